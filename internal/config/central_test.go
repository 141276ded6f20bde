package config

import (
	"io"
	"strings"
	"testing"
	"time"
)

// Kube-OVN's ovn-central reads NODE_IPS, POD_IP and DB_CLUSTER_ADDR: its
// Deployment's environment configures a central member as it is.
func TestCentralAcceptsKubeOVNCentralEnvironment(t *testing.T) {
	c, err := Load([]string{"--role=central"}, []string{"NODE_IPS=10.0.0.1,10.0.0.2,10.0.0.3", "POD_IP=10.0.0.2", "NODE_NAME=cp2"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsCentral() || strings.Join(c.OVNDBIPs, ",") != "10.0.0.1,10.0.0.2,10.0.0.3" || c.Central.IP != "10.0.0.2" {
		t.Fatalf("%+v", c)
	}
	if c.Central.ElectionTimer != time.Second || c.Central.CompactSize != 64<<20 || c.Central.CompactInterval != time.Hour {
		t.Fatalf("defaults: %+v", c.Central)
	}
	// DB_CLUSTER_ADDR overrides POD_IP, as in Kube-OVN; OVN_DB_IPS wins over NODE_IPS.
	c, err = Load([]string{"--role=central"}, []string{"NODE_IPS=10.0.0.9", "OVN_DB_IPS=10.0.0.1,10.0.0.2", "POD_IP=10.0.0.2", "DB_CLUSTER_ADDR=10.0.0.1", "NODE_NAME=cp1"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Central.IP != "10.0.0.1" || strings.Join(c.OVNDBIPs, ",") != "10.0.0.1,10.0.0.2" {
		t.Fatalf("%+v %v", c.Central, c.OVNDBIPs)
	}
}

func TestCentralRejectsBadSettings(t *testing.T) {
	for _, c := range []struct {
		env  []string
		args []string
		want string
	}{
		{nil, []string{"--role=central"}, "role=central needs the cluster's member addresses"},
		{[]string{"OVN_DB_IPS=10.0.0.1,10.0.0.1"}, []string{"--role=central"}, "listed twice"},
		{[]string{"OVN_DB_IPS=10.0.0.1"}, []string{"--role=central", "--election-timer=50"}, "election-timer"},
		{[]string{"OVN_DB_IPS=10.0.0.1"}, []string{"--role=central", "--central-ip=cp1"}, "central-ip"},
		{nil, []string{"--role=master"}, "not one of node, central"},
	} {
		_, err := Load(c.args, append(c.env, "NODE_NAME=n"), io.Discard)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v %v: %v, want %q", c.env, c.args, err, c.want)
		}
	}
}

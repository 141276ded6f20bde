package ovsdbconn

import (
	"strings"
	"testing"
)

func TestClusterRemotes(t *testing.T) {
	for _, tc := range []struct {
		ips    []string
		ssl    bool
		nb, sb string
	}{
		{nil, false, "", ""},
		{[]string{"", " "}, true, "", ""},
		{[]string{"10.0.0.1"}, false, "tcp:10.0.0.1:6641", "tcp:10.0.0.1:6642"},
		{[]string{"10.0.0.1", " 10.0.0.2 ", ""}, false, "tcp:10.0.0.1:6641,tcp:10.0.0.2:6641", "tcp:10.0.0.1:6642,tcp:10.0.0.2:6642"},
		{[]string{"10.0.0.1", "fd00::2"}, true, "ssl:10.0.0.1:6641,ssl:[fd00::2]:6641", "ssl:10.0.0.1:6642,ssl:[fd00::2]:6642"},
		{[]string{"[fd00::3]"}, false, "tcp:[fd00::3]:6641", "tcp:[fd00::3]:6642"},
	} {
		nb, sb := ClusterRemotes(tc.ips, tc.ssl)
		if nb != tc.nb || sb != tc.sb {
			t.Errorf("ClusterRemotes(%q, %v) = %q, %q; want %q, %q", tc.ips, tc.ssl, nb, sb, tc.nb, tc.sb)
		}
	}
}

func TestSplitEndpoints(t *testing.T) {
	eps, err := splitEndpoints(" tcp:10.0.0.1:6641, unix:/run/ovn/ovnnb_db.sock ,", false)
	if err != nil || len(eps) != 2 || eps[0] != "tcp:10.0.0.1:6641" || eps[1] != "unix:/run/ovn/ovnnb_db.sock" {
		t.Fatalf("got %q, %v", eps, err)
	}
	if _, err := splitEndpoints("ssl:10.0.0.1:6641", false); err == nil || !strings.Contains(err.Error(), "no TLS configuration") {
		t.Fatalf("ssl without TLS: %v", err)
	}
	if _, err := splitEndpoints("ssl:10.0.0.1:6641", true); err != nil {
		t.Fatalf("ssl with TLS: %v", err)
	}
	if _, err := splitEndpoints("10.0.0.1:6641", false); err == nil || !strings.Contains(err.Error(), "no scheme") {
		t.Fatalf("no scheme: %v", err)
	}
	if _, err := splitEndpoints(" , ", false); err == nil {
		t.Fatal("no endpoint accepted")
	}
}

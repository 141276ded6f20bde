package ovnnet

import (
	"maps"
	"net/netip"
	"strings"
	"testing"
)

func goodExternalData() map[string]string {
	return map[string]string{
		"enable-external-gw": "true", "external-gw-nodes": "node-b, node-c", "external-gw-nic": "ext0",
		"external-gw-addr": "172.56.0.1/16", "nic-ip": "172.56.0.254/16", "nic-mac": "16:52:F3:13:6A:25", "type": "centralized",
	}
}

func TestParseExternalGatewayConfigAcceptsKubeOVNsForm(t *testing.T) {
	c, err := ParseExternalGatewayConfig(goodExternalData())
	if err != nil {
		t.Fatal(err)
	}
	if !c.Enabled || strings.Join(c.Nodes, ",") != "node-b,node-c" || c.NIC != "ext0" || c.GatewayIP.String() != "172.56.0.1" ||
		c.PortIP.String() != "172.56.0.254/16" || c.PortMAC != "16:52:f3:13:6a:25" || len(c.Ignored) != 0 {
		t.Fatalf("parsed %+v", c)
	}
	// Kube-OVN: a missing enable key enables; nic-mac may be left out (stable derived MAC).
	d := goodExternalData()
	delete(d, "enable-external-gw")
	delete(d, "nic-mac")
	delete(d, "type")
	d["external-gw-addr"] = "172.56.0.1"
	d["some-future-key"] = "x"
	c, err = ParseExternalGatewayConfig(d)
	if err != nil || !c.Enabled || c.PortMAC == "" || strings.Join(c.Ignored, ",") != "some-future-key" {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	c2, _ := ParseExternalGatewayConfig(d)
	if c2.PortMAC != c.PortMAC {
		t.Fatalf("derived MAC not stable: %s then %s", c.PortMAC, c2.PortMAC)
	}
	c, err = ParseExternalGatewayConfig(map[string]string{"enable-external-gw": "false", "nic-ip": "junk"})
	if err != nil || c.Enabled {
		t.Fatalf("disabled config: %+v, %v (the other keys do not matter then)", c, err)
	}
}

func TestParseExternalGatewayConfigNamesEachProblem(t *testing.T) {
	for _, tc := range []struct {
		set  map[string]string
		want string
	}{
		{map[string]string{"enable-external-gw": "yes"}, `enable-external-gw="yes": not "true" or "false"`},
		{map[string]string{"type": "distributed"}, "distributed EIP/SNAT"},
		{map[string]string{"external-gw-switch": "ext-subnet"}, "external-gw-switch"},
		{map[string]string{"external-gw-nodes": " , "}, "names no node"},
		{map[string]string{"external-gw-nodes": "a,b,a"}, `node "a" is listed twice`},
		{map[string]string{"external-gw-nic": ""}, "external-gw-nic=\"\": missing"},
		{map[string]string{"external-gw-nic": "eth0/1"}, "not an interface name"},
		{map[string]string{"external-gw-nic": "br-int"}, "device of OVS or ovnhost"},
		{map[string]string{"external-gw-addr": "fd00::1"}, "IPv6 is not supported"},
		{map[string]string{"external-gw-addr": "10.0.0.1/16"}, "not in nic-ip's subnet 172.56.0.0/16"},
		{map[string]string{"external-gw-addr": "172.56.0.1/24"}, "has prefix /24 but nic-ip has /16"},
		{map[string]string{"nic-ip": "172.56.0.254"}, "with a /prefix"},
		{map[string]string{"nic-ip": "172.56.0.0/16"}, "network or broadcast"},
		{map[string]string{"nic-ip": "172.56.0.1/16"}, "is external-gw-addr itself"},
		{map[string]string{"nic-mac": "01:00:5e:00:00:01"}, "multicast"},
		{map[string]string{"nic-mac": "zz"}, "not a MAC address"},
	} {
		d := goodExternalData()
		maps.Copy(d, tc.set)
		_, err := ParseExternalGatewayConfig(d)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one containing %q", tc.set, err, tc.want)
		}
		if err != nil && !strings.Contains(err.Error(), "kube-system/ovn-external-gw-config") {
			t.Errorf("%v: error %v does not name the ConfigMap", tc.set, err)
		}
	}
}

func TestCheckExternalAddress(t *testing.T) {
	c, err := ParseExternalGatewayConfig(goodExternalData())
	if err != nil {
		t.Fatal(err)
	}
	if a, err := c.CheckExternalAddress("ovn.kubernetes.io/eip", " 172.56.0.10 "); err != nil || a != netip.MustParseAddr("172.56.0.10") {
		t.Fatalf("172.56.0.10: %v, %v", a, err)
	}
	for in, want := range map[string]string{
		"10.1.2.3":       "outside the external subnet 172.56.0.0/16",
		"172.56.0.254":   "router's own address",
		"172.56.0.1":     "external network's gateway",
		"172.56.255.255": "broadcast",
		"nope":           "not an IPv4 address",
		"fd00::1":        "not an IPv4 address",
	} {
		if _, err := c.CheckExternalAddress("ovn.kubernetes.io/eip", in); err == nil || !strings.Contains(err.Error(), want) ||
			!strings.Contains(err.Error(), "ovn.kubernetes.io/eip") {
			t.Errorf("%s: %v, want an error naming the annotation and %q", in, err, want)
		}
	}
}

func TestPlanExternalBridgeTrustsOnlyValidatedData(t *testing.T) {
	d := goodExternalData()
	ok := map[string]string{ExternalDigestAnnotation: ExternalGatewayDigest(d)}
	if p := PlanExternalBridge("node-b", true, d, ok); p.Action != BridgeEnsure || p.NIC != "ext0" {
		t.Fatalf("listed node, validated data: %+v", p)
	}
	if p := PlanExternalBridge("node-a", true, d, ok); p.Action != BridgeRemove {
		t.Fatalf("unlisted node: %+v", p)
	}
	if p := PlanExternalBridge("node-b", false, nil, nil); p.Action != BridgeRemove {
		t.Fatalf("no ConfigMap: %+v", p)
	}
	edited := maps.Clone(d)
	edited["external-gw-nic"] = "br-int"
	if p := PlanExternalBridge("node-b", true, edited, ok); p.Action != BridgeKeep {
		t.Fatalf("data edited after validation: %+v, want keep", p)
	}
	off := map[string]string{"enable-external-gw": "false"}
	if p := PlanExternalBridge("node-b", true, off, map[string]string{ExternalDigestAnnotation: ExternalGatewayDigest(off)}); p.Action != BridgeRemove {
		t.Fatalf("disabled: %+v", p)
	}
	if ExternalGatewayDigest(map[string]string{"a": "b=c"}) == ExternalGatewayDigest(map[string]string{"a=b": "c"}) {
		t.Fatal("digest confuses keys and values")
	}
}

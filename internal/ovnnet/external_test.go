package ovnnet

import (
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
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
		{map[string]string{"type": "both"}, `type="both": not centralized or distributed`},
		{map[string]string{"type": "centralized", "external-gw-nodes": ""}, "names no node"},
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

func TestParseExternalGatewayConfigDistributed(t *testing.T) {
	d := goodExternalData()
	d["type"] = " distributed "
	delete(d, "external-gw-nodes") // optional: every node is a gateway then
	c, err := ParseExternalGatewayConfig(d)
	if err != nil || !c.Distributed || len(c.Nodes) != 0 || c.NIC != "ext0" {
		t.Fatalf("distributed without external-gw-nodes: %+v, %v", c, err)
	}
	d["external-gw-nic"] = ""
	if _, err := ParseExternalGatewayConfig(d); err == nil || !strings.Contains(err.Error(), "every node needs it") {
		t.Fatalf("distributed without a NIC: %v", err)
	}
	c, _ = ParseExternalGatewayConfig(goodExternalData())
	if c.Distributed {
		t.Fatal("type centralized parsed as distributed")
	}
}

func TestGatewayOrder(t *testing.T) {
	all := []string{"node-d", "node-a", "node-c", "node-b"}
	c := ExternalGatewayConfig{Nodes: []string{"node-c", "node-z", "node-a"}}
	if got := c.GatewayOrder(all); !slices.Equal(got, []string{"node-c", "node-a"}) {
		t.Fatalf("centralized order %v, want the listed existing nodes in their order", got)
	}
	c.Distributed = true
	if got := c.GatewayOrder(all); !slices.Equal(got, []string{"node-c", "node-a", "node-b", "node-d"}) {
		t.Fatalf("distributed order %v, want the listed nodes first, then the others by name", got)
	}
	c.Nodes = nil
	if got := c.GatewayOrder(all); !slices.Equal(got, []string{"node-a", "node-b", "node-c", "node-d"}) {
		t.Fatalf("distributed order without external-gw-nodes %v, want every node by name", got)
	}
}

func TestHAPriorityStaysInOVNsRange(t *testing.T) {
	if got := []int{haPriority(0, 2), haPriority(1, 2)}; !slices.Equal(got, []int{100, 90}) {
		t.Fatalf("short list priorities %v, want 100, 90 (unchanged)", got)
	}
	for _, n := range []int{10, 11, 500, 40000} {
		prev := 1 << 30
		for i := 0; i < n; i++ {
			p := haPriority(i, n)
			if p < 0 || p > 32767 || p >= prev {
				t.Fatalf("%d nodes: priority of #%d is %d (previous %d): must fall strictly within 0..32767", n, i, p, prev)
			}
			prev = p
			if n == 40000 && i > 40 {
				break // beyond OVN's range anyway; the first ones must still fit
			}
		}
	}
}

func TestEIPMACIsStableUnicastAndPerAddress(t *testing.T) {
	a := netip.MustParseAddr("172.56.0.10")
	if got := EIPMAC(a); got != "02:e1:ac:38:00:0a" {
		t.Fatalf("EIPMAC(%s) = %s, want 02:e1:ac:38:00:0a", a, got)
	}
	m, err := net.ParseMAC(EIPMAC(a))
	if err != nil || m[0]&1 != 0 || m[0]&2 == 0 {
		t.Fatalf("EIPMAC %s: want a unicast, locally administered MAC (%v)", m, err)
	}
	if EIPMAC(a) == EIPMAC(netip.MustParseAddr("172.56.0.11")) {
		t.Fatal("two EIPs share a MAC")
	}
}

func TestPodNATRows(t *testing.T) {
	cfg, err := ParseExternalGatewayConfig(goodExternalData())
	if err != nil {
		t.Fatal(err)
	}
	row := func(n []ovnnb.NAT, i int) string {
		return n[i].Type + " " + n[i].ExternalIP + " " + n[i].LogicalIP + " gw=" + n[i].GatewayPort + " port=" + n[i].LogicalPort + " mac=" + n[i].ExternalMAC
	}
	pod := PodNAT{Pod: "ns/web", IP: netip.MustParseAddr("10.16.0.5"), EIP: netip.MustParseAddr("172.56.0.10")}
	nats, pols := PodNATRows("ovn-cluster", cfg, pod)
	if len(nats) != 1 || row(nats, 0) != "dnat_and_snat 172.56.0.10 10.16.0.5 gw=ovn-cluster-ovn-external port= mac=" {
		t.Fatalf("centralized EIP rows %+v", nats)
	}
	if len(pols) != 1 || pols[0].Match != "ip4.src == 10.16.0.5" || pols[0].Nexthop != cfg.GatewayIP || pols[0].Priority != EIPPriority {
		t.Fatalf("EIP policy %+v", pols)
	}
	if nats[0].ExternalIDs["pod"] != "ns/web" {
		t.Fatalf("rule external_ids %v, want pod=ns/web (how a restarted controller finds the holder)", nats[0].ExternalIDs)
	}
	pod.Port = "web.ns"
	nats, _ = PodNATRows("ovn-cluster", cfg, pod)
	if len(nats) != 1 || row(nats, 0) != "dnat_and_snat 172.56.0.10 10.16.0.5 gw=ovn-cluster-ovn-external port=web.ns mac=02:e1:ac:38:00:0a" {
		t.Fatalf("distributed EIP rows %+v", nats)
	}
	// snat has no logical port in OVN: it stays on the gateway chassis, distributed or not.
	pod = PodNAT{Pod: "ns/batch", IP: netip.MustParseAddr("10.16.0.6"), SNAT: netip.MustParseAddr("172.56.0.20"), Port: "batch.ns"}
	nats, pols = PodNATRows("ovn-cluster", cfg, pod)
	if len(nats) != 1 || nats[0].Type != nbdb.NATTypeSNAT || nats[0].LogicalPort != "" || nats[0].ExternalMAC != "" || len(pols) != 1 {
		t.Fatalf("SNAT rows %+v %+v", nats, pols)
	}
	if nats, pols := PodNATRows("ovn-cluster", cfg, PodNAT{Pod: "ns/none", IP: netip.MustParseAddr("10.16.0.7")}); nats != nil || pols != nil {
		t.Fatalf("no EIP/SNAT: %+v %+v, want nothing", nats, pols)
	}
}

func TestPlanExternalBridgeDistributedBridgesEveryNode(t *testing.T) {
	d := goodExternalData()
	d["type"] = "distributed"
	ann := map[string]string{ExternalDigestAnnotation: ExternalGatewayDigest(d)}
	for _, n := range []string{"node-a", "node-b"} {
		if p := PlanExternalBridge(n, true, d, ann); p.Action != BridgeEnsure || p.NIC != "ext0" || !p.Distributed {
			t.Fatalf("%s with type distributed: %+v, want it to bridge ext0", n, p)
		}
	}
	// Back to centralized: a node not listed removes its bridge.
	c := goodExternalData()
	if p := PlanExternalBridge("node-a", true, c, map[string]string{ExternalDigestAnnotation: ExternalGatewayDigest(c)}); p.Action != BridgeRemove {
		t.Fatalf("node-a after switching to centralized: %+v, want remove", p)
	}
}

package ovnnet

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func TestRankGatewaysKeepsTheActiveFirstUnlessFailback(t *testing.T) {
	gw := []GatewayNode{{Node: "b"}, {Node: "c"}, {Node: "d"}}
	names := func(gs []GatewayNode) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Node)
		}
		return out
	}
	for _, tc := range []struct {
		active   string
		failback bool
		want     []string
	}{
		{"", false, []string{"b", "c", "d"}},
		{"b", false, []string{"b", "c", "d"}},
		{"d", false, []string{"d", "b", "c"}},
		{"d", true, []string{"b", "c", "d"}},
		{"gone", false, []string{"b", "c", "d"}}, // not a gateway any more
	} {
		if got := names(RankGateways(gw, tc.active, tc.failback)); !slices.Equal(got, tc.want) {
			t.Errorf("RankGateways(b,c,d; active %q, failback %v) = %v, want %v", tc.active, tc.failback, got, tc.want)
		}
	}
	if got := names(gw); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("RankGateways changed its input: %v", got)
	}
}

func TestParseGatewayNodeForms(t *testing.T) {
	got, err := ParseGatewayNode(" n1:192.168.0.9 , n2 ")
	if err != nil || len(got) != 2 || got[0].Node != "n1" || got[0].EgressIP.String() != "192.168.0.9" || got[1].Node != "n2" || got[1].EgressIP.IsValid() {
		t.Fatalf("ParseGatewayNode = %+v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "n1,n1", "n1:notanip", ":1.2.3.4", "n1:fd00::1"} {
		if _, err := ParseGatewayNode(bad); err == nil {
			t.Errorf("ParseGatewayNode(%q) accepted", bad)
		}
	}
}

// Each centralized subnet takes one transit slot: its IPv4 /30 and IPv6
// /126 sit at the same offset of their ranges, an IPv6-only subnet still
// takes a slot, and the reroute is per family with the gateway node's end
// of that family's transit network as next hop. A family the subnet loses
// keeps no reroute; ensuring again keeps the slot.
func TestCentralizedGatewayPerFamily(t *testing.T) {
	ctx := context.Background()
	s, nb := nbtest.Client(t)
	n := New(nb, Config{})
	if err := n.EnsureDefaultTopology(ctx, "10.16.0.0/16", "100.64.0.0/16"); err != nil {
		t.Fatal(err)
	}
	nodes := []GatewayNode{{Node: "node-b", Chassis: "ch-b"}}
	ensure := func(subnet string, cidrs ...string) Transit {
		t.Helper()
		var ps []netip.Prefix
		for _, c := range cidrs {
			ps = append(ps, netip.MustParsePrefix(c))
		}
		tr, err := n.EnsureCentralizedGateway(ctx, subnet, ps, nodes)
		if err != nil {
			t.Fatalf("subnet %s: %v", subnet, err)
		}
		return tr
	}
	v4 := ensure("v4", "10.80.0.0/16")
	dual := ensure("dual", "10.81.0.0/16", "fd00:81::/64")
	v6 := ensure("v6", "fd00:82::/64")
	for _, tc := range []struct {
		name   string
		got    Transit
		v4, v6 string
	}{
		{"v4", v4, "169.254.64.1/30", ""},
		{"dual", dual, "169.254.64.5/30", "fd00:a9fe:4000::5/126"},
		{"v6", v6, "", "fd00:a9fe:4000::9/126"},
	} {
		str := func(p netip.Prefix) string {
			if !p.IsValid() {
				return ""
			}
			return p.String()
		}
		if str(tc.got.V4) != tc.v4 || str(tc.got.V6) != tc.v6 {
			t.Errorf("subnet %s: transit %v, want %q and %q", tc.name, tc.got.Prefixes(), tc.v4, tc.v6)
		}
	}
	r := readEgressRows(t, s, n)
	for match, hop := range map[string]string{
		"ip4.src == 10.80.0.0/16": "169.254.64.2",
		"ip4.src == 10.81.0.0/16": "169.254.64.6",
		"ip6.src == fd00:81::/64": "fd00:a9fe:4000::6",
		"ip6.src == fd00:82::/64": "fd00:a9fe:4000::a",
	} {
		if got := r.policies["29500 "+match]; !slices.Equal(got, []string{hop}) {
			t.Errorf("reroute %q: nexthops %v, want [%s]; policies %v", match, got, hop, r.policies)
		}
	}
	var networks []string
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
		if p.Name == GatewayRouterPort(DefaultRouter, "dual") {
			networks = p.Networks
		}
	}
	if !slices.Equal(networks, []string{"169.254.64.5/30", "fd00:a9fe:4000::5/126"}) {
		t.Errorf("dual's gateway port networks %v, want both transit networks", networks)
	}
	// The router knows each gateway node's end by its shared MAC, so it
	// never has to solicit it (OVN 23.03 solicits an IPv6 next hop wrongly).
	bindings := func() map[string]string {
		out := map[string]string{}
		for _, b := range nbtest.Rows[*nbdb.StaticMACBinding](t, s, nb, nbdb.StaticMACBindingTable) {
			out[b.LogicalPort+" "+b.IP] = b.MAC
		}
		return out
	}
	dualPort := GatewayRouterPort(DefaultRouter, "dual")
	if got := bindings(); got[dualPort+" 169.254.64.6"] != GatewayMAC || got[dualPort+" fd00:a9fe:4000::6"] != GatewayMAC {
		t.Errorf("static MAC bindings %v: want both of dual's gateway-node ends at %s", got, GatewayMAC)
	}
	// dual loses its IPv6 CIDR: the IPv6 reroute goes, the slot stays.
	if again := ensure("dual", "10.81.0.0/16"); again.V4 != dual.V4 || again.V6.IsValid() {
		t.Errorf("dual made IPv4-only: transit %v, want %v alone", again.Prefixes(), dual.V4)
	}
	if _, ok := readEgressRows(t, s, n).policies["29500 ip6.src == fd00:81::/64"]; ok {
		t.Error("the IPv6 reroute of dual is left after it lost its IPv6 CIDR")
	}
	if got := bindings(); got[dualPort+" fd00:a9fe:4000::6"] != "" {
		t.Errorf("dual made IPv4-only keeps its IPv6 static MAC binding: %v", got)
	}
	if err := n.RemoveCentralizedGateway(ctx, "v4"); err != nil {
		t.Fatal(err)
	}
	for k := range bindings() {
		if strings.HasPrefix(k, GatewayRouterPort(DefaultRouter, "v4")+" ") {
			t.Errorf("static MAC binding %s left after v4's gateway was removed", k)
		}
	}
	// The freed slot 0 is the next one handed out.
	if got := ensure("next", "fd00:83::/64"); got.V6.String() != "fd00:a9fe:4000::1/126" {
		t.Errorf("after v4's removal the next subnet got %v, want slot 0 (fd00:a9fe:4000::1/126)", got.Prefixes())
	}
}

func TestTransitSlots(t *testing.T) {
	last := (1<<(32-TransitRange.Bits()))/4 - 1
	for _, i := range []int{0, 1, 63, 64, 1000, last} {
		v4, v6 := transitOf(TransitRange, i), transitOf(TransitRange6, i)
		if !TransitRange.Contains(v4.Addr()) || !TransitRange6.Contains(v6.Addr()) || transitSlot(v4) != i || transitSlot(v6) != i {
			t.Errorf("slot %d: %s (slot %d) and %s (slot %d)", i, v4, transitSlot(v4), v6, transitSlot(v6))
		}
	}
	if transitOf(TransitRange, last).String() != "169.254.127.253/30" || transitOf(TransitRange6, last).String() != "fd00:a9fe:4000::3ffd/126" {
		t.Errorf("last slot: %s and %s", transitOf(TransitRange, last), transitOf(TransitRange6, last))
	}
	if transitSlot(netip.MustParsePrefix("10.0.0.1/30")) != -1 {
		t.Error("a network outside both ranges has a slot")
	}
}

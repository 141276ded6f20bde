package ovnnet

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// A custom VPC's external gateway on a real ovsdb-server (the HA chassis
// group is replaced and referenced in one transaction): its port joins
// ovn-external beside the cluster router's, with its own HA group, a
// default route and the NAT rows; the VPC's own routes are set without
// touching them and the other way round; a change of gateway nodes
// replaces the group; removal takes everything, and a VPC whose router
// still has the port after the external switch went is still found.
func TestVPCExternalGatewayBesideTheDefaultOne(t *testing.T) {
	ctx := context.Background()
	s := nbtest.StartOVSDB(t)
	nb := s.Connect(t, ovnnb.Options{PortGroups: true})
	n := New(nb, Config{})
	if err := n.EnsureDefaultTopology(ctx, "10.16.0.0/16", ""); err != nil {
		t.Fatal(err)
	}
	cfg, err := ParseExternalGatewayConfig(goodExternalData())
	if err != nil {
		t.Fatal(err)
	}
	nodes := []GatewayNode{{Node: "node-b", Chassis: "ch-b"}, {Node: "node-c", Chassis: "ch-c"}}
	if err := n.EnsureExternalGateway(ctx, cfg, nodes); err != nil {
		t.Fatal(err)
	}
	if err := n.EnsureVPC(ctx, VPC{Name: "vpc-a"}); err != nil {
		t.Fatal(err)
	}
	sc, err := ipam.ParseSubnet("net-a", "10.200.0.0/24", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	sc.VPC = "vpc-a"
	if err := n.AddSubnet(ctx, sc, nil); err != nil {
		t.Fatal(err)
	}
	fip := ovnnb.NAT{Type: nbdb.NATTypeDNATAndSNAT, ExternalIP: "172.56.0.10", LogicalIP: "10.200.0.5", GatewayPort: ExternalRouterPort("vpc-a"),
		ExternalIDs: map[string]string{KeyVPCExternal: "vpc-a", "vpc-nat-object": "fip/f1"}}
	snat := ovnnb.NAT{Type: nbdb.NATTypeSNAT, ExternalIP: "172.56.0.11", LogicalIP: "10.200.0.0/24", GatewayPort: ExternalRouterPort("vpc-a"),
		ExternalIDs: map[string]string{KeyVPCExternal: "vpc-a", "vpc-nat-object": "snat/s1"}}
	v := VPCExternal{VPC: "vpc-a", Address: netip.MustParsePrefix("172.56.0.2/16"), GatewayIP: cfg.GatewayIP, DefaultRoute: true, Nodes: nodes,
		NATs: []ovnnb.NAT{fip, snat}}
	if err := n.EnsureVPCExternal(ctx, v); err != nil {
		t.Fatal(err)
	}
	lrps := map[string]*nbdb.LogicalRouterPort{}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
		lrps[p.Name] = p
	}
	lrp := lrps["vpc-a-ovn-external"]
	if lrp == nil || !slices.Equal(lrp.Networks, []string{"172.56.0.2/16"}) || lrp.HaChassisGroup == nil {
		t.Fatalf("vpc-a's gateway port %+v", lrp)
	}
	if lrps["ovn-cluster-ovn-external"] == nil {
		t.Fatal("the cluster router's gateway port is gone")
	}
	groups := map[string]*nbdb.HAChassisGroup{}
	for _, g := range nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable) {
		groups[g.UUID] = g
	}
	if g := groups[*lrp.HaChassisGroup]; g == nil || g.Name != "vpc-a-ovn-external" || len(g.HaChassis) != 2 {
		t.Fatalf("vpc-a's HA group %+v", g)
	}
	var sw *nbdb.LogicalSwitch
	lsps := map[string]*nbdb.LogicalSwitchPort{}
	for _, p := range nbtest.Rows[*nbdb.LogicalSwitchPort](t, s, nb, nbdb.LogicalSwitchPortTable) {
		lsps[p.UUID] = p
	}
	for _, x := range nbtest.Rows[*nbdb.LogicalSwitch](t, s, nb, nbdb.LogicalSwitchTable) {
		if x.Name == ExternalSwitch {
			sw = x
		}
	}
	var names []string
	for _, u := range sw.Ports {
		names = append(names, lsps[u].Name)
		if lsps[u].Name == "ovn-external-vpc-a" && (lsps[u].Type != "router" || lsps[u].Options["router-port"] != "vpc-a-ovn-external" || lsps[u].Options["nat-addresses"] != "router") {
			t.Errorf("switch port of vpc-a: %+v", lsps[u])
		}
	}
	slices.Sort(names)
	if want := []string{"ovn-external-localnet", "ovn-external-ovn-cluster", "ovn-external-vpc-a"}; !slices.Equal(names, want) {
		t.Fatalf("ovn-external's ports %v, want %v", names, want)
	}
	checkRoutes := func(want ...string) {
		t.Helper()
		var got []string
		for _, r := range nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, s, nb, nbdb.LogicalRouterStaticRouteTable) {
			if r.ExternalIDs[ovnnb.KeyVPC] == "vpc-a" || r.ExternalIDs[KeyVPCExternal] == "vpc-a" {
				got = append(got, r.IPPrefix+" via "+r.Nexthop)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("vpc-a's routes %v, want %v", got, want)
		}
	}
	checkRoutes("0.0.0.0/0 via 172.56.0.1")
	nats, err := n.VPCNATs(ctx, "vpc-a")
	if err != nil || len(nats) != 2 {
		t.Fatalf("NAT rows %+v, %v", nats, err)
	}
	for _, x := range nats {
		if x.GatewayPort != "vpc-a-ovn-external" {
			t.Errorf("NAT %+v: not on the VPC's gateway port", x)
		}
	}
	// The VPC reconciler's routes and this gateway's are separate sets.
	if err := n.EnsureVPC(ctx, VPC{Name: "vpc-a", Routes: []ovnnb.VPCRoute{{Prefix: netip.MustParsePrefix("10.9.0.0/16"), Nexthop: netip.MustParseAddr("10.200.0.9")}}}); err != nil {
		t.Fatal(err)
	}
	checkRoutes("0.0.0.0/0 via 172.56.0.1", "10.9.0.0/16 via 10.200.0.9")
	v.DefaultRoute, v.NATs = false, []ovnnb.NAT{snat}
	v.Nodes = []GatewayNode{{Node: "node-c", Chassis: "ch-c"}}
	if err := n.EnsureVPCExternal(ctx, v); err != nil {
		t.Fatal(err)
	}
	checkRoutes("10.9.0.0/16 via 10.200.0.9")
	if got := haChassisOf(t, s, nb, "vpc-a-ovn-external"); !slices.Equal(got, []string{"ch-c"}) {
		t.Fatalf("HA chassis after the change %v", got)
	}
	if nats, _ := n.VPCNATs(ctx, "vpc-a"); len(nats) != 1 || nats[0].Type != nbdb.NATTypeSNAT {
		t.Fatalf("NAT rows after the FIP went: %+v", nats)
	}
	if got, err := n.VPCExternals(ctx); err != nil || !slices.Equal(got, []string{"vpc-a"}) {
		t.Fatalf("VPCExternals %v, %v", got, err)
	}
	// The default gateway removed (its switch with it): the VPC's port is still found.
	if err := n.RemoveExternalGateway(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := n.VPCExternals(ctx); err != nil || !slices.Equal(got, []string{"vpc-a"}) {
		t.Fatalf("VPCExternals after the switch went: %v, %v", got, err)
	}
	if err := n.RemoveVPCExternal(ctx, "vpc-a"); err != nil {
		t.Fatal(err)
	}
	checkRoutes("10.9.0.0/16 via 10.200.0.9")
	if got, _ := n.VPCExternals(ctx); len(got) != 0 {
		t.Fatalf("VPCExternals after removal: %v", got)
	}
	for _, g := range nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable) {
		t.Errorf("HA group left: %s", g.Name)
	}
	if nats, _ := n.VPCNATs(ctx, "vpc-a"); len(nats) != 0 {
		t.Fatalf("NAT rows left: %+v", nats)
	}
	if ports, _ := nb.RouterPorts(ctx, "vpc-a"); !slices.Equal(ports, []string{"vpc-a-net-a"}) {
		t.Fatalf("vpc-a's ports %v, want its Subnet's only", ports)
	}
	// Removing again, and for a VPC whose router is gone, is fine.
	if err := n.RemoveVPC(ctx, "vpc-a"); err != nil {
		t.Fatal(err)
	}
	if err := n.RemoveVPCExternal(ctx, "vpc-a"); err != nil {
		t.Fatal(err)
	}
}

func haChassisOf(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, group string) []string {
	t.Helper()
	byUUID := map[string]string{}
	for _, c := range nbtest.Rows[*nbdb.HAChassis](t, s, nb, nbdb.HAChassisTable) {
		byUUID[c.UUID] = c.ChassisName
	}
	var out []string
	for _, g := range nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable) {
		if g.Name == group {
			for _, u := range g.HaChassis {
				out = append(out, byUUID[u])
			}
		}
	}
	slices.Sort(out)
	return out
}

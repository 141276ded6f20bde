package ovnnb_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func haChassis(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, group string) []ovnnb.HAChassis {
	t.Helper()
	byUUID := map[string]*nbdb.HAChassis{}
	for _, c := range nbtest.Rows[*nbdb.HAChassis](t, s, nb, nbdb.HAChassisTable) {
		byUUID[c.UUID] = c
	}
	var out []ovnnb.HAChassis
	for _, g := range nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable) {
		if g.Name != group {
			continue
		}
		for _, u := range g.HaChassis {
			out = append(out, ovnnb.HAChassis{Name: byUUID[u].ChassisName, Priority: byUUID[u].Priority})
		}
	}
	slices.SortFunc(out, func(a, b ovnnb.HAChassis) int { return b.Priority - a.Priority })
	return out
}

// A real ovsdb-server: replacing the HA chassis group (a root table) and
// pointing the router port at the new one in one transaction is refused by
// the in-memory server, which checks references operation by operation.
func TestGatewayPortWithItsHAChassisGroup(t *testing.T) {
	s := nbtest.StartOVSDB(t)
	nb := s.Connect(t, ovnnb.Options{PortGroups: true})
	topology(t, nb)
	ctx := context.Background()
	g := ovnnb.GatewayPort{Router: "ovn-cluster", Switch: "egw-a", Network: "external", Addresses: []netip.Prefix{mustPrefix("100.65.0.1/30")},
		Chassis: []ovnnb.HAChassis{{Name: "ch-1", Priority: 100}, {Name: "ch-2", Priority: 90}}, IDs: map[string]string{"egress": "gateway"}}
	if err := nb.EnsureGatewayPort(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := haChassis(t, s, nb, "egw-a"); !slices.Equal(got, g.Chassis) {
		t.Fatalf("HA chassis %v, want %v", got, g.Chassis)
	}
	ln := portNamed(t, s, nb, ovnnb.LocalnetPortName("egw-a"))
	if ln == nil || ln.Type != "localnet" || ln.Options["network_name"] != "external" {
		t.Fatalf("localnet port %+v", ln)
	}
	var lrp *nbdb.LogicalRouterPort
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
		if p.Name == ovnnb.RouterPortName("ovn-cluster", "egw-a") {
			lrp = p
		}
	}
	groups := nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable)
	if lrp == nil || lrp.HaChassisGroup == nil || len(groups) != 1 || *lrp.HaChassisGroup != groups[0].UUID || lrp.ExternalIDs["egress"] != "gateway" {
		t.Fatalf("router port %+v, groups %+v", lrp, groups)
	}
	ports, err := nb.GatewayPorts(ctx, map[string]string{"egress": "gateway"})
	if err != nil || !slices.Equal(ports[lrp.Name], []netip.Prefix{mustPrefix("100.65.0.1/30")}) {
		t.Fatalf("GatewayPorts %v %v", ports, err)
	}
	// The subnet becomes dual-stack: the port gets the IPv6 network too.
	g.Addresses = append(g.Addresses, mustPrefix("fd00:a9fe:4000::1/126"))
	if err := nb.EnsureGatewayPort(ctx, g); err != nil {
		t.Fatal(err)
	}
	ports, err = nb.GatewayPorts(ctx, map[string]string{"egress": "gateway"})
	if err != nil || !slices.Equal(ports[lrp.Name], g.Addresses) {
		t.Fatalf("GatewayPorts after adding IPv6: %v %v, want %v", ports, err, g.Addresses)
	}

	// The order changes: the group is replaced, the router port follows.
	g.Chassis = []ovnnb.HAChassis{{Name: "ch-2", Priority: 100}, {Name: "ch-1", Priority: 90}}
	if err := nb.EnsureGatewayPort(ctx, g); err != nil {
		t.Fatal(err)
	}
	if got := haChassis(t, s, nb, "egw-a"); !slices.Equal(got, g.Chassis) {
		t.Fatalf("HA chassis after reorder %v", got)
	}
	if n := len(nbtest.Rows[*nbdb.HAChassis](t, s, nb, nbdb.HAChassisTable)); n != 2 {
		t.Fatalf("%d HA_Chassis rows, want the two of the new group", n)
	}

	if err := nb.DeleteGatewayPort(ctx, "ovn-cluster", "egw-a"); err != nil {
		t.Fatal(err)
	}
	if n := len(nbtest.Rows[*nbdb.HAChassisGroup](t, s, nb, nbdb.HAChassisGroupTable)); n != 0 {
		t.Fatalf("%d HA chassis groups left", n)
	}
	if switchNamed(t, s, nb, "egw-a") != nil {
		t.Fatal("gateway switch left")
	}
}

func TestBFDOptionsOnNBGlobal(t *testing.T) {
	s, nb := nbtest.Client(t)
	if err := nb.SetBFDOptions(context.Background(), 300, 300, 3); err != nil {
		t.Fatal(err)
	}
	g := nbtest.Rows[*nbdb.NBGlobal](t, s, nb, nbdb.NBGlobalTable)
	if len(g) != 1 || g[0].Options["bfd-min-rx"] != "300" || g[0].Options["bfd-mult"] != "3" {
		t.Fatalf("NB_Global %+v", g)
	}
}

func TestForeignRowsNamesKubeOVNsRows(t *testing.T) {
	_, nb := nbtest.Client(t)
	topology(t, nb)
	nbtest.Transact(t, nb, nbtest.Insert(t, nb, &nbdb.AddressSet{Name: "kube_ovn_set", ExternalIDs: map[string]string{ovnnb.KeyVendor: ovnnb.KubeOVNVendor}})...)
	got := nb.ForeignRows(ovnnb.KubeOVNVendor)
	if !slices.Equal(got[nbdb.AddressSetTable], []string{"kube_ovn_set"}) || len(got) != 1 {
		t.Fatalf("ForeignRows %v", got)
	}
}

package ovnnb_test

import (
	"context"
	"net/netip"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

type routerNAT struct {
	nats     map[string]*nbdb.NAT                 // "type ext logical" -> row
	policies map[string]*nbdb.LogicalRouterPolicy // match -> row
}

func readNAT(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) routerNAT {
	t.Helper()
	out := routerNAT{nats: map[string]*nbdb.NAT{}, policies: map[string]*nbdb.LogicalRouterPolicy{}}
	for _, x := range nbtest.Rows[*nbdb.NAT](t, s, nb, nbdb.NATTable) {
		out.nats[x.Type+" "+x.ExternalIP+" "+x.LogicalIP] = x
	}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, s, nb, nbdb.LogicalRouterPolicyTable) {
		out.policies[p.Match] = p
	}
	return out
}

func podNAT(pod string, eip, ip string) ([]ovnnb.NAT, []ovnnb.Policy) {
	ids := map[string]string{"pod": pod}
	return []ovnnb.NAT{{Type: nbdb.NATTypeDNATAndSNAT, ExternalIP: eip, LogicalIP: ip, GatewayPort: "ovn-cluster-ovn-default", ExternalIDs: ids}},
		[]ovnnb.Policy{{Priority: 31000, Match: "ip4.src == " + ip, Nexthop: netip.MustParseAddr("10.16.0.254"), ExternalIDs: ids}}
}

func TestRouterNATFollowsItsOwnerAndLeavesOthersAlone(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		topology(t, nb)
		ctx := context.Background()
		aN, aP := podNAT("default/a", "192.0.2.10", "10.16.0.10")
		if err := nb.SetRouterNAT(ctx, "ovn-cluster", map[string]string{"pod": "default/a"}, aN, aP); err != nil {
			t.Fatal(err)
		}
		bN, bP := podNAT("default/b", "192.0.2.11", "10.16.0.11")
		if err := nb.SetRouterNAT(ctx, "ovn-cluster", map[string]string{"pod": "default/b"}, bN, bP); err != nil {
			t.Fatal(err)
		}
		st := readNAT(t, s, nb)
		a := st.nats["dnat_and_snat 192.0.2.10 10.16.0.10"]
		var lrp *nbdb.LogicalRouterPort
		for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
			if p.Name == "ovn-cluster-ovn-default" {
				lrp = p
			}
		}
		if a == nil || a.GatewayPort == nil || *a.GatewayPort != lrp.UUID || a.ExternalIDs["pod"] != "default/a" {
			t.Fatalf("pod a's NAT: %+v", a)
		}
		pa := st.policies["ip4.src == 10.16.0.10"]
		if pa == nil || pa.Action != nbdb.LogicalRouterPolicyActionReroute || len(pa.Nexthops) != 1 || pa.Nexthops[0] != "10.16.0.254" {
			t.Fatalf("pod a's policy: %+v", pa)
		}
		b := st.nats["dnat_and_snat 192.0.2.11 10.16.0.11"]

		// a moves to another EIP and its rule gets a SNAT sibling: a's
		// unchanged policy stays the same row, b is untouched.
		aN = append([]ovnnb.NAT{{Type: nbdb.NATTypeSNAT, ExternalIP: "192.0.2.20", LogicalIP: "10.16.0.10", ExternalIDs: map[string]string{"pod": "default/a"}}}, aN...)
		aN[1].ExternalIP = "192.0.2.12"
		if err := nb.SetRouterNAT(ctx, "ovn-cluster", map[string]string{"pod": "default/a"}, aN, aP); err != nil {
			t.Fatal(err)
		}
		st2 := readNAT(t, s, nb)
		if st2.nats["dnat_and_snat 192.0.2.10 10.16.0.10"] != nil {
			t.Fatal("a's old EIP rule left behind")
		}
		if st2.nats["dnat_and_snat 192.0.2.12 10.16.0.10"] == nil || st2.nats["snat 192.0.2.20 10.16.0.10"] == nil {
			t.Fatalf("a's new rules missing: %v", st2.nats)
		}
		if st2.policies["ip4.src == 10.16.0.10"].UUID != pa.UUID {
			t.Fatal("a's unchanged policy was rewritten")
		}
		if st2.nats["dnat_and_snat 192.0.2.11 10.16.0.11"] == nil || st2.nats["dnat_and_snat 192.0.2.11 10.16.0.11"].UUID != b.UUID {
			t.Fatal("b's rule was touched by a's update")
		}
		got, err := nb.NATs(ctx, "ovn-cluster", map[string]string{"pod": "default/a"})
		if err != nil || len(got) != 2 {
			t.Fatalf("NATs of a: %+v, %v", got, err)
		}

		// Nothing: a's rows go, from the router and from the database.
		if err := nb.SetRouterNAT(ctx, "ovn-cluster", map[string]string{"pod": "default/a"}, nil, nil); err != nil {
			t.Fatal(err)
		}
		st3 := readNAT(t, s, nb)
		if len(st3.nats) != 1 || len(st3.policies) != 1 || st3.policies["ip4.src == 10.16.0.11"] == nil {
			t.Fatalf("after removing a: NAT %v, policies %v; want b's only", st3.nats, st3.policies)
		}
		r := nbtest.Rows[*nbdb.LogicalRouter](t, s, nb, nbdb.LogicalRouterTable)[0]
		if len(r.Nat) != 1 || len(r.Policies) != 1 {
			t.Fatalf("router references %d NAT rules and %d policies, want 1 and 1", len(r.Nat), len(r.Policies))
		}
	})
}

func TestRouterNATOnAMissingRouter(t *testing.T) {
	_, nb := nbtest.Client(t)
	ctx := context.Background()
	if err := nb.SetRouterNAT(ctx, "nowhere", map[string]string{"pod": "x"}, nil, nil); err != nil {
		t.Fatalf("removing from a missing router: %v, want nothing to do", err)
	}
	n, p := podNAT("default/a", "192.0.2.10", "10.16.0.10")
	if err := nb.SetRouterNAT(ctx, "nowhere", map[string]string{"pod": "default/a"}, n, p); err == nil {
		t.Fatal("NAT on a missing router: no error")
	}
}

func TestRoutesAndPoliciesByOwner(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	ctx := context.Background()
	rt := ovnnb.Route{Router: "ovn-cluster", Prefix: mustPrefix("10.16.0.0/16"), Nexthop: mustAddr("100.64.0.2"), ExternalIDs: map[string]string{ovnnb.KeyNode: "n1"}}
	if err := nb.EnsureRoute(ctx, rt); err != nil {
		t.Fatal(err)
	}
	rt.Nexthop = mustAddr("100.64.0.3")
	if err := nb.EnsureRoute(ctx, rt); err != nil {
		t.Fatal(err)
	}
	routes, err := nb.Routes(ctx, "ovn-cluster", map[string]string{ovnnb.KeyNode: "n1"})
	if err != nil || len(routes) != 1 || routes[0].Nexthop != mustAddr("100.64.0.3") {
		t.Fatalf("routes %+v %v: want one, via 100.64.0.3", routes, err)
	}
	if err := nb.EnsurePolicy(ctx, ovnnb.Policy{Router: "ovn-cluster", Priority: 29000, Match: "ip4.src == 10.16.0.0/16", Nexthop: mustAddr("100.64.0.2"),
		ExternalIDs: map[string]string{ovnnb.KeyNode: "n1"}}); err != nil {
		t.Fatal(err)
	}
	if err := nb.DeleteRoutes(ctx, "ovn-cluster", map[string]string{ovnnb.KeyNode: "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := nb.DeletePolicies(ctx, "ovn-cluster", map[string]string{ovnnb.KeyNode: "n1"}); err != nil {
		t.Fatal(err)
	}
	if n := len(nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, s, nb, nbdb.LogicalRouterStaticRouteTable)); n != 0 {
		t.Fatalf("%d routes left", n)
	}
	if n := len(nbtest.Rows[*nbdb.LogicalRouterPolicy](t, s, nb, nbdb.LogicalRouterPolicyTable)); n != 0 {
		t.Fatalf("%d policies left", n)
	}
}

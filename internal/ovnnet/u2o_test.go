package ovnnet

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// An interconnected underlay subnet (u2oInterconnection) in each family
// the cluster has: the cluster router's port on it holds an address of
// each of the subnet's families and sends no router advertisement (the
// physical router is the subnet's IPv6 router); per family, the subnet's
// traffic to the nodes' addresses (ovnhost.nodes.ip4/.ip6) and everywhere
// outside the cluster is rerouted to the physical gateway of that family;
// an IPv6 gateway also has a static route to itself (through which OVN
// 23.03 learns to solicit it).
// The IPv4 rows are those of before IPv6 (same match strings); an
// IPv4-only cluster has no IPv6 row. The subnet losing its IPv6 CIDR loses
// its IPv6 policies; switched off, it has none.
func TestU2ORowsPerFamily(t *testing.T) {
	ctx := context.Background()
	const (
		v4Policy = "ip4.src == 192.168.50.0/24"
		v4Nodes  = "ip4.src == 192.168.50.0/24 && ip4.dst == $ovnhost.nodes.ip4"
		v6Policy = "ip6.src == fd00:50::/64"
		v6Nodes  = "ip6.src == fd00:50::/64 && ip6.dst == $ovnhost.nodes.ip6"
	)
	for _, tc := range []struct {
		name                   string
		def, join, services    string
		node                   []netip.Addr
		cidr, gateway          string
		wantPolicies           map[string][]string // "priority match" -> nexthops
		wantNodes4, wantNodes6 []string            // nil: no such set
		routerFamilies         int
	}{
		{name: "dual-stack", def: dualDefault, join: dualJoin, services: "10.96.0.0/12,fd00:10:96::/112",
			node: []netip.Addr{netip.MustParseAddr("192.168.100.1"), netip.MustParseAddr("fd00:100::1")},
			cidr: "192.168.50.0/24,fd00:50::/64", gateway: "192.168.50.254,fd00:50::fe",
			wantPolicies: map[string][]string{"31100 " + v4Nodes: {"192.168.50.254"}, "29100 " + v4Policy: {"192.168.50.254"},
				"31100 " + v6Nodes: {"fd00:50::fe"}, "29100 " + v6Policy: {"fd00:50::fe"}},
			wantNodes4: []string{"192.168.100.1"}, wantNodes6: []string{"fd00:100::1"}, routerFamilies: 2},
		{name: "ipv6-only", def: "fd00:10:16::/64", join: "fd00:100:64::/112", services: "fd00:10:96::/112",
			node: []netip.Addr{netip.MustParseAddr("fd00:100::1")},
			cidr: "fd00:50::/64", gateway: "fd00:50::fe",
			wantPolicies: map[string][]string{"31100 " + v6Nodes: {"fd00:50::fe"}, "29100 " + v6Policy: {"fd00:50::fe"}},
			wantNodes4:   []string{}, wantNodes6: []string{"fd00:100::1"}, routerFamilies: 1},
		{name: "ipv4-only", def: "10.16.0.0/16", join: "100.64.0.0/16", services: "10.96.0.0/12",
			node: []netip.Addr{netip.MustParseAddr("192.168.100.1")},
			cidr: "192.168.50.0/24", gateway: "192.168.50.254",
			wantPolicies: map[string][]string{"31100 " + v4Nodes: {"192.168.50.254"}, "29100 " + v4Policy: {"192.168.50.254"}},
			wantNodes4:   []string{"192.168.100.1"}, routerFamilies: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, nb := nbtest.Client(t)
			var services []netip.Prefix
			for _, c := range strings.Split(tc.services, ",") {
				services = append(services, netip.MustParsePrefix(c))
			}
			n := New(nb, Config{ServiceCIDRs: services})
			if err := n.EnsureDefaultTopology(ctx, tc.def, tc.join); err != nil {
				t.Fatal(err)
			}
			if _, err := n.AddNode(ctx, NodeRequest{Name: "node-a", InternalIPs: tc.node}); err != nil {
				t.Fatal(err)
			}
			cfg, err := ipam.ParseSubnet("sub50", tc.cidr, tc.gateway, []string{})
			if err != nil {
				t.Fatal(err)
			}
			ul := &Underlay{Provider: "physnet1", VlanID: 50, U2O: true}
			if err := n.AddSubnet(ctx, cfg, ul); err != nil {
				t.Fatal(err)
			}
			r := readEgressRows(t, s, n)
			u2o := u2oPolicies(r)
			if !maps.EqualFunc(u2o, tc.wantPolicies, slices.Equal) {
				t.Errorf("u2o policies:\n got %v\nwant %v", u2o, tc.wantPolicies)
			}
			for _, set := range []struct {
				name string
				want []string
			}{{NodeAddressesSet, tc.wantNodes4}, {NodeAddressesSet6, tc.wantNodes6}} {
				got, ok := r.sets[set.name]
				if set.want == nil {
					if ok {
						t.Errorf("%s exists (%v) in a cluster without that family", set.name, got)
					}
					continue
				}
				if !ok || !slices.Equal(got, set.want) {
					t.Errorf("%s = %v (present %v), want %v", set.name, got, ok, set.want)
				}
			}
			ips, _, ok := n.U2O(ctx, "sub50")
			if !ok || len(ips) != tc.routerFamilies {
				t.Errorf("interconnection addresses %v (ok %v), want one per family of %s", ips, ok, tc.cidr)
			}
			lrp := routerPortOn(t, s, n, "sub50")
			if lrp == nil || len(lrp.Networks) != tc.routerFamilies {
				t.Fatalf("router port on sub50: %+v, want one network per family of %s", lrp, tc.cidr)
			}
			for _, gw := range strings.Split(tc.gateway, ",") {
				if slices.ContainsFunc(lrp.Networks, func(nw string) bool { return strings.HasPrefix(nw, gw+"/") }) {
					t.Errorf("the router port holds the physical gateway %s: %v", gw, lrp.Networks)
				}
			}
			// Each IPv6 next hop has its static route (OVN 23.03 solicits
			// a policy's IPv6 next hop only through one); IPv4 has none.
			for _, gw := range strings.Split(tc.gateway, ",") {
				via, has := r.routes[gw]
				if want := strings.Contains(gw, ":"); has != want || (want && via != gw) {
					t.Errorf("route to the gateway %s: %q (present %v), want present %v via itself; routes %v", gw, via, has, want, r.routes)
				}
			}
			if len(lrp.Ipv6RaConfigs) != 0 {
				t.Errorf("the router port on an underlay subnet sends router advertisements onto the physical network: %v", lrp.Ipv6RaConfigs)
			}

			if strings.Contains(tc.cidr, ",") {
				// The subnet drops its IPv6 CIDR: its IPv6 policies go.
				cfg4, err := ipam.ParseSubnet("sub50", "192.168.50.0/24", "192.168.50.254", nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := n.AddSubnet(ctx, cfg4, ul); err != nil {
					t.Fatal(err)
				}
				want := map[string][]string{"31100 " + v4Nodes: {"192.168.50.254"}, "29100 " + v4Policy: {"192.168.50.254"}}
				r := readEgressRows(t, s, n)
				if got := u2oPolicies(r); !maps.EqualFunc(got, want, slices.Equal) {
					t.Errorf("after sub50 became IPv4-only, u2o policies %v, want %v", got, want)
				}
				if via, ok := r.routes["fd00:50::fe"]; ok {
					t.Errorf("after sub50 became IPv4-only, the route to its former IPv6 gateway stays (via %s)", via)
				}
			}
			if err := n.AddSubnet(ctx, cfg, &Underlay{Provider: "physnet1", VlanID: 50}); err != nil {
				t.Fatal(err)
			}
			r = readEgressRows(t, s, n)
			if got := u2oPolicies(r); len(got) != 0 {
				t.Errorf("u2o policies left after the interconnection was switched off: %v", got)
			}
			if via, ok := r.routes["fd00:50::fe"]; ok {
				t.Errorf("the route to the IPv6 gateway stays after the interconnection was switched off (via %s)", via)
			}
		})
	}
}

const (
	dualDefault = "10.16.0.0/16,fd00:10:16::/64"
	dualJoin    = "100.64.0.0/16,fd00:100:64::/112"
)

// u2oPolicies keeps the policies at the interconnection's priorities.
func u2oPolicies(r egressRows) map[string][]string {
	out := map[string][]string{}
	for k, v := range r.policies {
		if strings.HasPrefix(k, "31100 ") || strings.HasPrefix(k, "29100 ") {
			out[k] = v
		}
	}
	return out
}

// routerPortOn is the cluster router's port on subnet (nil: none).
func routerPortOn(t *testing.T, s *nbtest.Server, n *Network, subnet string) *nbdb.LogicalRouterPort {
	t.Helper()
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, n.NB, nbdb.LogicalRouterPortTable) {
		if p.Name == DefaultRouter+"-"+subnet {
			return p
		}
	}
	return nil
}

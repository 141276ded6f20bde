package ovnnet

import (
	"context"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// egressRows is what a user reads of egress in the NB: address sets by
// name, the router's policies ("priority match" -> nexthops) and its
// routes (prefix -> nexthop).
type egressRows struct {
	sets     map[string][]string
	policies map[string][]string
	routes   map[string]string
}

func readEgressRows(t *testing.T, s *nbtest.Server, n *Network) egressRows {
	t.Helper()
	r := egressRows{sets: map[string][]string{}, policies: map[string][]string{}, routes: map[string]string{}}
	for _, a := range nbtest.Rows[*nbdb.AddressSet](t, s, n.NB, nbdb.AddressSetTable) {
		addrs := slices.Clone(a.Addresses)
		slices.Sort(addrs)
		r.sets[a.Name] = addrs
	}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, s, n.NB, nbdb.LogicalRouterPolicyTable) {
		r.policies[strconv.Itoa(p.Priority)+" "+p.Match] = p.Nexthops
	}
	for _, rt := range nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, s, n.NB, nbdb.LogicalRouterStaticRouteTable) {
		r.routes[rt.IPPrefix] = rt.Nexthop
	}
	return r
}

// A dual-stack cluster's egress: each family has its cluster set, the
// node's pod set, the reroute to the node's join address of that family
// and a default route to that family's join gateway; a pod's addresses
// land in its family's set and leave both when it goes. An IPv4-only
// cluster gets no IPv6 row at all.
func TestEgressRowsPerFamily(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name        string
		join, def   string
		services    string
		node        []netip.Addr
		wantV6      bool
		podPrefixes []string // the pod's address prefixes, in order
	}{
		{name: "dual-stack", join: "100.64.0.0/16,fd00:100:64::/112", def: "10.16.0.0/16,fd00:10:16::/64", services: "10.96.0.0/12,fd00:10:96::/112",
			node: []netip.Addr{netip.MustParseAddr("192.168.100.1"), netip.MustParseAddr("fd00:100::1")}, wantV6: true,
			podPrefixes: []string{"10.16.", "fd00:10:16::"}},
		{name: "ipv4-only", join: "100.64.0.0/16", def: "10.16.0.0/16", services: "10.96.0.0/12",
			node: []netip.Addr{netip.MustParseAddr("192.168.100.1")}, podPrefixes: []string{"10.16."}},
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
			join, err := n.AddNode(ctx, NodeRequest{Name: "node-a", InternalIPs: tc.node})
			if err != nil {
				t.Fatal(err)
			}
			pod, err := n.AddPod(ctx, PodRequest{Namespace: "ns", Name: "p", Node: "node-a"})
			if err != nil {
				t.Fatal(err)
			}
			if len(pod.IPs) != len(tc.podPrefixes) {
				t.Fatalf("pod addresses %v, want one per family of %s", pod.IPs, tc.def)
			}
			r := readEgressRows(t, s, n)
			for _, f := range []struct {
				fam      ipFamily
				want     bool
				anyRoute string
				gw       string
			}{{ip4Family, true, "0.0.0.0/0", "100.64.0.1"}, {ip6Family, tc.wantV6, "::/0", "fd00:100:64::1"}} {
				joinIP := f.fam.of(join.IPs)
				podIP := f.fam.of(pod.IPs)
				_, hasCluster := r.sets[f.fam.clusterSet()]
				nodeSet, hasNode := r.sets[f.fam.nodeSet("node-a")]
				reroute, hasReroute := r.policies["29000 "+f.fam.nodeEgressMatch("node-a")]
				_, hasAllow := r.policies["31000 "+f.fam.clusterMatch()]
				route, hasRoute := r.routes[f.anyRoute]
				if !f.want {
					if hasCluster || hasNode || hasReroute || hasAllow || hasRoute || len(joinIP) > 0 {
						t.Errorf("%s rows in an IPv4-only cluster: %+v", f.fam.ip, r)
					}
					continue
				}
				if len(joinIP) != 1 || len(podIP) != 1 {
					t.Fatalf("%s: node join %v, pod %v: want one address each", f.fam.ip, join.IPs, pod.IPs)
				}
				if !hasCluster || !slices.Contains(r.sets[f.fam.clusterSet()], f.fam.of(tc.node)[0].String()) {
					t.Errorf("%s cluster set %v lacks the node's address %v", f.fam.ip, r.sets[f.fam.clusterSet()], f.fam.of(tc.node))
				}
				if !hasNode || !slices.Equal(nodeSet, []string{podIP[0].String()}) {
					t.Errorf("%s node set %v, want the pod's %s", f.fam.ip, nodeSet, podIP[0])
				}
				if !hasReroute || !slices.Equal(reroute, []string{joinIP[0].String()}) {
					t.Errorf("%s reroute policy nexthops %v (present %v), want the node's join address %s; policies %v", f.fam.ip, reroute, hasReroute, joinIP[0], r.policies)
				}
				if !hasAllow {
					t.Errorf("%s: no policy keeping cluster destinations routed: %v", f.fam.ip, r.policies)
				}
				if !hasRoute || route != f.gw {
					t.Errorf("%s default route %q (present %v), want via %s", f.fam.ip, route, hasRoute, f.gw)
				}
			}
			if tc.wantV6 && !slices.Contains(r.sets[ClusterAddressSet6], "fd00:10:96::/112") {
				t.Errorf("the IPv6 service CIDR is not a cluster destination: %v", r.sets[ClusterAddressSet6])
			}
			if slices.ContainsFunc(r.sets[ClusterAddressSet], func(a string) bool { return strings.Contains(a, ":") }) {
				t.Errorf("IPv6 prefix in the IPv4 set: %v", r.sets[ClusterAddressSet])
			}
			if err := n.DeletePod(ctx, "ns", "p"); err != nil {
				t.Fatal(err)
			}
			r = readEgressRows(t, s, n)
			for _, set := range []string{NodeAddressSet("node-a"), NodeAddressSet6("node-a")} {
				if len(r.sets[set]) != 0 {
					t.Errorf("%s keeps %v after the pod's deletion", set, r.sets[set])
				}
			}
			if err := n.DeleteNode(ctx, "node-a"); err != nil {
				t.Fatal(err)
			}
			r = readEgressRows(t, s, n)
			for p := range r.policies {
				if p != "31000 "+ip4Family.clusterMatch() && p != "31000 "+ip6Family.clusterMatch() {
					t.Errorf("policy %q left after the node's deletion", p)
				}
			}
			for _, set := range []string{NodeAddressSet("node-a"), NodeAddressSet6("node-a")} {
				if _, ok := r.sets[set]; ok {
					t.Errorf("%s left after the node's deletion", set)
				}
			}
		})
	}
}

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

// Two custom VPCs with the default VPC's CIDR: each subnet on its VPC's
// router, none in the cluster set, a custom VPC's pod in no node's egress
// set (its address is the default VPC pod's too), no load balancer group;
// the VPC's routes, policies and peering port are exactly what EnsureVPC
// was given, and RemoveVPC takes the router with them.
func TestCustomVPCsAreOwnAddressSpaces(t *testing.T) {
	ctx := context.Background()
	s, nb := nbtest.Client(t)
	n := New(nb, Config{})
	if err := n.EnsureDefaultTopology(ctx, "10.16.0.0/16", ""); err != nil {
		t.Fatal(err)
	}
	uuid, err := nb.EnsureLBGroup(ctx, "cluster_lbg")
	if err != nil {
		t.Fatal(err)
	}
	if err := nb.AttachLBGroup(ctx, "cluster_lbg", uuid, DefaultRouter); err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddNode(ctx, NodeRequest{Name: "node-a", InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.100.1")}}); err != nil {
		t.Fatal(err)
	}
	for _, vpc := range []string{"vpc-a", "vpc-b"} {
		if err := n.EnsureVPC(ctx, VPC{Name: vpc}); err != nil {
			t.Fatal(err)
		}
		cfg, err := ipam.ParseSubnet(vpc+"-net", "10.16.0.0/24", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		cfg.VPC = vpc
		if err := n.AddSubnet(ctx, cfg, nil); err != nil {
			t.Fatalf("subnet of %s overlapping ovn-default: %v", vpc, err)
		}
	}
	def, err := n.AddPod(ctx, PodRequest{Namespace: "ns", Name: "def", Node: "node-a", IPs: []netip.Addr{netip.MustParseAddr("10.16.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.AddPod(ctx, PodRequest{Namespace: "ns", Name: "in-a", Subnet: "vpc-a-net", Node: "node-a", IPs: def.IPs}); err != nil {
		t.Fatalf("vpc-a pod with the default pod's address: %v", err)
	}
	r := readEgressRows(t, s, n)
	if got := r.sets[ClusterAddressSet]; slices.Contains(got, "10.16.0.0/24") || !slices.Contains(got, "10.16.0.0/16") {
		t.Errorf("cluster set %v: want ovn-default's CIDR and no custom VPC's", got)
	}
	if got := r.sets[NodeAddressSet("node-a")]; !slices.Equal(got, []string{"10.16.0.5"}) {
		t.Errorf("node-a's egress set %v, want the default pod's address once", got)
	}
	routers := map[string]*nbdb.LogicalRouter{}
	for _, lr := range nbtest.Rows[*nbdb.LogicalRouter](t, s, nb, nbdb.LogicalRouterTable) {
		routers[lr.Name] = lr
	}
	for _, vpc := range []string{"vpc-a", "vpc-b"} {
		if lr := routers[vpc]; lr == nil || len(lr.Ports) != 1 || len(lr.LoadBalancerGroup) != 0 {
			t.Errorf("router %s: %+v; want one port (its subnet's) and no load balancer group", vpc, lr)
		}
	}
	for _, ls := range nbtest.Rows[*nbdb.LogicalSwitch](t, s, nb, nbdb.LogicalSwitchTable) {
		custom := ls.ExternalIDs[ovnnb.KeyVPC] != ""
		if custom == (len(ls.LoadBalancerGroup) > 0) {
			t.Errorf("switch %s (vpc %q): load balancer groups %v", ls.Name, ls.ExternalIDs[ovnnb.KeyVPC], ls.LoadBalancerGroup)
		}
	}
	// Routes, policies and a peering port, set as a whole.
	want := VPC{Name: "vpc-a",
		Routes:   []ovnnb.VPCRoute{{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Nexthop: netip.MustParseAddr("10.16.0.254")}, {Prefix: netip.MustParsePrefix("10.16.0.8/29"), Nexthop: netip.MustParseAddr("10.16.0.253"), SrcIP: true}},
		Policies: []ovnnb.RouterPolicy{{Priority: 31000, Match: "ip4.dst == 10.16.0.99", Action: "drop"}},
		Peers:    []ovnnb.PeerPort{{Name: VPCPeerPortName("vpc-a", "vpc-b"), Peer: VPCPeerPortName("vpc-b", "vpc-a"), Network: netip.MustParsePrefix("169.254.0.1/30")}},
	}
	for range 2 { // idempotent
		if err := n.EnsureVPC(ctx, want); err != nil {
			t.Fatal(err)
		}
	}
	var routes, policies, peers []string
	for _, rt := range nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, s, nb, nbdb.LogicalRouterStaticRouteTable) {
		if rt.ExternalIDs[ovnnb.KeyVPC] == "vpc-a" {
			routes = append(routes, rt.IPPrefix+" "+rt.Nexthop+" "+*rt.Policy)
		}
	}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, s, nb, nbdb.LogicalRouterPolicyTable) {
		if p.ExternalIDs[ovnnb.KeyVPC] == "vpc-a" {
			policies = append(policies, p.Action+" "+p.Match)
		}
	}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
		if p.Peer != nil {
			peers = append(peers, p.Name+" peer "+*p.Peer+" "+p.Networks[0])
		}
	}
	slices.Sort(routes)
	if w := []string{"0.0.0.0/0 10.16.0.254 dst-ip", "10.16.0.8/29 10.16.0.253 src-ip"}; !slices.Equal(routes, w) {
		t.Errorf("routes %v, want %v", routes, w)
	}
	if w := []string{"drop ip4.dst == 10.16.0.99"}; !slices.Equal(policies, w) {
		t.Errorf("policies %v, want %v", policies, w)
	}
	if w := []string{"vpc-a-vpc-b peer vpc-b-vpc-a 169.254.0.1/30"}; !slices.Equal(peers, w) {
		t.Errorf("peering ports %v, want %v", peers, w)
	}
	if err := n.EnsureVPC(ctx, VPC{Name: "vpc-a"}); err != nil {
		t.Fatal(err)
	}
	if lr := routerNamed(t, s, n, "vpc-a"); lr == nil || len(lr.StaticRoutes) != 0 || len(lr.Policies) != 0 || len(lr.Ports) != 1 {
		t.Errorf("vpc-a after emptying its spec: %+v; want only its subnet's port", lr)
	}
	if err := n.RemoveVPC(ctx, "vpc-b"); err != nil {
		t.Fatal(err)
	}
	if lr := routerNamed(t, s, n, "vpc-b"); lr != nil {
		t.Errorf("router vpc-b still there after RemoveVPC")
	}
	// The cluster router is not a VPC router: RemoveVPC leaves it.
	if err := n.RemoveVPC(ctx, DefaultRouter); err != nil || routerNamed(t, s, n, DefaultRouter) == nil {
		t.Errorf("RemoveVPC(ovn-cluster) removed the cluster router (%v)", err)
	}
}

func routerNamed(t *testing.T, s *nbtest.Server, n *Network, name string) *nbdb.LogicalRouter {
	for _, lr := range nbtest.Rows[*nbdb.LogicalRouter](t, s, n.NB, nbdb.LogicalRouterTable) {
		if lr.Name == name {
			return lr
		}
	}
	return nil
}

package ovnnet

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Egress to outside the cluster leaves through the pod's own node (Kube-OVN's
// distributed gateway): the cluster router's default route points at the
// join switch, and one policy per node reroutes traffic from that node's
// pods, to anything that is not a cluster address, to the node's join
// address (its ovn0). Each IP family has its own sets, policies and
// default route. The node masquerades it when the Subnet asks for
// natOutgoing.

// DefaultServiceCIDR is Kube-OVN's service CIDR: never routed out.
const DefaultServiceCIDR = "10.96.0.0/12"

// Router policy priorities (Kube-OVN's): cluster destinations are allowed
// (routed normally) above the per-node reroute. A negated match
// (ip4.dst != $set) would expand into the cross product of each CIDR's
// complement in OpenFlow: tens of thousands of flows with four subnets.
const (
	ClusterPriority = 31000
	EgressPriority  = 29000
)

// External ID keys of egress rows.
const (
	keyEgress = "egress" // "default-route", "cluster", "node"
)

// ipFamily is one IP version as OVN matches name it: each family has its
// own address sets, policies and default route, since a match compares
// addresses of one family.
type ipFamily struct {
	ip      string // "ip4" or "ip6": the match field prefix and the sets' suffix
	is      func(netip.Addr) bool
	anyDest netip.Prefix // the default route's prefix
}

var (
	ip4Family = ipFamily{"ip4", netip.Addr.Is4, netip.MustParsePrefix("0.0.0.0/0")}
	ip6Family = ipFamily{"ip6", netip.Addr.Is6, netip.MustParsePrefix("::/0")}
	families  = []ipFamily{ip4Family, ip6Family}
)

// of keeps the addresses of this family.
func (f ipFamily) of(ips []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, ip := range ips {
		if f.is(ip) {
			out = append(out, ip)
		}
	}
	return out
}

// ClusterAddressSet holds every IPv4 destination that stays inside the
// cluster: subnets, join, services, node addresses; ClusterAddressSet6 the
// IPv6 ones.
const (
	ClusterAddressSet  = "ovnhost.cluster.ip4"
	ClusterAddressSet6 = "ovnhost.cluster.ip6"
)

func (f ipFamily) clusterSet() string { return "ovnhost.cluster." + f.ip }

// NodeAddressSet is the set of the IPv4 addresses of one node's pods
// (NodeAddressSet6: the IPv6 ones). Node names have no '_', so mapping '-'
// to '_' keeps names apart and within OVN's [a-zA-Z_.][a-zA-Z_.0-9]*.
func NodeAddressSet(node string) string  { return ip4Family.nodeSet(node) }
func NodeAddressSet6(node string) string { return ip6Family.nodeSet(node) }

func (f ipFamily) nodeSet(node string) string {
	return "ovnhost.node." + strings.ReplaceAll(node, "-", "_") + "." + f.ip
}

// nodeEgressMatch is the match of a node's reroute policy.
func (f ipFamily) nodeEgressMatch(node string) string {
	return fmt.Sprintf("%s.src == $%s", f.ip, f.nodeSet(node))
}

// clusterMatch is the match of the policy that keeps cluster traffic routed.
func (f ipFamily) clusterMatch() string {
	return fmt.Sprintf("%s.dst == $%s", f.ip, f.clusterSet())
}

// syncClusterSet rewrites the cluster address sets from the subnets and
// nodes known now. The IPv6 set exists only while some cluster address is
// IPv6 (an IPv4-only cluster has no IPv6 rows).
func (n *Network) syncClusterSet(ctx context.Context) error {
	// One writer at a time: the sets are rewritten from memory as a whole.
	n.clusterSetMu.Lock()
	defer n.clusterSetMu.Unlock()
	var prefixes []netip.Prefix
	n.mu.Lock()
	physicalGW := maps.Clone(n.physicalGW)
	vpcOf := maps.Clone(n.vpcOf)
	var nodes []netip.Addr
	for _, ips := range n.nodeIPs {
		nodes = append(nodes, ips...)
	}
	n.mu.Unlock()
	for _, name := range n.IPAM.SubnetNames() {
		if vpcOf[name] != "" {
			// Another VPC's address space: for the default VPC's pods it
			// is outside the cluster (and may overlap its subnets).
			continue
		}
		if u2o, ok := physicalGW[name]; ok && !u2o {
			// Reached through the physical network: overlay pods go to it
			// through their node, as to any address outside the cluster.
			continue
		}
		s, _ := n.IPAM.Subnet(name)
		prefixes = append(prefixes, s.CIDRs...)
	}
	prefixes = append(prefixes, n.serviceCIDRs()...)
	slices.SortFunc(nodes, netip.Addr.Compare)
	for _, f := range families {
		var addrs, nodeAddrs []string
		for _, p := range prefixes {
			if f.is(p.Addr()) && !p.Addr().Is4In6() {
				addrs = append(addrs, p.String())
			}
		}
		for _, ip := range f.of(nodes) {
			nodeAddrs = append(nodeAddrs, ip.String())
		}
		addrs = append(addrs, nodeAddrs...)
		if f.ip == "ip6" && len(addrs) == 0 {
			for _, set := range []string{f.clusterSet(), f.nodesSet()} {
				if err := n.NB.DeleteAddressSet(ctx, set); err != nil {
					return err
				}
			}
			continue
		}
		// The nodes' addresses of this family, which the u2o policies of
		// the family name (the IPv4 set always exists, as before IPv6).
		if err := n.NB.EnsureAddressSet(ctx, ovnnb.AddressSet{Name: f.nodesSet(), Addresses: nodeAddrs, ExternalIDs: map[string]string{keyEgress: "nodes"}}); err != nil {
			return err
		}
		if err := n.NB.EnsureAddressSet(ctx, ovnnb.AddressSet{Name: f.clusterSet(), Addresses: addrs, ExternalIDs: map[string]string{keyEgress: "cluster"}}); err != nil {
			return err
		}
	}
	return nil
}

func (n *Network) serviceCIDRs() []netip.Prefix {
	if len(n.cfg.ServiceCIDRs) > 0 {
		return n.cfg.ServiceCIDRs
	}
	return []netip.Prefix{netip.MustParsePrefix(DefaultServiceCIDR)}
}

// ensureNodeEgress gives a node, in each family in which it has a join
// address and the join Subnet a gateway, its pod address set, its reroute
// policy to that join address, and the router its default route to the
// join switch.
func (n *Network) ensureNodeEgress(ctx context.Context, node string, joinIPs, joinGateways []netip.Addr, internal []netip.Addr) error {
	n.mu.Lock()
	n.nodeIPs[node] = slices.Clone(internal)
	n.mu.Unlock()
	if err := n.syncClusterSet(ctx); err != nil {
		return err
	}
	for _, f := range families {
		join, gw := f.of(joinIPs), f.of(joinGateways)
		if len(join) == 0 || len(gw) == 0 {
			continue
		}
		if err := n.NB.EnsurePolicy(ctx, ovnnb.Policy{Router: n.cfg.Router, Priority: ClusterPriority, Match: f.clusterMatch(),
			ExternalIDs: map[string]string{keyEgress: "cluster"}}); err != nil {
			return err
		}
		if err := n.NB.CreateAddressSetIfMissing(ctx, ovnnb.AddressSet{Name: f.nodeSet(node), ExternalIDs: map[string]string{keyEgress: "node", ovnnb.KeyNode: node}}); err != nil {
			return err
		}
		if err := n.NB.EnsurePolicy(ctx, ovnnb.Policy{Router: n.cfg.Router, Priority: EgressPriority, Match: f.nodeEgressMatch(node), Nexthop: join[0],
			ExternalIDs: map[string]string{keyEgress: "node", ovnnb.KeyNode: node}}); err != nil {
			return err
		}
		if err := n.NB.EnsureRoute(ctx, ovnnb.Route{Router: n.cfg.Router, Prefix: f.anyDest, Nexthop: gw[0],
			ExternalIDs: map[string]string{keyEgress: "default-route"}}); err != nil {
			return err
		}
	}
	return nil
}

// removeNodeEgress drops a node's policy and pod address set.
func (n *Network) removeNodeEgress(ctx context.Context, node string) error {
	if err := n.NB.DeletePolicies(ctx, n.cfg.Router, map[string]string{keyEgress: "node", ovnnb.KeyNode: node}); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.nodeIPs, node)
	n.mu.Unlock()
	for _, f := range families {
		if err := n.NB.DeleteAddressSet(ctx, f.nodeSet(node)); err != nil {
			return err
		}
	}
	return n.syncClusterSet(ctx)
}

// nodeSets are the egress address sets, one per family of ips, of the node
// a pod runs on, created on first use (none while the pod is not
// scheduled).
func (n *Network) nodeSets(ctx context.Context, node string, ips []netip.Addr) (ovnnb.FamilySets, error) {
	var sets ovnnb.FamilySets
	if node == "" {
		return sets, nil
	}
	for _, f := range families {
		if len(f.of(ips)) == 0 {
			continue
		}
		set := f.nodeSet(node)
		if err := n.NB.CreateAddressSetIfMissing(ctx, ovnnb.AddressSet{Name: set, ExternalIDs: map[string]string{keyEgress: "node", ovnnb.KeyNode: node}}); err != nil {
			return sets, err
		}
		if f.ip == "ip4" {
			sets.V4 = set
		} else {
			sets.V6 = set
		}
	}
	return sets, nil
}

// forgetPodEgress removes a pod's addresses from every node set (it may
// have been recorded under a node it no longer runs on).
func (n *Network) forgetPodEgress(ctx context.Context, ips []netip.Addr) error {
	return n.forgetPodEgressExcept(ctx, ips, ovnnb.FamilySets{})
}

// forgetPodEgressExcept is forgetPodEgress sparing the sets of keep (a
// virtual machine's addresses leave the set of the node it left).
func (n *Network) forgetPodEgressExcept(ctx context.Context, ips []netip.Addr, keep ovnnb.FamilySets) error {
	var addrs []string
	for _, ip := range ips {
		addrs = append(addrs, ip.String())
	}
	if len(addrs) == 0 {
		return nil
	}
	sets, err := n.NB.AddressSets(ctx, map[string]string{keyEgress: "node"})
	if err != nil {
		return err
	}
	for _, s := range sets {
		if s.Name == keep.V4 || s.Name == keep.V6 {
			continue
		}
		var in []string
		for _, a := range addrs {
			if slices.Contains(s.Addresses, a) {
				in = append(in, a)
			}
		}
		if len(in) > 0 {
			if err := n.NB.AddressSetDelete(ctx, s.Name, in...); err != nil {
				return err
			}
		}
	}
	return nil
}

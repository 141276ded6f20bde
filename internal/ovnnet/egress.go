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
// address (its ovn0). The node masquerades it when the Subnet asks for
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

// ClusterAddressSet holds every IPv4 destination that stays inside the
// cluster: subnets, join, services, node addresses.
const ClusterAddressSet = "ovnhost.cluster.ip4"

// NodeAddressSet is the set of the IPv4 addresses of one node's pods. Node
// names have no '_', so mapping '-' to '_' keeps names apart and within
// OVN's [a-zA-Z_.][a-zA-Z_.0-9]*.
func NodeAddressSet(node string) string {
	return "ovnhost.node." + strings.ReplaceAll(node, "-", "_") + ".ip4"
}

// nodeEgressMatch is the match of a node's reroute policy.
func nodeEgressMatch(node string) string {
	return fmt.Sprintf("ip4.src == $%s", NodeAddressSet(node))
}

// clusterMatch is the match of the policy that keeps cluster traffic routed.
var clusterMatch = fmt.Sprintf("ip4.dst == $%s", ClusterAddressSet)

// syncClusterSet rewrites the cluster address set from the subnets and
// nodes known now.
func (n *Network) syncClusterSet(ctx context.Context) error {
	// One writer at a time: the set is rewritten from memory as a whole.
	n.clusterSetMu.Lock()
	defer n.clusterSetMu.Unlock()
	var addrs []string
	n.mu.Lock()
	physicalGW := maps.Clone(n.physicalGW)
	n.mu.Unlock()
	for _, name := range n.IPAM.SubnetNames() {
		if u2o, ok := physicalGW[name]; ok && !u2o {
			// Reached through the physical network: overlay pods go to it
			// through their node, as to any address outside the cluster.
			continue
		}
		s, _ := n.IPAM.Subnet(name)
		for _, p := range s.CIDRs {
			if p.Addr().Is4() {
				addrs = append(addrs, p.String())
			}
		}
	}
	for _, p := range n.serviceCIDRs() {
		if p.Addr().Is4() {
			addrs = append(addrs, p.String())
		}
	}
	var nodes []string
	n.mu.Lock()
	for _, ips := range n.nodeIPs {
		for _, ip := range ips {
			if ip.Is4() {
				nodes = append(nodes, ip.String())
			}
		}
	}
	n.mu.Unlock()
	slices.Sort(nodes)
	if err := n.NB.EnsureAddressSet(ctx, ovnnb.AddressSet{Name: NodeAddressesSet, Addresses: nodes, ExternalIDs: map[string]string{keyEgress: "nodes"}}); err != nil {
		return err
	}
	addrs = append(addrs, nodes...)
	return n.NB.EnsureAddressSet(ctx, ovnnb.AddressSet{Name: ClusterAddressSet, Addresses: addrs, ExternalIDs: map[string]string{keyEgress: "cluster"}})
}

func (n *Network) serviceCIDRs() []netip.Prefix {
	if len(n.cfg.ServiceCIDRs) > 0 {
		return n.cfg.ServiceCIDRs
	}
	return []netip.Prefix{netip.MustParsePrefix(DefaultServiceCIDR)}
}

// ensureNodeEgress gives a node its pod address set, its reroute policy to
// joinIP, and the router its default route to the join switch.
func (n *Network) ensureNodeEgress(ctx context.Context, node string, joinIP, joinGateway netip.Addr, internal []netip.Addr) error {
	if !joinIP.Is4() || !joinGateway.Is4() {
		return nil // IPv4 egress only for now
	}
	n.mu.Lock()
	n.nodeIPs[node] = slices.Clone(internal)
	n.mu.Unlock()
	if err := n.syncClusterSet(ctx); err != nil {
		return err
	}
	if err := n.NB.EnsurePolicy(ctx, ovnnb.Policy{Router: n.cfg.Router, Priority: ClusterPriority, Match: clusterMatch,
		ExternalIDs: map[string]string{keyEgress: "cluster"}}); err != nil {
		return err
	}
	if _, err := n.nodeSet(ctx, node); err != nil {
		return err
	}
	if err := n.NB.EnsurePolicy(ctx, ovnnb.Policy{Router: n.cfg.Router, Priority: EgressPriority, Match: nodeEgressMatch(node), Nexthop: joinIP,
		ExternalIDs: map[string]string{keyEgress: "node", ovnnb.KeyNode: node}}); err != nil {
		return err
	}
	return n.NB.EnsureRoute(ctx, ovnnb.Route{Router: n.cfg.Router, Prefix: netip.MustParsePrefix("0.0.0.0/0"), Nexthop: joinGateway,
		ExternalIDs: map[string]string{keyEgress: "default-route"}})
}

// removeNodeEgress drops a node's policy and pod address set.
func (n *Network) removeNodeEgress(ctx context.Context, node string) error {
	if err := n.NB.DeletePolicies(ctx, n.cfg.Router, map[string]string{keyEgress: "node", ovnnb.KeyNode: node}); err != nil {
		return err
	}
	n.mu.Lock()
	delete(n.nodeIPs, node)
	n.mu.Unlock()
	if err := n.NB.DeleteAddressSet(ctx, NodeAddressSet(node)); err != nil {
		return err
	}
	return n.syncClusterSet(ctx)
}

// nodeSet is the egress address set of the node a pod runs on, created on
// first use ("" while the pod is not scheduled).
func (n *Network) nodeSet(ctx context.Context, node string) (string, error) {
	if node == "" {
		return "", nil
	}
	set := NodeAddressSet(node)
	err := n.NB.CreateAddressSetIfMissing(ctx, ovnnb.AddressSet{Name: set, ExternalIDs: map[string]string{keyEgress: "node", ovnnb.KeyNode: node}})
	return set, err
}

// forgetPodEgress removes a pod's addresses from every node set (it may
// have been recorded under a node it no longer runs on).
func (n *Network) forgetPodEgress(ctx context.Context, ips []netip.Addr) error {
	var v4 []string
	for _, ip := range ips {
		if ip.Is4() {
			v4 = append(v4, ip.String())
		}
	}
	if len(v4) == 0 {
		return nil
	}
	sets, err := n.NB.AddressSets(ctx, map[string]string{keyEgress: "node"})
	if err != nil {
		return err
	}
	for _, s := range sets {
		if slices.ContainsFunc(v4, func(a string) bool { return slices.Contains(s.Addresses, a) }) {
			if err := n.NB.AddressSetDelete(ctx, s.Name, v4...); err != nil {
				return err
			}
		}
	}
	return nil
}

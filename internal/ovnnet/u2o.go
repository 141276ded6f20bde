package ovnnet

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Underlay-to-overlay interconnection (Kube-OVN's u2oInterconnection): an
// underlay subnet whose gateway is a physical router gets a port on the
// cluster router at an address of its own. Its pods use that port as
// their default gateway (the node sets it, from the Subnet's status), so
// what they send to the cluster (overlay pods, Services, join) is routed
// by OVN; the router sends the rest, and what goes to the nodes'
// addresses, on to the physical router, so that replies come back the
// way the nodes' own traffic to the pods goes. Overlay pods reach the
// subnet through the router's port on it (the subnet is in the cluster
// address set).

// Priorities of the interconnection's router policies: above the cluster
// allow (ClusterPriority) for the nodes' addresses, above the per-node
// egress reroute for the rest (the subnet's pods are in no node's egress
// set; a pod address set from before must not win a tie either).
const (
	U2ONodePriority  = ClusterPriority + 100
	U2OOtherPriority = EgressPriority + 100
)

// NodeAddressesSet holds the nodes' IPv4 addresses (Node InternalIPs),
// NodeAddressesSet6 their IPv6 ones (present while the cluster has IPv6
// addresses, as ovnhost.cluster.ip6).
const (
	NodeAddressesSet  = "ovnhost.nodes.ip4"
	NodeAddressesSet6 = "ovnhost.nodes.ip6"
)

func (f ipFamily) nodesSet() string { return "ovnhost.nodes." + f.ip }

func u2oIDs(subnet string) map[string]string {
	return map[string]string{keyEgress: "u2o", ovnnb.KeySwitch: subnet}
}

// u2oPolicies are an interconnected subnet's policies: per family of its
// CIDRs, its traffic to the nodes' addresses and everywhere outside the
// cluster goes on to its physical gateway of that family (none for a
// family without one).
func (n *Network) u2oPolicies(cfg ipam.SubnetConfig) []ovnnb.Policy {
	var out []ovnnb.Policy
	for _, c := range cfg.CIDRs {
		f := ip4Family
		if !c.Addr().Is4() {
			f = ip6Family
		}
		gw := f.of(cfg.Gateways)
		if len(gw) == 0 {
			continue
		}
		for _, p := range []ovnnb.Policy{
			{Priority: U2ONodePriority, Match: fmt.Sprintf("%s.src == %s && %s.dst == $%s", f.ip, c, f.ip, f.nodesSet())},
			{Priority: U2OOtherPriority, Match: fmt.Sprintf("%s.src == %s", f.ip, c)},
		} {
			p.Router, p.Nexthop, p.ExternalIDs = n.cfg.Router, gw[0], u2oIDs(cfg.Name)
			out = append(out, p)
		}
	}
	return out
}

// syncU2OPolicies adds or removes a subnet's interconnection policies
// (and their next hops' routes), and those of a CIDR it no longer has.
func (n *Network) syncU2OPolicies(ctx context.Context, cfg ipam.SubnetConfig, on bool) error {
	if !on {
		if err := n.NB.DeletePolicies(ctx, n.cfg.Router, u2oIDs(cfg.Name)); err != nil {
			return err
		}
		return n.NB.DeleteRoutes(ctx, n.cfg.Router, u2oIDs(cfg.Name))
	}
	var keep []string
	var nexthops []netip.Addr
	for _, p := range n.u2oPolicies(cfg) {
		if err := n.NB.EnsurePolicy(ctx, p); err != nil {
			return err
		}
		keep = append(keep, p.Match)
		if p.Nexthop.Is6() && !slices.Contains(nexthops, p.Nexthop) {
			nexthops = append(nexthops, p.Nexthop)
		}
	}
	if err := n.NB.DeletePoliciesExcept(ctx, n.cfg.Router, u2oIDs(cfg.Name), keep); err != nil {
		return err
	}
	return n.syncU2ONexthopRoutes(ctx, cfg.Name, nexthops)
}

// syncU2ONexthopRoutes gives each IPv6 next hop of the subnet's policies
// (its physical gateway) a static route to itself through itself. OVN
// 23.03 solicits a reroute policy's IPv6 next hop at the solicited-node
// group of the packet's destination, not of the next hop, so the physical
// router never hears the solicitation and nothing beyond it is reached;
// for a static route's next hop northd adds the solicitation at the next
// hop's own group. The route sends the gateway's address where the
// subnet's connected route already does.
func (n *Network) syncU2ONexthopRoutes(ctx context.Context, subnet string, nexthops []netip.Addr) error {
	have, err := n.NB.Routes(ctx, n.cfg.Router, u2oIDs(subnet))
	if err != nil {
		return err
	}
	for _, h := range have {
		if !slices.Contains(nexthops, h.Prefix.Addr()) {
			// A gateway the subnet no longer has: start over.
			if err := n.NB.DeleteRoutes(ctx, n.cfg.Router, u2oIDs(subnet)); err != nil {
				return err
			}
			break
		}
	}
	for _, gw := range nexthops {
		if err := n.NB.EnsureRoute(ctx, ovnnb.Route{Router: n.cfg.Router, Prefix: netip.PrefixFrom(gw, gw.BitLen()), Nexthop: gw, ExternalIDs: u2oIDs(subnet)}); err != nil {
			return err
		}
	}
	return nil
}

// U2O is the interconnection address(es) and router port MAC of an
// underlay subnet (ok false when it has none).
func (n *Network) U2O(ctx context.Context, subnet string) (ips []string, mac string, ok bool) {
	a, held := n.IPAM.Lookup(U2OOwner(subnet))
	if !held {
		return nil, "", false
	}
	for _, ip := range a.IPs {
		ips = append(ips, ip.String())
	}
	lrp := ovnnb.RouterPortName(n.cfg.Router, subnet)
	if mac, _, _ = n.NB.RouterPortMACOf(ctx, lrp); mac == "" {
		// Not in the cache yet: the MAC EnsureSwitch gives a new port.
		mac = ovnnb.RouterPortMAC(lrp)
	}
	return ips, mac, true
}

package ovnnet

import (
	"context"
	"fmt"

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

// NodeAddressesSet holds the nodes' IPv4 addresses (Node InternalIPs).
const NodeAddressesSet = "ovnhost.nodes.ip4"

func u2oIDs(subnet string) map[string]string {
	return map[string]string{keyEgress: "u2o", ovnnb.KeySwitch: subnet}
}

// syncU2OPolicies adds or removes a subnet's interconnection policies.
func (n *Network) syncU2OPolicies(ctx context.Context, cfg ipam.SubnetConfig, on bool) error {
	if !on {
		return n.NB.DeletePolicies(ctx, n.cfg.Router, u2oIDs(cfg.Name))
	}
	for i, c := range cfg.CIDRs {
		if !c.Addr().Is4() || i >= len(cfg.Gateways) {
			continue // IPv4 only, as the rest of egress for now
		}
		gw := cfg.Gateways[i]
		for _, p := range []ovnnb.Policy{
			{Priority: U2ONodePriority, Match: fmt.Sprintf("ip4.src == %s && ip4.dst == $%s", c, NodeAddressesSet)},
			{Priority: U2OOtherPriority, Match: fmt.Sprintf("ip4.src == %s", c)},
		} {
			p.Router, p.Nexthop, p.ExternalIDs = n.cfg.Router, gw, u2oIDs(cfg.Name)
			if err := n.NB.EnsurePolicy(ctx, p); err != nil {
				return err
			}
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

package egress

import (
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/supervisor/hostnat"
)

// A centralized subnet's gatewayNode may give, per node, the address its
// traffic leaves with ("node:IP", Kube-OVN's format): on that gateway node
// the subnet's natOutgoing traffic is translated to IP instead of being
// masqueraded to the outgoing interface's address. The address must be
// one the node holds, or replies would never come back: a missing one is
// logged with the fix and the subnet is masqueraded as without it.

// gatewaySNAT is the SNAT of the gateways with an egress address: each of
// the subnet's CIDRs of the address's family leaves with it.
func gatewaySNAT(gws []Gateway) []hostnat.SNAT {
	var out []hostnat.SNAT
	for _, g := range gws {
		if !g.NATOutgoing || !g.EgressIP.IsValid() {
			continue
		}
		for _, c := range g.CIDRs {
			if c.Addr().Is4() == g.EgressIP.Is4() {
				out = append(out, hostnat.SNAT{From: c, To: g.EgressIP})
			}
		}
	}
	return out
}

// localEgressIPs returns gws with each egress address the host does not
// hold dropped (logged with the fix).
func (u *Unit) localEgressIPs(gws []Gateway) []Gateway {
	if !slices.ContainsFunc(gws, func(g Gateway) bool { return g.EgressIP.IsValid() }) {
		return gws
	}
	have, err := hostAddrs()
	if err != nil {
		u.log.Warn("centralized gateway: cannot list the host's addresses to check gatewayNode's egress addresses; masquerading instead", "err", err)
	}
	out := slices.Clone(gws)
	for i, g := range out {
		if !g.EgressIP.IsValid() || slices.Contains(have, g.EgressIP) {
			continue
		}
		u.log.Warn("centralized gateway: gatewayNode gives this node an egress address it does not hold; masquerading to the outgoing interface's address instead",
			"subnet", g.Subnet, "egress_ip", g.EgressIP,
			"fix", "add "+g.EgressIP.String()+" to an interface of this node, or correct the node's entry in the Subnet's gatewayNode (node:IP)")
		out[i].EgressIP = netip.Addr{}
	}
	return out
}

// hostAddrs are the addresses of every interface of the host.
func hostAddrs() ([]netip.Addr, error) {
	as, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		if ip, ok := netip.AddrFromSlice(a.IP); ok {
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

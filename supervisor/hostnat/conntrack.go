package hostnat

import (
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
)

// staleFlow matches the connections that the masquerade rules just written
// should have translated but could not: netfilter decides NAT once, on a
// connection's first packet, so a pod's first SYN sent before the rules
// existed (a pod wired right after start, or during a flush) is tracked
// without NAT and every retransmission follows that entry until it times
// out: the pod's connection hangs although the rules are in place.
// Deleting such entries lets the next packet create a new, translated one.
// A flow is stale when its source is in a NATOutgoing prefix, its
// destination is not excluded, and its reply still goes to the pod's own
// address (no source NAT was applied).
type staleFlow struct{ fr familyRules }

func (s staleFlow) MatchConntrackFlow(f *netlink.ConntrackFlow) bool {
	// Only the host's own tracking (zone 0), where the masquerade rules
	// act: OVS's datapath tracks pod flows in OVN's zones of the same
	// table, and deleting those would cut pods' established connections.
	if f.Zone != 0 {
		return false
	}
	src, ok1 := addrOf(f.Forward.SrcIP)
	dst, ok2 := addrOf(f.Forward.DstIP)
	replyDst, ok3 := addrOf(f.Reverse.DstIP)
	if !ok1 || !ok2 || !ok3 || replyDst != src {
		return false
	}
	if containsAddr(s.fr.exclude, dst) {
		return false
	}
	return containsAddr(s.fr.natOutgoing, src) || slices.ContainsFunc(s.fr.snat, func(sn SNAT) bool { return sn.From.Contains(src) })
}

func addrOf(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	return a.Unmap(), ok
}

func containsAddr(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// flushUnNATed deletes, in the manager's namespace, the tracked flows that
// the rules n should have masqueraded (staleFlow); it returns how many.
func (m *Manager) flushUnNATed(n normalized) (uint, error) {
	var total uint
	err := m.ns.do(func() error {
		for _, f := range families {
			if !n[f].needed() {
				continue
			}
			fam := netlink.InetFamily(netlink.FAMILY_V4)
			if f == v6 {
				fam = netlink.InetFamily(netlink.FAMILY_V6)
			}
			c, err := netlink.ConntrackDeleteFilters(netlink.ConntrackTable, fam, staleFlow{n[f]})
			total += c
			if err != nil {
				return err
			}
		}
		return nil
	})
	return total, err
}

package hostlink

import (
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// plan is what Move moves, and what the target and the rest of the host
// already have.
type plan struct {
	src, dst netlink.Link
	from, to string
	copyMAC  bool

	addrs  []netlink.Addr  // from's global addresses, in the kernel's order
	routes []netlink.Route // the routes to move, as they are through from
	rules  []netlink.Rule  // the rules naming from
	neighs []netlink.Neigh // from's permanent neighbours
	// The prefix routes of from's IPv6 addresses with a lifetime: the
	// kernel does not remove them with the address (it takes them for a
	// router's), and makes new ones on to.
	leftovers []netlink.Route

	dstAddrs  []netlink.Addr  // to's addresses
	others    []netlink.Route // the routes not through from: what a replace may overwrite
	dstNeighs []netlink.Neigh // to's permanent neighbours
}

func (p *plan) empty() bool {
	return len(p.addrs) == 0 && len(p.routes) == 0 && len(p.rules) == 0 && len(p.neighs) == 0
}

// shared reports whether to has every address to move already (Share).
func (p *plan) shared() bool {
	if len(p.addrs) == 0 {
		return false
	}
	for _, a := range p.addrs {
		if !hasAddr(p.dstAddrs, a) {
			return false
		}
	}
	return true
}

// planMove reads what from has and what may not be moved. It changes
// nothing: a refusal leaves the host as it was.
func planMove(src, dst netlink.Link, opts Options) (*plan, error) {
	from, to := src.Attrs().Name, dst.Attrs().Name
	p := &plan{src: src, dst: dst, from: from, to: to, copyMAC: opts.CopyMAC}
	si, di := src.Attrs().Index, dst.Attrs().Index

	srcAddrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(src, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", from, err)
	}
	if p.dstAddrs, err = nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(dst, netlink.FAMILY_ALL) }); err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", to, err)
	}
	for _, a := range srcAddrs {
		if !global(a) {
			continue
		}
		if l := relabel(a.Label, from, to); len(l) >= unix.IFNAMSIZ {
			return nil, fmt.Errorf("address %s of %s has the label %q, which would be %q on %s: longer than %d characters; shorten the label (ip address change) and move again",
				a.IPNet, from, a.Label, l, to, unix.IFNAMSIZ-1)
		}
		p.addrs = append(p.addrs, a)
	}

	// Every table: a route through from in table 100 matters as much as
	// one in main. Filtering on the link index would miss multipath routes
	// (they have no single link), hence the whole dump, read once.
	all, err := nldump.Retry(func() ([]netlink.Route, error) {
		return netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing the routes of all tables: %w", err)
	}
	extras, err := routeExtras()
	if err != nil {
		return nil, fmt.Errorf("listing the routes of all tables: %w", err)
	}
	for _, r := range all {
		if !through(r, si) {
			p.others = append(p.others, r)
			continue
		}
		ex := extras[routeKey(r)]
		if skipRoute(r, ex, p.addrs) {
			if _, ok := prefixRouteOf(r, p.addrs); ok && ex.expires && r.LinkIndex == si {
				p.leftovers = append(p.leftovers, r)
			}
			continue
		}
		if err := movable(r, ex, from); err != nil {
			return nil, err
		}
		p.routes = append(p.routes, r)
	}
	if err := checkAddrMetrics(p.addrs, all, si, from); err != nil {
		return nil, err
	}
	p.routes = directFirst(p.routes)

	rules, err := listRules()
	if err != nil {
		return nil, err
	}
	for _, r := range rules {
		if r.IifName != from && r.OifName != from {
			continue
		}
		if err := ruleMovable(r, from); err != nil {
			return nil, err
		}
		p.rules = append(p.rules, r.Rule)
	}

	srcNeighs, err := nldump.Retry(func() ([]netlink.Neigh, error) { return netlink.NeighList(si, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the neighbours of %s: %w", from, err)
	}
	dstNeighs, err := nldump.Retry(func() ([]netlink.Neigh, error) { return netlink.NeighList(di, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the neighbours of %s: %w", to, err)
	}
	p.neighs = permanent(srcNeighs)
	p.dstNeighs = permanent(dstNeighs)
	return p, nil
}

// global: the addresses that identify the host on the network. IPv6
// link-local addresses belong to their link and stay.
func global(a netlink.Addr) bool {
	return a.Scope == int(netlink.SCOPE_UNIVERSE) && !a.IP.IsLinkLocalUnicast()
}

// relabel renames an IPv4 label for the new link: from and from:x become
// to and to:x; a label not naming from is kept.
func relabel(label, from, to string) string {
	if label == from {
		return to
	}
	if rest, ok := strings.CutPrefix(label, from+":"); ok {
		return to + ":" + rest
	}
	return label
}

func permanent(ns []netlink.Neigh) []netlink.Neigh {
	var out []netlink.Neigh
	for _, n := range ns {
		if n.State&netlink.NUD_PERMANENT != 0 && n.IP != nil {
			out = append(out, n)
		}
	}
	return out
}

// through reports whether r leaves through the link index, alone or as one
// of its nexthops.
func through(r netlink.Route, index int) bool {
	if r.LinkIndex == index {
		return true
	}
	for _, nh := range r.MultiPath {
		if nh.LinkIndex == index {
			return true
		}
	}
	return false
}

// skipRoute: the routes that are not moved.
//   - The kernel's own for an address (the prefix route, the local and
//     broadcast routes of table local, IPv6's multicast and link-local
//     routes) come back with the address on the new link. A kernel route
//     the kernel would not make again (a network manager adds the prefix
//     routes of its noprefixroute addresses as proto kernel) is moved.
//   - Routes with a lifetime (router advertisements, IPv6 on-link prefixes)
//     would become permanent: the library cannot set a lifetime. They
//     expire on from, and to learns its own from the next advertisement.
func skipRoute(r netlink.Route, ex routeExtra, addrs []netlink.Addr) bool {
	if ex.expires || r.Protocol == unix.RTPROT_RA {
		return true
	}
	if r.Dst != nil && (r.Dst.IP.IsLinkLocalUnicast() || r.Dst.IP.IsLinkLocalMulticast()) {
		return true
	}
	if r.Protocol != unix.RTPROT_KERNEL {
		return false
	}
	if r.Table == unix.RT_TABLE_LOCAL || r.Type != unix.RTN_UNICAST {
		return true
	}
	_, ok := prefixRouteOf(r, addrs)
	return ok
}

// prefixRouteOf finds the address the kernel made r for: r is in table
// main at the kernel's metric and its destination is the address's prefix
// (its peer's, for a point-to-point address), which has no noprefixroute.
func prefixRouteOf(r netlink.Route, addrs []netlink.Addr) (netlink.Addr, bool) {
	if r.Protocol != unix.RTPROT_KERNEL || r.Table != unix.RT_TABLE_MAIN || r.Dst == nil {
		return netlink.Addr{}, false
	}
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_NOPREFIXROUTE != 0 || r.Priority != kernelMetric(a.IP) {
			continue
		}
		if samePrefix(r.Dst, prefixOf(a)) {
			return a, true
		}
	}
	return netlink.Addr{}, false
}

func prefixOf(a netlink.Addr) *net.IPNet {
	n := a.IPNet
	if a.Peer != nil {
		n = a.Peer
	}
	return &net.IPNet{IP: n.IP.Mask(n.Mask), Mask: n.Mask}
}

func samePrefix(a, b *net.IPNet) bool {
	ao, ab := a.Mask.Size()
	bo, bb := b.Mask.Size()
	return ao == bo && ab == bb && a.IP.Mask(a.Mask).Equal(b.IP.Mask(b.Mask))
}

// kernelMetric is the metric of the prefix route the kernel makes for an
// address without one of its own.
func kernelMetric(ip net.IP) int {
	if ip.To4() != nil {
		return 0
	}
	return 256 // IP6_RT_PRIO_ADDRCONF
}

// checkAddrMetrics refuses an address whose prefix route has a metric of
// its own (ip address add ... metric N): the library cannot set it, and the
// address would come back on to with the kernel's metric.
func checkAddrMetrics(addrs []netlink.Addr, routes []netlink.Route, index int, from string) error {
	for _, a := range addrs {
		if a.Flags&unix.IFA_F_NOPREFIXROUTE != 0 {
			continue
		}
		pfx := prefixOf(a)
		atDefault, other := false, -1
		for _, r := range routes {
			if r.LinkIndex != index || r.Protocol != unix.RTPROT_KERNEL || r.Table != unix.RT_TABLE_MAIN || r.Dst == nil || !samePrefix(r.Dst, pfx) {
				continue
			}
			if r.Priority == kernelMetric(a.IP) {
				atDefault = true
			} else {
				other = r.Priority
			}
		}
		if !atDefault && other >= 0 {
			return fmt.Errorf("address %s of %s has a prefix route metric of its own (%d, ip address add ... metric %d), which cannot be carried to another link by this code; remove the metric (ip address change %s dev %s) or move the address by hand",
				a.IPNet, from, other, other, a.IPNet, from)
		}
	}
	return nil
}

// movable refuses, before any change, a route this code cannot re-create
// exactly.
func movable(r netlink.Route, ex routeExtra, from string) error {
	what := ""
	switch {
	case ex.nhID:
		what = "uses a nexthop object (ip nexthop)"
	case ex.encap || r.Encap != nil:
		what = "has a lightweight tunnel encapsulation (encap)"
	case ex.srcPrefix:
		what = "is source-specific (from PREFIX)"
	case ex.pref:
		what = "has a router preference other than medium (pref)"
	case r.MPLSDst != nil || r.NewDst != nil:
		what = "is an MPLS route"
	}
	for _, nh := range r.MultiPath {
		if what == "" && (nh.Encap != nil || nh.NewDst != nil || nh.Via != nil) {
			what = "has a nexthop with an encapsulation, a new destination or a via of another family"
		}
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("the route %s through %s %s, which this code cannot re-create on another link; move it by hand or remove it, then move again",
		routeSpec(r, nil), from, what)
}

// directFirst orders routes without a gateway before those with one (or
// several), which may need them to reach their gateway; the order is
// otherwise kept.
func directFirst(routes []netlink.Route) []netlink.Route {
	out := make([]netlink.Route, 0, len(routes))
	direct := func(r netlink.Route) bool { return r.Gw == nil && r.Via == nil && len(r.MultiPath) == 0 }
	for _, r := range routes {
		if direct(r) {
			out = append(out, r)
		}
	}
	for _, r := range routes {
		if !direct(r) {
			out = append(out, r)
		}
	}
	return out
}

// routeKey identifies a route within the kernel's tables the way a replace
// does: family, table, destination, TOS, metric, plus the type.
func routeKey(r netlink.Route) string {
	return keyOf(r.Family, r.Table, r.Dst, r.Tos, r.Priority, r.Type)
}

func keyOf(family, table int, dst *net.IPNet, tos, priority, typ int) string {
	d := "default"
	if dst != nil {
		if ones, _ := dst.Mask.Size(); ones != 0 || !dst.IP.IsUnspecified() {
			d = dst.String()
		}
	}
	return fmt.Sprintf("%d %d %s %d %d %d", family, table, d, tos, priority, typ)
}

// sameRoute finds among routes the one r replaces: same family,
// destination, metric, TOS and table.
func sameRoute(routes []netlink.Route, r netlink.Route) (netlink.Route, bool) {
	for _, o := range routes {
		if o.Family == r.Family && keyOf(0, o.Table, o.Dst, o.Tos, o.Priority, 0) == keyOf(0, r.Table, r.Dst, r.Tos, r.Priority, 0) {
			return o, true
		}
	}
	return netlink.Route{}, false
}

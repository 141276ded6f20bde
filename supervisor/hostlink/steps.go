package hostlink

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// The steps of a move. Each one that changes the host records its undo
// right after it succeeds.

// prepareTarget gives to from's MTU (and MAC, on request) and sets it up.
func (t *tx) prepareTarget(p *plan) error {
	src, dst, to := p.src, p.dst, p.to
	if mtu := src.Attrs().MTU; dst.Attrs().MTU != mtu {
		old := dst.Attrs().MTU
		if err := t.step(stepSetMTU, fmt.Sprintf("set the MTU of %s to %d", to, mtu), func() error {
			return netlink.LinkSetMTU(dst, mtu)
		}); err != nil {
			return err
		}
		t.onUndo(stepSetMTU, fmt.Sprintf("set the MTU of %s back to %d", to, old),
			fmt.Sprintf("ip link set dev %s mtu %d", to, old),
			func() error { return netlink.LinkSetMTU(dst, old) })
	}
	if mac := src.Attrs().HardwareAddr; p.copyMAC && len(mac) > 0 && !bytes.Equal(mac, dst.Attrs().HardwareAddr) {
		old := dst.Attrs().HardwareAddr
		if err := t.step(stepSetMAC, fmt.Sprintf("set the MAC address of %s to %s", to, mac), func() error {
			return netlink.LinkSetHardwareAddr(dst, mac)
		}); err != nil {
			return err
		}
		t.onUndo(stepSetMAC, fmt.Sprintf("set the MAC address of %s back to %s", to, old),
			fmt.Sprintf("ip link set dev %s address %s", to, old),
			func() error { return netlink.LinkSetHardwareAddr(dst, old) })
	}
	if dst.Attrs().RawFlags&unix.IFF_UP == 0 {
		if err := t.step(stepSetUp, fmt.Sprintf("set %s up", to), func() error {
			return netlink.LinkSetUp(dst)
		}); err != nil {
			return err
		}
		t.onUndo(stepSetUp, fmt.Sprintf("set %s down again", to),
			fmt.Sprintf("ip link set dev %s down", to),
			func() error { return netlink.LinkSetDown(dst) })
	}
	return nil
}

// moveAddrs takes from's global addresses away, in the kernel's order (a
// primary takes its secondaries along), then gives them to to in the order
// that reproduces the kernel's list there; it returns how many to has.
func (t *tx) moveAddrs(p *plan) (moved int, err error) {
	for _, a := range p.addrs {
		if err := t.step(stepAddrDel, fmt.Sprintf("remove address %s from %s", a.IPNet, p.from), func() error {
			return addrDel(p.src, a)
		}); err != nil {
			return 0, err
		}
	}
	for _, a := range addOrder(p.addrs) {
		if hasAddr(p.dstAddrs, a) {
			moved++
			continue
		}
		na := addrReq(a, relabel(a.Label, p.from, p.to))
		if err := t.step(stepAddrAdd, fmt.Sprintf("add address %s to %s", na.IPNet, p.to), func() error {
			return addrAdd(p.dst, na)
		}); err != nil {
			return 0, err
		}
		t.onUndoUnless(stepAddrAdd, fmt.Sprintf("remove address %s from %s", na.IPNet, p.to),
			addrCmd("del", na, p.to),
			func() error { return addrDel(p.dst, na) },
			func() bool { return gone(linkHasAddr(p.dst, na)) })
		moved++
	}
	return moved, nil
}

// copyAddrs gives to a copy of each of from's addresses it lacks (from
// keeps them), in the order that reproduces the kernel's list; it returns
// how many it added.
func (t *tx) copyAddrs(p *plan) (added int, err error) {
	for _, a := range addOrder(p.addrs) {
		if hasAddr(p.dstAddrs, a) {
			continue
		}
		na := addrReq(a, relabel(a.Label, p.from, p.to))
		if err := t.step(stepAddrAdd, fmt.Sprintf("add a copy of address %s to %s", na.IPNet, p.to), func() error {
			return addrAdd(p.dst, na)
		}); err != nil {
			return 0, err
		}
		t.onUndoUnless(stepAddrAdd, fmt.Sprintf("remove address %s from %s", na.IPNet, p.to),
			addrCmd("del", na, p.to),
			func() error { return addrDel(p.dst, na) },
			func() bool { return gone(linkHasAddr(p.dst, na)) })
		added++
	}
	return added, nil
}

// reshare records the undo that puts to's copies of from's addresses (a
// Share before the move) after from's again: the kernel prefers the first
// of two routes it made for the same prefix, and a rollback re-adds from's
// addresses after to's copies.
func (t *tx) reshare(p *plan) {
	var copies []netlink.Addr
	for _, a := range p.dstAddrs {
		if hasAddr(p.addrs, a) {
			copies = append(copies, a)
		}
	}
	var cmds []string
	for _, a := range copies {
		cmds = append(cmds, addrCmd("del", addrReq(a, a.Label), p.to))
	}
	for _, a := range addOrder(copies) {
		cmds = append(cmds, addrCmd("add", addrReq(a, a.Label), p.to))
	}
	t.onUndo(stepAddrAdd, fmt.Sprintf("put the copies of %s's addresses on %s after %s's again", p.from, p.to, p.from), strings.Join(cmds, "; "),
		func() error {
			for _, a := range copies {
				if err := addrDel(p.dst, addrReq(a, a.Label)); err != nil {
					return err
				}
				if a.IP.To4() == nil && a.ValidLft != foreverLft {
					// The kernel leaves the prefix route of an IPv6
					// address with a lifetime behind.
					pr := netlink.Route{LinkIndex: p.dst.Attrs().Index, Family: netlink.FAMILY_V6, Dst: prefixOf(a), Protocol: unix.RTPROT_KERNEL, Priority: kernelMetric(a.IP), Table: unix.RT_TABLE_MAIN}
					if err := routeDel(pr); err != nil {
						return err
					}
				}
			}
			for _, a := range addOrder(copies) {
				if err := addrAdd(p.dst, addrReq(a, a.Label)); err != nil {
					return err
				}
			}
			return waitDAD(p.dst, p.to, copies, t.dadTimeout)
		})
}

// moveRoutesRulesNeighs moves what is not an address, in that order.
func (t *tx) moveRoutesRulesNeighs(p *plan) (routes, rules, neighs int, err error) {
	if routes, err = t.moveRoutes(p); err != nil {
		return 0, 0, 0, err
	}
	if rules, err = t.moveRules(p); err != nil {
		return 0, 0, 0, err
	}
	if neighs, err = t.moveNeighs(p); err != nil {
		return 0, 0, 0, err
	}
	return routes, rules, neighs, nil
}

// dropLeftovers removes from from the prefix routes the kernel left there
// for its IPv6 addresses with a lifetime. No undo: re-adding the address
// makes the route again.
func (t *tx) dropLeftovers(p *plan) error {
	for _, r := range p.leftovers {
		rr := routeReq(r, 0, 0)
		if err := t.step(stepPrefixDel, fmt.Sprintf("remove the prefix route %s left on %s", routeSpec(r, nil), p.from), func() error {
			return routeDel(rr)
		}); err != nil {
			return err
		}
	}
	return nil
}

// waitDAD is the step that waits until to may use its new IPv6 addresses
// (a route with one of them as src is refused before).
func (t *tx) waitDAD(link netlink.Link, name string, addrs []netlink.Addr) error {
	return t.step(stepDAD, fmt.Sprintf("wait for duplicate address detection of the IPv6 addresses on %s", name), func() error {
		return waitDAD(link, name, addrs, t.dadTimeout)
	})
}

// moveRoutes re-adds p's routes through to (a replace: it also takes the
// route away from from, where the kernel has not already dropped it).
func (t *tx) moveRoutes(p *plan) (moved int, err error) {
	si, di := p.src.Attrs().Index, p.dst.Attrs().Index
	names := linkNames{si: p.from, di: p.to}
	for _, r := range p.routes {
		nr := routeReq(r, si, di)
		if err := t.step(stepRouteAdd, fmt.Sprintf("move route %s to %s", routeSpec(r, nil), p.to), func() error {
			return routeReplace(nr)
		}); err != nil {
			return 0, err
		}
		moved++
		if prior, found := sameRoute(p.others, nr); found {
			// The replace overwrote another route: put that one back.
			pr := routeReq(prior, 0, 0)
			t.onUndo(stepRouteAdd, fmt.Sprintf("put route %s back", routeSpec(pr, names)),
				routeCmd("replace", pr, names),
				func() error { return routeReplace(pr) })
			continue
		}
		t.onUndoUnless(stepRouteAdd, fmt.Sprintf("remove route %s", routeSpec(nr, names)),
			routeCmd("del", nr, names),
			func() error { return routeDel(nr) },
			func() bool { return gone(routeThrough(nr, di)) })
	}
	return moved, nil
}

// moveRules rewrites the rules naming from to name to, the new one added
// before the old one goes (no moment without the policy).
func (t *tx) moveRules(p *plan) (moved int, err error) {
	for _, r := range p.rules {
		nr := renameRule(r, p.from, p.to)
		added := false
		if err := t.step(stepRuleAdd, fmt.Sprintf("add rule %q", ruleSpec(nr)), func() error {
			err := netlink.RuleAdd(&nr)
			if errors.Is(err, unix.EEXIST) {
				return nil // already there (a move cut short before)
			}
			added = err == nil
			return err
		}); err != nil {
			return 0, err
		}
		if added {
			t.onUndoUnless(stepRuleAdd, fmt.Sprintf("remove rule %q", ruleSpec(nr)), ruleCmd("del", nr),
				func() error { return ruleDel(nr) },
				func() bool { return gone(ruleExists(nr)) })
		}
		if err := t.step(stepRuleDel, fmt.Sprintf("remove rule %q", ruleSpec(r)), func() error {
			return ruleDel(r)
		}); err != nil {
			return 0, err
		}
		t.onUndoUnless(stepRuleDel, fmt.Sprintf("re-add rule %q", ruleSpec(r)), ruleCmd("add", r),
			func() error { return ruleAdd(r) },
			func() bool { return there(ruleExists(r)) })
		moved++
	}
	return moved, nil
}

// moveNeighs moves from's permanent neighbours to to.
func (t *tx) moveNeighs(p *plan) (moved int, err error) {
	si, di := p.src.Attrs().Index, p.dst.Attrs().Index
	for _, n := range p.neighs {
		on, nn := neighReq(n, si), neighReq(n, di)
		if err := t.step(stepNeighAdd, fmt.Sprintf("add neighbour %s to %s", n.IP, p.to), func() error {
			return netlink.NeighSet(&nn)
		}); err != nil {
			return 0, err
		}
		if prior, found := findNeigh(p.dstNeighs, n.IP); found {
			pn := neighReq(prior, di)
			t.onUndo(stepNeighAdd, fmt.Sprintf("put neighbour %s of %s back", n.IP, p.to), neighCmd("replace", pn, p.to),
				func() error { return netlink.NeighSet(&pn) })
		} else {
			t.onUndoUnless(stepNeighAdd, fmt.Sprintf("remove neighbour %s from %s", n.IP, p.to), neighCmd("del", nn, p.to),
				func() error { return neighDel(nn) },
				func() bool { return gone(neighExists(nn)) })
		}
		if err := t.step(stepNeighDel, fmt.Sprintf("remove neighbour %s from %s", n.IP, p.from), func() error {
			return neighDel(on)
		}); err != nil {
			return 0, err
		}
		t.onUndo(stepNeighDel, fmt.Sprintf("re-add neighbour %s to %s", n.IP, p.from), neighCmd("replace", on, p.from),
			func() error { return netlink.NeighSet(&on) })
		moved++
	}
	return moved, nil
}

// restoreSource records the undo that gives the link name back the
// addresses addrs (exactly, in their order), the routes routes and the
// permanent neighbours neighs (the kernel drops the IPv4 ones with the last
// IPv4 address). Undo steps run last first, so they are recorded
// backwards: addresses come back before the wait for their duplicate
// address detection and the routes that need them.
func (t *tx) restoreSource(link netlink.Link, name string, addrs []netlink.Addr, routes []netlink.Route, neighs []netlink.Neigh) {
	idx := link.Attrs().Index
	names := linkNames{idx: name}
	for i := len(neighs) - 1; i >= 0; i-- {
		n := neighReq(neighs[i], idx)
		t.onUndo(stepNeighDel, fmt.Sprintf("re-add neighbour %s to %s", n.IP, name), neighCmd("replace", n, name),
			func() error { return netlink.NeighSet(&n) })
	}
	for i := len(routes) - 1; i >= 0; i-- {
		r := routeReq(routes[i], idx, idx)
		t.onUndo(stepRouteDel, fmt.Sprintf("re-add route %s to %s", routeSpec(r, nil), name),
			routeCmd("replace", r, names),
			func() error { return routeReplace(r) })
	}
	t.onUndo(stepDAD, fmt.Sprintf("wait for duplicate address detection on %s", name), "",
		func() error { return waitDAD(link, name, addrs, t.dadTimeout) })
	t.onUndo(stepAddrDel, fmt.Sprintf("give %s its addresses back", name), restoreAddrsCmd(addrs, name),
		func() error { return restoreAddrs(link, name, addrs) })
}

// restoreAddrs makes the global addresses of link exactly want, in its
// order. The kernel orders them by when they were added, and a missing one
// re-added alone would land elsewhere (an IPv4 primary after the others):
// unless the list already is want, all go and come back in order.
func restoreAddrs(link netlink.Link, name string, want []netlink.Addr) error {
	cur, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	var have []netlink.Addr
	for _, a := range cur {
		if global(a) {
			have = append(have, a)
		}
	}
	if sameAddrs(have, want) {
		return nil
	}
	for _, a := range have {
		if err := addrDel(link, a); err != nil {
			return fmt.Errorf("removing address %s from %s: %w", a.IPNet, name, err)
		}
	}
	for _, a := range addOrder(want) {
		if err := addrAdd(link, addrReq(a, a.Label)); err != nil {
			return fmt.Errorf("adding address %s to %s: %w", a.IPNet, name, err)
		}
	}
	return nil
}

func restoreAddrsCmd(want []netlink.Addr, name string) string {
	cmds := []string{fmt.Sprintf("ip address flush dev %s scope global", name)}
	for _, a := range addOrder(want) {
		cmds = append(cmds, addrCmd("add", addrReq(a, a.Label), name))
	}
	return strings.Join(cmds, "; ")
}

func sameAddrs(a, b []netlink.Addr) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IPNet.String() != b[i].IPNet.String() {
			return false
		}
	}
	return true
}

// addOrder is the order in which to add addrs for the kernel to list them
// as addrs lists them: IPv4 in that order (the kernel appends), IPv6
// backwards (the kernel puts a new address first among those of its scope).
func addOrder(addrs []netlink.Addr) []netlink.Addr {
	var v4, v6 []netlink.Addr
	for _, a := range addrs {
		if a.IP.To4() != nil {
			v4 = append(v4, a)
		} else {
			v6 = append([]netlink.Addr{a}, v6...)
		}
	}
	return append(v4, v6...)
}

// addrReq is a as a request for another link: its label, and no broadcast
// made up when it had none (the library computes one for a nil Broadcast).
func addrReq(a netlink.Addr, label string) netlink.Addr {
	n := a
	n.LinkIndex = 0
	n.Label = label
	if a.IP.To4() != nil {
		// Four bytes, as the kernel reads IFA_BROADCAST (a journal gives
		// back sixteen).
		n.Broadcast = a.Broadcast.To4()
		if n.Broadcast == nil {
			n.Broadcast = net.IPv4zero
		}
	}
	return n
}

// addrAdd adds a copy of a (the library rewrites the broadcast of the one
// it is given); an address already there is not an error.
func addrAdd(link netlink.Link, a netlink.Addr) error {
	c := a
	err := netlink.AddrAdd(link, &c)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// addrDel removes a; an address already gone (with its primary) is not an
// error.
func addrDel(link netlink.Link, a netlink.Addr) error {
	c := a
	err := netlink.AddrDel(link, &c)
	if errors.Is(err, unix.EADDRNOTAVAIL) {
		return nil
	}
	return err
}

func hasAddr(addrs []netlink.Addr, a netlink.Addr) bool {
	for _, b := range addrs {
		if b.IPNet.String() == a.IPNet.String() {
			return true
		}
	}
	return false
}

// requestFlags are the route flags a request may carry; the others
// (linkdown, dead, offload, ...) are the kernel's to report.
const requestFlags = unix.RTNH_F_ONLINK | unix.RTNH_F_PERVASIVE

// routeReq returns r as a request, through the link index to where it went
// through from (its nexthops too; from == to keeps the links).
func routeReq(r netlink.Route, from, to int) netlink.Route {
	n := r
	if from != 0 && n.LinkIndex == from {
		n.LinkIndex = to
	}
	n.Flags &= requestFlags
	if len(r.MultiPath) > 0 {
		n.MultiPath = make([]*netlink.NexthopInfo, len(r.MultiPath))
		for i, nh := range r.MultiPath {
			c := *nh
			if from != 0 && c.LinkIndex == from {
				c.LinkIndex = to
			}
			c.Flags &= requestFlags
			n.MultiPath[i] = &c
		}
	}
	return n
}

func routeReplace(r netlink.Route) error { return netlink.RouteReplace(&r) }

// routeDel removes r; a route already gone is not an error.
func routeDel(r netlink.Route) error {
	err := netlink.RouteDel(&r)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	return err
}

func renameRule(r netlink.Rule, from, to string) netlink.Rule {
	if r.IifName == from {
		r.IifName = to
	}
	if r.OifName == from {
		r.OifName = to
	}
	return r
}

// ruleAdd adds r; a rule already there is not an error.
func ruleAdd(r netlink.Rule) error {
	err := netlink.RuleAdd(&r)
	if errors.Is(err, unix.EEXIST) {
		return nil
	}
	return err
}

// ruleDel removes r; a rule already gone is not an error.
func ruleDel(r netlink.Rule) error {
	err := netlink.RuleDel(&r)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// neighReq is the permanent neighbour n on the link index.
func neighReq(n netlink.Neigh, index int) netlink.Neigh {
	return netlink.Neigh{LinkIndex: index, Family: n.Family, State: netlink.NUD_PERMANENT,
		Flags: n.Flags & unix.NTF_ROUTER, IP: n.IP, HardwareAddr: n.HardwareAddr}
}

// neighDel removes n; a neighbour already gone is not an error.
func neighDel(n netlink.Neigh) error {
	err := netlink.NeighDel(&n)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

func findNeigh(ns []netlink.Neigh, ip net.IP) (netlink.Neigh, bool) {
	for _, n := range ns {
		if n.IP.Equal(ip) {
			return n, true
		}
	}
	return netlink.Neigh{}, false
}

// What holds of the host now, for undo steps whose effect a later one may
// have had (tx.onUndoUnless). A failed reading holds nothing.

func gone(present bool, err error) bool  { return err == nil && !present }
func there(present bool, err error) bool { return err == nil && present }

func linkHasAddr(link netlink.Link, a netlink.Addr) (bool, error) {
	addrs, err := netlink.AddrList(link, netlink.FAMILY_ALL)
	return hasAddr(addrs, a), err
}

// routeThrough reports whether the table of r has a route with r's key
// through the link index.
func routeThrough(r netlink.Route, index int) (bool, error) {
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: r.Table}, netlink.RT_FILTER_TABLE)
	for _, o := range routes {
		if _, same := sameRoute([]netlink.Route{o}, r); same && through(o, index) {
			return true, err
		}
	}
	return false, err
}

func ruleExists(r netlink.Rule) (bool, error) {
	rules, err := listRules()
	for _, o := range rules {
		if ruleCmd("", o.Rule) == ruleCmd("", r) {
			return true, err
		}
	}
	return false, err
}

func neighExists(n netlink.Neigh) (bool, error) {
	ns, err := netlink.NeighList(n.LinkIndex, netlink.FAMILY_ALL)
	_, found := findNeigh(permanent(ns), n.IP)
	return found, err
}

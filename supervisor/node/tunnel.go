package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// The userspace datapath sends encapsulated packets only from an address
// it owns: the tunnel endpoint must sit on the internal port of an OVS
// bridge (br-phy) whose other port is the underlay interface. With
// --userspace-tunnel the node sets that up and puts the host back as it was
// on stop (BRIEF section 4; the usual OVS-DPDK layout).

// wantTunnelBridge reports whether br-phy is to be managed.
func (n *Node) wantTunnelBridge() bool {
	return n.nc.UserspaceTunnel
}

// tunnelBridgeOps adds br-phy (internal port + the underlay interface) to
// the configuration transaction, or the missing underlay port to an existing
// br-phy. root is the Open_vSwitch row (named-uuid when created in the same
// transaction: newRoot).
func (n *Node) tunnelBridgeOps(ctx context.Context, root *vswitch.OpenvSwitch, newRoot bool) ([]ovsdb.Operation, error) {
	ovs := n.OVS()
	iface := n.nc.TunnelIface
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("userspace-tunnel: tunnel interface %s: %w", iface, err)
	}
	var ops []ovsdb.Operation
	add := func(m model.Model) error {
		o, err := ovs.Create(m)
		ops = append(ops, o...)
		return err
	}
	br := &vswitch.Bridge{Name: nodeconfig.PhysBridge}
	if ovs.Get(ctx, br) == nil {
		if ovs.Get(ctx, &vswitch.Port{Name: iface}) == nil {
			return nil, nil
		}
		if err := add(&vswitch.Interface{UUID: "phyiface", Name: iface}); err != nil {
			return nil, err
		}
		if err := add(&vswitch.Port{UUID: "phyport", Name: iface, Interfaces: []string{"phyiface"}}); err != nil {
			return nil, err
		}
		m, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"phyport"}})
		return append(ops, m...), err
	}
	standalone := vswitch.BridgeFailModeStandalone
	steps := []model.Model{
		&vswitch.Interface{UUID: "phybriface", Name: nodeconfig.PhysBridge, Type: "internal"},
		&vswitch.Port{UUID: "phybrport", Name: nodeconfig.PhysBridge, Interfaces: []string{"phybriface"}},
		&vswitch.Interface{UUID: "phyiface", Name: iface},
		&vswitch.Port{UUID: "phyport", Name: iface, Interfaces: []string{"phyiface"}},
		// Same MAC as the underlay NIC: the network knows that one.
		&vswitch.Bridge{UUID: "phybr", Name: nodeconfig.PhysBridge, DatapathType: string(nodeconfig.Userspace), FailMode: &standalone,
			OtherConfig: map[string]string{"hwaddr": link.Attrs().HardwareAddr.String(), "disable-in-band": "true"},
			ExternalIDs: map[string]string{"vendor": ovsconf.Vendor}, Ports: []string{"phybrport", "phyport"}},
	}
	for _, m := range steps {
		if err := add(m); err != nil {
			return nil, err
		}
	}
	if newRoot {
		root.Bridges = append(root.Bridges, "phybr")
		return ops, nil
	}
	m, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"phybr"}})
	return append(ops, m...), err
}

// tunnelBridgeUnit moves the tunnel interface's addresses and routes to
// br-phy once ovs-vswitchd has created it, and back on stop.
type tunnelBridgeUnit struct{ n *Node }

func (u *tunnelBridgeUnit) Name() string { return "tunnel-bridge" }

func (u *tunnelBridgeUnit) Start(context.Context) error {
	moved, err := moveAddresses(u.n.nc.TunnelIface, nodeconfig.PhysBridge)
	if err != nil {
		return fmt.Errorf("moving the addresses of %s to %s: %w", u.n.nc.TunnelIface, nodeconfig.PhysBridge, err)
	}
	if moved > 0 {
		u.n.log.Info("tunnel endpoint moved to the userspace bridge", "from", u.n.nc.TunnelIface, "to", nodeconfig.PhysBridge, "addresses", moved)
	}
	return nil
}

func (u *tunnelBridgeUnit) Stop(context.Context) error {
	if u.n.KeepingDatapath() {
		return nil
	}
	moved, err := moveAddresses(nodeconfig.PhysBridge, u.n.nc.TunnelIface)
	if moved > 0 {
		u.n.log.Info("tunnel endpoint given back to the interface", "to", u.n.nc.TunnelIface, "addresses", moved)
	}
	return err
}

// moveAddresses moves the global addresses of the link from, then the
// routes through it, to the link to, and sets to up with from's MTU. It
// returns how many addresses were moved. Idempotent: nothing to move is not
// an error.
//
// All or nothing, in the manner of the containernetworking plugins: each
// completed step is recorded with its inverse, and when a later step fails
// the recorded inverses run in reverse order, so that from ends with
// exactly the addresses and routes it had, including the routes the kernel
// dropped together with an address (re-added explicitly), and to is as it
// was. The error names the failed step and says whether the host was
// restored or what is left to put back by hand.
func moveAddresses(from, to string) (moved int, err error) {
	src, err := netlink.LinkByName(from)
	if err != nil {
		return 0, err
	}
	dst, err := netlink.LinkByName(to)
	if err != nil {
		return 0, err
	}
	m, err := planMove(src, dst, from, to)
	if err != nil {
		return 0, err
	}

	tx := &moveTx{}
	ok := false
	defer func() {
		if !ok {
			moved = 0
			err = tx.rollback(err, from, to)
		}
	}()

	if err := tx.prepareTarget(src, dst, to); err != nil {
		return 0, err
	}
	if len(m.addrs) == 0 && len(m.routes) == 0 {
		ok = true
		return 0, nil
	}

	// Before the first change to from: the undo that puts from back as it
	// was, run last. Removing an address also makes the kernel drop the
	// routes that need it (all of them with the last IPv4 address, and the
	// secondaries of a primary): every original address and route is
	// re-added, in their original order, whichever of them is missing.
	tx.restoreSource(src, from, m.addrs, m.routes)

	if moved, err = tx.moveAddrs(src, dst, from, to, m); err != nil {
		return 0, err
	}
	if err := tx.moveRoutes(dst, to, m); err != nil {
		return 0, err
	}
	ok = true
	return moved, nil
}

// move is what moveAddresses moves, and what the target link already has.
type move struct {
	addrs     []netlink.Addr
	routes    []netlink.Route
	dstAddrs  []netlink.Addr
	dstRoutes []netlink.Route
}

// planMove lists the global addresses of src and the routes through it
// that are not the kernel's own, and what dst already has.
func planMove(src, dst netlink.Link, from, to string) (*move, error) {
	srcAddrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(src, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", from, err)
	}
	srcRoutes, err := nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteList(src, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the routes of %s: %w", from, err)
	}
	dstAddrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(dst, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the addresses of %s: %w", to, err)
	}
	dstRoutes, err := nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteList(dst, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, fmt.Errorf("listing the routes of %s: %w", to, err)
	}
	m := &move{dstAddrs: dstAddrs, dstRoutes: dstRoutes}
	for _, a := range srcAddrs {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) && !a.IP.IsLinkLocalUnicast() {
			m.addrs = append(m.addrs, a)
		}
	}
	// Routes the kernel made for the addresses follow them; the others
	// (default route, static ones) are re-added through the new link.
	for _, r := range srcRoutes {
		if r.Protocol == unix.RTPROT_KERNEL || r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast() {
			continue
		}
		m.routes = append(m.routes, r)
	}
	m.routes = directFirst(m.routes)
	return m, nil
}

// prepareTarget gives dst src's MTU and sets it up.
func (tx *moveTx) prepareTarget(src, dst netlink.Link, to string) error {
	if mtu := src.Attrs().MTU; dst.Attrs().MTU != mtu {
		old := dst.Attrs().MTU
		if err := tx.step(stepSetMTU, fmt.Sprintf("set the MTU of %s to %d", to, mtu), func() error {
			return netlink.LinkSetMTU(dst, mtu)
		}); err != nil {
			return err
		}
		tx.onUndo(stepSetMTU, fmt.Sprintf("set the MTU of %s back to %d", to, old),
			fmt.Sprintf("ip link set dev %s mtu %d", to, old),
			func() error { return netlink.LinkSetMTU(dst, old) })
	}
	if dst.Attrs().RawFlags&unix.IFF_UP == 0 {
		if err := tx.step(stepSetUp, fmt.Sprintf("set %s up", to), func() error {
			return netlink.LinkSetUp(dst)
		}); err != nil {
			return err
		}
		tx.onUndo(stepSetUp, fmt.Sprintf("set %s down again", to),
			fmt.Sprintf("ip link set dev %s down", to),
			func() error { return netlink.LinkSetDown(dst) })
	}
	return nil
}

// moveAddrs moves m's addresses from src to dst; it returns how many.
func (tx *moveTx) moveAddrs(src, dst netlink.Link, from, to string, m *move) (moved int, err error) {
	for _, a := range m.addrs {
		if err := tx.step(stepAddrDel, fmt.Sprintf("remove address %s from %s", a.IPNet, from), func() error {
			err := netlink.AddrDel(src, &a)
			if errors.Is(err, unix.EADDRNOTAVAIL) {
				return nil // gone with its primary: restoreSource puts it back
			}
			return err
		}); err != nil {
			return 0, err
		}
		if hasAddr(m.dstAddrs, a) {
			moved++
			continue
		}
		na := a
		na.Label = ""
		if err := tx.step(stepAddrAdd, fmt.Sprintf("add address %s to %s", na.IPNet, to), func() error {
			return netlink.AddrAdd(dst, &na)
		}); err != nil {
			return 0, err
		}
		tx.onUndo(stepAddrAdd, fmt.Sprintf("remove address %s from %s", na.IPNet, to),
			fmt.Sprintf("ip address del %s dev %s", na.IPNet, to),
			func() error {
				err := netlink.AddrDel(dst, &na)
				if errors.Is(err, unix.EADDRNOTAVAIL) {
					return nil
				}
				return err
			})
		moved++
	}
	return moved, nil
}

// moveRoutes re-adds m's routes through dst.
func (tx *moveTx) moveRoutes(dst netlink.Link, to string, m *move) error {
	for _, r := range m.routes {
		nr := routeVia(r, dst.Attrs().Index)
		if err := tx.step(stepRouteAdd, fmt.Sprintf("move route %s to %s", routeSpec(r, ""), to), func() error {
			return netlink.RouteReplace(&nr)
		}); err != nil {
			return err
		}
		if prior, found := sameRoute(m.dstRoutes, nr); found {
			// The replace overwrote a route of to: put that one back.
			p := routeVia(prior, prior.LinkIndex)
			tx.onUndo(stepRouteAdd, fmt.Sprintf("put route %s of %s back", routeSpec(p, ""), to),
				routeCmd("replace", p, to),
				func() error { return netlink.RouteReplace(&p) })
			continue
		}
		tx.onUndo(stepRouteAdd, fmt.Sprintf("remove route %s from %s", routeSpec(nr, ""), to),
			routeCmd("del", nr, to),
			func() error {
				err := netlink.RouteDel(&nr)
				if errors.Is(err, unix.ESRCH) {
					return nil
				}
				return err
			})
	}
	return nil
}

// moveFault, when set, is called before each step of moveAddresses and of
// its rollback with the step's kind (stepAddrAdd, "undo "+stepAddrDel, ...)
// and makes that step fail with the error it returns. It exists so tests
// can break a move half-way on a real kernel and check that the host is
// put back; it is nil in production.
var moveFault func(step string) error

// Step kinds, as moveFault sees them.
const (
	stepSetMTU   = "set-mtu"
	stepSetUp    = "set-up"
	stepAddrDel  = "addr-del"
	stepAddrAdd  = "addr-add"
	stepRouteAdd = "route-add"
	// from loses a route: the kernel drops it with an address, or the
	// replace that moves it takes it away. Only its undo is a step.
	stepRouteDel = "route-del"
	stepUndo     = "undo "
)

func injectFault(step string) error {
	if moveFault == nil {
		return nil
	}
	return moveFault(step)
}

// moveTx runs the steps of a move and remembers how to undo each one that
// completed.
type moveTx struct{ undo []undoStep }

type undoStep struct {
	kind   string       // the step it undoes, for moveFault
	what   string       // for the error: "remove address 10.0.0.2/24 from br-phy"
	manual string       // the same by hand: "ip address del 10.0.0.2/24 dev br-phy"
	do     func() error // idempotent
}

// step runs do; the error names the step.
func (tx *moveTx) step(kind, what string, do func() error) error {
	err := injectFault(kind)
	if err == nil {
		err = do()
	}
	if err != nil {
		return fmt.Errorf("%s failed: %w", what, err)
	}
	return nil
}

func (tx *moveTx) onUndo(kind, what, manual string, do func() error) {
	tx.undo = append(tx.undo, undoStep{kind: kind, what: what, manual: manual, do: do})
}

// restoreSource records the undo that gives the link name back the
// addresses addrs and the routes routes. Undo steps run last first, so they
// are recorded backwards: addresses come back before the routes that need
// them, each in its original order (the primary before its secondaries).
func (tx *moveTx) restoreSource(link netlink.Link, name string, addrs []netlink.Addr, routes []netlink.Route) {
	for i := len(routes) - 1; i >= 0; i-- {
		r := routeVia(routes[i], link.Attrs().Index)
		tx.onUndo(stepRouteDel, fmt.Sprintf("re-add route %s to %s", routeSpec(r, ""), name),
			routeCmd("replace", r, name),
			func() error { return netlink.RouteReplace(&r) })
	}
	for i := len(addrs) - 1; i >= 0; i-- {
		a := addrs[i]
		tx.onUndo(stepAddrDel, fmt.Sprintf("re-add address %s to %s", a.IPNet, name),
			fmt.Sprintf("ip address add %s dev %s", a.IPNet, name),
			func() error {
				err := netlink.AddrAdd(link, &a)
				if errors.Is(err, unix.EEXIST) {
					return nil
				}
				return err
			})
	}
}

// rollback runs the recorded undo steps, last first, and returns the error
// to report for cause: restored, or what is left to do by hand.
func (tx *moveTx) rollback(cause error, from, to string) error {
	if len(tx.undo) == 0 {
		return cause // nothing was changed
	}
	var failed, manual []string
	for i := len(tx.undo) - 1; i >= 0; i-- {
		u := tx.undo[i]
		err := injectFault(stepUndo + u.kind)
		if err == nil {
			err = u.do()
		}
		if err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", u.what, err))
			manual = append(manual, u.manual)
		}
	}
	tx.undo = nil
	if len(failed) == 0 {
		return fmt.Errorf("%w; rolled back: %s has all its addresses and routes again and %s is as it was", cause, from, to)
	}
	return fmt.Errorf("%w; rolling back failed too, so %s and %s are not quite as they were: %s; to finish by hand, run: %s",
		cause, from, to, strings.Join(failed, "; "), strings.Join(manual, "; "))
}

// routeVia returns r through the link index, as a request: the flags the
// kernel reports but refuses in a request (linkdown, dead) are cleared.
func routeVia(r netlink.Route, index int) netlink.Route {
	r.LinkIndex = index
	r.Flags &^= unix.RTNH_F_LINKDOWN | unix.RTNH_F_DEAD
	return r
}

// directFirst orders routes without a gateway before those with one, which
// may need them to reach their gateway; the order is otherwise kept.
func directFirst(routes []netlink.Route) []netlink.Route {
	out := make([]netlink.Route, 0, len(routes))
	for _, r := range routes {
		if r.Gw == nil {
			out = append(out, r)
		}
	}
	for _, r := range routes {
		if r.Gw != nil {
			out = append(out, r)
		}
	}
	return out
}

func hasAddr(addrs []netlink.Addr, a netlink.Addr) bool {
	for _, b := range addrs {
		if b.IPNet.String() == a.IPNet.String() {
			return true
		}
	}
	return false
}

// sameRoute finds in routes the one r replaces: same destination, metric,
// TOS and table.
func sameRoute(routes []netlink.Route, r netlink.Route) (netlink.Route, bool) {
	for _, o := range routes {
		if o.Family == r.Family && o.Dst.String() == r.Dst.String() && o.Priority == r.Priority &&
			o.Tos == r.Tos && o.Table == r.Table {
			return o, true
		}
	}
	return netlink.Route{}, false
}

// routeCmd is the ip(8) command that does verb (add, del, replace) to r
// through dev.
func routeCmd(verb string, r netlink.Route, dev string) string {
	ip := "ip"
	if r.Family == netlink.FAMILY_V6 {
		ip = "ip -6"
	}
	return fmt.Sprintf("%s route %s %s", ip, verb, routeSpec(r, dev))
}

// routeSpec writes r the way ip-route(8) takes it, with "dev dev" when dev
// is not empty.
func routeSpec(r netlink.Route, dev string) string {
	var b strings.Builder
	dst := "default"
	if r.Dst != nil {
		if ones, _ := r.Dst.Mask.Size(); ones != 0 || !r.Dst.IP.IsUnspecified() {
			dst = r.Dst.String()
		}
	}
	b.WriteString(dst)
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	if dev != "" {
		fmt.Fprintf(&b, " dev %s", dev)
	}
	if r.Flags&unix.RTNH_F_ONLINK != 0 {
		b.WriteString(" onlink")
	}
	if r.Protocol != 0 {
		fmt.Fprintf(&b, " proto %s", r.Protocol)
	}
	if scope := r.Scope.String(); r.Scope != netlink.SCOPE_UNIVERSE {
		if scope == "unknown" {
			scope = fmt.Sprint(int(r.Scope))
		}
		fmt.Fprintf(&b, " scope %s", scope)
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	if r.Table != 0 && r.Table != unix.RT_TABLE_MAIN {
		fmt.Fprintf(&b, " table %d", r.Table)
	}
	return b.String()
}

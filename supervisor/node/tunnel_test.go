package node

import (
	"errors"
	"fmt"
	"net"
	"reflect"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// moveAddresses on a real kernel, in a throwaway network namespace: under0
// is the tunnel interface (10.99.0.2/24, a default route, a route through a
// gateway and a direct one), br-phy stands for the OVS internal port. One
// end of a veth pair is enough for br-phy (and for under0; this kernel may
// lack the dummy driver): moveAddresses only touches the netlink half of
// the internal port (MTU, up, addresses, routes), never OVS.

const (
	tunUnder = "under0"
	tunPhy   = "br-phy"
	tunAddr  = "10.99.0.2/24"
)

var errInjected = errors.New("injected fault")

// inFreshNetNS runs fn on a locked OS thread inside a new, unnamed network
// namespace, then puts the thread back in its namespace; the new one goes
// away with its last reference.
func inFreshNetNS(t *testing.T, fn func()) {
	t.Helper()
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	defer func() {
		ns.Close()
		if err := netns.Set(orig); err != nil {
			// The thread stays locked: the runtime ends it rather than
			// run anything else in the test namespace.
			orig.Close()
			t.Errorf("back to the original netns: %v", err)
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
	}()
	fn()
}

// setupTunnelLinks makes under0 (up, MTU 1400, its address and routes) and
// br-phy (down, MTU 1500, nothing on it), each with a veth peer.
func setupTunnelLinks(t *testing.T) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	lo, err := netlink.LinkByName("lo")
	must("lo", err)
	must("lo up", netlink.LinkSetUp(lo))

	for _, name := range []string{tunUnder, tunPhy} {
		// The peer is up, so that the link has carrier once up.
		peer := name + "-peer"
		must("add "+name, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name, TxQLen: -1}, PeerName: peer, PeerTxQLen: -1}))
		p, err := netlink.LinkByName(peer)
		must(peer, err)
		must(peer+" up", netlink.LinkSetUp(p))
	}
	under, err := netlink.LinkByName(tunUnder)
	must(tunUnder, err)
	must("mtu", netlink.LinkSetMTU(under, 1400))
	must("up", netlink.LinkSetUp(under))
	addr, err := netlink.ParseAddr(tunAddr)
	must("parse", err)
	must("address", netlink.AddrAdd(under, addr))

	cidr := func(s string) *net.IPNet {
		_, n, err := net.ParseCIDR(s)
		must(s, err)
		return n
	}
	idx := under.Attrs().Index
	for _, r := range []netlink.Route{
		{LinkIndex: idx, Dst: cidr("198.51.100.0/24"), Gw: net.ParseIP("10.99.0.254"), Protocol: unix.RTPROT_STATIC},
		{LinkIndex: idx, Dst: cidr("203.0.113.0/24"), Scope: netlink.SCOPE_LINK, Protocol: unix.RTPROT_STATIC},
		{LinkIndex: idx, Dst: cidr("0.0.0.0/0"), Gw: net.ParseIP("10.99.0.1"), Protocol: unix.RTPROT_STATIC},
	} {
		must("route "+r.String(), netlink.RouteAdd(&r))
	}
}

type linkState struct {
	MTU    int
	Up     bool
	Addrs  []string
	Routes []string
}

func (s linkState) String() string {
	return fmt.Sprintf("mtu %d up %v\n  addrs:  %s\n  routes: %s", s.MTU, s.Up,
		strings.Join(s.Addrs, ", "), strings.Join(s.Routes, "\n          "))
}

func stateOf(t *testing.T, name string) linkState {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	s := linkState{MTU: l.Attrs().MTU, Up: l.Attrs().RawFlags&unix.IFF_UP != 0}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	for _, a := range addrs {
		s.Addrs = append(s.Addrs, fmt.Sprintf("%s scope %d", a.IPNet, a.Scope))
	}
	routes, err := netlink.RouteList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("routes of %s: %v", name, err)
	}
	for _, r := range routes {
		s.Routes = append(s.Routes, fmt.Sprintf("%v via %v proto %d scope %d src %v metric %d table %d type %d flags %#x",
			r.Dst, r.Gw, r.Protocol, r.Scope, r.Src, r.Priority, r.Table, r.Type, r.Flags))
	}
	sort.Strings(s.Addrs)
	sort.Strings(s.Routes)
	return s
}

func hasLine(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}

// failAt makes moveFault fail the nth (from 1) step of kind.
func failAt(t *testing.T, kind string, nth int) {
	seen := 0
	moveFault = func(step string) error {
		if step == kind {
			seen++
			if seen == nth {
				return errInjected
			}
		}
		return nil
	}
	t.Cleanup(func() { moveFault = nil })
}

func TestTunnelMoveAddressesAndBack(t *testing.T) {
	inFreshNetNS(t, func() {
		setupTunnelLinks(t)
		under, phy := stateOf(t, tunUnder), stateOf(t, tunPhy)

		n, err := moveAddresses(tunUnder, tunPhy)
		if err != nil || n != 1 {
			t.Fatalf("moveAddresses(%s, %s) = %d, %v; want 1, nil", tunUnder, tunPhy, n, err)
		}
		moved := stateOf(t, tunPhy)
		if moved.MTU != 1400 || !moved.Up {
			t.Errorf("%s after the move: want MTU 1400 and up, got\n%s", tunPhy, moved)
		}
		if !hasLine(moved.Addrs, tunAddr+" ") {
			t.Errorf("%s after the move lacks %s:\n%s", tunPhy, tunAddr, moved)
		}
		for _, r := range []string{"0.0.0.0/0 via 10.99.0.1 ", "198.51.100.0/24 via 10.99.0.254 ", "203.0.113.0/24 via <nil> ", "10.99.0.0/24 via <nil> "} {
			if !hasLine(moved.Routes, r) {
				t.Errorf("%s after the move lacks the route %q:\n%s", tunPhy, r, moved)
			}
		}
		left := stateOf(t, tunUnder)
		if hasLine(left.Addrs, tunAddr+" ") || hasLine(left.Routes, "0.0.0.0/0 ") || hasLine(left.Routes, "198.51.100.0/24 ") {
			t.Errorf("%s after the move still has its address or routes:\n%s", tunUnder, left)
		}

		n, err = moveAddresses(tunPhy, tunUnder)
		if err != nil || n != 1 {
			t.Fatalf("moveAddresses(%s, %s) = %d, %v; want 1, nil", tunPhy, tunUnder, n, err)
		}
		if got := stateOf(t, tunUnder); !reflect.DeepEqual(got, under) {
			t.Errorf("%s after the move back:\n%s\nwant\n%s", tunUnder, got, under)
		}
		back := stateOf(t, tunPhy)
		if hasLine(back.Addrs, tunAddr+" ") || len(back.Routes) > len(phy.Routes) && hasLine(back.Routes, "0.0.0.0/0 ") {
			t.Errorf("%s after the move back still has the address or routes:\n%s", tunPhy, back)
		}

		// Nothing left to move: not an error.
		if n, err := moveAddresses(tunPhy, tunUnder); err != nil || n != 0 {
			t.Errorf("second move back = %d, %v; want 0, nil", n, err)
		}
	})
}

// A step fails half-way: under0 must end with exactly its address and
// routes (the default route included, which the kernel dropped with the
// address), br-phy as it was, and the error must name the step.
func TestTunnelMoveRollsBackOnFailure(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		nth        int
		wantStep   string
	}{
		{"between address removal and add", stepAddrAdd, 1, "add address " + tunAddr + " to " + tunPhy + " failed"},
		// Routes without a gateway move first; the order of the others
		// is the kernel's (not checked).
		{"after the address add, before the routes", stepRouteAdd, 1, "move route 203.0.113.0/24 proto static scope link to " + tunPhy + " failed"},
		{"with one route moved", stepRouteAdd, 2, "move route "},
		{"at the last route", stepRouteAdd, 3, "move route "},
		{"at the MTU", stepSetMTU, 1, "set the MTU of " + tunPhy + " to 1400 failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inFreshNetNS(t, func() {
				setupTunnelLinks(t)
				under, phy := stateOf(t, tunUnder), stateOf(t, tunPhy)
				failAt(t, tc.kind, tc.nth)

				n, err := moveAddresses(tunUnder, tunPhy)
				if err == nil {
					t.Fatalf("moveAddresses succeeded (%d) despite the fault", n)
				}
				t.Logf("error: %v", err)
				if n != 0 {
					t.Errorf("moved = %d after a rollback, want 0", n)
				}
				if !errors.Is(err, errInjected) {
					t.Errorf("error does not wrap the cause: %v", err)
				}
				if !strings.Contains(err.Error(), tc.wantStep) {
					t.Errorf("error does not name the step %q: %v", tc.wantStep, err)
				}
				if tc.kind != stepSetMTU && !strings.Contains(err.Error(), "rolled back") {
					t.Errorf("error does not say the host was restored: %v", err)
				}
				if got := stateOf(t, tunUnder); !reflect.DeepEqual(got, under) {
					t.Errorf("%s after the rollback:\n%s\nwant\n%s", tunUnder, got, under)
				}
				if got := stateOf(t, tunPhy); !reflect.DeepEqual(got, phy) {
					t.Errorf("%s after the rollback:\n%s\nwant\n%s", tunPhy, got, phy)
				}
			})
		})
	}
}

// When the rollback fails too, the error says what is left and how to put
// it back by hand.
func TestTunnelMoveRollbackFailureTellsWhatToDoByHand(t *testing.T) {
	inFreshNetNS(t, func() {
		setupTunnelLinks(t)
		moveFault = func(step string) error {
			if step == stepRouteAdd || step == stepUndo+stepAddrDel {
				return errInjected
			}
			return nil
		}
		t.Cleanup(func() { moveFault = nil })

		_, err := moveAddresses(tunUnder, tunPhy)
		if err == nil {
			t.Fatal("moveAddresses succeeded despite the fault")
		}
		t.Logf("error: %v", err)
		for _, want := range []string{
			"move route 203.0.113.0/24 ",
			"rolling back failed too",
			"ip address add " + tunAddr + " dev " + tunUnder,
			"ip route replace default via 10.99.0.1 dev " + tunUnder + " proto static",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error lacks %q: %v", want, err)
			}
		}
		if strings.Contains(err.Error(), "rolled back:") {
			t.Errorf("error claims a restored host: %v", err)
		}
	})
}

package hostnat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestGuardPackets: the test namespace is the node. A "pod" namespace is
// behind the node's veth named ovn0 (10.16.0.2 -> 10.16.0.1), an
// "outside" namespace (192.0.2.2, another node) behind to-out. The node
// listens on TCP 6641, 6642, 10666 and 8080; the other node on TCP 6642
// and UDP 6081 and 7007. With the guard, the pod's connections to the
// guarded ports time out (dropped: the guard's counters grow) while 8080
// and UDP 7007 pass; the node's own connection to the pod from source
// port 6643 (a guarded port) gets its replies; after RemoveGuard the same
// connections work (so it was the guard that dropped them); a flushed
// guard is restored by Run; Cleanup leaves nothing.
func TestGuardPackets(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			requireBackend(t, backend)
			inFreshNetNS(t, func(node netns.NsHandle) { testGuardPackets(t, node, backend) })
		})
	}
}

func testGuardPackets(t *testing.T, node netns.NsHandle, beName string) {
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	podNS, err := netns.New()
	must("pod netns", err)
	defer podNS.Close()
	outNS, err := netns.New()
	must("outside netns", err)
	defer outNS.Close()
	must("back to the node netns", netns.Set(node))

	for _, p := range []struct {
		name string
		ns   netns.NsHandle
	}{{"ovn0", podNS}, {"to-out", outNS}} {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.name}, PeerName: p.name + "-p"}
		must("veth "+p.name, netlink.LinkAdd(v))
		peer, err := netlink.LinkByName(p.name + "-p")
		must("peer", err)
		must("move peer", netlink.LinkSetNsFd(peer, int(p.ns)))
		h, err := netlink.NewHandleAt(p.ns)
		must("handle", err)
		l, err := h.LinkByName(p.name + "-p")
		must("peer in ns", err)
		must("rename", h.LinkSetName(l, "eth0"))
		h.Close()
	}
	handle := func(ns netns.NsHandle) *netlink.Handle {
		h, err := netlink.NewHandleAt(ns)
		must("handle", err)
		t.Cleanup(h.Close)
		return h
	}
	addr := func(h *netlink.Handle, link, cidr string) {
		l, err := h.LinkByName(link)
		must(link, err)
		a, err := netlink.ParseAddr(cidr)
		must(cidr, err)
		must("addr "+cidr, h.AddrAdd(l, a))
		must("up "+link, h.LinkSetUp(l))
		if lo, err := h.LinkByName("lo"); err == nil {
			_ = h.LinkSetUp(lo)
		}
	}
	route := func(h *netlink.Handle, dst, gw string) {
		_, d, err := net.ParseCIDR(dst)
		must(dst, err)
		must("route "+dst, h.RouteAdd(&netlink.Route{Dst: d, Gw: net.ParseIP(gw)}))
	}
	nh, ph, oh := handle(node), handle(podNS), handle(outNS)
	addr(nh, "ovn0", "10.16.0.1/24")
	addr(nh, "to-out", "192.0.2.1/24")
	addr(ph, "eth0", "10.16.0.2/24")
	route(ph, "0.0.0.0/0", "10.16.0.1")
	addr(oh, "eth0", "192.0.2.2/24")
	route(oh, "10.16.0.0/24", "192.0.2.1")
	inNS(t, node, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) })

	// Listeners: TCP on the node and the other node, UDP echo on the other node.
	tcpListen := func(ns netns.NsHandle, addr string) {
		var l net.Listener
		inNS(t, ns, func() error {
			var err error
			l, err = net.Listen("tcp4", addr)
			return err
		})
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				_, _ = c.Write([]byte("hello"))
				c.Close()
			}
		}()
	}
	for _, p := range []string{"6641", "6642", "10666", "8080"} {
		tcpListen(node, "0.0.0.0:"+p)
	}
	tcpListen(outNS, "0.0.0.0:6642")
	tcpListen(podNS, "0.0.0.0:9000") // the pod's server the node connects to
	for _, p := range []int{6081, 7007} {
		var srv *net.UDPConn
		inNS(t, outNS, func() error {
			var err error
			srv, err = net.ListenUDP("udp4", &net.UDPAddr{Port: p})
			return err
		})
		t.Cleanup(func() { srv.Close() })
		go func() {
			buf := make([]byte, 64)
			for {
				n, from, err := srv.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				_, _ = srv.WriteToUDPAddrPort(buf[:n], from)
			}
		}()
	}

	// tcp dials from ns (from local port lport when not 0) and reads the
	// greeting; the error when no greeting came within d.
	tcp := func(ns netns.NsHandle, dst string, lport int, d time.Duration) error {
		var err error
		inNS(t, ns, func() error {
			dl := net.Dialer{Timeout: d}
			if lport != 0 {
				dl.LocalAddr = &net.TCPAddr{Port: lport}
			}
			var c net.Conn
			c, err = dl.Dial("tcp4", dst)
			if err != nil {
				return nil
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(d))
			buf := make([]byte, 5)
			_, err = c.Read(buf)
			return nil
		})
		return err
	}
	udp := func(dst string, d time.Duration) error {
		var err error
		inNS(t, podNS, func() error {
			var c net.Conn
			if c, err = net.Dial("udp4", dst); err != nil {
				return nil
			}
			defer c.Close()
			deadline := time.Now().Add(d)
			for time.Now().Before(deadline) {
				if _, err = c.Write([]byte("geneve?")); err != nil {
					return nil
				}
				_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond)) // resend while ARP settles
				if _, err = c.Read(make([]byte, 64)); err == nil {
					return nil
				}
			}
			return nil
		})
		return err
	}
	// Before the guard: everything answers (the test's network works,
	// and these are the holes the guard closes).
	for _, dst := range []string{"10.16.0.1:6641", "10.16.0.1:6642", "10.16.0.1:10666", "10.16.0.1:8080", "192.0.2.2:6642"} {
		must("pod -> "+dst+" without the guard", tcp(podNS, dst, 0, 3*time.Second))
	}
	must("pod -> 192.0.2.2:6081/udp without the guard", udp("192.0.2.2:6081", 3*time.Second))

	m, err := New(beName, testLogger(t))
	must("New", err)
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	must("ApplyGuard", m.ApplyGuard(ctx, DefaultGuard(0, "ovn0", "br-egw")))
	must("ApplyGuard again (idempotent)", m.ApplyGuard(ctx, DefaultGuard(0, "ovn0", "br-egw")))
	if ok, why, err := m.be.guardSync(m.guard); !ok || err != nil {
		t.Fatalf("guard not in the kernel as computed: %s %v", why, err)
	}
	drops0, err := m.GuardDrops()
	must("GuardDrops", err)

	const blocked = 700 * time.Millisecond // a dropped SYN gets no answer at all
	for _, dst := range []string{"10.16.0.1:6641", "10.16.0.1:6642", "10.16.0.1:10666", "192.0.2.2:6642"} {
		err := tcp(podNS, dst, 0, blocked)
		if err == nil {
			t.Errorf("pod -> %s: connected through the guard", dst)
		} else if errors.Is(err, os.ErrDeadlineExceeded) == false && !strings.Contains(err.Error(), "timeout") {
			t.Errorf("pod -> %s: %v, want a timeout (dropped, not refused)", dst, err)
		}
	}
	if err := udp("192.0.2.2:6081", blocked); err == nil {
		t.Error("pod -> 192.0.2.2:6081/udp (another node's Geneve port): answered through the guard")
	}
	// Not over-blocking: other ports pass, the node reaches the pod, also
	// from a guarded source port (the reply comes in on ovn0 to 6643).
	must("pod -> 10.16.0.1:8080 with the guard", tcp(podNS, "10.16.0.1:8080", 0, 3*time.Second))
	must("pod -> 192.0.2.2:7007/udp with the guard", udp("192.0.2.2:7007", 3*time.Second))
	must("node -> pod 10.16.0.2:9000 from source port 6643", tcp(node, "10.16.0.2:9000", 6643, 3*time.Second))
	drops1, err := m.GuardDrops()
	must("GuardDrops", err)
	if drops1 < drops0+5 {
		t.Errorf("guard counted %d drops, want at least 5 (4 SYNs and a UDP packet)", drops1-drops0)
	}
	t.Logf("guard dropped %d packets", drops1-drops0)

	// Someone flushes the guard; Run restores it.
	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }()
	switch beName {
	case BackendNFT:
		c, err := nftables.New(nftables.WithNetNSFd(int(node)))
		must("nft", err)
		c.FlushRuleset()
		must("nft flush ruleset", c.Flush())
	case BackendLegacy:
		ipt := kernelView{t: t, ns: node}.ipt(v4)
		must("iptables -F INPUT", ipt.ClearChain("filter", "INPUT"))
		must("iptables -F OVNHOST-GUARD", ipt.ClearChain("filter", GuardChain))
	}
	waitFor(t, "flushed guard restored by Run", 2*time.Second, func() (bool, string) {
		ok, why, err := m.be.guardSync(&guardRules{ifaces: []string{"br-egw", "ovn0"}, tcp: []uint16{6641, 6642, 6643, 6644, 7471, 10666}, udp: []uint16{4789, 6081, 7471}})
		return ok && err == nil, fmt.Sprint(why, err)
	})
	if err := tcp(podNS, "10.16.0.1:6641", 0, blocked); err == nil {
		t.Error("pod -> 10.16.0.1:6641: connected after the restore")
	}

	// Without the guard the same connections work: it was the guard.
	must("RemoveGuard", m.RemoveGuard(ctx))
	must("pod -> 10.16.0.1:6641 after RemoveGuard", tcp(podNS, "10.16.0.1:6641", 0, 3*time.Second))
	must("pod -> 192.0.2.2:6081/udp after RemoveGuard", udp("192.0.2.2:6081", 3*time.Second))
	if ok, why, err := m.be.guardSync(nil); !ok || err != nil {
		t.Errorf("guard left after RemoveGuard: %s %v", why, err)
	}
	cancel()
	must("Run", <-runDone)
	if ok, why, _ := m.be.guardSync(nil); !ok {
		t.Errorf("Run put the removed guard back: %s", why)
	}

	// Cleanup removes a guard left by a stop that kept the datapath.
	must("ApplyGuard", m.ApplyGuard(context.Background(), DefaultGuard(0, "ovn0")))
	must("Cleanup", Cleanup(testLogger(t)))
	for _, b := range []string{BackendNFT, BackendLegacy} {
		if b == BackendLegacy {
			if _, err := legacyProgram(v4); err != nil {
				continue
			}
		}
		be := map[string]func() backend{
			BackendNFT: func() backend { x, _ := newNFT(m.ns, testLogger(t)); return x },
			BackendLegacy: func() backend {
				x, err := newLegacy(m.ns, testLogger(t))
				must("legacy", err)
				return x
			},
		}[b]()
		if ok, why, err := be.guardSync(nil); !ok || err != nil {
			t.Errorf("%s guard left after Cleanup: %s %v", b, why, err)
		}
	}
	if beName == BackendLegacy {
		for _, f := range families {
			ipt := kernelView{t: t, ns: node}.ipt(f)
			for _, h := range guardHooks {
				rules, err := ipt.List("filter", h)
				must("list "+h, err)
				if slices.ContainsFunc(rules, func(r string) bool { return strings.Contains(r, GuardChain) }) {
					t.Errorf("%s %s still jumps to %s: %q", f, h, GuardChain, rules)
				}
			}
		}
	}
}

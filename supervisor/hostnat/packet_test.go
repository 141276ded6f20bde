package hostnat

import (
	"context"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// inNS runs fn on a throwaway thread moved into ns (sockets created there
// stay in ns).
func inNS(t *testing.T, ns netns.NsHandle, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is discarded
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestMasqueradePackets: the test namespace routes between a "pod"
// namespace (10.16.0.2, in NATOutgoing) and an "outside" one (192.0.2.2,
// and 198.51.100.2 which is in Exclude). A UDP echo in outside reports the
// source it saw: the router's 192.0.2.1 for the first, the pod's own
// address for the excluded destination.
func TestMasqueradePackets(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			requireBackend(t, backend)
			inFreshNetNS(t, func(router netns.NsHandle) { testPackets(t, router, backend) })
		})
	}
}

func testPackets(t *testing.T, router netns.NsHandle, backend string) {
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}
	// The peer namespaces; netns.New moves the thread, so go back.
	podNS, err := netns.New()
	must("pod netns", err)
	defer podNS.Close()
	outNS, err := netns.New()
	must("outside netns", err)
	defer outNS.Close()
	must("back to the router netns", netns.Set(router))

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
	for _, p := range []struct {
		name, peer string
		ns         netns.NsHandle
	}{{"to-pod", "eth0", podNS}, {"to-out", "eth0", outNS}} {
		v := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: p.name}, PeerName: p.name + "-p"}
		must("veth "+p.name, netlink.LinkAdd(v))
		peer, err := netlink.LinkByName(p.name + "-p")
		must("peer", err)
		must("move peer", netlink.LinkSetNsFd(peer, int(p.ns)))
		h, err := netlink.NewHandleAt(p.ns)
		must("handle", err)
		l, err := h.LinkByName(p.name + "-p")
		must("peer in ns", err)
		must("rename", h.LinkSetName(l, p.peer))
		h.Close()
	}
	rh, err := netlink.NewHandleAt(router)
	must("router handle", err)
	defer rh.Close()
	ph, err := netlink.NewHandleAt(podNS)
	must("pod handle", err)
	defer ph.Close()
	oh, err := netlink.NewHandleAt(outNS)
	must("outside handle", err)
	defer oh.Close()
	addr(rh, "to-pod", "10.16.0.1/24")
	addr(rh, "to-out", "192.0.2.1/24")
	addr(ph, "eth0", "10.16.0.2/24")
	route(ph, "0.0.0.0/0", "10.16.0.1")
	addr(oh, "eth0", "192.0.2.2/24")
	a, _ := netlink.ParseAddr("198.51.100.2/32")
	eth, err := oh.LinkByName("eth0")
	must("outside eth0", err)
	must("excluded address", oh.AddrAdd(eth, a))
	route(oh, "10.16.0.0/24", "192.0.2.1") // replies to unmasqueraded packets
	route(rh, "198.51.100.0/24", "192.0.2.2")
	// net sysctls belong to the namespace of the writing thread
	inNS(t, router, func() error { return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644) })

	m, err := New(backend, testLogger(t))
	must("New", err)
	defer m.Close()
	ctx := context.Background()
	must("Apply", m.Apply(ctx, Rules{
		NATOutgoing: pfx("10.16.0.0/16"),
		Exclude:     pfx("10.16.0.0/16", "198.51.100.0/24"),
	}))
	defer func() { must("Remove", m.Remove(ctx)) }()

	// The echo: replies with the source address it saw, one socket per
	// address so the reply leaves from the address the pod sent to.
	for _, ip := range []string{"192.0.2.2", "198.51.100.2"} {
		var srv *net.UDPConn
		inNS(t, outNS, func() error {
			var err error
			srv, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.ParseIP(ip), Port: 7007})
			return err
		})
		defer srv.Close()
		go func() {
			buf := make([]byte, 64)
			for {
				_, from, err := srv.ReadFromUDPAddrPort(buf)
				if err != nil {
					return
				}
				_, _ = srv.WriteToUDPAddrPort([]byte(from.Addr().String()), from)
			}
		}()
	}

	seen := func(dst string) string {
		var c *net.UDPConn
		inNS(t, podNS, func() error {
			var err error
			c, err = net.DialUDP("udp4", nil, &net.UDPAddr{IP: net.ParseIP(dst), Port: 7007})
			return err
		})
		defer c.Close()
		buf := make([]byte, 64)
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if _, err := c.Write([]byte("hi")); err != nil {
				t.Fatalf("send to %s: %v", dst, err)
			}
			_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond)) // resend while ARP settles
			n, err := c.Read(buf)
			if err == nil {
				return string(buf[:n])
			}
		}
		t.Fatalf("no echo from %s within 3s", dst)
		return ""
	}
	if got := seen("192.0.2.2"); netip.MustParseAddr(got) != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("outside saw %s for a packet to 192.0.2.2, want the masqueraded 192.0.2.1", got)
	}
	if got := seen("198.51.100.2"); got != "10.16.0.2" {
		t.Errorf("outside saw %s for a packet to the excluded 198.51.100.2, want the pod's 10.16.0.2", got)
	}

	// A gatewayNode "node:IP": the pod's subnet leaves with that address
	// of the router, not the outgoing interface's first one; excluded
	// destinations still see the pod.
	egressIP, _ := netlink.ParseAddr("192.0.2.9/24")
	out, err := rh.LinkByName("to-out")
	must("to-out", err)
	must("egress address", rh.AddrAdd(out, egressIP))
	rules := Rules{
		NATOutgoing: pfx("10.16.0.0/16"),
		Exclude:     pfx("10.16.0.0/16", "198.51.100.0/24"),
		SNAT:        []SNAT{{From: netip.MustParsePrefix("10.16.0.0/24"), To: netip.MustParseAddr("192.0.2.9")}},
	}
	must("Apply with SNAT", m.Apply(ctx, rules))
	if ok, reason, err := m.be.sync(mustNormalize(t, rules)); err != nil || !ok {
		t.Fatalf("after Apply with SNAT the kernel differs: %s %v", reason, err)
	}
	if got := seen("192.0.2.2"); got != "192.0.2.9" {
		t.Errorf("outside saw %s for a packet to 192.0.2.2 with SNAT to 192.0.2.9, want 192.0.2.9", got)
	}
	if got := seen("198.51.100.2"); got != "10.16.0.2" {
		t.Errorf("outside saw %s for a packet to the excluded 198.51.100.2 with SNAT, want the pod's 10.16.0.2", got)
	}
	// Dropping the SNAT goes back to the masquerade.
	rules.SNAT = nil
	must("Apply without SNAT", m.Apply(ctx, rules))
	if got := seen("192.0.2.2"); got != "192.0.2.1" {
		t.Errorf("outside saw %s after the SNAT was dropped, want the masqueraded 192.0.2.1", got)
	}
}

func mustNormalize(t *testing.T, r Rules) normalized {
	t.Helper()
	n, err := normalize(r)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

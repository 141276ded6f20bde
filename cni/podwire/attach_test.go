package podwire

import (
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/cni/ovsport"
)

// A pod's attachment interface (net1) is wired beside its eth0 in the same
// namespace: its own veth and port, bound to "<pod>.<ns>.<provider>", with
// its provider recorded for GC; eth0's port stays (it is no stale port of
// the same iface-id), rates follow eth0 only, and CHECK and DEL of net1
// touch net1 only.
func TestAttachmentIsWiredBesideTheDefaultInterface(t *testing.T) {
	ctx := t.Context()
	w, cl := wirer(t, 20*time.Second)
	a, n := samplePod(t, "ovht-att")
	installed := installWhenPresent(ctx, cl, a.Port)
	if err := w.Add(ctx, a, n, func(*Result) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	att := a
	att.IfName, att.Provider = "net1", "att.ns.ovn"
	att.Port = PortName(a.ContainerID, "net1")
	mac, _ := net.ParseMAC("0a:58:ac:11:00:05")
	an := Network{Addrs: []netip.Prefix{netip.MustParsePrefix("172.17.0.5/24")}, MAC: mac, MTU: 1400}
	installed = installWhenPresent(ctx, cl, att.Port)
	if err := w.Add(ctx, att, an, func(*Result) error { return nil }); err != nil {
		t.Fatalf("ADD net1: %v", err)
	}
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	br := ovsport.New(cl, "")
	ids, ok, _ := br.Interface(ctx, att.Port)
	if !ok || ids[ovsport.KeyIfaceID] != "p.ns.att.ns.ovn" || ids[ovsport.KeyProvider] != "att.ns.ovn" || ids[ovsport.KeyIP] != "172.17.0.5" ||
		ids[ovsport.KeyAttachedMAC] != "0a:58:ac:11:00:05" || ids[ovsport.KeyIfName] != "net1" || ids[ovsport.KeyPodName] != "p" {
		t.Fatalf("net1's interface external_ids %v", ids)
	}
	if ids, ok, _ := br.Interface(ctx, a.Port); !ok || ids[ovsport.KeyIfaceID] != "p.ns" {
		t.Fatalf("eth0's port after net1's ADD: %v %v", ok, ids)
	}
	// Both interfaces in the pod, net1 without a default route.
	h, err := netns.GetFromPath(a.Netns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	for _, name := range []string{"eth0", "net1"} {
		if _, err := nl.LinkByName(name); err != nil {
			t.Fatalf("%s in the pod: %v", name, err)
		}
	}
	l1, _ := nl.LinkByName("net1")
	rs, _ := nl.RouteList(l1, netlink.FAMILY_V4)
	for _, r := range rs {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() {
			t.Fatalf("net1 has a default route: %+v", r)
		}
	}
	if !slices.Equal(w.Wired(), []string{"ns/p"}) {
		t.Fatalf("wired %v", w.Wired())
	}
	owned, err := w.Owned(ctx)
	if err != nil || len(owned) != 2 || !slices.Contains(owned, att) || !slices.Contains(owned, a) {
		t.Fatalf("owned %+v %v, want eth0's and net1's", owned, err)
	}
	if err := w.Check(ctx, att, Expected{Network: an}); err != nil {
		t.Fatalf("CHECK net1: %v", err)
	}
	// A restarted wirer follows eth0's rates, not net1's port.
	w2 := New(Options{OVS: cl, InstallWait: time.Second})
	if err := w2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	w2.mu.Lock()
	port := w2.wired["ns/p"].port
	w2.mu.Unlock()
	w2.Stop()
	if port != a.Port {
		t.Fatalf("after a restart the rates of ns/p follow port %q, want eth0's %q", port, a.Port)
	}
	if err := w.Del(ctx, att); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := br.Interface(ctx, att.Port); ok {
		t.Fatal("net1's port is left after its DEL")
	}
	if _, ok, _ := br.Interface(ctx, a.Port); !ok {
		t.Fatal("DEL of net1 removed eth0's port")
	}
	if _, err := nl.LinkByName("eth0"); err != nil {
		t.Fatalf("eth0 after DEL of net1: %v", err)
	}
	if err := w.Del(ctx, a); err != nil {
		t.Fatal(err)
	}
}

package ovsport

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/cni/ovsport/ovsporttest"
)

// These tests run against a real ovsdb-server with the installed
// vswitch schema (no ovs-vswitchd: only the rows are tested; tests/cni
// wires real pods). The test plays ovn-controller where a row needs
// ovn-installed.

func count(t *testing.T, b *Bridge, table string, where ...ovsdb.Condition) int {
	t.Helper()
	rows, err := b.selectRows(t.Context(), table, where, "_uuid")
	if err != nil {
		t.Fatal(err)
	}
	return len(rows)
}

func podIDs(name string) map[string]string {
	return map[string]string{KeyIfaceID: name + ".ns", KeyPodName: name, KeyPodNamespace: "ns", KeyVendor: Vendor,
		KeyContainerID: "c-" + name, KeyIfName: "eth0"}
}

func TestMissingBridge(t *testing.T) {
	b := New(ovsporttest.ConfDB(t, ""), "")
	if _, ok, err := b.DatapathType(t.Context()); ok || err != nil {
		t.Fatalf("datapath type of a missing bridge: ok %v err %v", ok, err)
	}
	err := b.AddPort(t.Context(), PortSpec{Name: "veth1", ExternalIDs: podIDs("p"), IngressMbps: 10})
	if err == nil || !strings.Contains(err.Error(), "bridge br-int does not exist") {
		t.Fatalf("AddPort without br-int: %v", err)
	}
	// The wait on the bridge aborted the whole transaction: no root QoS left.
	if n := count(t, b, "QoS"); n != 0 {
		t.Fatalf("%d QoS rows left behind", n)
	}
}

// A pod's port: its rows, its rates and how they change, how it is found
// (GC, stale ports) and removed with everything it owns.
func TestPodPortLifecycle(t *testing.T) {
	ctx := t.Context()
	b := New(ovsporttest.ConfDB(t, DefaultBridge), "")
	if dp, ok, err := b.DatapathType(ctx); dp != "netdev" || !ok || err != nil {
		t.Fatalf("datapath type %q %v %v", dp, ok, err)
	}
	if err := b.AddPort(ctx, PortSpec{Name: "veth1", ExternalIDs: podIDs("p"), IngressMbps: 10, EgressMbps: 5}); err != nil {
		t.Fatal(err)
	}
	// ovn0 shares nothing with pods, even a pod's iface-id.
	if err := b.AddPort(ctx, PortSpec{Name: "ovn0", Type: "internal", ExternalIDs: map[string]string{KeyIfaceID: "p.ns", KeyVendor: Vendor}}); err != nil {
		t.Fatal(err)
	}
	if in, eg, err := b.Rates(ctx, "veth1"); in != 10 || eg != 5 || err != nil {
		t.Fatalf("rates %d/%d %v, want 10/5", in, eg, err)
	}
	if names, err := b.PortsByIfaceID(ctx, "p.ns"); err != nil || !slices.Equal(names, []string{"veth1"}) {
		t.Fatalf("ports of p.ns: %v %v (internal ports are never a pod's)", names, err)
	}
	owned, err := b.OwnedInterfaces(ctx)
	if err != nil || len(owned) != 1 || owned[0].Name != "veth1" || owned[0].ExternalIDs[KeyContainerID] != "c-p" {
		t.Fatalf("owned %+v %v", owned, err)
	}
	if err := b.SetQoS(ctx, "veth1", podIDs("p"), 20, 0); err != nil {
		t.Fatal(err)
	}
	if in, eg, err := b.Rates(ctx, "veth1"); in != 20 || eg != 0 || err != nil {
		t.Fatalf("rates after SetQoS %d/%d %v, want 20/0", in, eg, err)
	}
	if q, qs := count(t, b, "QoS"), count(t, b, "Queue"); q != 1 || qs != 1 {
		t.Fatalf("%d QoS and %d Queue rows after SetQoS, want the new ones only", q, qs)
	}
	// A port that is gone (a rate change racing the pod's DEL) gets no
	// QoS: its QoS and Queue rows are roots and used to stay forever.
	if err := b.SetQoS(ctx, "gone", podIDs("gone"), 1, 1); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("SetQoS of a missing interface: %v", err)
	}
	for _, table := range []string{"QoS", "Queue"} {
		if n := count(t, b, table, includes("external_ids", map[string]string{extPort: "gone"})); n != 0 {
			t.Errorf("%d %s rows left behind by SetQoS of a port that does not exist", n, table)
		}
	}
	// Rates removed (an invalid annotation counts as none): no QoS row left.
	if err := b.SetQoS(ctx, "veth1", podIDs("p"), 0, 0); err != nil {
		t.Fatal(err)
	}
	if q, qs := count(t, b, "QoS"), count(t, b, "Queue"); q != 0 || qs != 0 {
		t.Fatalf("%d QoS and %d Queue rows after the rates were removed, want none", q, qs)
	}
	if in, eg, err := b.Rates(ctx, "veth1"); in != 0 || eg != 0 || err != nil {
		t.Fatalf("rates after removal %d/%d %v, want 0/0", in, eg, err)
	}
	if err := b.SetExternalIDs(ctx, "veth1", map[string]string{KeyIP: "10.16.0.9"}); err != nil {
		t.Fatal(err)
	}
	ids, ok, err := b.Interface(ctx, "veth1")
	if !ok || err != nil || ids[KeyIP] != "10.16.0.9" || ids[KeyIfaceID] != "p.ns" {
		t.Fatalf("interface %v %v %v", ids, ok, err)
	}
	for range 2 { // a missing port is not an error
		if err := b.DeletePort(ctx, "veth1"); err != nil {
			t.Fatal(err)
		}
	}
	for _, table := range []string{"QoS", "Queue"} {
		if n := count(t, b, table, includes("external_ids", map[string]string{extPort: "veth1"})); n != 0 {
			t.Errorf("%d %s rows left after DeletePort", n, table)
		}
	}
	if n := count(t, b, "Port", eq("name", "veth1")); n != 0 {
		t.Errorf("port left after DeletePort")
	}
	if _, ok, _ := b.Interface(ctx, "veth1"); ok {
		t.Errorf("interface left after DeletePort")
	}
}

// WaitInstalled is ovsdb-server's own wait: it returns once the key is
// set, ErrInstallTimeout when it is not in time.
func TestWaitInstalled(t *testing.T) {
	ctx := t.Context()
	b := New(ovsporttest.ConfDB(t, DefaultBridge), "")
	if err := b.AddPort(ctx, PortSpec{Name: "veth1", ExternalIDs: podIDs("p")}); err != nil {
		t.Fatal(err)
	}
	if err := b.WaitInstalled(ctx, "veth1", 200*time.Millisecond); !errors.Is(err, ErrInstallTimeout) {
		t.Fatalf("not installed: %v, want ErrInstallTimeout", err)
	}
	done := make(chan error, 1)
	go func() { done <- b.WaitInstalled(ctx, "veth1", 20*time.Second) }()
	// ovn-controller's write.
	if err := b.SetExternalIDs(ctx, "veth1", map[string]string{KeyOVNInstalled: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("installed: %v", err)
	}
}

func TestMirror(t *testing.T) {
	ctx := t.Context()
	b := New(ovsporttest.ConfDB(t, DefaultBridge), "")
	err := b.AddPort(ctx, PortSpec{Name: "veth1", ExternalIDs: podIDs("p"), Mirror: true})
	if err == nil || !strings.Contains(err.Error(), "has no mirror") {
		t.Fatalf("mirrored pod without a mirror: %v", err)
	}
	if n := count(t, b, "Port", eq("name", "veth1")); n != 0 {
		t.Fatal("the port of a pod that could not be mirrored was left")
	}
	for range 2 { // ensuring twice re-points the same mirror
		if err := b.EnsureMirror(ctx, "mirror0"); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, b, "Mirror"); n != 1 {
		t.Fatalf("%d mirrors", n)
	}
	if err := b.AddPort(ctx, PortSpec{Name: "veth1", ExternalIDs: podIDs("p"), Mirror: true}); err != nil {
		t.Fatal(err)
	}
	if m, err := b.MirrorMembers(ctx); err != nil || !slices.Equal(m, []string{"veth1"}) {
		t.Fatalf("mirror members %v %v", m, err)
	}
	ids, ok, _ := b.Interface(ctx, "mirror0")
	if !ok || ids[extMirror] != "output" {
		t.Fatalf("mirror output interface %v %v", ids, ok)
	}
}

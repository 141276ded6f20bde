package podwire

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/ovsport"
	"github.com/ovnhost/ovnhost/cni/ovsport/ovsporttest"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The wirer against real veths in a real network namespace and a real
// conf.db (ovsdb-server without ovs-vswitchd): the test plays
// ovn-controller, setting ovn-installed once the interface row exists.
// tests/cni wires pods with the whole node.

func wirer(t *testing.T, installWait time.Duration) (*Wirer, client.Client) {
	t.Helper()
	testenv.RequireRoot(t)
	cl := ovsporttest.ConfDB(t, ovsport.DefaultBridge)
	w := New(Options{OVS: cl, InstallWait: installWait, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := w.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	if w.Datapath() != nodeconfig.Userspace {
		t.Fatalf("datapath %q, want br-int's (netdev)", w.Datapath())
	}
	return w, cl
}

// installWhenPresent sets ovn-installed on port's interface as soon as
// the row exists (ovsdb-server's wait, no polling).
func installWhenPresent(ctx context.Context, cl client.Client, port string) <-chan error {
	done := make(chan error, 1)
	go func() {
		ms := 20000
		where := []ovsdb.Condition{ovsdb.NewCondition("name", ovsdb.ConditionEqual, port)}
		_, err := ovsdbconn.Transact(ctx, cl, "ovn-controller", ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Interface", Timeout: &ms,
			Where: where, Columns: []string{"name"}, Until: "==", Rows: []ovsdb.Row{{"name": port}}},
			ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Interface", Where: where, Mutations: []ovsdb.Mutation{
				*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, ovsdb.OvsMap{GoMap: map[any]any{ovsport.KeyOVNInstalled: "true"}})}})
		done <- err
	}()
	return done
}

func samplePod(t *testing.T, prefix string) (Attachment, Network) {
	ns := podnettest.NewNetNS(t, prefix)
	mac, _ := net.ParseMAC("0a:58:0a:10:00:05")
	a := Attachment{Namespace: "ns", Name: "p", ContainerID: "cid-" + prefix, Netns: ns, IfName: "eth0", Port: PortName("cid-"+prefix, "eth0")}
	n := Network{Addrs: []netip.Prefix{netip.MustParsePrefix("10.16.0.5/16")}, MAC: mac, MTU: 1400,
		Routes:      []Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.16.0.1")}},
		IngressMbps: 10, EgressMbps: 5}
	return a, n
}

func TestAddCheckRatesDel(t *testing.T) {
	ctx := t.Context()
	w, cl := wirer(t, 20*time.Second)
	a, n := samplePod(t, "ovht-wire")
	installed := installWhenPresent(ctx, cl, a.Port)
	var got *Result
	if err := w.Add(ctx, a, n, func(r *Result) error { got = r; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	if got.HostIfName != a.Port || got.HostMAC == nil || got.PortDone.Before(got.VethDone) || got.VethDone.Before(got.StaleDone) {
		t.Fatalf("result %+v", got)
	}
	br := ovsport.New(cl, "")
	ids, ok, _ := br.Interface(ctx, a.Port)
	if !ok || ids[ovsport.KeyIfaceID] != "p.ns" || ids[ovsport.KeyIP] != "10.16.0.5" || ids[ovsport.KeyContainerID] != a.ContainerID || ids[ovsport.KeyPodNetns] != a.Netns {
		t.Fatalf("interface external_ids %v", ids)
	}
	if !slices.Equal(w.Wired(), []string{"ns/p"}) {
		t.Fatalf("wired %v", w.Wired())
	}
	want := Expected{Network: Network{Addrs: n.Addrs, MAC: n.MAC, MTU: 1400, Routes: n.Routes}}
	if err := w.Check(ctx, a, want); err != nil {
		t.Fatalf("CHECK of what ADD made: %v", err)
	}
	// A result without MTU: the host end's is expected.
	if err := w.Check(ctx, a, Expected{Network: Network{Addrs: n.Addrs, MAC: n.MAC, MTU: 9000, Routes: n.Routes}, MTUFromHost: true}); err != nil {
		t.Fatalf("CHECK with the host end's MTU: %v", err)
	}
	other := a
	other.Name = "q"
	if err := w.Check(ctx, other, want); !isStep(err, StepCheck) {
		t.Fatalf("CHECK of another pod's iface-id: %v", err)
	}
	owned, err := w.Owned(ctx)
	if err != nil || len(owned) != 1 || owned[0] != a {
		t.Fatalf("owned %+v %v, want %+v", owned, err, a)
	}
	w.SetRates("ns/p", 20, 0)
	if in, eg, err := br.Rates(ctx, a.Port); in != 20 || eg != 0 || err != nil {
		t.Fatalf("rates after SetRates %d/%d %v", in, eg, err)
	}
	w.ReapplyRates(ctx, "ns/p", 30, 1)
	if in, eg, _ := br.Rates(ctx, a.Port); in != 30 || eg != 1 {
		t.Fatalf("rates after ReapplyRates %d/%d", in, eg)
	}
	if err := w.Del(ctx, a); err != nil {
		t.Fatal(err)
	}
	w.Forget(a)
	if len(w.Wired()) != 0 {
		t.Fatalf("wired after DEL: %v", w.Wired())
	}
	if _, err := netlink.LinkByName(a.Port); err == nil {
		t.Fatal("the host end is still there")
	}
	if err := w.Check(ctx, a, want); !isStep(err, StepCheck) {
		t.Fatalf("CHECK after DEL: %v", err)
	}
}

// A failed ADD leaves nothing behind: no port, no veth.
func TestAddRollsBack(t *testing.T) {
	ctx := t.Context()
	w, cl := wirer(t, 300*time.Millisecond)
	a, n := samplePod(t, "ovht-rollb")
	gone := func(what string) {
		t.Helper()
		if _, ok, _ := ovsport.New(cl, "").Interface(ctx, a.Port); ok {
			t.Errorf("%s: the OVS interface is left", what)
		}
		if _, err := netlink.LinkByName(a.Port); err == nil {
			t.Errorf("%s: the host end is left", what)
		}
		if len(w.Wired()) != 0 {
			t.Errorf("%s: wired %v", what, w.Wired())
		}
	}
	// No ovn-controller: not installed in time.
	err := w.Add(ctx, a, n, func(*Result) error { t.Fatal("answered"); return nil })
	if !isStep(err, StepInstallTimeout) {
		t.Fatalf("not installed: %v", err)
	}
	gone("not installed")
	// The answer cannot be built: its error as it is.
	w.installWait = 20 * time.Second
	installed := installWhenPresent(ctx, cl, a.Port)
	bad := errors.New("unsupported version")
	if err := w.Add(ctx, a, n, func(*Result) error { return bad }); err != bad {
		t.Fatalf("answer failed: %v", err)
	}
	if err := <-installed; err != nil {
		t.Fatal(err)
	}
	gone("answer failed")
	// Mirroring without an output port is refused before the port exists.
	n.Mirror = true
	if err := w.Add(ctx, a, n, func(*Result) error { return nil }); !isStep(err, StepMirror) {
		t.Fatalf("mirror without output: %v", err)
	}
	gone("mirror without output")
	n.Mirror, n.MTU = false, 10
	if err := w.Add(ctx, a, n, func(*Result) error { return nil }); !isStep(err, StepConfig) {
		t.Fatalf("MTU 10: %v", err)
	}
}

func TestStatus(t *testing.T) {
	w := New(Options{OVS: ovsporttest.ConfDB(t, "")})
	if err := w.Status(t.Context()); err == nil || err.Error() != "bridge br-int is missing" {
		t.Fatalf("status without br-int: %v", err)
	}
	if err := w.Start(t.Context()); err == nil {
		t.Fatal("started without br-int")
	}
}

func isStep(err error, s Step) bool {
	var we *Error
	return errors.As(err, &we) && we.Step == s
}

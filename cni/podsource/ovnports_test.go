package podsource

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/database/inmemory"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/ovn-kubernetes/libovsdb/server"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// The trust decision alone: the annotations must equal the port OVN holds.
func TestAnnotationsMustMatchWhatOVNHolds(t *testing.T) {
	port := OVNPort{Switch: "ovn-default", MAC: mustMAC("0a:58:0a:10:00:05"), IPs: []netip.Addr{netip.MustParseAddr("10.16.0.5")}}
	for _, c := range []struct {
		name       string
		change     map[string]string
		port       func(p *OVNPort)
		field, ovn string
	}{
		{"agree", nil, nil, "", ""},
		{"agree without a logical_switch annotation", map[string]string{annotations.LogicalSwitch: ""}, nil, "", ""},
		{"another pod's address", map[string]string{annotations.IPAddress: "10.16.0.9"}, nil, annotations.IPAddress, "10.16.0.5"},
		{"another pod's MAC", map[string]string{annotations.MACAddress: "0a:58:0a:10:00:09"}, nil, annotations.MACAddress, "0a:58:0a:10:00:05"},
		{"another tenant's switch", map[string]string{annotations.LogicalSwitch: "tenant-b"}, nil, annotations.LogicalSwitch, "ovn-default"},
		{"one address of a dual-stack port", nil, func(p *OVNPort) { p.IPs = append(p.IPs, netip.MustParseAddr("fd00::5")) }, annotations.IPAddress, "10.16.0.5,fd00::5"},
		{"a datapath without a name", nil, func(p *OVNPort) { p.Switch = "" }, annotations.LogicalSwitch, "without a logical switch name"},
	} {
		ann := good()
		for k, v := range c.change {
			ann[k] = v
		}
		n, err := ParseAnnotations(ann)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		p := port
		p.IPs = append([]netip.Addr(nil), port.IPs...)
		if c.port != nil {
			c.port(&p)
		}
		mm := matchOVN("ns/p", ann, n, p, "the OVN southbound database at unix:sb")
		if c.field == "" {
			if mm != nil {
				t.Errorf("%s: refused: %v", c.name, mm)
			}
			continue
		}
		if mm == nil {
			t.Errorf("%s: accepted, want a mismatch of %s", c.name, c.field)
			continue
		}
		msg := mm.Error()
		for _, want := range []string{"ns/p", c.field, c.ovn, "the annotation does not match what the controller programmed in OVN", "southbound"} {
			if !strings.Contains(msg, want) {
				t.Errorf("%s: %q does not name %q", c.name, msg, want)
			}
		}
		if c.change[c.field] != "" && !strings.Contains(msg, c.change[c.field]) {
			t.Errorf("%s: %q does not name the annotation's value %q", c.name, msg, c.change[c.field])
		}
	}
	for _, c := range []struct {
		macs []string
		ok   bool
	}{
		{[]string{"0a:58:0a:10:00:05 10.16.0.5 fd00::5"}, true},
		{[]string{"dynamic"}, false},
		{[]string{"unknown"}, false},
		{[]string{"0a:58:0a:10:00:05"}, false},
		{nil, false},
		{[]string{"0a:58:0a:10:00:05 10.16.0.5", "0a:58:0a:10:00:06 10.16.0.6"}, false},
	} {
		p, ok, _ := ParsePortBinding(c.macs, "s")
		if ok != c.ok || ok && (len(p.IPs) != 2 || p.MAC.String() != "0a:58:0a:10:00:05") {
			t.Errorf("Port_Binding mac %q: %+v %v, want ok=%v", c.macs, p, ok, c.ok)
		}
	}
}

func mustMAC(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

// sbServer serves an empty in-memory OVN southbound database (libovsdb's
// server with the schema of internal/ovsdb/sbdb) until the test ends, and
// returns its endpoint and a connection to write rows as ovn-northd would.
func sbServer(t *testing.T) (string, *ovsdbconn.Conn) {
	t.Helper()
	cm, err := sbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	schema := sbdb.Schema()
	dm, errs := model.NewDatabaseModel(schema, cm)
	if len(errs) > 0 {
		t.Fatalf("SB model: %v", errs)
	}
	log := logr.Discard()
	db := inmemory.NewDatabase(map[string]model.ClientDBModel{schema.Name: cm}, &log)
	srv, err := server.NewOvsdbServer(db, &log, dm)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "sbtest")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "sb.sock")
	served := make(chan error, 1)
	go func() { served <- srv.Serve("unix", sock) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		_ = os.RemoveAll(dir)
	})
	sub, err := ovsdbconn.Subset(cm, &sbdb.DatapathBinding{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := ovsdbconn.Dial(ctx, sub, "unix:"+sock, ovsdbconn.Options{Name: "in-memory SB", Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return "unix:" + sock, conn
}

func sbTransact(t *testing.T, c *ovsdbconn.Conn, ops ...ovsdb.Operation) []ovsdb.OperationResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := ovsdbconn.Transact(ctx, c.Client, "sbtest", ops...)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func strMap(m map[string]string) ovsdb.OvsMap {
	out := ovsdb.OvsMap{GoMap: map[any]any{}}
	for k, v := range m {
		out.GoMap[k] = v
	}
	return out
}

// portBinding is ovn-northd's Port_Binding of a VIF port on datapath dp.
func portBinding(lsp, dp string, key int, addresses string) ovsdb.Operation {
	return ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Port_Binding", Row: ovsdb.Row{
		"logical_port": lsp, "datapath": ovsdb.UUID{GoUUID: dp}, "tunnel_key": key,
		"mac": ovsdb.OvsSet{GoSet: []any{addresses}},
	}}
}

// controllerPod is a pod on node n whose address annotations (ann) the
// controller's field manager owns, as the API server records a
// server-side apply (or a forged --field-manager write).
func controllerPod(name string, ann map[string]string) *corev1.Pod {
	keys := make([]string, 0, len(ann))
	for k := range ann {
		keys = append(keys, k)
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Annotations: ann,
		ManagedFields: []metav1.ManagedFieldsEntry{owner(annotations.ControllerFieldManager, time.Now(), keys...)}},
		Spec: corev1.PodSpec{NodeName: "n"}}
}

// The node takes a pod's network from what OVN holds: it waits (on the
// southbound monitor, with a deadline naming the Port_Binding) for the
// controller's port, wires a pod whose annotations equal it, and refuses
// one whose annotations name another pod's address even though the
// controller's field manager "wrote" them.
func TestPodNetworkComesFromOVN(t *testing.T) {
	ep, sb := sbServer(t)
	victim := good()                                    // 10.16.0.5, its port below
	thief := good()                                     // OVN gave it 10.16.0.6
	thief[annotations.MACAddress] = "0a:58:0a:10:00:06" // forged: victim's address, its own MAC
	late := good()
	late[annotations.IPAddress], late[annotations.MACAddress] = "10.16.0.7", "0a:58:0a:10:00:07"
	cs := fake.NewClientset(controllerPod("victim", victim), controllerPod("thief", thief), controllerPod("late", late))
	k := NewKube(cs, nil, KubeOptions{Node: "n", Log: slog.New(slog.DiscardHandler), OVN: NewSBPorts(ep, nil, nil), MismatchGrace: 300 * time.Millisecond})
	ctx := t.Context()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()

	res := sbTransact(t, sb, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Datapath_Binding", Row: ovsdb.Row{
		"tunnel_key": 1, "external_ids": strMap(map[string]string{"name": "ovn-default", "logical-switch": "x"})}})
	dp := res[0].UUID.GoUUID
	sbTransact(t, sb, portBinding("victim.ns", dp, 1, "0a:58:0a:10:00:05 10.16.0.5"),
		portBinding("thief.ns", dp, 2, "0a:58:0a:10:00:06 10.16.0.6"))

	// No Port_Binding for "late" yet: ADD waits, and its deadline names it.
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err := k.PodNetwork(short, PodRef{Namespace: "ns", Name: "late"})
	cancel()
	var at *AnnotationTimeout
	if !errors.As(err, &at) || !strings.Contains(err.Error(), "Port_Binding") || !strings.Contains(err.Error(), "late.ns") || !strings.Contains(err.Error(), "southbound") {
		t.Fatalf("pod without a port in OVN: %v, want a timeout naming its Port_Binding late.ns and the southbound database", err)
	}
	// It arrives while ADD waits: the monitor's update wakes it.
	got := make(chan error, 1)
	go func() {
		n, err := k.PodNetwork(ctx, PodRef{Namespace: "ns", Name: "late"})
		if err == nil && n.Addrs[0].Addr().String() != "10.16.0.7" {
			err = errors.New("wrong address " + n.Addrs[0].String())
		}
		got <- err
	}()
	sbTransact(t, sb, portBinding("late.ns", dp, 3, "0a:58:0a:10:00:07 10.16.0.7"))
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("pod whose port reached OVN during the ADD: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("ADD still waits 20 s after the pod's Port_Binding reached the southbound database")
	}

	n, err := k.PodNetwork(ctx, PodRef{Namespace: "ns", Name: "victim"})
	if err != nil || n.Addrs[0].Addr().String() != "10.16.0.5" || n.Switch != "ovn-default" {
		t.Fatalf("pod whose annotations are what OVN holds: %+v %v", n, err)
	}
	_, err = k.PodNetwork(ctx, PodRef{Namespace: "ns", Name: "thief"})
	var mm *MismatchError
	if !errors.As(err, &mm) || mm.Field != annotations.IPAddress || mm.Annotation != "10.16.0.5" || mm.OVN != "10.16.0.6" ||
		!strings.Contains(err.Error(), "ns/thief") || !strings.Contains(err.Error(), "the annotation does not match what the controller programmed in OVN") {
		t.Fatalf("pod annotated with another pod's address: %v, want a mismatch of %s naming 10.16.0.5 and 10.16.0.6", err, annotations.IPAddress)
	}
}

// A rate annotation made invalid on a running pod removes the limit it
// replaced (issue 23, item 6): it used to leave the old QoS in place.
func TestInvalidRateAnnotationRemovesTheLimit(t *testing.T) {
	k := NewKube(nil, nil, KubeOptions{Node: "n", Log: slog.New(slog.DiscardHandler)})
	var got []Rates
	k.OnRatesChanged(func(_ string, r Rates) { got = append(got, r) })
	pod := func(in, eg string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
			Annotations: map[string]string{annotations.IngressRate: in, annotations.EgressRate: eg}}}
	}
	k.podChanged(pod("10", "5"), pod("ten", "5"))
	k.podChanged(pod("ten", "5"), pod("ten", "-1"))
	k.podChanged(pod("ten", "-1"), pod("20", "-1"))
	want := []Rates{{0, 5}, {0, 0}, {20, 0}}
	if len(got) != len(want) {
		t.Fatalf("QoS updates %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("QoS updates %v, want %v (an invalid rate is no limit, the valid one stays)", got, want)
		}
	}
}

// A VM's pod is wired where its port is unbound, bound already, or
// requested (a live migration's target); elsewhere it waits, saying why.
func TestVirtualMachinePodWaitsUntilItsChassisIsRequested(t *testing.T) {
	for _, c := range []struct {
		port OVNPort
		own  string
		wait bool
	}{
		{OVNPort{}, "b", false},                                            // first pod of the VM: unbound
		{OVNPort{Chassis: "b"}, "b", false},                                // bound here already
		{OVNPort{Chassis: "a", Requested: []string{"a", "b"}}, "b", false}, // migration target
		{OVNPort{Chassis: "a"}, "b", true},                                 // running on a, no migration yet
		{OVNPort{Chassis: "a", Requested: []string{"a"}}, "b", true},       // migration ended on a
		{OVNPort{Chassis: "a"}, "", false},                                 // own chassis unknown: not held
	} {
		w := vmBound("vm1.default", c.port, c.own, "the SB")
		if (w != "") != c.wait {
			t.Errorf("port %+v on %q: wait %q, want waiting %v", c.port, c.own, w, c.wait)
		}
		if c.wait && (!strings.Contains(w, "vm1.default") || !strings.Contains(w, "kubevirt.io/migrationJobUID")) {
			t.Errorf("wait message %q", w)
		}
	}
}

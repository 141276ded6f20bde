package ovsbridge

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsconf/ovsconftest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

const mark = "ovnhost-test-nic"

// A bridge against an in-memory conf.db: created with its internal port,
// datapath, hwaddr and uplink; converged when the spec changes (the old
// uplink out, a port someone else added kept); removed, absent fine.
func TestEnsureConvergeRemove(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, map[string]string{"system-id": "n1"})
	s := Spec{Name: "br-p1", Datapath: nodeconfig.Userspace, HWAddr: "0a:00:00:00:00:01", Uplink: "eth1", UplinkMark: mark}
	if Exists(ctx, ovs, "br-p1") {
		t.Fatal("br-p1 before it was made")
	}
	if err := Ensure(ctx, ovs, s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-p1", func() bool { return Exists(ctx, ovs, "br-p1") })
	br := bridgeRow(t, ovs, "br-p1")
	if br.DatapathType != "netdev" || br.OtherConfig["hwaddr"] != "0a:00:00:00:00:01" || br.OtherConfig["disable-in-band"] != "true" ||
		br.FailMode == nil || *br.FailMode != vswitch.BridgeFailModeStandalone || br.ExternalIDs["vendor"] != ovsconf.Vendor {
		t.Fatalf("br-p1: %+v", br)
	}
	if got := portsOf(t, ovs, "br-p1"); got != "br-p1 eth1" {
		t.Fatalf("ports: %s", got)
	}
	if i := (&vswitch.Interface{Name: "br-p1"}); ovs.Get(ctx, i) != nil || i.Type != "internal" {
		t.Fatalf("internal port: %+v", i)
	}
	// Again: nothing changes.
	if err := Ensure(ctx, ovs, s); err != nil {
		t.Fatal(err)
	}
	if got := portsOf(t, ovs, "br-p1"); got != "br-p1 eth1" {
		t.Fatalf("ports after a second ensure: %s", got)
	}

	// An administrator's port in our bridge stays through convergence.
	addPort(t, ovs, "br-p1", "veth-admin")
	waitFor(t, ovs, "veth-admin", func() bool { return portsOf(t, ovs, "br-p1") == "br-p1 eth1 veth-admin" })

	// Another NIC, MAC and datapath: converged in place.
	s.Uplink, s.HWAddr, s.Datapath = "eth2", "0a:00:00:00:00:02", nodeconfig.Kernel
	if err := Ensure(ctx, ovs, s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "eth2 instead of eth1", func() bool { return portsOf(t, ovs, "br-p1") == "br-p1 eth2 veth-admin" })
	waitFor(t, ovs, "new MAC and datapath", func() bool {
		br := bridgeRow(t, ovs, "br-p1")
		return br.OtherConfig["hwaddr"] == "0a:00:00:00:00:02" && br.DatapathType == "system"
	})
	// No uplink any more: ours goes, the administrator's stays.
	s.Uplink = ""
	if err := Ensure(ctx, ovs, s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "no uplink", func() bool { return portsOf(t, ovs, "br-p1") == "br-p1 veth-admin" })

	if err := Remove(ctx, ovs, "br-p1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-p1 gone", func() bool { return !Exists(ctx, ovs, "br-p1") })
	if err := Remove(ctx, ovs, "br-p1"); err != nil {
		t.Fatalf("removing an absent bridge: %v", err)
	}
	if err := Remove(ctx, nil, "br-p1"); err != nil {
		t.Fatalf("removing without conf.db: %v", err)
	}
	if err := Ensure(ctx, nil, s); err == nil || !strings.Contains(err.Error(), "br-p1: conf.db is not connected") {
		t.Fatalf("ensure without conf.db: %v", err)
	}
	for _, bad := range []Spec{{}, {Name: "br-x", Uplink: "br-x", UplinkMark: mark}, {Name: "br-x", Uplink: "eth1"}} {
		if err := Ensure(ctx, ovs, bad); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// A NIC that is a port of another bridge (an administrator's, or another
// feature's) is refused with both bridges named, and nothing is created.
func TestUplinkOfAnotherBridgeRefused(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, nil)
	foreignBridge(t, ovs, "br-eth0", "eth0")
	waitFor(t, ovs, "br-eth0", func() bool { return Exists(ctx, ovs, "br-eth0") })
	err := Ensure(ctx, ovs, Spec{Name: "br-p1", Uplink: "eth0", UplinkMark: mark})
	if err == nil {
		t.Fatal("eth0 taken from br-eth0")
	}
	for _, want := range []string{"eth0 cannot be the uplink of OVS bridge br-p1", "another OVS bridge, br-eth0", "take eth0 out of br-eth0"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if Exists(ctx, ovs, "br-p1") {
		t.Error("br-p1 created although its uplink was refused")
	}
	// Another feature's bridge: the same.
	if err := Ensure(ctx, ovs, Spec{Name: "br-p2", Uplink: "eth1", UplinkMark: mark}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-p2", func() bool { return Exists(ctx, ovs, "br-p2") })
	if err := Ensure(ctx, ovs, Spec{Name: "br-p3", Uplink: "eth1", UplinkMark: "ovnhost-other-nic"}); err == nil || !strings.Contains(err.Error(), "another OVS bridge, br-p2") {
		t.Fatalf("eth1 taken from br-p2: %v", err)
	}
	// A bridge's internal port is no uplink either.
	if err := Ensure(ctx, ovs, Spec{Name: "br-p3", Uplink: "br-p2", UplinkMark: mark}); err == nil || !strings.Contains(err.Error(), "another OVS bridge, br-p2") {
		t.Fatalf("br-p2's internal port taken: %v", err)
	}
}

// A NIC someone put into our bridge by hand is adopted (marked), so a
// later NIC replaces it.
func TestUplinkAdopted(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, nil)
	foreignBridge(t, ovs, "br-p1", "eth1")
	waitFor(t, ovs, "br-p1", func() bool { return Exists(ctx, ovs, "br-p1") })
	if err := Ensure(ctx, ovs, Spec{Name: "br-p1", Uplink: "eth1", UplinkMark: mark}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "eth1 marked", func() bool {
		p := &vswitch.Port{Name: "eth1"}
		return ovs.Get(ctx, p) == nil && p.ExternalIDs[mark] == "true"
	})
	if err := Ensure(ctx, ovs, Spec{Name: "br-p1", Uplink: "eth2", UplinkMark: mark}); err != nil {
		t.Fatal(err)
	}
	// br-p1 was made without an internal port, and Ensure adds none.
	waitFor(t, ovs, "eth2 instead of eth1", func() bool { return portsOf(t, ovs, "br-p1") == "eth2" })
}

// WaitUplink returns once ovs-vswitchd gave the NIC an OpenFlow port, and
// the interface's error when it could not open it.
func TestWaitUplink(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, nil)
	if err := Ensure(ctx, ovs, Spec{Name: "br-p1", Uplink: "eth1", UplinkMark: mark}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "eth1", func() bool { return ovs.Get(ctx, &vswitch.Interface{Name: "eth1"}) == nil })
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := WaitUplink(short, ovs, "br-p1", "eth1"); err == nil {
		t.Fatal("eth1 opened before ovs-vswitchd set its ofport")
	}
	setInterface(t, ovs, "eth1", func(i *vswitch.Interface) []any {
		n := 7
		i.Ofport = &n
		return []any{&i.Ofport}
	})
	if err := WaitUplink(ctx, ovs, "br-p1", "eth1"); err != nil {
		t.Fatal(err)
	}
	setInterface(t, ovs, "eth1", func(i *vswitch.Interface) []any {
		n, e := -1, "could not open network device eth1 (No such device)"
		i.Ofport, i.Error = &n, &e
		return []any{&i.Ofport, &i.Error}
	})
	if err := WaitUplink(ctx, ovs, "br-p1", "eth1"); err == nil || !strings.Contains(err.Error(), "ovs-vswitchd cannot use eth1: could not open network device eth1") {
		t.Fatalf("the interface's error: %v", err)
	}
}

// foreignBridge makes bridge (no internal port) with port nic, as an
// administrator or another program would.
func foreignBridge(t *testing.T, ovs *ovsdbconn.Conn, bridge, nic string) {
	t.Helper()
	var ops []ovsdb.Operation
	for _, m := range []model.Model{&vswitch.Interface{UUID: "i", Name: nic}, &vswitch.Port{UUID: "p", Name: nic, Interfaces: []string{"i"}},
		&vswitch.Bridge{UUID: "b", Name: bridge, Ports: []string{"p"}}} {
		o, err := ovs.Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	root := root(t, ovs)
	o, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ovsdbconn.Transact(context.Background(), ovs, "a foreign bridge", append(ops, o...)...); err != nil {
		t.Fatal(err)
	}
}

// addPort adds an unmarked port nic to bridge, as an administrator would.
func addPort(t *testing.T, ovs *ovsdbconn.Conn, bridge, nic string) {
	t.Helper()
	br := bridgeRow(t, ovs, bridge)
	var ops []ovsdb.Operation
	for _, m := range []model.Model{&vswitch.Interface{UUID: "i", Name: nic}, &vswitch.Port{UUID: "p", Name: nic, Interfaces: []string{"i"}}} {
		o, err := ovs.Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	o, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"p"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ovsdbconn.Transact(context.Background(), ovs, "a foreign port", append(ops, o...)...); err != nil {
		t.Fatal(err)
	}
}

// setInterface changes Interface name's columns as ovs-vswitchd would.
func setInterface(t *testing.T, ovs *ovsdbconn.Conn, name string, set func(*vswitch.Interface) []any) {
	t.Helper()
	i := &vswitch.Interface{Name: name}
	if err := ovs.Get(context.Background(), i); err != nil {
		t.Fatal(err)
	}
	ops, err := ovs.Where(i).Update(i, set(i)...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ovsdbconn.Transact(context.Background(), ovs, "ovs-vswitchd's columns of "+name, ops...); err != nil {
		t.Fatal(err)
	}
}

func bridgeRow(t *testing.T, ovs *ovsdbconn.Conn, name string) *vswitch.Bridge {
	t.Helper()
	br := &vswitch.Bridge{Name: name}
	if err := ovs.Get(context.Background(), br); err != nil {
		t.Fatalf("bridge %s: %v", name, err)
	}
	return br
}

func root(t *testing.T, ovs *ovsdbconn.Conn) *vswitch.OpenvSwitch {
	t.Helper()
	r, err := openVSwitch(context.Background(), ovs)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func portsOf(t *testing.T, ovs *ovsdbconn.Conn, bridge string) string {
	t.Helper()
	ctx := context.Background()
	br := &vswitch.Bridge{Name: bridge}
	if err := ovs.Get(ctx, br); err != nil {
		return ""
	}
	var names []string
	for _, u := range br.Ports {
		p := &vswitch.Port{UUID: u}
		if ovs.Get(ctx, p) == nil {
			names = append(names, p.Name)
		}
	}
	slices.Sort(names)
	return strings.Join(names, " ")
}

func waitFor(t *testing.T, ovs *ovsdbconn.Conn, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ovs.WaitUntil(ctx, what, cond, nil); err != nil {
		t.Fatal(err)
	}
}

package node_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// A pod-like namespace wired by hand (the CNI server's job, done here with
// the ip tool so these tests only depend on the supervisor): a veth whose
// host end is an OVS port on br-int bound to a logical switch port.

type pod struct {
	ns, hostIf, lsp, mac, ip string
}

func dial(t testing.TB, m func() (model.ClientDBModel, error), endpoint string) *ovsdbconn.Conn {
	t.Helper()
	dbm, err := m()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := ovsdbconn.Dial(ctx, dbm, endpoint, ovsdbconn.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func transact(t testing.TB, c *ovsdbconn.Conn, ops []ovsdb.Operation, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		t.Fatalf("transaction: %v (%+v)", err, res)
	}
}

// addPods creates logical switch ls1 with one port per pod and wires each
// pod's namespace to br-int, waiting for ovn-installed.
func addPods(t *testing.T, n *node, pods ...pod) {
	t.Helper()
	wirePods(t, "unix:"+n.Path("ovn-run", "ovnnb_db.sock"), "unix:"+n.Path("ovs-run", "db.sock"), n.NS, n.LogTail, pods)
}

// wirePods does addPods for any node: its NB and conf.db endpoints and the
// namespace its datapath lives in.
func wirePods(t testing.TB, nbEndpoint, ovsEndpoint, nodeNS string, logTail func() string, pods []pod) {
	t.Helper()
	createSwitch(t, nbEndpoint, pods)
	plugPods(t, ovsEndpoint, nodeNS, logTail, pods)
}

// createSwitch creates logical switch ls1 with one port per pod.
func createSwitch(t testing.TB, nbEndpoint string, pods []pod) {
	t.Helper()
	nb := dial(t, nbdb.FullDatabaseModel, nbEndpoint)
	ls := &nbdb.LogicalSwitch{UUID: "ls", Name: "ls1", OtherConfig: map[string]string{"subnet": "10.16.0.0/24"}}
	var ops []ovsdb.Operation
	for i, p := range pods {
		lsp := &nbdb.LogicalSwitchPort{UUID: fmt.Sprintf("lsp%d", i), Name: p.lsp, Addresses: []string{p.mac + " " + p.ip}}
		o, err := nb.Create(lsp)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
		ls.Ports = append(ls.Ports, lsp.UUID)
	}
	o, err := nb.Create(ls)
	transact(t, nb, append(ops, o...), err)
}

// plugPods wires each pod's namespace to br-int of the node whose conf.db
// is ovsEndpoint and whose datapath lives in nodeNS.
func plugPods(t testing.TB, ovsEndpoint, nodeNS string, logTail func() string, pods []pod) {
	t.Helper()
	ovs := dial(t, vswitch.FullDatabaseModel, ovsEndpoint)
	for _, p := range pods {
		p.ns = newNetns(t, "ohp")
		plumb(t, nodeNS, p)
		iface := &vswitch.Interface{UUID: "iface", Name: p.hostIf, ExternalIDs: map[string]string{"iface-id": p.lsp}}
		port := &vswitch.Port{UUID: "port", Name: p.hostIf, Interfaces: []string{"iface"}}
		br := &vswitch.Bridge{Name: "br-int"}
		ctx := context.Background()
		if err := ovs.Get(ctx, br); err != nil {
			t.Fatal(err)
		}
		o1, err := ovs.Create(iface)
		if err != nil {
			t.Fatal(err)
		}
		o2, err := ovs.Create(port)
		if err != nil {
			t.Fatal(err)
		}
		o3, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"port"}})
		transact(t, ovs, append(append(o1, o2...), o3...), err)
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err = ovs.WaitUntil(wctx, "ovn-installed on "+p.hostIf, func() bool {
			i := &vswitch.Interface{Name: p.hostIf}
			return ovs.Get(wctx, i) == nil && i.ExternalIDs["ovn-installed"] == "true"
		}, nil)
		cancel()
		if err != nil {
			t.Fatalf("%v\n%s", err, logTail())
		}
		pods[indexOf(pods, p.lsp)].ns = p.ns
	}
}

func indexOf(pods []pod, lsp string) int {
	for i, p := range pods {
		if p.lsp == lsp {
			return i
		}
	}
	return -1
}

func plumb(t testing.TB, nodeNS string, p pod) {
	t.Helper()
	run(t, "ip", "link", "add", "name", p.hostIf, "netns", nodeNS, "type", "veth", "peer", "name", "eth0", "netns", p.ns)
	run(t, "ip", "-n", p.ns, "link", "set", "eth0", "address", p.mac, "mtu", "1400")
	run(t, "ip", "-n", p.ns, "addr", "add", p.ip+"/24", "dev", "eth0")
	run(t, "ip", "-n", p.ns, "link", "set", "eth0", "up")
	run(t, "ip", "-n", nodeNS, "link", "set", p.hostIf, "up")
	// Userspace datapath: checksum offload would leave bad L4 checksums.
	run(t, "ip", "netns", "exec", p.ns, "ethtool", "-K", "eth0", "tx", "off")
}

// ping returns nil when at least one of count echoes comes back.
func ping(ns, ip string, count int) error {
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-c", fmt.Sprint(count), "-i", "0.2", "-W", "2", ip).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ping %s from %s: %v\n%s", ip, ns, err, out)
	}
	return nil
}

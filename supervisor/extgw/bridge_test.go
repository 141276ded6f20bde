package extgw

import (
	"context"
	"fmt"
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

// br-external against an in-memory conf.db: the NIC as its port, replaced
// when the configuration names another, the mapping kept beside others,
// and a NIC of another bridge refused.
func TestExternalBridgeInConfDB(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, map[string]string{ovsconf.BridgeMappings: "egw:br-egw"})
	if HasExternalBridge(ctx, ovs) {
		t.Fatal("br-external before it was made")
	}
	if err := EnsureExternalBridge(ctx, ovs, nodeconfig.Kernel, "external", "eth1"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-external", func() bool { return HasExternalBridge(ctx, ovs) })
	if got := portsOf(t, ovs); got != "br-external eth1" {
		t.Fatalf("ports: %s", got)
	}
	if got := mappings(t, ovs); got != "egw:br-egw,external:br-external" {
		t.Fatalf("mappings: %q", got)
	}
	// Another NIC replaces ours.
	if err := EnsureExternalBridge(ctx, ovs, nodeconfig.Kernel, "external", "eth2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "eth2 in br-external", func() bool { return portsOf(t, ovs) == "br-external eth2" })

	// A NIC that is a port of a bridge ovnhost did not put it in.
	var ops []ovsdb.Operation
	for _, m := range []model.Model{&vswitch.Interface{UUID: "i", Name: "eth3"}, &vswitch.Port{UUID: "p", Name: "eth3", Interfaces: []string{"i"}},
		&vswitch.Bridge{UUID: "b", Name: "br-x", Ports: []string{"p"}}} {
		o, err := ovs.Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	root, err := ovsRoot(ctx, ovs)
	if err != nil {
		t.Fatal(err)
	}
	o, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"b"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ovsdbconn.Transact(ctx, ovs, "a foreign bridge", append(ops, o...)...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "eth3", func() bool { return ovs.Get(ctx, &vswitch.Port{Name: "eth3"}) == nil })
	if err := EnsureExternalBridge(ctx, ovs, nodeconfig.Kernel, "external", "eth3"); err == nil || !strings.Contains(err.Error(), "another OVS bridge") {
		t.Fatalf("a foreign port taken: %v", err)
	}

	if err := RemoveExternalBridge(ctx, ovs, "external"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-external gone", func() bool { return !HasExternalBridge(ctx, ovs) })
	if got := mappings(t, ovs); got != "egw:br-egw" {
		t.Fatalf("mappings after remove: %q", got)
	}
}

func portsOf(t *testing.T, ovs *ovsdbconn.Conn) string {
	t.Helper()
	ctx := context.Background()
	br := &vswitch.Bridge{Name: ExternalBridge}
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

func mappings(t *testing.T, ovs *ovsdbconn.Conn) string {
	t.Helper()
	root, err := ovsRoot(context.Background(), ovs)
	if err != nil {
		t.Fatal(err)
	}
	return root.ExternalIDs[ovsconf.BridgeMappings]
}

func waitFor(t *testing.T, ovs *ovsdbconn.Conn, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ovs.WaitUntil(ctx, what, cond, nil); err != nil {
		t.Fatal(err)
	}
}

func ovsRoot(ctx context.Context, ovs *ovsdbconn.Conn) (*vswitch.OpenvSwitch, error) {
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil || len(roots) != 1 {
		return nil, fmt.Errorf("Open_vSwitch rows %v: %v", roots, err)
	}
	return &roots[0], nil
}

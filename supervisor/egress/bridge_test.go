package egress

import (
	"context"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsconf/ovsconftest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// br-egw against an in-memory conf.db: created with the node's datapath
// and mapped, idempotent, and removed leaving the other mappings.
func TestGatewayBridgeInConfDB(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, map[string]string{ovsconf.BridgeMappings: "ext:br-external", "system-id": "n1"})
	if err := EnsureGatewayBridge(ctx, ovs, nodeconfig.Userspace, "egw", "0a:00:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	mappings := func() string {
		t.Helper()
		var roots []vswitch.OpenvSwitch
		if err := ovs.List(ctx, &roots); err != nil || len(roots) != 1 {
			t.Fatalf("Open_vSwitch: %v %v", roots, err)
		}
		if roots[0].ExternalIDs["system-id"] != "n1" {
			t.Fatalf("other external_ids touched: %v", roots[0].ExternalIDs)
		}
		return roots[0].ExternalIDs[ovsconf.BridgeMappings]
	}
	waitFor(t, ovs, "br-egw", func() bool { return ovs.Get(ctx, &vswitch.Bridge{Name: GatewayBridge}) == nil })
	br := &vswitch.Bridge{Name: GatewayBridge}
	if err := ovs.Get(ctx, br); err != nil {
		t.Fatal(err)
	}
	if br.DatapathType != "netdev" || br.OtherConfig["hwaddr"] != "0a:00:00:00:00:01" || br.ExternalIDs["vendor"] != ovsconf.Vendor || len(br.Ports) != 1 {
		t.Fatalf("br-egw: %+v", br)
	}
	if got := mappings(); got != "ext:br-external,egw:br-egw" {
		t.Fatalf("mappings after ensure: %q", got)
	}
	// Again: nothing to do.
	if err := EnsureGatewayBridge(ctx, ovs, nodeconfig.Userspace, "egw", "0a:00:00:00:00:01"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveGatewayBridge(ctx, ovs, "egw"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ovs, "br-egw gone", func() bool { return ovs.Get(ctx, &vswitch.Bridge{Name: GatewayBridge}) != nil })
	if got := mappings(); got != "ext:br-external" {
		t.Fatalf("mappings after remove: %q", got)
	}
	// Absent is fine; no connection is fine.
	if err := RemoveGatewayBridge(ctx, ovs, "egw"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveGatewayBridge(ctx, nil, "egw"); err != nil {
		t.Fatal(err)
	}
	if err := EnsureGatewayBridge(ctx, nil, nodeconfig.Kernel, "egw", "x"); err == nil {
		t.Fatal("ensure without conf.db succeeded")
	}
}

func waitFor(t *testing.T, ovs *ovsdbconn.Conn, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ovs.WaitUntil(ctx, what, cond, nil); err != nil {
		t.Fatal(err)
	}
}

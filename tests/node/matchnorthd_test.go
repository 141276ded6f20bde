package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
)

// A node of a central whose ovn-northd reports a newer release than the
// node's ovn-controller (set as OVN's fail-safe upgrade procedure does:
// northd stopped, SB_Global options:northd_internal_version edited) gets
// external_ids:ovn-match-northd-version=true while ovn-controller runs,
// and doctor's ovn-version-skew names both versions; back to the same
// release, the key is false again. While held, /readyz says so (the node
// stays ready: its pods keep their flows); the CNI server's refusal of
// ADDs meanwhile is cni/server TestAddFailsAtOnceWhileOVNControllerIsHeld
// (this node has no NB to allocate from, so no CNI server).
func TestMatchNorthdVersionFollowsTheSkew(t *testing.T) {
	n := newNode(t)
	central := ovncentral.Start(t)
	n.Env = []string{"OVN_SB_ADDR=" + central.SB()}
	n.Start()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	waitExternalID(t, ovs, "ovn-match-northd-version", "false")
	if c := doctorCheck(t, n, "ovn-version-skew"); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "same release") {
		t.Errorf("doctor's ovn-version-skew with one release: %+v", c)
	}

	sb := dial(t, sbdb.FullDatabaseModel, central.SB())
	central.StopNorthd()
	own := setNorthdVersion(t, sb, "25.03.0-20.41.0-78.0")
	waitExternalID(t, ovs, "ovn-match-northd-version", "true")
	if err := n.WaitLog("ovn-controller keeps its installed flows and handles no change until they match", 5*time.Second); err != nil {
		t.Error(err)
	}
	// The node stays ready (its pods keep their flows) and says why new
	// ones cannot be wired.
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 ||
		!strings.Contains(body, "ovn-controller 23.03") || !strings.Contains(body, "is held for version skew with ovn-northd 25.03.0-20.41.0-78.0") {
		t.Errorf("/readyz while ovn-controller is held: %d %v %q", code, err, body)
	}
	c := doctorCheck(t, n, "ovn-version-skew")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "ovn-northd 25.03 (internal 25.03.0-20.41.0-78.0)") ||
		!strings.Contains(c.Found, "this node's ovn-controller 23.03") || !strings.Contains(c.Found, "ovn-match-northd-version=true") ||
		!strings.Contains(c.Fix, "upgrade this node's ovn-controller to 25.03") {
		t.Errorf("doctor's ovn-version-skew with an older ovn-controller: %+v", c)
	}

	setNorthdVersion(t, sb, own)
	waitExternalID(t, ovs, "ovn-match-northd-version", "false")
	if err := n.WaitLog("ovn-controller no longer held", 5*time.Second); err != nil {
		t.Error(err)
	}
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 || strings.Contains(body, "held") {
		t.Errorf("/readyz after the hold: %d %v %q", code, err, body)
	}
}

// setNorthdVersion writes SB_Global options:northd_internal_version and
// returns the value it replaced.
func setNorthdVersion(t *testing.T, sb *ovsdbconn.Conn, v string) string {
	t.Helper()
	ctx := context.Background()
	var g []sbdb.SBGlobal
	if err := sb.List(ctx, &g); err != nil || len(g) != 1 {
		t.Fatalf("SB_Global: %v %v", g, err)
	}
	old := g[0].Options["northd_internal_version"]
	opts := map[string]string{}
	for k, val := range g[0].Options {
		opts[k] = val
	}
	opts["northd_internal_version"] = v
	g[0].Options = opts
	ops, err := sb.Where(&g[0]).Update(&g[0], &g[0].Options)
	transact(t, sb, ops, err)
	return old
}

// TestHeldOVNControllerIsAwaitedNotRestarted: an ovn-controller that
// starts held for a version skew on a node without flows (as a fresh node
// joining mid-upgrade) never registers and installs nothing, by design.
// Here ovnhost is stopped while held (conf.db keeps
// ovn-match-northd-version=true) and started again: the node waits on
// ovn-controller past the start timeout instead of restarting it in a
// loop, /readyz names the hold, and when northd's version matches again
// that same process registers, installs its flows, and the node is ready.
func TestHeldOVNControllerIsAwaitedNotRestarted(t *testing.T) {
	n := newNode(t)
	central := ovncentral.Start(t)
	n.Env = []string{"OVN_SB_ADDR=" + central.SB()}
	n.Start("--start-timeout=5s")
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	waitExternalID(t, ovs, "ovn-match-northd-version", "false")
	sb := dial(t, sbdb.FullDatabaseModel, central.SB())
	central.StopNorthd()
	own := setNorthdVersion(t, sb, "25.03.0-20.41.0-78.0")
	waitExternalID(t, ovs, "ovn-match-northd-version", "true")
	if code := n.Stop(); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, n.LogTail())
	}

	if err := n.StartNoWait("--start-timeout=5s"); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog("ovn-controller not ready, held for version skew: waiting on, not restarting it", time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}
	pidfile := n.Path("ovn-run", "ovn-controller.pid")
	held := n.ReadPid(pidfile)
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 503 || !strings.Contains(body, "is held for version skew with ovn-northd 25.03.0-20.41.0-78.0") {
		t.Errorf("/readyz while a starting ovn-controller is held: %d %v %q", code, err, body)
	}

	setNorthdVersion(t, sb, own)
	n.WaitReady(time.Minute)
	if now := n.ReadPid(pidfile); now != held {
		t.Errorf("the held ovn-controller (pid %d) was restarted (now pid %d) instead of awaited", held, now)
	}
}

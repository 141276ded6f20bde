package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovnversion"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// matchNorthdVersion is the Open_vSwitch external_ids key that makes
// ovn-controller compare its internal version with the one ovn-northd
// writes in SB_Global options:northd_internal_version and, while they
// differ, process no SB or conf.db change, keeping the flows it installed
// (OVN 23.03 ovn-controller.c check_northd_version). ovnhost sets it
// exactly where OVN supports no mixed operation (ovnversion.MatchNorthd:
// an ovn-controller older than northd, or newer beyond the rolling-upgrade
// span) and clears it elsewhere, so that a supported rolling upgrade
// (controllers first) does not freeze the nodes. It is written when
// ovn-controller starts, as soon as its version is known, and again
// whenever northd's version in the SB changes. A northd upgraded first
// races this write: ovn-controller may handle the new flows before the
// key lands; OVN's fail-safe procedure (set it everywhere before the
// upgrade) has no such window.
const matchNorthdVersion = "ovn-match-northd-version"

// versionLine catches the internal version ovn-controller logs at start.
type versionLine struct {
	once sync.Once
	seen chan struct{}
	v    string
}

func newVersionLine() *versionLine { return &versionLine{seen: make(chan struct{})} }

func (vl *versionLine) onLine(line string) {
	if v := ovnversion.InternalFromLog(line); v != "" {
		vl.once.Do(func() { vl.v = v; close(vl.seen) })
	}
}

// controllerVersion is the running ovn-controller's version: the internal
// version it logs at start, or for an adopted one (or a release that does
// not log it) its control socket's answer to version.
func (n *Node) controllerVersion(ctx context.Context, c *process.Child, vl *versionLine) (string, error) {
	if vl != nil && !c.Adopted() {
		select {
		case <-vl.seen:
			return vl.v, nil
		case <-c.Exited():
			return "", errors.New("ovn-controller exited before it logged its version")
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(5 * time.Second):
			// Older releases do not log it: ask the socket below.
		}
	}
	out, err := unixctl.Call(ctx, n.nc.Layout.ControllerCtl(c.Pid()), "version")
	if err != nil {
		return "", err
	}
	return ovnversion.Controller(out), nil
}

// setHeld records why ovn-controller processes no change ("": it does)
// for the CNI server (ADDs fail at once with it) and for /readyz, which
// names it while the node is ready (existing pods keep their flows) and
// while ovn-controller is awaited (a fresh node's never registers).
func (n *Node) setHeld(why string) {
	n.mu.Lock()
	n.held = why
	n.mu.Unlock()
	n.health.Degraded("ovn-controller", why)
}

// ControllerHeld is why the running ovn-controller installs no new flows
// ("" when it does).
func (n *Node) ControllerHeld() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.held
}

// followNorthdVersion writes ovn-match-northd-version for the running
// ovn-controller as soon as its version is known, then again on every
// change of northd's version in the SB, until the child exits. It runs
// beside the readiness gate, which it does not hold up.
func (n *Node) followNorthdVersion(c *process.Child, sb *ovsdbconn.Conn, vl *versionLine) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The next ovn-controller starts unheld: its version is read anew.
	defer n.setHeld("")
	go func() {
		<-c.Exited()
		cancel()
	}()
	controller, err := n.controllerVersion(ctx, c, vl)
	if err != nil {
		if ctx.Err() == nil {
			n.log.Warn("ovn-match-northd-version not managed: ovn-controller's version is unknown", "err", err)
		}
		return
	}
	written := ""
	apply := func(ctx context.Context) error {
		var globals []sbdb.SBGlobal
		_ = sb.List(ctx, &globals)
		northd := ""
		if len(globals) > 0 {
			northd = globals[0].Options["northd_internal_version"]
		}
		skew := ovnversion.Compare(northd, controller)
		want := "false"
		if skew.MatchNorthd() {
			want = "true"
		}
		if want == written {
			return nil
		}
		if err := setExternalID(ctx, n.OVS(), matchNorthdVersion, want); err != nil {
			return err
		}
		wasHeld := written == "true"
		written = want
		if want == "true" {
			n.setHeld(fmt.Sprintf("ovn-controller %s is held for version skew with ovn-northd %s (%s): it keeps the flows it installed and installs none for new ports until both run the same release; upgrade this node's ovn-controller (OVN's order: controllers first, then northd)",
				controller, northd, skew))
		} else {
			n.setHeld("")
		}
		if want == "true" {
			n.log.Warn("ovn-controller and ovn-northd versions differ beyond what OVN supports: ovn-controller keeps its installed flows and handles no change until they match",
				"ovn_controller", controller, "ovn_northd", northd, "skew", skew.String(), "external_ids", matchNorthdVersion+"=true")
		} else if wasHeld {
			n.log.Info("ovn-controller no longer held: its version and ovn-northd's are within what OVN supports",
				"ovn_controller", controller, "ovn_northd", northd, "skew", skew.String())
		} else {
			n.log.Info("ovn-match-northd-version off", "ovn_controller", controller, "ovn_northd", northd, "skew", skew.String())
		}
		return nil
	}
	for {
		changed := sb.Changed()
		wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
		if err := apply(wctx); err != nil && ctx.Err() == nil {
			n.log.Warn("writing "+matchNorthdVersion, "err", err)
			written = "" // tried again on the next change
		}
		wcancel()
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

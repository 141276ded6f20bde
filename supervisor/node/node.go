// Package node is the node daemon's supervisor: it runs the OVS/OVN daemons
// in dependency order (in all-in-one mode the NB/SB ovsdb-servers and
// ovn-northd first, then ovsdb-server for conf.db, the Open_vSwitch
// configuration with br-int, ovs-vswitchd and ovn-controller), each gated on
// real readiness read from the databases, restarts them when they die, and
// stops them in reverse order.
package node

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
	"github.com/ovnhost/ovnhost/supervisor/preflight"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// Vendor marks what ovnhost creates in the databases.
const Vendor = "ovnhost"

// Node supervises the daemons of one node.
type Node struct {
	cfg    *config.Config
	pre    *preflight.Result
	lay    Layout
	log    *slog.Logger
	health *health.Reporter

	// ctx lives from Start to Stop; restarts run under it.
	ctx    context.Context
	cancel context.CancelFunc

	bins     map[string]string
	systemID string
	tls      *ovsdbconn.TLSFiles

	mu     sync.Mutex
	ovs    *ovsdbconn.Conn // conf.db, long-lived
	nb, sb *ovsdbconn.Conn // NB (all-in-one), SB

	group   lifecycle.Group
	daemons map[string]*daemon
	units   []lifecycle.Unit
	extra   []lifecycle.Unit
}

// New plans the node; nothing is started.
func New(cfg *config.Config, pre *preflight.Result, log *slog.Logger, h *health.Reporter) (*Node, error) {
	n := &Node{cfg: cfg, pre: pre, lay: NewLayout(cfg.Paths), log: log, health: h, daemons: map[string]*daemon{}}
	progs := []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovsdb-tool"}
	if !cfg.Remote() {
		progs = append(progs, "ovn-northd")
	}
	n.bins = map[string]string{}
	var missing []string
	for _, p := range progs {
		path, ok := findProgram(cfg.BinDirs, p)
		if !ok {
			missing = append(missing, p)
			continue
		}
		n.bins[p] = path
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("programs not found in %v: %v; install openvswitch-switch, ovn-host (and ovn-central for all-in-one) or set --bin-dirs", cfg.BinDirs, missing)
	}
	if cfg.EnableSSL {
		t, err := ovsdbconn.LoadTLS(cfg.SSLKey, cfg.SSLCert, cfg.SSLCACert, log)
		if err != nil {
			return nil, fmt.Errorf("ENABLE_SSL: %w; check --ssl-key, --ssl-cert and --ssl-ca-cert (default <ssl-dir>/ovn-privkey.pem, ovn-cert.pem, cacert.pem)", err)
		}
		n.tls = t
	}
	n.units = n.plan()
	return n, nil
}

// plan builds the units in start order; building a daemon registers it
// with health, so /readyz and READY=1 know every child before any starts.
func (n *Node) plan() []lifecycle.Unit {
	var central []lifecycle.Unit
	if !n.cfg.Remote() {
		central = []lifecycle.Unit{n.nbDaemon(), n.sbDaemon(), n.northdDaemon()}
	}
	ovsdb := n.ovsdbDaemon()
	vswitchd := n.vswitchdDaemon()
	controller := n.controllerDaemon()
	vswitchd.dependants = []*daemon{controller}
	// One recovery at a time within the chain, so ovn-controller restarted
	// by ovs-vswitchd's recovery is not also recovered as a crash of its own.
	controller.restarts = vswitchd.restarts
	local := []lifecycle.Unit{ovsdb, &ovsConfigUnit{n: n}, vswitchd}
	if n.wantTunnelBridge() {
		local = append(local, &tunnelBridgeUnit{n: n})
	}
	if central == nil {
		return append(local, controller)
	}
	// The OVN databases and the local switch do not need each other;
	// only ovn-controller needs both.
	return []lifecycle.Unit{&lifecycle.Parallel{Label: "ovn-central+ovs", Chains: [][]lifecycle.Unit{central, local}, Log: n.log}, controller}
}

func findProgram(dirs []string, name string) (string, bool) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

// AddUnit appends a unit started after ovn-controller is ready and stopped
// before it (the CNI server).
func (n *Node) AddUnit(u lifecycle.Unit) { n.extra = append(n.extra, u) }

// OVS is the long-lived connection to the local conf.db (valid once
// ovsdb-server is ready).
func (n *Node) OVS() *ovsdbconn.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ovs
}

// SystemID is the chassis name (valid once the OVS configuration ran).
func (n *Node) SystemID() string { return n.systemID }

// Layout is the file plan.
func (n *Node) Layout() Layout { return n.lay }

// Start prepares the directories and starts every unit in order, returning
// once the whole node is ready.
func (n *Node) Start(ctx context.Context) error {
	n.ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := n.lay.PrepareDirs(!n.cfg.Remote(), n.cfg.RunOwner); err != nil {
		return err
	}
	if n.tls != nil {
		if err := n.tls.Watch(n.ctx); err != nil {
			return err
		}
	}
	go n.rotateLogs(n.ctx)
	units := append(n.units, n.extra...)
	n.group = lifecycle.Group{Units: units, Log: n.log}
	return n.group.Start(ctx, n.cfg.StopTimeout)
}

// Stop stops everything in reverse order within the stop timeout per unit.
func (n *Node) Stop(ctx context.Context) error {
	if n.cancel != nil {
		n.cancel()
	}
	// Let recoveries in progress notice the cancellation and finish.
	locked := map[*sync.Mutex]bool{}
	for _, d := range n.daemons {
		if !locked[d.restarts] {
			locked[d.restarts] = true
			d.restarts.Lock()
			defer d.restarts.Unlock()
		}
	}
	err := n.group.Stop(ctx)
	n.mu.Lock()
	for _, c := range []*ovsdbconn.Conn{n.ovs, n.nb, n.sb} {
		if c != nil {
			closeBounded(c, n.log)
		}
	}
	n.ovs, n.nb, n.sb = nil, nil, nil
	n.mu.Unlock()
	return err
}

func (n *Node) newDaemon(name string) *daemon {
	d := &daemon{name: name, n: n, log: n.log, backoff: process.DefaultBackoff(), restarts: &sync.Mutex{}}
	n.daemons[name] = d
	// Known to health from the start: READY=1 waits for all of them.
	n.health.Register(name)
	return d
}

// Daemon returns the running child of a supervised daemon (tests, netctl).
func (n *Node) Daemon(name string) *process.Child {
	if d, ok := n.daemons[name]; ok {
		return d.Child()
	}
	return nil
}

// childEnv points every OVS/OVN program at our directories, so nothing
// falls back to /etc or /usr/local/var.
func (n *Node) childEnv() []string {
	p := n.cfg.Paths
	return []string{
		"OVS_RUNDIR=" + p.OVSRunDir, "OVS_LOGDIR=" + p.OVSLogDir, "OVS_DBDIR=" + p.OVSDBDir,
		"OVS_SYSCONFDIR=" + p.OVSDBDir,
		"OVN_RUNDIR=" + p.OVNRunDir, "OVN_LOGDIR=" + p.OVNLogDir, "OVN_DBDIR=" + p.OVNDBDir,
		"OVN_SYSCONFDIR=" + p.OVNDBDir,
	}
}

func logArgs(file string) []string {
	return []string{"--no-chdir", "-vconsole:info", "-vsyslog:off", "-vfile:info", "--log-file=" + file}
}

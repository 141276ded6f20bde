// Package node is the node daemon's supervisor: it runs the OVS/OVN daemons
// in dependency order (in all-in-one mode the NB/SB ovsdb-servers and
// ovn-northd first, then ovsdb-server for conf.db, the Open_vSwitch
// configuration with br-int, ovs-vswitchd and ovn-controller), each gated on
// real readiness read from the databases, restarts them when they die, and
// stops them in reverse order.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// Node supervises the daemons of one node.
type Node struct {
	nc     *nodeconfig.NodeConfig
	log    *slog.Logger
	health *health.Reporter

	// ctx lives from Start to Stop (the daemons' set's).
	ctx context.Context

	bins     map[string]string
	systemID string
	tls      *ovsdbconn.TLSFiles

	lock *os.File // the instance lock, held from Start to Stop
	// upgrading: Stop keeps the datapath (as --keep-datapath).
	upgrading atomic.Bool

	mu     sync.Mutex
	ovs    *ovsdbconn.Conn // conf.db, long-lived
	nb, sb *ovsdbconn.Conn // NB (all-in-one), SB
	// restoreWait: ovs-vswitchd was started with flow-restore-wait on a
	// kept kernel datapath; ovn-controller's flows end it.
	restoreWait bool
	// vswitchdEmpty: ovs-vswitchd was started by this ovnhost and
	// ovn-controller's flows are not on br-int yet: there is nothing for
	// ovn-ofctrl-wait-before-clear to keep.
	vswitchdEmpty bool
	// held is why the running ovn-controller processes no change ("":
	// it does): ovn-match-northd-version with a version skew.
	held string

	group   lifecycle.Group
	daemons daemon.Set
	units   []lifecycle.Unit
	extra   []lifecycle.Unit
	// observed are the extra units whose readiness the group's observer
	// reports (the daemons report their children themselves).
	observed map[string]lifecycle.Unit
}

// Options are the node's collaborators.
type Options struct {
	Log    *slog.Logger
	Health *health.Reporter
	// TLS are the SSL files behind nc's remotes, re-read on rotation (nil
	// without ENABLE_SSL).
	TLS *ovsdbconn.TLSFiles
	// ExplainExec turns an exec error into its cause; nil leaves it as is.
	ExplainExec func(binary string, err error) error
}

// New plans the node from its resolved configuration; nothing is started.
func New(nc *nodeconfig.NodeConfig, o Options) (*Node, error) {
	dc := nc.Daemons
	n := &Node{nc: nc, log: o.Log, health: o.Health, tls: o.TLS,
		daemons: daemon.Set{Log: o.Log, Health: o.Health, ExplainExec: o.ExplainExec, Settings: daemon.Settings{
			StartTimeout: dc.StartTimeout, StopTimeout: dc.StopTimeout,
			ProbeInterval: dc.ProbeInterval, ProbeMisses: dc.ProbeMisses, AdoptChildren: dc.AdoptChildren}}}
	progs := []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovsdb-tool"}
	if nc.AllInOne {
		progs = append(progs, "ovn-northd")
	}
	bins, missing := daemon.FindPrograms(dc.BinDirs, progs...)
	if len(missing) > 0 {
		return nil, fmt.Errorf("programs not found in %v: %v; install openvswitch-switch, ovn-host (and ovn-central for all-in-one) or set --bin-dirs", dc.BinDirs, missing)
	}
	n.bins = bins
	n.units = n.plan()
	return n, nil
}

// plan builds the units in start order; building a daemon registers it
// with health, so /readyz and READY=1 know every child before any starts.
func (n *Node) plan() []lifecycle.Unit {
	var central []lifecycle.Unit
	if n.nc.AllInOne {
		central = []lifecycle.Unit{n.nbDaemon(), n.sbDaemon(), n.northdDaemon()}
	}
	ovsdb := n.ovsdbDaemon()
	vswitchd := n.vswitchdDaemon()
	controller := n.controllerDaemon()
	// One recovery at a time within the chain, so ovn-controller restarted
	// by ovs-vswitchd's recovery is not also recovered as a crash of its own.
	vswitchd.SetDependants(controller)
	// An ovn-controller that outlived ovnhost is kept only with the
	// ovs-vswitchd it was connected to: a fresh ovs-vswitchd needs a fresh
	// one, as after any ovs-vswitchd restart.
	controller.AdoptWith = vswitchd
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

// AddUnit appends a unit started after ovn-controller is ready and stopped
// before it (the node's features: host NAT, external gateway, CNI server).
// Registered now, so READY=1 also waits for it.
func (n *Node) AddUnit(u lifecycle.Unit) {
	if n.observed == nil {
		n.observed = map[string]lifecycle.Unit{}
	}
	n.health.Register(u.Name())
	n.observed[u.Name()] = u
	n.extra = append(n.extra, u)
}

// Units are the node's units in start order: its daemons, then the added ones.
func (n *Node) Units() []lifecycle.Unit {
	return append(append([]lifecycle.Unit(nil), n.units...), n.extra...)
}

// unitHealth reports the added units' start to health through the
// lifecycle's observer hook, so units need not know about health.
type unitHealth struct{ n *Node }

// Awaiter is a unit that says what its start waits for.
type Awaiter interface{ Awaits() string }

func (o unitHealth) Starting(name string) {
	u, ok := o.n.observed[name]
	if !ok {
		return
	}
	what := "the start of " + name
	if a, ok := u.(Awaiter); ok {
		what = a.Awaits()
	}
	o.n.health.Waiting(name, what)
}

// Lacker is a unit that may start without all it serves (an underlay
// NIC that is not there): ready, so the node is, but degraded, which
// /readyz and STATUS name.
type Lacker interface{ Lacks() error }

func (o unitHealth) Started(name string, took time.Duration) {
	u, ok := o.n.observed[name]
	if !ok {
		return
	}
	if l, ok := u.(Lacker); ok {
		if err := l.Lacks(); err != nil {
			o.n.health.Degraded(name, err.Error())
		}
	}
	o.n.health.Ready(name, took, took)
}

// OVS is the long-lived connection to the local conf.db (valid once
// ovsdb-server is ready).
func (n *Node) OVS() *ovsdbconn.Conn {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.ovs
}

// SystemID is the chassis name (valid once the OVS configuration ran).
func (n *Node) SystemID() string { return n.systemID }

// Config is the node's resolved configuration.
func (n *Node) Config() *nodeconfig.NodeConfig { return n.nc }

// Start prepares the directories and starts every unit in order, returning
// once the whole node is ready.
func (n *Node) Start(ctx context.Context) error {
	n.ctx = n.daemons.Start(ctx)
	if err := daemon.PrepareDirs(n.nc.Layout.Paths.Dirs(n.nc.AllInOne), n.nc.Daemons.RunOwner); err != nil {
		return err
	}
	if err := n.lockInstance(); err != nil {
		return err
	}
	if n.tls != nil {
		if err := n.tls.Watch(n.ctx); err != nil {
			return err
		}
	}
	go n.daemons.RotateLogs(n.ctx, n.nc.Daemons.LogFileMaxSize, n.nc.Daemons.LogRotateInterval)
	n.group = lifecycle.Group{Units: n.Units(), Log: n.log, Observer: unitHealth{n}}
	return n.group.Start(ctx, n.nc.Daemons.StopTimeout)
}

// Stop stops everything in reverse order within the stop timeout per unit.
func (n *Node) Stop(ctx context.Context) error {
	// Recoveries in progress notice the cancellation and finish.
	return n.daemons.Stop(ctx, func(ctx context.Context) error {
		err := n.group.Stop(ctx)
		n.mu.Lock()
		for _, c := range []*ovsdbconn.Conn{n.ovs, n.nb, n.sb} {
			if c != nil {
				closeBounded(c, n.log)
			}
		}
		n.ovs, n.nb, n.sb = nil, nil, nil
		n.mu.Unlock()
		n.unlockInstance()
		return err
	})
}

// StopForUpgrade stops for the next ovnhost (an upgrade of ovnhost itself:
// SIGUSR2) and keeps the datapath. With adopt-children the OVS/OVN daemons
// are left running for the next ovnhost to adopt (handedOver); without,
// they stop as with --keep-datapath (they would die with us anyway).
func (n *Node) StopForUpgrade(ctx context.Context) (handedOver bool, err error) {
	n.upgrading.Store(true)
	adopt := n.nc.Daemons.AdoptChildren
	if adopt {
		n.daemons.HandOver()
	}
	return adopt, n.Stop(ctx)
}

// KeepingDatapath reports whether a stop leaves the datapath in place:
// --keep-datapath, or an upgrade.
func (n *Node) KeepingDatapath() bool { return n.nc.Daemons.KeepDatapath || n.upgrading.Load() }

// lockInstance takes the node's instance lock for as long as ovnhost
// runs: a second ovnhost on the same directories would otherwise fight the
// first over its daemons (or, with adopt-children, take them over).
func (n *Node) lockInstance() error {
	path := filepath.Join(n.nc.Layout.Paths.OVSRunDir, "ovnhost.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("instance lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("another ovnhost already runs on these directories (it holds %s); stop it first, or give this one its own --ovs-run-dir", path)
		}
		return fmt.Errorf("instance lock %s: %w", path, err)
	}
	n.lock = f
	return nil
}

func (n *Node) unlockInstance() {
	if n.lock != nil {
		// A stop leaves nothing in the run directory.
		os.Remove(n.lock.Name())
		n.lock.Close()
		n.lock = nil
	}
}

// newDaemon declares a daemon; known to health from the start: READY=1
// waits for all of them.
func (n *Node) newDaemon(name string) *daemon.Daemon { return n.daemons.New(name) }

// Daemon returns the running child of a supervised daemon (tests, netctl).
func (n *Node) Daemon(name string) *process.Child {
	if d := n.daemons.Get(name); d != nil {
		return d.Child()
	}
	return nil
}

// childEnv points every OVS/OVN program at our directories, so nothing
// falls back to /etc or /usr/local/var.
func (n *Node) childEnv() []string {
	p := n.nc.Layout.Paths
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

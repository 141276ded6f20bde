package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// dbServer describes one ovsdb-server instance.
type dbServer struct {
	name, db, schema, sock, pid, ctl, log string
	extraArgs                             []string
}

func (n *Node) dbServerDaemon(s dbServer, slot **ovsdbconn.Conn, connect func(ctx context.Context, c *process.Child) error) *daemon.Daemon {
	d := n.newDaemon(s.name)
	d.LogFile, d.Ctl, d.Pidfile = s.log, fixedCtl(s.ctl), s.pid
	// Our client goes first, or it logs reconnect failures as the server leaves.
	d.BeforeStop = func() { n.closeConn(slot) }
	d.Graceful = func(ctx context.Context, _ *process.Child, _ bool) error {
		_, err := unixctl.Call(ctx, s.ctl, "exit")
		return err
	}
	d.Prepare = func(ctx context.Context, _ bool) error {
		if err := daemon.ClearStale("ovsdb-server", s.pid, s.sock, s.ctl, layout.LockFile(s.db)); err != nil {
			return err
		}
		n.health.Waiting(s.name, "database "+s.db+" at the installed schema")
		return ensureDB(ctx, n.bins["ovsdb-tool"], s.db, s.schema, n.log)
	}
	d.Spec = func() (process.Spec, error) {
		args := []string{s.db, "--remote=punix:" + s.sock, "--pidfile=" + s.pid, "--unixctl=" + s.ctl}
		args = append(args, s.extraArgs...)
		args = append(args, logArgs(s.log)...)
		return process.Spec{Name: s.name, Path: n.bins["ovsdb-server"], Args: args, Env: n.childEnv()}, nil
	}
	d.Gate = func(ctx context.Context, c *process.Child) error {
		n.health.Waiting(s.name, "unix:"+s.sock+" to answer")
		return connect(ctx, c)
	}
	// The database socket itself, where clients are served.
	d.Probe = func(ctx context.Context, _ *process.Child) error { return unixctl.Echo(ctx, s.sock) }
	d.Needs = func(context.Context, *process.Child) error { return dbSpace(s.db) }
	return d
}

// keepConn dials a long-lived connection the first time and, after a
// restart, waits for that connection to be re-established by libovsdb.
func (n *Node) keepConn(slot **ovsdbconn.Conn, dbModel func() (model.ClientDBModel, error), endpoint, name string, tables []model.Model, first func(context.Context, *ovsdbconn.Conn) error) func(context.Context, *process.Child) error {
	return func(ctx context.Context, c *process.Child) error {
		n.mu.Lock()
		cur := *slot
		n.mu.Unlock()
		m, err := dbModel()
		if err != nil {
			return err
		}
		if cur != nil {
			// A fresh short-lived connection proves the new server
			// answers; the long-lived one reconnects on its own.
			probe, err := ovsdbconn.Dial(ctx, m, endpoint, ovsdbconn.Options{Probe: true, Log: n.log, Exited: c.Exited(), Name: name, TLS: n.tlsFor(endpoint)})
			if err != nil {
				return err
			}
			probe.Close()
			return nil
		}
		conn, err := ovsdbconn.Dial(ctx, m, endpoint, ovsdbconn.Options{Tables: tables, Log: n.log, Exited: c.Exited(), Name: name, TLS: n.tlsFor(endpoint)})
		if err != nil {
			return err
		}
		if first != nil {
			if err := first(ctx, conn); err != nil {
				conn.Close()
				return err
			}
		}
		n.mu.Lock()
		*slot = conn
		n.mu.Unlock()
		return nil
	}
}

func (n *Node) tlsFor(endpoint string) *tls.Config {
	if n.tls == nil || !strings.HasPrefix(endpoint, "ssl:") {
		return nil
	}
	return n.tls.Config()
}

func (n *Node) nbDaemon() *daemon.Daemon {
	l := n.nc.Layout
	return n.dbServerDaemon(dbServer{name: "ovsdb-nb", db: l.NBDB, schema: filepath.Join(n.nc.Daemons.OVNSchema, "ovn-nb.ovsschema"), sock: l.NBSock, pid: l.NBPid, ctl: l.NBCtl, log: l.NBLog}, &n.nb,
		n.keepConn(&n.nb, subset(nbdb.FullDatabaseModel, &nbdb.NBGlobal{}), n.nc.NB.Endpoint, "ovsdb-server (OVN_Northbound)", []model.Model{&nbdb.NBGlobal{}}, ensureNBGlobal))
}

func (n *Node) sbDaemon() *daemon.Daemon {
	l := n.nc.Layout
	return n.dbServerDaemon(dbServer{name: "ovsdb-sb", db: l.SBDB, schema: filepath.Join(n.nc.Daemons.OVNSchema, "ovn-sb.ovsschema"), sock: l.SBSock, pid: l.SBPid, ctl: l.SBCtl, log: l.SBLog}, &n.sb,
		n.keepConn(&n.sb, subset(sbdb.FullDatabaseModel, sbTables()...), "unix:"+l.SBSock, "ovsdb-server (OVN_Southbound)", sbTables(), nil))
}

// subset is a model of only the tables the node uses: libovsdb checks every
// table of a model against the server, and a cluster's central may run
// another OVN release than this node's packages.
func subset(full func() (model.ClientDBModel, error), tables ...model.Model) func() (model.ClientDBModel, error) {
	return func() (model.ClientDBModel, error) {
		m, err := full()
		if err != nil {
			return m, err
		}
		return ovsdbconn.Subset(m, tables...)
	}
}

func sbTables() []model.Model {
	return []model.Model{&sbdb.SBGlobal{}, &sbdb.Chassis{}, &sbdb.ChassisPrivate{}}
}

// closeConn closes and forgets a long-lived connection.
func (n *Node) closeConn(slot **ovsdbconn.Conn) {
	n.mu.Lock()
	c := *slot
	*slot = nil
	n.mu.Unlock()
	if c != nil {
		closeBounded(c, n.log)
	}
}

// closeBounded closes c but does not let a client stuck in its reconnect
// loop hold up the shutdown of the daemons.
func closeBounded(c *ovsdbconn.Conn, log *slog.Logger) {
	done := make(chan struct{})
	go func() { c.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Second):
		log.Warn("OVSDB client did not close within 1s; leaving it", "endpoint", c.Endpoint())
	}
}

// ensureNBGlobal inserts the NB_Global row if the database is new (what
// `ovn-nbctl init` does).
func ensureNBGlobal(ctx context.Context, c *ovsdbconn.Conn) error {
	var rows []nbdb.NBGlobal
	if err := c.List(ctx, &rows); err != nil {
		return err
	}
	if len(rows) > 0 {
		return nil
	}
	ops, err := c.Create(&nbdb.NBGlobal{})
	if err != nil {
		return err
	}
	return transact(ctx, c, ops...)
}

func transact(ctx context.Context, c *ovsdbconn.Conn, ops ...ovsdb.Operation) error {
	_, err := ovsdbconn.Transact(ctx, c, "transaction on "+c.Endpoint(), ops...)
	return err
}

// everyRow matches all rows: OVSDB requires a where clause.
var everyRow = []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionNotEqual, Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}}

// bumpCfg adds one to column of the only row of table and returns the new
// value, atomically (mutate then select in one transaction).
func bumpCfg(ctx context.Context, c *ovsdbconn.Conn, table, column string) (int, error) {
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationMutate, Table: table, Where: everyRow, Mutations: []ovsdb.Mutation{{Column: column, Mutator: ovsdb.MutateOperationAdd, Value: 1}}},
		{Op: ovsdb.OperationSelect, Table: table, Where: everyRow, Columns: []string{column}},
	}
	res, err := ovsdbconn.Transact(ctx, c, "bump "+table+"."+column, ops...)
	if err != nil {
		return 0, err
	}
	if len(res) < 2 || len(res[1].Rows) != 1 {
		return 0, fmt.Errorf("%s: expected one row", table)
	}
	switch v := res[1].Rows[0][column].(type) {
	case float64:
		return int(v), nil
	case int:
		return v, nil
	default:
		return 0, fmt.Errorf("%s.%s: unexpected value %v", table, column, v)
	}
}

func (n *Node) northdDaemon() *daemon.Daemon {
	d := n.newDaemon("ovn-northd")
	l := n.nc.Layout
	d.LogFile, d.Ctl, d.Pidfile = l.NorthdLog, fixedCtl(l.NorthdCtl), l.NorthdPid
	d.Prepare = func(context.Context, bool) error {
		return daemon.ClearStale("ovn-northd", l.NorthdPid, l.NorthdCtl)
	}
	d.Spec = func() (process.Spec, error) {
		args := []string{"--ovnnb-db=" + n.nc.NB.Endpoint, "--ovnsb-db=unix:" + l.SBSock, "--pidfile=" + l.NorthdPid, "--unixctl=" + l.NorthdCtl}
		args = append(args, logArgs(d.LogFile)...)
		return process.Spec{Name: "ovn-northd", Path: n.bins["ovn-northd"], Args: args, Env: n.childEnv()}, nil
	}
	d.Gate = func(ctx context.Context, c *process.Child) error {
		// What `ovn-nbctl --wait=sb sync` does: bump nb_cfg and wait
		// for northd to report it applied to the SB database.
		target, err := bumpCfg(ctx, n.nb, "NB_Global", "nb_cfg")
		if err != nil {
			return fmt.Errorf("bumping NB_Global.nb_cfg: %w", err)
		}
		n.health.Waiting("ovn-northd", fmt.Sprintf("NB_Global.sb_cfg to reach %d", target))
		return n.nb.WaitUntil(ctx, fmt.Sprintf("ovn-northd to apply nb_cfg %d to the SB database", target), func() bool {
			var rows []nbdb.NBGlobal
			_ = n.nb.List(ctx, &rows)
			return len(rows) == 1 && rows[0].SbCfg >= target
		}, c.Exited())
	}
	d.Graceful = func(ctx context.Context, _ *process.Child, _ bool) error {
		_, err := unixctl.Call(ctx, l.NorthdCtl, "exit")
		return err
	}
	return d
}

func (n *Node) ovsdbDaemon() *daemon.Daemon {
	l := n.nc.Layout
	d := n.dbServerDaemon(dbServer{name: "ovsdb-server", db: l.ConfDB, schema: n.nc.Daemons.OVSSchema, sock: l.DBSock, pid: l.OVSDBPid, ctl: l.OVSDBCtl,
		log:       l.OVSDBLog,
		extraArgs: []string{"--remote=db:Open_vSwitch,Open_vSwitch,manager_options"}}, &n.ovs,
		n.keepConn(&n.ovs, vswitch.FullDatabaseModel, "unix:"+l.DBSock, "ovsdb-server (conf.db)", nil, nil))
	return d
}

func (n *Node) vswitchdDaemon() *daemon.Daemon {
	d := n.newDaemon("ovs-vswitchd")
	l := n.nc.Layout
	d.LogFile, d.Ctl, d.Pidfile = l.VSwitchdLog, fixedCtl(l.VSwitchdCtl), l.VSwitchdPid
	var target int
	d.Prepare = func(ctx context.Context, _ bool) error {
		if err := daemon.ClearStale("ovs-vswitchd", l.VSwitchdPid, l.VSwitchdCtl); err != nil {
			return err
		}
		if err := n.waitForCPUCount(ctx); err != nil {
			return err
		}
		if err := n.refuseStrandingTheHost(ctx); err != nil {
			return err
		}
		if n.keptKernelDatapath() {
			if err := setFlowRestoreWait(ctx, n.OVS(), true); err != nil {
				return err
			}
			n.mu.Lock()
			n.restoreWait = true
			n.mu.Unlock()
			n.log.Info("kernel datapath kept: ovs-vswitchd starts with flow-restore-wait until ovn-controller's flows are back")
		}
		n.mu.Lock()
		n.vswitchdEmpty = true
		n.mu.Unlock()
		// A fresh next_cfg makes cur_cfg == next_cfg mean "this process
		// has applied the configuration", not "nothing happened yet".
		var err error
		target, err = bumpCfg(ctx, n.OVS(), "Open_vSwitch", "next_cfg")
		return err
	}
	d.Spec = func() (process.Spec, error) {
		args := []string{"unix:" + l.DBSock, "--pidfile=" + l.VSwitchdPid, "--unixctl=" + l.VSwitchdCtl}
		if n.nc.Datapath.IsUserspace() {
			args = append(args, "--disable-system")
		}
		if n.nc.Daemons.MLockAll {
			args = append(args, "--mlockall")
		}
		args = append(args, logArgs(d.LogFile)...)
		return process.Spec{Name: "ovs-vswitchd", Path: n.bins["ovs-vswitchd"], Args: args, Env: n.childEnv()}, nil
	}
	d.Gate = func(ctx context.Context, c *process.Child) error {
		what := fmt.Sprintf("Open_vSwitch.cur_cfg to reach next_cfg %d", target)
		n.health.Waiting("ovs-vswitchd", what)
		ovs := n.OVS()
		return ovs.WaitUntil(ctx, "ovs-vswitchd to apply the configuration ("+what+")", func() bool {
			var rows []vswitch.OpenvSwitch
			_ = ovs.List(ctx, &rows)
			return len(rows) == 1 && rows[0].CurCfg >= target
		}, c.Exited())
	}
	d.Graceful = func(ctx context.Context, _ *process.Child, final bool) error {
		args := []string{"--cleanup"}
		if n.KeepingDatapath() || !final {
			args = nil
		}
		_, err := unixctl.Call(ctx, l.VSwitchdCtl, "exit", args...)
		return err
	}
	d.AfterStop = func(ctx context.Context) error {
		if n.KeepingDatapath() || !n.nc.Datapath.IsUserspace() {
			return nil
		}
		return n.removeTaps(ctx)
	}
	return d
}

// removeTaps deletes tap devices of the userspace datapath that a killed
// ovs-vswitchd left behind: they outlive the process.
func (n *Node) removeTaps(ctx context.Context) error {
	names := map[string]bool{"ovs-netdev": true, "br-int": true}
	if ovs := n.OVS(); ovs != nil {
		var ifaces []vswitch.Interface
		_ = ovs.List(ctx, &ifaces)
		for _, i := range ifaces {
			if i.Type == "internal" {
				names[i.Name] = true
			}
		}
	}
	var errs []error
	for name := range names {
		link, err := netlink.LinkByName(name)
		if err != nil {
			continue
		}
		if link.Type() != "tuntap" {
			continue
		}
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("removing leftover tap %s: %w", name, err))
		} else {
			n.log.Info("removed leftover tap device", "name", name)
		}
	}
	return errors.Join(errs...)
}

func (n *Node) controllerDaemon() *daemon.Daemon {
	d := n.newDaemon("ovn-controller")
	l := n.nc.Layout
	d.LogFile, d.Pidfile = l.ControllerLog, l.ControllerPid
	d.Ctl = func(c *process.Child) string { return l.ControllerCtl(c.Pid()) }
	d.Prepare = func(ctx context.Context, _ bool) error {
		if err := daemon.ClearStale("ovn-controller", l.ControllerPid); err != nil {
			return err
		}
		if err := n.setOfctrlWaitBeforeClear(ctx); err != nil {
			return err
		}
		// ovn-controller writes ovn-nb-cfg(-ts) on br-int once its flows
		// are installed, but only when the value differs from what is
		// there: removing both makes their reappearance the signal.
		return n.clearBrIntKeys(ctx, "ovn-nb-cfg", "ovn-nb-cfg-ts")
	}
	var vl *versionLine
	d.Spec = func() (process.Spec, error) {
		vl = newVersionLine()
		args := []string{"unix:" + l.DBSock, "--pidfile=" + l.ControllerPid}
		if t := n.nc.Daemons.TLS; t.Enabled {
			args = append(args, "--private-key="+t.Key, "--certificate="+t.Cert, "--ca-cert="+t.CACert)
		}
		args = append(args, logArgs(d.LogFile)...)
		return process.Spec{Name: "ovn-controller", Path: n.bins["ovn-controller"], Args: args, Env: n.childEnv(), OnLine: vl.onLine}, nil
	}
	// The gate is timed here, not by the daemon set: while ovn-controller
	// is held for a version skew (ovn-match-northd-version) it registers
	// nothing and installs no flows by design, and restarting it for that
	// would change nothing, so each timed-out wait starts over while held.
	d.Untimed = true
	timeout := n.nc.Daemons.StartTimeout
	d.Gate = func(ctx context.Context, c *process.Child) error {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		sb, err := n.sbConn(sctx, c)
		cancel()
		if err != nil {
			return err
		}
		go n.followNorthdVersion(c, sb, vl)
		for {
			gctx, cancel := context.WithTimeout(ctx, timeout)
			err := n.controllerReady(gctx, sb, c)
			timedOut := errors.Is(gctx.Err(), context.DeadlineExceeded)
			cancel()
			why := n.ControllerHeld()
			if err == nil || !timedOut || ctx.Err() != nil || why == "" {
				return err
			}
			n.log.Warn("ovn-controller not ready, held for version skew: waiting on, not restarting it", "err", err, "held", why)
		}
	}
	d.Needs = func(ctx context.Context, c *process.Child) error {
		out, err := unixctl.Call(ctx, l.ControllerCtl(c.Pid()), "connection-status")
		if err != nil {
			return nil // unanswered: the liveness probe's business
		}
		if st := strings.TrimSpace(out); st != "connected" {
			remote := n.nc.SB.Endpoint
			if remote == "" {
				remote = "unix:" + l.SBSock
			}
			return fmt.Errorf("its OVN southbound database at %s (ovn-controller reports %q; pods keep their flows, new pods wait)", remote, st)
		}
		return nil
	}
	d.Graceful = func(ctx context.Context, c *process.Child, final bool) error {
		// "exit" removes our Chassis row and releases the ports bound to
		// it; "--restart" keeps them, for a restart or an upgrade.
		var args []string
		if n.KeepingDatapath() || !final {
			args = []string{"--restart"}
		}
		_, err := unixctl.Call(ctx, l.ControllerCtl(c.Pid()), "exit", args...)
		return err
	}
	return d
}

// waitFlows waits until ovn-controller has installed its flows on br-int.
// The signal is br-int's ovn-nb-cfg-ts, which ovn-controller writes once
// the flows for SB_Global.nb_cfg are acknowledged by ovs-vswitchd. A cluster
// whose nb_cfg is still 0 never gets that key, and no database changes when
// the flows land; only then are br-int's flows counted over unixctl, every
// 10 ms until the deadline.
func (n *Node) waitFlows(ctx context.Context, sb *ovsdbconn.Conn, c *process.Child) error {
	ovs := n.OVS()
	var tick <-chan time.Time
	for {
		ovsChanged, sbChanged := ovs.Changed(), sb.Changed()
		br := &vswitch.Bridge{Name: "br-int"}
		if ovs.Get(ctx, br) == nil {
			if _, ok := br.ExternalIDs["ovn-nb-cfg-ts"]; ok {
				return nil
			}
		}
		var globals []sbdb.SBGlobal
		_ = sb.List(ctx, &globals)
		if len(globals) == 0 || globals[0].NbCfg == 0 {
			if tick == nil {
				t := time.NewTicker(10 * time.Millisecond)
				defer t.Stop()
				tick = t.C
			}
			flows, err := unixctl.Call(ctx, n.nc.Layout.VSwitchdCtl, "bridge/dump-flows", "br-int")
			if err == nil && strings.Contains(flows, "actions=") {
				return nil
			}
		}
		select {
		case <-ovsChanged:
		case <-sbChanged:
		case <-tick:
		case <-c.Exited():
			return errors.New("gave up waiting for flows on br-int: ovn-controller exited")
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for ovn-controller to install flows on br-int (br-int external_ids:ovn-nb-cfg-ts never appeared): %w", ctx.Err())
		}
	}
}

// controllerReady waits for the running ovn-controller's Chassis row in
// the SB and then for its flows on br-int, and ends flow-restore-wait.
func (n *Node) controllerReady(ctx context.Context, sb *ovsdbconn.Conn, c *process.Child) error {
	what := fmt.Sprintf("its Chassis row %q in the SB database (%s)", n.systemID, n.nc.SB.Endpoint)
	n.health.Waiting("ovn-controller", what)
	if err := sb.WaitUntil(ctx, "ovn-controller to register "+what, func() bool {
		return sb.Get(ctx, &sbdb.Chassis{Name: n.systemID}) == nil
	}, c.Exited()); err != nil {
		return err
	}
	what = "flows on br-int (br-int external_ids:ovn-nb-cfg-ts)"
	n.health.Waiting("ovn-controller", what)
	err := n.waitFlows(ctx, sb, c)
	if err == nil {
		n.mu.Lock()
		n.vswitchdEmpty = false
		n.mu.Unlock()
	}
	// Flows are back (or the wait failed): ovs-vswitchd must not keep
	// the kept datapath frozen either way.
	if rerr := n.endFlowRestoreWait(ctx); err == nil {
		err = rerr
	}
	return err
}

// sbConn is the SB connection: the local one in all-in-one mode, else one
// dialed (once) to the cluster's SB.
func (n *Node) sbConn(ctx context.Context, c *process.Child) (*ovsdbconn.Conn, error) {
	n.mu.Lock()
	sb := n.sb
	n.mu.Unlock()
	if sb != nil {
		return sb, nil
	}
	n.health.Waiting("ovn-controller", "the SB database at "+n.nc.SB.Endpoint+" to answer")
	err := n.keepConn(&n.sb, subset(sbdb.FullDatabaseModel, sbTables()...), n.nc.SB.Endpoint, "OVN_Southbound at "+n.nc.SB.Endpoint, sbTables(), nil)(ctx, c)
	if err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.sb, nil
}

// clearBrIntKeys removes external_ids keys from br-int, if present.
func (n *Node) clearBrIntKeys(ctx context.Context, keys ...string) error {
	ovs := n.OVS()
	br := &vswitch.Bridge{Name: "br-int"}
	if err := ovs.Get(ctx, br); err != nil {
		return fmt.Errorf("br-int is missing from conf.db: %w", err)
	}
	ids := maps.Clone(br.ExternalIDs)
	for _, k := range keys {
		delete(ids, k)
	}
	if len(ids) == len(br.ExternalIDs) {
		return nil
	}
	br.ExternalIDs = ids
	ops, err := ovs.Where(br).Update(br, &br.ExternalIDs)
	if err != nil {
		return err
	}
	return transact(ctx, ovs, ops...)
}

// endFlowRestoreWait removes flow-restore-wait if ovs-vswitchd was started
// with it.
func (n *Node) endFlowRestoreWait(ctx context.Context) error {
	n.mu.Lock()
	on := n.restoreWait
	n.restoreWait = false
	n.mu.Unlock()
	if !on {
		return nil
	}
	if err := setFlowRestoreWait(ctx, n.OVS(), false); err != nil {
		return err
	}
	n.log.Info("ovn-controller's flows are on br-int: flow-restore-wait removed")
	return nil
}

func fixedCtl(path string) func(*process.Child) string {
	return func(*process.Child) string { return path }
}

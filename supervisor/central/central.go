// Package central runs one member of the clustered OVN central: the Raft
// northbound and southbound ovsdb-servers and ovn-northd, supervised like
// the node's daemons (lifecycle units, children in the foreground, restart
// with back-off, sd_notify and the health endpoint). It decides the
// membership (create, join, rejoin under a new ID and kick the stale one,
// leave when dropped from OVN_DB_IPS), gates readiness on cluster/status
// (joined and a leader known), converts the databases online after an OVN
// upgrade, compacts them on a size or time threshold, and publishes each
// database's Raft state. docs/central.md records the decisions.
package central

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
)

// ErrLeft is returned by Start when this member has left the cluster
// because OVN_DB_IPS no longer lists it; the caller exits cleanly.
var ErrLeft = errors.New("this member left the cluster: OVN_DB_IPS no longer lists it")

// Config is the member's configuration, resolved from the settings.
type Config struct {
	// Members are the cluster's addresses (OVN_DB_IPS).
	Members []string
	// IP is this member's address, one of Members; empty: found on the
	// host, or read from an existing database.
	IP string
	// ElectionTimer is the Raft election timer a new cluster is created with.
	ElectionTimer time.Duration
	// CompactSize compacts a database whose file grows past it (0: never
	// by size); CompactInterval compacts one that has had new log entries
	// for that long (0: never by time).
	CompactSize     int64
	CompactInterval time.Duration
	// StatusInterval is how often cluster/status is read for health.
	StatusInterval time.Duration
	Paths          layout.Paths
	// Daemons: programs, schemas, timeouts, the run directory's owner and
	// the SSL files (probes and adoption are the node's only).
	Daemons nodeconfig.Daemons
}

// SettingError is a membership the settings got wrong (the caller exits
// 2): which setting, its value, what is wrong and what to do.
type SettingError struct {
	Key, Value, Reason, Fix string
}

func (e *SettingError) Error() string {
	return fmt.Sprintf("%s = %q: %s; %s", e.Key, e.Value, e.Reason, e.Fix)
}

// Options are the central's collaborators.
type Options struct {
	Log    *slog.Logger
	Health *health.Reporter
	// TLS are the SSL files (ENABLE_SSL), for the questions asked to the
	// other members; nil without SSL.
	TLS *ovsdbconn.TLSFiles
	// ExplainExec turns an exec error into its cause; nil leaves it as is.
	ExplainExec func(binary string, err error) error
}

// Central is one member of the OVN central cluster.
type Central struct {
	cfg    Config
	lay    layout.Layout
	log    *slog.Logger
	health *health.Reporter
	tls    *ovsdbconn.TLSFiles
	bins   map[string]string

	// self is this member's address; members is OVN_DB_IPS.
	self    string
	members []string
	leaving bool

	// ctx lives from Start to Stop (the daemons' set's).
	ctx   context.Context
	loops sync.WaitGroup

	daemons daemon.Set
	nb, sb  *database
	northd  *daemon.Daemon
	units   []lifecycle.Unit
	group   lifecycle.Group

	mu           sync.Mutex
	northdStatus string
}

// New plans the member; nothing is started. A member not in OVN_DB_IPS
// without a database of its own is a configuration error.
func New(cfg Config, o Options) (*Central, error) {
	c := &Central{cfg: cfg, lay: layout.New(cfg.Paths), log: o.Log, health: o.Health, tls: o.TLS,
		members: cfg.Members,
		// No probes and no adoption: the central's children are plain
		// foreground programs.
		daemons: daemon.Set{Log: o.Log, Health: o.Health, ExplainExec: o.ExplainExec,
			Settings: daemon.Settings{StartTimeout: cfg.Daemons.StartTimeout, StopTimeout: cfg.Daemons.StopTimeout}}}
	bins, missing := daemon.FindPrograms(cfg.Daemons.BinDirs, "ovsdb-server", "ovsdb-tool", "ovsdb-client", "ovn-northd")
	if len(missing) > 0 {
		return nil, fmt.Errorf("programs not found in %v: %v; install openvswitch-common and ovn-central or set --bin-dirs", cfg.Daemons.BinDirs, missing)
	}
	c.bins = bins
	c.nb = c.newDatabase("ovsdb-nb", "OVN_Northbound", "ovn-nb.ovsschema", c.lay.NBDB, c.lay.NBSock, c.lay.NBCtl, c.lay.NBPid, c.lay.NBLog, ovsdbconn.NBPort, NBRaftPort)
	c.sb = c.newDatabase("ovsdb-sb", "OVN_Southbound", "ovn-sb.ovsschema", c.lay.SBDB, c.lay.SBSock, c.lay.SBCtl, c.lay.SBPid, c.lay.SBLog, ovsdbconn.SBPort, SBRaftPort)
	self, err := c.findSelf()
	if err != nil {
		return nil, err
	}
	c.self = self
	c.leaving = Leaving(self, c.members)
	if c.leaving && !exists(c.nb.file) && !exists(c.sb.file) {
		return nil, &SettingError{Key: "ovn-db-ips", Value: strings.Join(c.members, ","),
			Reason: fmt.Sprintf("this member's address %s is not listed and it has no database (it left the cluster or never joined)", self),
			Fix:    "add " + self + " to OVN_DB_IPS on every member to (re)join it, or stop running the central here"}
	}
	c.northd = c.northdChild()
	// Both databases side by side, then ovn-northd (not for a member
	// that is leaving).
	c.units = []lifecycle.Unit{&lifecycle.Parallel{Label: "ovn-databases", Chains: [][]lifecycle.Unit{{c.nb.child}, {c.sb.child}}, Log: c.log}}
	if !c.leaving {
		c.units = append(c.units, c.northd)
	}
	c.health.SetCentral(c.Status)
	return c, nil
}

// Units are the member's units in start order.
func (c *Central) Units() []lifecycle.Unit { return c.units }

// findSelf is this member's address: the setting, else the address its
// database was created with, else the one address of OVN_DB_IPS this
// host has.
func (c *Central) findSelf() (string, error) {
	if c.cfg.IP != "" {
		return c.cfg.IP, nil
	}
	for _, db := range []*database{c.nb, c.sb} {
		if addr, err := db.localAddress(context.Background()); err == nil {
			if ip := ipOfRaftAddress(addr); ip != "" {
				return ip, nil
			}
		}
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", fmt.Errorf("listing this host's addresses: %w; set --central-ip (POD_IP)", err)
	}
	var mine []string
	for _, a := range addrs {
		p, err := netip.ParsePrefix(a.String())
		if err != nil {
			continue
		}
		ip := p.Addr().Unmap().String()
		mine = append(mine, ip)
		if contains(c.members, ip) {
			return ip, nil
		}
	}
	return "", &SettingError{Key: "central-ip", Reason: fmt.Sprintf("not set, and none of this host's addresses (%s) is in OVN_DB_IPS (%s)", strings.Join(mine, ", "), strings.Join(c.members, ",")),
		Fix: "set --central-ip or POD_IP to this member's address, and list it in OVN_DB_IPS"}
}

// Self is this member's address.
func (c *Central) Self() string { return c.self }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ssl reports whether the members talk SSL (ENABLE_SSL).
func (c *Central) ssl() bool { return c.cfg.Daemons.TLS.Enabled }

// sslArgs are the key, certificate and CA of an SSL member or northd.
func (c *Central) sslArgs() []string {
	if !c.ssl() {
		return nil
	}
	t := c.cfg.Daemons.TLS
	return []string{"--private-key=" + t.Key, "--certificate=" + t.Cert, "--ca-cert=" + t.CACert}
}

// Start prepares the directories, starts both databases (side by side)
// and then ovn-northd, and returns once the member is ready. A member
// dropped from OVN_DB_IPS leaves the cluster instead and returns ErrLeft.
func (c *Central) Start(ctx context.Context) error {
	c.ctx = c.daemons.Start(ctx)
	if err := c.prepareDirs(); err != nil {
		return err
	}
	if c.tls != nil {
		if err := c.tls.Watch(c.ctx); err != nil {
			return err
		}
	}
	c.group = lifecycle.Group{Units: c.units, Log: c.log}
	if err := c.group.Start(ctx, c.cfg.Daemons.StopTimeout); err != nil {
		return err
	}
	if c.leaving {
		return c.leave(ctx)
	}
	c.loops.Add(1)
	go func() { defer c.loops.Done(); c.watchCluster(c.ctx) }()
	return nil
}

// Stop stops northd and the databases in reverse order. A database
// server leaves through its "exit" command, which hands its leadership to
// another member first (raft_close transfers it; a SIGTERM would not).
func (c *Central) Stop(ctx context.Context) error {
	return c.daemons.Stop(ctx, func(ctx context.Context) error {
		c.loops.Wait()
		return c.group.Stop(ctx)
	})
}

// prepareDirs creates the OVN directories; the runtime one is re-owned
// every start (/run is a tmpfs).
func (c *Central) prepareDirs() error {
	var ovn []layout.Dir
	for _, d := range c.cfg.Paths.Dirs(true) {
		if strings.HasPrefix(d.Setting.Name, "ovn-") {
			ovn = append(ovn, d)
		}
	}
	return daemon.PrepareDirs(ovn, c.cfg.Daemons.RunOwner)
}

// Status is the member's Raft state for health (/status, /readyz?verbose).
func (c *Central) Status() *health.CentralStatus {
	s := &health.CentralStatus{Address: c.self}
	for _, db := range []*database{c.nb, c.sb} {
		s.Databases = append(s.Databases, db.report())
	}
	c.mu.Lock()
	s.Northd = c.northdStatus
	c.mu.Unlock()
	return s
}

// leave takes this member out of both clusters (cluster/leave), waits until
// it is out, stops the servers and moves the database files aside.
func (c *Central) leave(ctx context.Context) error {
	c.log.Warn("this member's address is no longer in OVN_DB_IPS: leaving the cluster", "address", c.self, "members", strings.Join(c.members, ","))
	var errs []error
	for _, db := range []*database{c.nb, c.sb} {
		if err := db.leave(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.Daemons.StopTimeout)
	defer cancel()
	errs = append(errs, c.daemons.Stop(sctx, c.group.Stop))
	if err := errors.Join(errs...); err != nil {
		return err
	}
	stamp := time.Now().UTC().Format("20060102T150405Z")
	for _, db := range []*database{c.nb, c.sb} {
		dst := db.file + ".left-" + stamp
		if err := os.Rename(db.file, dst); err != nil {
			return fmt.Errorf("left the cluster but could not move %s aside: %w", db.file, err)
		}
		c.log.Info("left the cluster; database kept aside", "db", db.schemaName, "file", dst)
	}
	return ErrLeft
}

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
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
)

// ErrLeft is returned by Start when this member has left the cluster
// because OVN_DB_IPS no longer lists it; the caller exits cleanly.
var ErrLeft = errors.New("this member left the cluster: OVN_DB_IPS no longer lists it")

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
	cfg         *config.Config
	lay         layout.Layout
	log         *slog.Logger
	health      *health.Reporter
	tls         *ovsdbconn.TLSFiles
	explainExec func(string, error) error
	bins        map[string]string

	// self is this member's address; members is OVN_DB_IPS.
	self    string
	members []string
	leaving bool

	ctx    context.Context
	cancel context.CancelFunc
	loops  sync.WaitGroup

	nb, sb *database
	northd *child
	group  lifecycle.Group

	mu           sync.Mutex
	northdStatus string
}

// New plans the member; nothing is started. A member not in OVN_DB_IPS
// without a database of its own is a configuration error.
func New(cfg *config.Config, o Options) (*Central, error) {
	c := &Central{cfg: cfg, lay: layout.New(cfg.Paths), log: o.Log, health: o.Health, tls: o.TLS, explainExec: o.ExplainExec,
		members: cfg.OVNDBIPs}
	if c.explainExec == nil {
		c.explainExec = func(_ string, err error) error { return err }
	}
	c.bins = map[string]string{}
	var missing []string
	for _, p := range []string{"ovsdb-server", "ovsdb-tool", "ovsdb-client", "ovn-northd"} {
		path, ok := findProgram(cfg.BinDirs, p)
		if !ok {
			missing = append(missing, p)
			continue
		}
		c.bins[p] = path
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("programs not found in %v: %v; install openvswitch-common and ovn-central or set --bin-dirs", cfg.BinDirs, missing)
	}
	c.nb = c.newDatabase("ovsdb-nb", "OVN_Northbound", "ovn-nb.ovsschema", c.lay.NBDB, c.lay.NBSock, c.lay.NBCtl, c.lay.NBPid, c.lay.NBLog, ovsdbconn.NBPort, NBRaftPort)
	c.sb = c.newDatabase("ovsdb-sb", "OVN_Southbound", "ovn-sb.ovsschema", c.lay.SBDB, c.lay.SBSock, c.lay.SBCtl, c.lay.SBPid, c.lay.SBLog, ovsdbconn.SBPort, SBRaftPort)
	self, err := c.findSelf()
	if err != nil {
		return nil, err
	}
	c.self = self
	c.leaving = Leaving(self, c.members)
	if c.leaving && !exists(c.nb.file) && !exists(c.sb.file) {
		return nil, &config.Error{Key: "ovn-db-ips", Value: strings.Join(c.members, ","),
			Reason: fmt.Sprintf("this member's address %s is not listed and it has no database (it left the cluster or never joined)", self),
			Fix:    "add " + self + " to OVN_DB_IPS on every member to (re)join it, or stop running the central here"}
	}
	c.northd = c.northdChild()
	c.health.SetCentral(c.Status)
	return c, nil
}

// findSelf is this member's address: the setting, else the address its
// database was created with, else the one address of OVN_DB_IPS this
// host has.
func (c *Central) findSelf() (string, error) {
	if c.cfg.Central.IP != "" {
		return c.cfg.Central.IP, nil
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
	return "", &config.Error{Key: "central-ip", Reason: fmt.Sprintf("not set, and none of this host's addresses (%s) is in OVN_DB_IPS (%s)", strings.Join(mine, ", "), strings.Join(c.members, ",")),
		Fix: "set --central-ip or POD_IP to this member's address, and list it in OVN_DB_IPS"}
}

// Self is this member's address.
func (c *Central) Self() string { return c.self }

func findProgram(dirs []string, name string) (string, bool) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// ssl reports whether the members talk SSL (ENABLE_SSL).
func (c *Central) ssl() bool { return c.cfg.EnableSSL }

// sslArgs are the key, certificate and CA of an SSL member or northd.
func (c *Central) sslArgs() []string {
	if !c.ssl() {
		return nil
	}
	return []string{"--private-key=" + c.cfg.SSLKey, "--certificate=" + c.cfg.SSLCert, "--ca-cert=" + c.cfg.SSLCACert}
}

// Start prepares the directories, starts both databases (side by side)
// and then ovn-northd, and returns once the member is ready. A member
// dropped from OVN_DB_IPS leaves the cluster instead and returns ErrLeft.
func (c *Central) Start(ctx context.Context) error {
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if err := c.prepareDirs(); err != nil {
		return err
	}
	if c.tls != nil {
		if err := c.tls.Watch(c.ctx); err != nil {
			return err
		}
	}
	dbs := &lifecycle.Parallel{Label: "ovn-databases", Chains: [][]lifecycle.Unit{{c.nb.child}, {c.sb.child}}, Log: c.log}
	units := []lifecycle.Unit{dbs}
	if !c.leaving {
		units = append(units, c.northd)
	}
	c.group = lifecycle.Group{Units: units, Log: c.log}
	if err := c.group.Start(ctx, c.cfg.StopTimeout); err != nil {
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
	if c.cancel != nil {
		c.cancel()
	}
	c.loops.Wait()
	return c.group.Stop(ctx)
}

// prepareDirs creates the OVN directories; the runtime one is re-owned
// every start (/run is a tmpfs).
func (c *Central) prepareDirs() error {
	var errs []error
	p := c.cfg.Paths
	for _, s := range layout.DirSettings {
		if !strings.HasPrefix(s.Name, "ovn-") {
			continue
		}
		d := *s.Dir(&p)
		if err := os.MkdirAll(d, s.Mode); err != nil {
			errs = append(errs, fmt.Errorf("cannot create %s: %w; move it with %s", d, err, s.Key()))
			continue
		}
		if s.Runtime {
			if err := os.Chmod(d, s.Mode); err != nil {
				errs = append(errs, fmt.Errorf("chmod %s: %w", d, err))
			}
			if o := c.cfg.RunOwner; o.UID >= 0 || o.GID >= 0 {
				if err := os.Chown(d, o.UID, o.GID); err != nil {
					errs = append(errs, fmt.Errorf("chown %s to %s: %w", d, o.Spec, err))
				}
			}
		}
	}
	return errors.Join(errs...)
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
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.cfg.StopTimeout)
	defer cancel()
	errs = append(errs, c.group.Stop(sctx))
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

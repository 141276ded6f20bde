package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsquirks"
)

// Identity is what this node claims in the SB database.
type Identity struct {
	SystemID string
	Hostname string
	EncapIP  string
	Source   string // where SystemID came from
}

// Chassis is one SB Chassis row with its encapsulation addresses.
type Chassis struct {
	Name     string
	Hostname string
	EncapIPs []string
}

// services are doctor's questions to the node's OVSDB servers and daemons,
// and to the NB/SB databases nc names.
type services struct {
	nc      *nodeconfig.NodeConfig
	f       DoctorFacts
	timeout time.Duration
}

func (s *services) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(parent, s.timeout)
}

func (s *services) run(ctx context.Context) []Check {
	var out []Check
	id := Identity{EncapIP: s.nc.EncapIP}
	matchNorthd := false
	writtenWait, haveRow := "", false
	if h, err := s.f.Hostname(); err == nil {
		id.Hostname = h
	}

	// The node's own ovsdb-server.
	ovsSock := s.nc.Layout.DBSock
	ovsUp := false
	c := Check{Name: "ovsdb:Open_vSwitch"}
	if _, err := s.f.Stat(ovsSock); err != nil {
		c.Status, c.Found, c.Fix = Warn, ovsSock+" does not exist: ovsdb-server is not running (is ovnhost running?)", "start ovnhost"
	} else {
		cx, cancel := s.ctx(ctx)
		dbs, err := s.f.ListDBs(cx, "unix:"+ovsSock)
		cancel()
		switch {
		case err != nil:
			c.Status, c.Found, c.Fix = Fail, fmt.Sprintf("%s exists but does not answer: %v", ovsSock, err), "restart ovnhost (a stale socket from a dead ovsdb-server is replaced on start)"
		case !contains(dbs, "Open_vSwitch"):
			c.Status, c.Found, c.Fix = Fail, fmt.Sprintf("%s answers but serves %v, not Open_vSwitch", ovsSock, dbs), "check --ovs-run-dir: another ovsdb-server owns this socket"
		default:
			ovsUp = true
			c.Status, c.Found = Pass, ovsSock+" answers (Open_vSwitch)"
		}
	}
	out = append(out, c)

	// Identity: the running database wins over the state file.
	if ovsUp {
		cx, cancel := s.ctx(ctx)
		rows, err := s.f.OpenvSwitch(cx, "unix:"+ovsSock)
		cancel()
		pidfile := s.nc.Layout.VSwitchdPid
		pid, alive := s.f.Pidfile(pidfile, "ovs-vswitchd")
		out = append(out, checkVswitchd(pidfile, pid, alive, rows, err))
		if alive && err == nil && len(rows) == 1 && s.nc.Datapath == nodeconfig.Kernel {
			started, serr := s.f.ProcessStarted(pid)
			out = append(out, checkUpcallHandlers(pid, ovsVersion(rows[0]), started, serr))
		}
		if err == nil && len(rows) == 1 && s.nc.Datapath == nodeconfig.Kernel {
			out = append(out, checkTunnelBackers(ovsVersion(rows[0])))
		}
		if err == nil && len(rows) == 1 {
			ext := rows[0].ExternalIDs
			if v := ext["system-id"]; v != "" {
				id.SystemID, id.Source = v, "Open_vSwitch external_ids:system-id"
			}
			if v := ext["hostname"]; v != "" {
				id.Hostname = v
			}
			if v := ext["ovn-encap-ip"]; v != "" {
				id.EncapIP = v
			}
			matchNorthd = ext["ovn-match-northd-version"] == "true"
			writtenWait, haveRow = ext["ovn-ofctrl-wait-before-clear"], true
		}
	}
	if id.SystemID == "" {
		if b, err := s.f.ReadFile(s.nc.Layout.SystemIDFile); err == nil {
			id.SystemID, id.Source = strings.TrimSpace(string(b)), s.nc.Layout.SystemIDFile
		}
	}

	// ovn-controller's SB connection, and whether its restart keeps flows.
	out = append(out, s.controller(ctx))
	if haveRow {
		out = append(out, s.ofctrlWait(ctx, writtenWait))
	}

	// NB and SB.
	sbUp := ""
	if !s.nc.AllInOne {
		if s.nc.NB.Endpoint != "" {
			// The node itself never writes NB: unreachable NB is a warning.
			nb, _ := s.reach(ctx, "nb-reachable", s.nc.NB.Endpoint, "OVN_Northbound")
			if nb.Status == Fail {
				nb.Status = Warn
				nb.Found += " (ovnhost on this node does not need NB; the controller and netctl do)"
			}
			out = append(out, nb)
		}
		var sb Check
		sb, sbUp = s.reach(ctx, "sb-reachable", s.nc.SB.Endpoint, "OVN_Southbound")
		out = append(out, sb)
	} else {
		nb, _ := s.local(ctx, "ovsdb:OVN_Northbound", s.nc.NB.Endpoint, "OVN_Northbound")
		sb, up := s.local(ctx, "ovsdb:OVN_Southbound", s.nc.SB.Endpoint, "OVN_Southbound")
		sbUp = up
		out = append(out, nb, sb)
	}

	// Duplicate chassis.
	if sbUp == "" {
		out = append(out, Check{Name: "chassis", Status: Warn, Found: "the SB database did not answer: duplicate system-ids and encap IPs not checked", Fix: "fix the SB connection above, then run netctl doctor again"})
		return out
	}
	cx, cancel := s.ctx(ctx)
	chassis, err := readChassis(cx, s.f, sbUp)
	cancel()
	if err != nil {
		out = append(out, Check{Name: "chassis", Status: Warn, Found: "cannot read SB Chassis rows: " + err.Error(), Fix: "check the SB database (ovn-sbctl --db=" + sbUp + " show)"})
		return out
	}
	out = append(out, CheckChassis(id, chassis, sbUp))
	out = append(out, s.skew(ctx, sbUp, matchNorthd))
	return out
}

// skew compares the central's northd with the local ovn-controller.
func (s *services) skew(ctx context.Context, sb string, matchNorthd bool) Check {
	cx, cancel := s.ctx(ctx)
	northd, err := s.f.NorthdVersion(cx, sb)
	cancel()
	if err != nil {
		return Check{Name: "ovn-version-skew", Status: Warn, Found: "cannot read SB_Global: " + err.Error(), Fix: "check the SB database"}
	}
	controller := ""
	if sock, err := s.f.ControllerSocket([]string{s.nc.Layout.OVNRunDir, s.nc.Layout.OVSRunDir}); err == nil {
		cx, cancel := s.ctx(ctx)
		out, err := s.f.Unixctl(cx, sock, "version")
		cancel()
		if err == nil {
			controller = ControllerVersion(out)
		}
	}
	return CheckVersionSkew(northd, controller, matchNorthd)
}

func (s *services) controller(ctx context.Context) Check {
	const name = "ovn-controller"
	dirs := []string{s.nc.Layout.OVNRunDir, s.nc.Layout.OVSRunDir}
	sock, err := s.f.ControllerSocket(dirs)
	if err != nil {
		return Check{Name: name, Status: Warn, Found: "ovn-controller is not running (no live ovn-controller.<pid>.ctl in " + strings.Join(dirs, " or ") + ")", Fix: "start ovnhost"}
	}
	cx, cancel := s.ctx(ctx)
	st, err := s.f.Unixctl(cx, sock, "connection-status")
	cancel()
	st = strings.TrimSpace(st)
	switch {
	case err != nil:
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s does not answer connection-status: %v", sock, err), Fix: "restart ovnhost"}
	case st != "connected":
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("ovn-controller is %s from the SB database %s", st, s.nc.SB.Endpoint),
			Fix: "make the SB database reachable from this node (see sb-reachable), check OVN_DB_IPS / OVN_SB_ADDR and the tunnel of the SB port 6642"}
	}
	return Check{Name: name, Status: Pass, Found: "ovn-controller is connected to the SB database (" + sock + ")"}
}

// reach checks remote endpoints; returns the first that answered with db.
func (s *services) reach(ctx context.Context, name, remotes, db string) (Check, string) {
	var ok []string
	var bad []string
	for _, r := range strings.Split(remotes, ",") {
		r = strings.TrimSpace(r)
		if r == "" {
			continue
		}
		cx, cancel := s.ctx(ctx)
		dbs, err := s.f.ListDBs(cx, r)
		cancel()
		switch {
		case err != nil:
			bad = append(bad, fmt.Sprintf("%s: %v", r, err))
		case !contains(dbs, db):
			bad = append(bad, fmt.Sprintf("%s serves %v, not %s", r, dbs, db))
		default:
			ok = append(ok, r)
		}
	}
	switch {
	case len(ok) == 0:
		return Check{Name: name, Status: Fail, Found: db + " unreachable: " + strings.Join(bad, "; "),
			Fix: "check OVN_DB_IPS, that the OVN central pods run, and that this node reaches ports 6641/6642 (firewall, routes, SSL settings)"}, ""
	case len(bad) > 0:
		return Check{Name: name, Status: Warn, Found: fmt.Sprintf("%s reachable at %s, but not at: %s", db, strings.Join(ok, ","), strings.Join(bad, "; ")),
			Fix: "check the unreachable cluster members"}, ok[0]
	}
	return Check{Name: name, Status: Pass, Found: db + " answers at " + strings.Join(ok, ",")}, ok[0]
}

// local checks an all-in-one database socket.
func (s *services) local(ctx context.Context, name, remote, db string) (Check, string) {
	if path, ok := strings.CutPrefix(remote, "unix:"); ok {
		if _, err := s.f.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return Check{Name: name, Status: Warn, Found: path + " does not exist: the local " + db + " server is not running (all-in-one mode)", Fix: "start ovnhost"}, ""
		}
	}
	return s.reach(ctx, name, remote, db)
}

func readChassis(ctx context.Context, f DoctorFacts, remote string) ([]Chassis, error) {
	rows, encs, err := f.SBChassis(ctx, remote)
	if err != nil {
		return nil, err
	}
	ipOf := map[string]string{}
	for _, e := range encs {
		ipOf[e.UUID] = e.IP
	}
	var out []Chassis
	for _, r := range rows {
		c := Chassis{Name: r.Name, Hostname: r.Hostname}
		for _, u := range r.Encaps {
			if ip := ipOf[u]; ip != "" && !contains(c.EncapIPs, ip) {
				c.EncapIPs = append(c.EncapIPs, ip)
			}
		}
		sort.Strings(c.EncapIPs)
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// CheckChassis looks for another chassis using this node's system-id (a
// cloned VM: `duplicate chassis`) or its encap IP.
func CheckChassis(self Identity, rows []Chassis, sb string) Check {
	const name = "chassis"
	if self.SystemID == "" {
		return Check{Name: name, Status: Warn, Found: "this node has no system-id yet (ovnhost never ran here): duplicates not checked", Fix: "start ovnhost, then run netctl doctor again"}
	}
	var fails, warns, fixes []string
	registered := false
	for _, c := range rows {
		if c.Name == self.SystemID {
			registered = true
			switch {
			case self.Hostname != "" && c.Hostname != "" && c.Hostname != self.Hostname:
				fails = append(fails, fmt.Sprintf("chassis %s in the SB database belongs to host %s (encap %s), but this node %s has the same system-id (from %s): two nodes share it (cloned VM?)",
					c.Name, c.Hostname, strings.Join(c.EncapIPs, ","), self.Hostname, self.Source))
				fixes = append(fixes, fmt.Sprintf("on one of the two nodes stop ovnhost, remove its system-id file (ovnhost generates a new one on start) and run ovn-sbctl --db=%s chassis-del %s", sb, c.Name))
			case self.EncapIP != "" && len(c.EncapIPs) > 0 && !contains(c.EncapIPs, self.EncapIP):
				warns = append(warns, fmt.Sprintf("chassis %s (host %s) is registered with encap %s, this node's encap IP is %s: another node with the same system-id and hostname (cloned VM), or the address changed",
					c.Name, c.Hostname, strings.Join(c.EncapIPs, ","), self.EncapIP))
				fixes = append(fixes, "if another node clones this one, give it a new system-id and host name")
			}
			continue
		}
		if self.EncapIP != "" && contains(c.EncapIPs, self.EncapIP) {
			fails = append(fails, fmt.Sprintf("chassis %s (host %s) uses this node's encap IP %s: tunnels meant for one of them reach the other", c.Name, c.Hostname, self.EncapIP))
			fixes = append(fixes, fmt.Sprintf("give every node its own tunnel address (IFACE/ENCAP_IP), or delete the stale chassis: ovn-sbctl --db=%s chassis-del %s", sb, c.Name))
		} else if self.Hostname != "" && c.Hostname == self.Hostname {
			warns = append(warns, fmt.Sprintf("chassis %s also names host %s: a stale registration from an earlier system-id", c.Name, c.Hostname))
			fixes = append(fixes, fmt.Sprintf("ovn-sbctl --db=%s chassis-del %s", sb, c.Name))
		}
	}
	switch {
	case len(fails) > 0:
		return Check{Name: name, Status: Fail, Found: strings.Join(append(fails, warns...), "; "), Fix: strings.Join(uniq(fixes), "; ")}
	case len(warns) > 0:
		return Check{Name: name, Status: Warn, Found: strings.Join(warns, "; "), Fix: strings.Join(uniq(fixes), "; ")}
	case registered:
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("system-id %s is registered once, by this host; no other chassis uses encap IP %s (%d chassis)", self.SystemID, dash(self.EncapIP), len(rows))}
	}
	return Check{Name: name, Status: Pass, Found: fmt.Sprintf("system-id %s is not registered yet and no other chassis uses encap IP %s (%d chassis)", self.SystemID, dash(self.EncapIP), len(rows))}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// checkVswitchd compares cur_cfg with next_cfg: ovs-vswitchd sets cur_cfg
// once it has applied the configuration numbered next_cfg.
func checkVswitchd(pidfile string, pid int, alive bool, rows []vswitch.OpenvSwitch, err error) Check {
	const name = "ovs-vswitchd"
	if !alive {
		found := "ovsdb-server runs but ovs-vswitchd does not (no live process in " + pidfile + ")"
		if pid != 0 {
			found = fmt.Sprintf("ovsdb-server runs but ovs-vswitchd does not (%s names pid %d, which is not ovs-vswitchd)", pidfile, pid)
		}
		return Check{Name: name, Status: Fail, Found: found + ": no packets are switched", Fix: "check ovs-vswitchd's log in --ovs-log-dir; restart ovnhost"}
	}
	if err != nil {
		return Check{Name: name, Status: Warn, Found: "cannot read the Open_vSwitch row: " + err.Error(), Fix: "restart ovnhost"}
	}
	if len(rows) != 1 {
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("the Open_vSwitch table has %d rows, not 1", len(rows)), Fix: "restart ovnhost (it initialises conf.db)"}
	}
	cur, next := rows[0].CurCfg, rows[0].NextCfg
	if cur < next {
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("ovs-vswitchd has not applied the configuration (cur_cfg %d < next_cfg %d): it is not running or is stuck", cur, next),
			Fix: "check ovs-vswitchd's log in --ovs-log-dir; restart ovnhost"}
	}
	return Check{Name: name, Status: Pass, Found: fmt.Sprintf("ovs-vswitchd (pid %d) applied the latest configuration (cur_cfg %d)", pid, cur)}
}

// checkUpcallHandlers reports an ovs-vswitchd of a release that counts no
// CPUs in the first 10 s after boot (ovsquirks.CPUCountAfterBoot) started
// in that window: the kernel datapath then has no upcall handler. A node
// started by other tooling than ovnhost (Kube-OVN's start-ovs.sh, say)
// is not held back.
func checkUpcallHandlers(pid int, release string, started time.Duration, err error) Check {
	const name = "vswitchd-upcalls"
	switch {
	case !ovsquirks.CountsNoCPUsAtBoot(release):
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("Open vSwitch %s counts the CPUs from its start", dash(release))}
	case err != nil:
		return Check{Name: name, Status: Warn, Found: fmt.Sprintf("Open vSwitch %s: cannot read when ovs-vswitchd (pid %d) started: %v", release, pid, err),
			Fix: "if it started within 10 s of boot, restart ovs-vswitchd; or upgrade Open vSwitch to 3.1.1 or later"}
	case started < ovsquirks.CPUCountAfterBoot:
		return Check{Name: name, Status: Fail,
			Found: fmt.Sprintf("ovs-vswitchd %s (pid %d) started %.1f s after boot, before it could count the CPUs: the kernel datapath has no upcall handler and drops every packet that misses its flow cache (new connections, ARP)", release, pid, started.Seconds()),
			Fix:   "restart ovs-vswitchd (restart ovnhost: it holds ovs-vswitchd 3.1.0 back until 10 s after boot), or upgrade Open vSwitch to 3.1.1 or later"}
	}
	return Check{Name: name, Status: Pass, Found: fmt.Sprintf("ovs-vswitchd %s (pid %d) started %.0f s after boot, after it could count the CPUs", release, pid, started.Seconds())}
}

// checkTunnelBackers warns of an Open vSwitch release that re-creates
// the kernel datapath's tunnel devices whenever ovs-vswitchd starts
// (ovsquirks.RecreatesTunnelBackers): every restart or upgrade of
// ovs-vswitchd then cuts cross-node traffic until the device is back.
func checkTunnelBackers(release string) Check {
	const name = "vswitchd-tunnel-restart"
	if !ovsquirks.RecreatesTunnelBackers(release) {
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("Open vSwitch %s keeps the tunnel devices (genev_sys_6081, vxlan_sys_4789) when ovs-vswitchd restarts", dash(release))}
	}
	return Check{Name: name, Status: Warn,
		Found: fmt.Sprintf("Open vSwitch %s deletes and re-creates the tunnel device (genev_sys_6081, vxlan_sys_4789) each time ovs-vswitchd starts: cross-node traffic stops while it is gone, on every ovs-vswitchd restart or upgrade (fixed upstream by commit 8661abd4c in 2.17.6, 3.0.4, 3.1.1 and 3.2.0)", release),
		Fix:   "upgrade Open vSwitch to a fixed release (3.1.1 or later; Debian 13 ships 3.5); until then restart ovs-vswitchd only in a maintenance window"}
}

func ovsVersion(r vswitch.OpenvSwitch) string {
	if r.OVSVersion == nil {
		return ""
	}
	return *r.OVSVersion
}

// ofctrlWait reports ovn-ofctrl-wait-before-clear against ovn-controller's
// own longest flow generation, when it runs.
func (s *services) ofctrlWait(ctx context.Context, written string) Check {
	maxGen, known := time.Duration(0), false
	if sock, err := s.f.ControllerSocket([]string{s.nc.Layout.OVNRunDir, s.nc.Layout.OVSRunDir}); err == nil {
		cx, cancel := s.ctx(ctx)
		out, err := s.f.Unixctl(cx, sock, "stopwatch/show flow-generation")
		cancel()
		if err == nil {
			maxGen, known = FlowGenerationMax(out)
		}
	}
	return CheckOfctrlWait(s.nc.Daemons.OfctrlWaitBeforeClear, written, maxGen, known)
}

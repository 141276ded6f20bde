// Package layout names every file and directory of an OVS/OVN node: the
// directory settings (flag, environment name, default: written here once and
// offered by the node's settings table) and the files the daemons keep in
// them. Pure: computing a layout touches nothing, so the node daemon,
// preflight, cleanup and netctl doctor all derive the same names.
package layout

import (
	"fmt"
	"os"
	"path/filepath"
)

// Paths are the directories a node writes to. Defaults keep state under
// /var/lib and sockets under /run, so nothing lands in /etc or /usr
// (read-only on Talos) unless configured.
type Paths struct {
	OVSDBDir  string // conf.db, system-id.conf (OPENVSWITCH_DIR)
	OVSRunDir string // db.sock, pidfiles, control sockets, br-int.mgmt
	OVSLogDir string
	OVNDBDir  string // ovnnb_db.db, ovnsb_db.db in all-in-one (OVN_DIR)
	OVNRunDir string // NB/SB sockets, ovn-northd and ovn-controller control sockets
	OVNLogDir string
}

// DirSetting is one directory setting.
type DirSetting struct {
	Name    string // flag and file key
	Env     string // Kube-OVN's (or OVS's) environment name
	Default string
	Help    string
	Mode    os.FileMode
	// Runtime directories live on a tmpfs (/run): recreated with their
	// owner and mode at every start.
	Runtime bool
	// AllInOneOnly directories are used only with local NB/SB databases.
	AllInOneOnly bool
	Dir          func(*Paths) *string
}

// Key is how an error message names the setting: "--ovs-db-dir (OPENVSWITCH_DIR)".
func (s DirSetting) Key() string {
	if s.Env == "" {
		return "--" + s.Name
	}
	return fmt.Sprintf("--%s (%s)", s.Name, s.Env)
}

// DirSettings lists the directory settings in the order they are created.
var DirSettings = []DirSetting{
	{Name: "ovs-db-dir", Env: "OPENVSWITCH_DIR", Default: "/var/lib/openvswitch", Help: "OVS state: conf.db and the system-id", Mode: 0o750,
		Dir: func(p *Paths) *string { return &p.OVSDBDir }},
	{Name: "ovs-log-dir", Env: "OVS_LOGDIR", Default: "/var/log/openvswitch", Help: "OVS log files", Mode: 0o750,
		Dir: func(p *Paths) *string { return &p.OVSLogDir }},
	{Name: "ovs-run-dir", Env: "OVS_RUNDIR", Default: "/run/openvswitch", Help: "OVS sockets and pidfiles", Mode: 0o755, Runtime: true,
		Dir: func(p *Paths) *string { return &p.OVSRunDir }},
	{Name: "ovn-run-dir", Env: "OVN_RUNDIR", Default: "/run/ovn", Help: "OVN sockets and pidfiles", Mode: 0o755, Runtime: true,
		Dir: func(p *Paths) *string { return &p.OVNRunDir }},
	{Name: "ovn-log-dir", Env: "OVN_LOGDIR", Default: "/var/log/ovn", Help: "OVN log files", Mode: 0o750,
		Dir: func(p *Paths) *string { return &p.OVNLogDir }},
	{Name: "ovn-db-dir", Env: "OVN_DIR", Default: "/var/lib/ovn", Help: "OVN state: local NB/SB databases in all-in-one mode", Mode: 0o750, AllInOneOnly: true,
		Dir: func(p *Paths) *string { return &p.OVNDBDir }},
}

// Dir is a directory to create.
type Dir struct {
	Path    string
	Mode    os.FileMode
	Runtime bool
	Setting DirSetting
}

// Dirs lists the directories a node needs.
func (p Paths) Dirs(allInOne bool) []Dir {
	var out []Dir
	for _, s := range DirSettings {
		if s.AllInOneOnly && !allInOne {
			continue
		}
		out = append(out, Dir{Path: *s.Dir(&p), Mode: s.Mode, Runtime: s.Runtime, Setting: s})
	}
	return out
}

// Layout names every file the node's daemons use.
type Layout struct {
	Paths

	ConfDB, SystemIDFile, DBSock, OVSDBPid, OVSDBCtl, OVSDBLog string
	VSwitchdPid, VSwitchdCtl, VSwitchdLog, BrIntMgmt           string
	ControllerPid, ControllerLog                               string
	NBDB, SBDB, NBSock, SBSock, NBPid, SBPid, NBLog, SBLog     string
	NBCtl, SBCtl, NorthdPid, NorthdCtl, NorthdLog              string
	// UnderlayJournals holds the journal of each NIC whose configuration
	// an underlay bridge took over (supervisor/hostlink): state, kept
	// across reboots beside conf.db, which keeps the bridges.
	UnderlayJournals string
}

// New plans the files under p's directories.
func New(p Paths) Layout {
	ovsDB := func(n string) string { return filepath.Join(p.OVSDBDir, n) }
	ovsRun := func(n string) string { return filepath.Join(p.OVSRunDir, n) }
	ovsLog := func(n string) string { return filepath.Join(p.OVSLogDir, n) }
	ovnDB := func(n string) string { return filepath.Join(p.OVNDBDir, n) }
	ovnRun := func(n string) string { return filepath.Join(p.OVNRunDir, n) }
	ovnLog := func(n string) string { return filepath.Join(p.OVNLogDir, n) }
	return Layout{
		Paths:         p,
		ConfDB:        ovsDB("conf.db"),
		SystemIDFile:  ovsDB("system-id.conf"),
		DBSock:        ovsRun("db.sock"),
		OVSDBPid:      ovsRun("ovsdb-server.pid"),
		OVSDBCtl:      ovsRun("ovsdb-server.ctl"),
		OVSDBLog:      ovsLog("ovsdb-server.log"),
		VSwitchdPid:   ovsRun("ovs-vswitchd.pid"),
		VSwitchdCtl:   ovsRun("ovs-vswitchd.ctl"),
		VSwitchdLog:   ovsLog("ovs-vswitchd.log"),
		BrIntMgmt:     ovsRun("br-int.mgmt"),
		ControllerPid: ovnRun("ovn-controller.pid"),
		ControllerLog: ovnLog("ovn-controller.log"),
		NBDB:          ovnDB("ovnnb_db.db"),
		SBDB:          ovnDB("ovnsb_db.db"),
		NBSock:        ovnRun("ovnnb_db.sock"),
		SBSock:        ovnRun("ovnsb_db.sock"),
		NBPid:         ovnRun("ovnnb_db.pid"),
		SBPid:         ovnRun("ovnsb_db.pid"),
		NBCtl:         ovnRun("ovnnb_db.ctl"),
		SBCtl:         ovnRun("ovnsb_db.ctl"),
		NBLog:         ovnLog("ovsdb-server-nb.log"),
		SBLog:         ovnLog("ovsdb-server-sb.log"),
		NorthdPid:     ovnRun("ovn-northd.pid"),
		NorthdCtl:     ovnRun("ovn-northd.ctl"),
		NorthdLog:     ovnLog("ovn-northd.log"),

		UnderlayJournals: ovsDB("ovnhost-underlay"),
	}
}

// ControllerCtl is ovn-controller's control socket: 23.03 has no --unixctl
// flag and names it after its pid.
func (l Layout) ControllerCtl(pid int) string {
	return filepath.Join(l.OVNRunDir, fmt.Sprintf("ovn-controller.%d.ctl", pid))
}

// LocalNB and LocalSB are the all-in-one databases' OVSDB remotes.
func (l Layout) LocalNB() string { return "unix:" + l.NBSock }

// LocalSB is the all-in-one SB database's OVSDB remote.
func (l Layout) LocalSB() string { return "unix:" + l.SBSock }

// LogFiles lists every log file the daemons write (for cleanup --purge).
func (l Layout) LogFiles() []string {
	return []string{l.OVSDBLog, l.VSwitchdLog, l.ControllerLog, l.NBLog, l.SBLog, l.NorthdLog}
}

// LockFile is ovsdb-server's lock next to a database file.
func LockFile(db string) string {
	return filepath.Join(filepath.Dir(db), "."+filepath.Base(db)+".~lock~")
}

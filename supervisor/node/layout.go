package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ovnhost/ovnhost/supervisor/config"
)

// Layout names every file the node's daemons use, derived from the
// configured directories. Pure: computing it touches nothing.
type Layout struct {
	P config.Paths

	ConfDB, SystemIDFile, DBSock, OVSDBPid, OVSDBCtl string
	VSwitchdPid, VSwitchdCtl, BrIntMgmt              string
	ControllerPid                                    string
	NBDB, SBDB, NBSock, SBSock, NBPid, SBPid         string
	NBCtl, SBCtl, NorthdPid, NorthdCtl               string
}

// NewLayout plans the files under cfg's directories.
func NewLayout(p config.Paths) Layout {
	return Layout{
		P:             p,
		ConfDB:        filepath.Join(p.OVSDBDir, "conf.db"),
		SystemIDFile:  filepath.Join(p.OVSDBDir, "system-id.conf"),
		DBSock:        filepath.Join(p.OVSRunDir, "db.sock"),
		OVSDBPid:      filepath.Join(p.OVSRunDir, "ovsdb-server.pid"),
		OVSDBCtl:      filepath.Join(p.OVSRunDir, "ovsdb-server.ctl"),
		VSwitchdPid:   filepath.Join(p.OVSRunDir, "ovs-vswitchd.pid"),
		VSwitchdCtl:   filepath.Join(p.OVSRunDir, "ovs-vswitchd.ctl"),
		BrIntMgmt:     filepath.Join(p.OVSRunDir, "br-int.mgmt"),
		ControllerPid: filepath.Join(p.OVNRunDir, "ovn-controller.pid"),
		NBDB:          filepath.Join(p.OVNDBDir, "ovnnb_db.db"),
		SBDB:          filepath.Join(p.OVNDBDir, "ovnsb_db.db"),
		NBSock:        filepath.Join(p.OVNRunDir, "ovnnb_db.sock"),
		SBSock:        filepath.Join(p.OVNRunDir, "ovnsb_db.sock"),
		NBPid:         filepath.Join(p.OVNRunDir, "ovnnb_db.pid"),
		SBPid:         filepath.Join(p.OVNRunDir, "ovnsb_db.pid"),
		NBCtl:         filepath.Join(p.OVNRunDir, "ovnnb_db.ctl"),
		SBCtl:         filepath.Join(p.OVNRunDir, "ovnsb_db.ctl"),
		NorthdPid:     filepath.Join(p.OVNRunDir, "ovn-northd.pid"),
		NorthdCtl:     filepath.Join(p.OVNRunDir, "ovn-northd.ctl"),
	}
}

// ControllerCtl is ovn-controller's control socket: 23.03 has no --unixctl
// flag and names it after its pid.
func (l Layout) ControllerCtl(pid int) string {
	return filepath.Join(l.P.OVNRunDir, fmt.Sprintf("ovn-controller.%d.ctl", pid))
}

// dirSpec is a directory to create with its mode; runtime dirs also get the
// configured owner, since /run is a tmpfs emptied at every boot.
type dirSpec struct {
	Path    string
	Mode    os.FileMode
	Runtime bool
}

// Dirs lists every directory the node needs.
func (l Layout) Dirs(allInOne bool) []dirSpec {
	d := []dirSpec{
		{l.P.OVSDBDir, 0o750, false},
		{l.P.OVSLogDir, 0o750, false},
		{l.P.OVSRunDir, 0o755, true},
		{l.P.OVNRunDir, 0o755, true},
		{l.P.OVNLogDir, 0o750, false},
	}
	if allInOne {
		d = append(d, dirSpec{l.P.OVNDBDir, 0o750, false})
	}
	return d
}

// PrepareDirs creates the directories; runtime ones are (re)owned every
// start. The error names the directory and the setting that moves it.
func (l Layout) PrepareDirs(allInOne bool, owner config.Owner) error {
	var errs []error
	for _, d := range l.Dirs(allInOne) {
		if err := os.MkdirAll(d.Path, d.Mode); err != nil {
			errs = append(errs, fmt.Errorf("cannot create %s: %w; move it with --%s", d.Path, err, settingFor(l.P, d.Path)))
			continue
		}
		if d.Runtime {
			if err := os.Chmod(d.Path, d.Mode); err != nil {
				errs = append(errs, fmt.Errorf("chmod %s: %w", d.Path, err))
			}
			if owner.UID >= 0 || owner.GID >= 0 {
				if err := os.Chown(d.Path, owner.UID, owner.GID); err != nil {
					errs = append(errs, fmt.Errorf("chown %s to %s: %w", d.Path, owner.Spec, err))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// settingFor names the flag that relocates dir.
func settingFor(p config.Paths, dir string) string {
	switch dir {
	case p.OVSDBDir:
		return "ovs-db-dir (OPENVSWITCH_DIR)"
	case p.OVSRunDir:
		return "ovs-run-dir (OVS_RUNDIR)"
	case p.OVSLogDir:
		return "ovs-log-dir (OVS_LOGDIR)"
	case p.OVNDBDir:
		return "ovn-db-dir (OVN_DIR)"
	case p.OVNRunDir:
		return "ovn-run-dir (OVN_RUNDIR)"
	case p.OVNLogDir:
		return "ovn-log-dir (OVN_LOGDIR)"
	}
	return "the matching directory setting"
}

// ProcessAlive reports whether pid is running prog (matched on the basename
// of argv[0] in /proc/PID/cmdline): PIDs are reused fast, so a pidfile alone
// proves nothing.
func ProcessAlive(pid int, prog string) bool {
	if pid <= 0 {
		return false
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err == nil {
		// A zombie is gone for our purposes; PID 1 here reaps lazily.
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	argv0 := strings.SplitN(string(raw), "\x00", 2)[0]
	return filepath.Base(argv0) == prog
}

// staleFiles are what a daemon leaves after a crash: pidfile, control
// socket, database socket, database lock.
type staleFiles struct {
	Prog    string
	Pidfile string
	Others  []string
}

// ClearStale removes the leftovers of a crashed run for one daemon, but only
// once the pid it recorded is verifiably not that daemon any more. A live
// one is an error naming the pid: two instances would fight over the files.
func ClearStale(s staleFiles) error {
	raw, err := os.ReadFile(s.Pidfile)
	if err == nil {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if ProcessAlive(pid, s.Prog) {
			return fmt.Errorf("%s from an earlier run is still running as pid %d (pidfile %s); stop it (kill %d) before starting ovnhost", s.Prog, pid, s.Pidfile, pid)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", s.Pidfile, err)
	}
	var errs []error
	for _, f := range append([]string{s.Pidfile}, s.Others...) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// lockFile is ovsdb-server's lock next to a database file.
func lockFile(db string) string {
	return filepath.Join(filepath.Dir(db), "."+filepath.Base(db)+".~lock~")
}

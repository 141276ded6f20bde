package node

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// PrepareDirs creates the node's directories; runtime ones are (re)owned
// every start. The error names the directory and the setting that moves it.
func PrepareDirs(p layout.Paths, allInOne bool, owner config.Owner) error {
	var errs []error
	for _, d := range p.Dirs(allInOne) {
		if err := os.MkdirAll(d.Path, d.Mode); err != nil {
			errs = append(errs, fmt.Errorf("cannot create %s: %w; move it with %s", d.Path, err, d.Setting.Key()))
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

// ProcessAlive reports whether pid is running prog (see process.Alive).
func ProcessAlive(pid int, prog string) bool { return process.Alive(pid, prog) }

// livePid reads pidfile and reports its pid if that is a running prog.
func livePid(pidfile, prog string) (int, bool) {
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, false
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid, ProcessAlive(pid, prog)
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

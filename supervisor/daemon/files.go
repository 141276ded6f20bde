package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// FindPrograms looks each program up in dirs, in order: the paths of those
// found, and the names of those missing.
func FindPrograms(dirs []string, names ...string) (map[string]string, []string) {
	found := map[string]string{}
	var missing []string
	for _, name := range names {
		if path, ok := findProgram(dirs, name); ok {
			found[name] = path
		} else {
			missing = append(missing, name)
		}
	}
	return found, missing
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

// PrepareDirs creates the directories; runtime ones are (re)owned every
// start (/run is a tmpfs). The error names the directory and the setting
// that moves it.
func PrepareDirs(dirs []layout.Dir, owner nodeconfig.Owner) error {
	var errs []error
	for _, d := range dirs {
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

// LivePid reads pidfile and reports its pid if that is a running prog.
func LivePid(pidfile, prog string) (int, bool) {
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, false
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	return pid, process.Alive(pid, prog)
}

// ClearStale removes the leftovers of a crashed run of prog (its pidfile,
// and others: control socket, database socket, database lock), but only
// once the pid it recorded is verifiably not that program any more. A live
// one is an error naming the pid: two instances would fight over the files.
func ClearStale(prog, pidfile string, others ...string) error {
	raw, err := os.ReadFile(pidfile)
	if err == nil {
		pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
		if process.Alive(pid, prog) {
			return fmt.Errorf("%s from an earlier run is still running as pid %d (pidfile %s); stop it (kill %d) before starting ovnhost", prog, pid, pidfile, pid)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("reading %s: %w", pidfile, err)
	}
	var errs []error
	for _, f := range append([]string{pidfile}, others...) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, syscall.ENOTDIR) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

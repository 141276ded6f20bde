package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

func TestClearStaleKeepsFilesOfALiveDaemon(t *testing.T) {
	dir := t.TempDir()
	// A live process that is not the daemon: its pid in a pidfile is a
	// reused pid, so the files are stale and go.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	pidfile := filepath.Join(dir, "ovsdb-server.pid")
	sock := filepath.Join(dir, "db.sock")
	write := func() {
		if err := os.WriteFile(pidfile, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(sock, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write()
	if err := ClearStale("ovsdb-server", pidfile, sock); err != nil {
		t.Fatalf("reused pid treated as live: %v", err)
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Fatal("stale socket kept")
	}
	// The same pid recorded for "sleep": the daemon is alive, nothing is removed.
	write()
	err := ClearStale("sleep", pidfile, sock)
	if err == nil || !strings.Contains(err.Error(), "still running as pid "+strconv.Itoa(cmd.Process.Pid)) {
		t.Fatalf("live daemon: %v", err)
	}
	if _, err := os.Stat(sock); err != nil {
		t.Fatal("socket of a live daemon removed")
	}
}

func TestPrepareDirsRecreatesRuntimeDirsWithModeAndNamesTheSetting(t *testing.T) {
	root := t.TempDir()
	p := layout.Paths{OVSDBDir: root + "/db", OVSRunDir: root + "/run/ovs", OVSLogDir: root + "/log", OVNDBDir: root + "/ovn", OVNRunDir: root + "/run/ovn", OVNLogDir: root + "/log"}
	if err := PrepareDirs(p.Dirs(true), nodeconfig.Owner{UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	// /run is a tmpfs: after a reboot the directory is gone.
	if err := os.RemoveAll(root + "/run"); err != nil {
		t.Fatal(err)
	}
	if err := PrepareDirs(p.Dirs(true), nodeconfig.Owner{UID: -1, GID: -1}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p.OVSRunDir)
	if err != nil || st.Mode().Perm() != 0o755 {
		t.Fatalf("run dir after reboot: %v %v", st, err)
	}
	// A path that cannot be created names the flag that moves it.
	blocker := filepath.Join(root, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	p.OVNRunDir = blocker + "/ovn"
	err = PrepareDirs(p.Dirs(false), nodeconfig.Owner{UID: -1, GID: -1})
	if err == nil || !strings.Contains(err.Error(), "ovn-run-dir (OVN_RUNDIR)") {
		t.Fatalf("got %v", err)
	}
}

package packaging

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/packaging/bundle"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// runChrooted runs prog with args chrooted into root, with an empty
// environment but PATH, and returns its combined output.
func runChrooted(t *testing.T, root, prog string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Chroot: root}
	cmd.Dir = "/"
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestBundleProgramsRunChrooted is what a user of the image or the Talos
// extension relies on: each bundled program starts with nothing from the
// host, only what the bundle carries.
func TestBundleProgramsRunChrooted(t *testing.T) {
	testenv.RequireRoot(t)
	dir := bundleDir(t)
	if len(bundleMan.Programs) < len(bundle.OVNHostPrograms)+len(bundle.OVSPrograms) {
		t.Fatalf("bundle lists %d programs", len(bundleMan.Programs))
	}
	for _, p := range bundleMan.Programs {
		out, err := runChrooted(t, dir, p, "--version")
		if err != nil {
			t.Errorf("chroot %s %s --version: %v\n%s", dir, p, err, out)
			continue
		}
		name := filepath.Base(p)
		if !strings.Contains(out, name) {
			t.Errorf("%s --version does not name the program: %q", p, out)
		}
		if strings.Contains(out, "WARN") || strings.Contains(out, "error while loading") {
			t.Errorf("%s --version complains inside the bundle: %q", p, out)
		}
	}
	// kubectl finds the plugin by its name; it answers as "kubectl netctl".
	for link := range bundle.ProgramLinks {
		out, err := runChrooted(t, dir, "/usr/bin/"+link, "--help")
		if err != nil || !strings.Contains(out, "kubectl netctl") {
			t.Errorf("chroot %s /usr/bin/%s --help: %v\n%s", dir, link, err, out)
		}
	}
}

// TestBundleMissingLibraryFails shows the chroot test can fail: the same
// program in a root that lacks one library of the closure does not start.
func TestBundleMissingLibraryFails(t *testing.T) {
	testenv.RequireRoot(t)
	dir := bundleDir(t)
	root := t.TempDir()
	// Copy the bundle without libcrypto, by hard links (same file system).
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		dst := filepath.Join(root, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(dst, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, dst)
		case strings.HasPrefix(d.Name(), "libcrypto.so"):
			return nil
		default:
			return os.Link(p, dst)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runChrooted(t, root, "/usr/bin/ovsdb-tool", "--version")
	if err == nil {
		t.Fatalf("ovsdb-tool ran without libcrypto: the chroot test would not notice a missing library\n%s", out)
	}
	if !strings.Contains(out, "libcrypto") {
		t.Fatalf("failure does not name the missing library: %s", out)
	}
}

// TestBundleClosureCoversLdd cross-checks the ELF parsing with the host's
// dynamic loader (ldd): every library ldd resolves is in the bundle.
func TestBundleClosureCoversLdd(t *testing.T) {
	testenv.RequireCommands(t, "ldd")
	dir := bundleDir(t)
	have := map[string]bool{}
	for _, l := range append(append([]string{}, bundleMan.Libraries...), bundleMan.Interpreters...) {
		have[filepath.Base(l)] = true
	}
	re := regexp.MustCompile(`(?m)^\s*(\S+)(?: => (\S+))?`)
	for _, p := range bundleMan.Dynamic {
		out, err := exec.Command("ldd", filepath.Join(dir, p)).CombinedOutput()
		if err != nil {
			t.Fatalf("ldd %s: %v\n%s", p, err, out)
		}
		for _, m := range re.FindAllStringSubmatch(string(out), -1) {
			name := filepath.Base(m[1])
			if strings.HasPrefix(name, "linux-vdso") || strings.HasPrefix(name, "linux-gate") {
				continue
			}
			if !have[name] {
				t.Errorf("%s needs %s (ldd), which the bundle lacks", p, name)
			}
			if _, err := os.Stat(filepath.Join(dir, m[1])); m[2] == "" && err != nil {
				t.Errorf("%s: loader %s is not in the bundle", p, m[1])
			}
		}
	}
}

// TestBundleLayout checks what the images inherit: schemas where the daemon
// looks by default, owner root, nothing writable by group or others.
func TestBundleLayout(t *testing.T) {
	dir := bundleDir(t)
	for _, p := range append(append([]string{}, bundle.Schemas...), "/etc/passwd", "/etc/group", "/usr/share/ovnhost/VERSION") {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Errorf("missing %s: %v", p, err)
		}
	}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSymlink == 0 && fi.Mode().Perm()&0o022 != 0 {
			t.Errorf("%s is writable by group or others (%v)", p, fi.Mode())
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 && (st.Uid != 0 || st.Gid != 0) {
			t.Errorf("%s is owned by %d:%d, not root", p, st.Uid, st.Gid)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestBundleDaemonReadyChrooted starts the real node daemon chrooted into
// the bundle, as the Talos service and the DaemonSet run it, with the host's
// /dev, /proc and /run bound in (and /sys of its network namespace), in a
// network namespace of its own, and waits for READY=1 on a notify socket, as
// systemd would; then /readyz must answer 200.
func TestBundleDaemonReadyChrooted(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "nsenter", "unshare", "chroot", "curl", "mount")
	dir := bundleDir(t)

	// The bundle itself is the root, read-only as Talos and the DaemonSet
	// image mount it; all mounts happen in a private mount namespace.
	root := dir
	// The writable places, bound where the daemon's defaults point, as the
	// Talos service and the DaemonSet mount the node's directories; /tmp is
	// a tmpfs (ovsdb-server needs tmpfile(3)).
	state := t.TempDir()
	writable := []string{"var/lib/openvswitch", "var/lib/ovn", "var/log/openvswitch", "var/log/ovn", "opt/cni/bin", "etc/cni/net.d"}
	for _, d := range writable {
		if err := os.MkdirAll(filepath.Join(state, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Sockets under one private directory of the host's /run (bound in
	// whole), so nothing meets the host's own /run/openvswitch.
	run, err := os.MkdirTemp("/run", "ovnhost-pkgtest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(run) })

	ns := fmt.Sprintf("ovnhost-pkgtest-%d", os.Getpid())
	ipns := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip -n %s %v: %v\n%s", ns, args, err, out)
		}
	}
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	ipns("link", "set", "lo", "up")
	ipns("link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1")
	ipns("link", "set", "uplink1", "up")
	ipns("addr", "add", "192.0.2.10/24", "dev", "uplink0")
	ipns("link", "set", "uplink0", "up")
	ipns("route", "add", "default", "via", "192.0.2.1", "dev", "uplink0")

	notifyPath := filepath.Join(run, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()

	// The mounts live in a private mount namespace (unshare --mount) and go
	// away with the daemon; nothing to unmount afterwards. /sys is a fresh
	// sysfs: the host's would show the host's interfaces, not those of the
	// daemon's network namespace.
	script := `set -e
mount --bind "$ROOT" "$ROOT"
mount -o remount,bind,ro "$ROOT"
mount --rbind /dev "$ROOT/dev"
mount --rbind /proc "$ROOT/proc"
mount -t sysfs sysfs "$ROOT/sys"
mount --rbind /run "$ROOT/run"
mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$ROOT/tmp"
for d in ` + strings.Join(writable, " ") + `; do mount --bind "$STATE/$d" "$ROOT/$d"; done
exec chroot "$ROOT" /usr/bin/ovnhost run`
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "--",
		"unshare", "--mount", "--propagation", "slave", "--",
		"/bin/sh", "-c", script)
	cmd.Env = []string{
		"ROOT=" + root,
		"STATE=" + state,
		"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		"NOTIFY_SOCKET=" + notifyPath,
		"NODE_NAME=pkgtest",
		"OVS_RUNDIR=" + run + "/openvswitch",
		"OVN_RUNDIR=" + run + "/ovn",
		"OVNHOST_CNI_SOCKET=" + run + "/cni.sock",
		"OVNHOST_HEALTH_ADDR=127.0.0.1:10665",
		"OVNHOST_DATAPATH=netdev",
		"DISABLE_MODULES_MANAGEMENT=true",
		"WATCHDOG_USEC=2000000",
	}
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	var exitErr error
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("ovnhost did not stop within 30 s of SIGTERM")
		}
	}
	t.Cleanup(stop)

	// The notify protocol as systemd (Type=notify, WatchdogSec=) sees it.
	msgs := make(chan string, 1024)
	go func() {
		defer close(msgs)
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				return
			}
			select {
			case msgs <- string(buf[:n]):
			default: // the test stopped listening
			}
		}
	}()
	var statuses []string
	// waitFor consumes notifications until the line want arrives.
	waitFor := func(want string, d time.Duration, exitOK bool) {
		t.Helper()
		deadline := time.After(d)
		ex := exited
		if stopped {
			ex = nil
		}
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("notify socket closed before %s\n%s", want, logs.String())
				}
				found := false
				for _, l := range strings.Split(m, "\n") {
					if strings.HasPrefix(l, "STATUS=") {
						statuses = append(statuses, strings.TrimPrefix(l, "STATUS="))
					}
					found = found || l == want
				}
				if found {
					return
				}
			case err := <-ex:
				stopped, exitErr = true, err // nothing left for stop() to wait for
				if exitOK {
					ex = nil // keep reading what it sent before it exited
					continue
				}
				t.Fatalf("ovnhost exited before %s: %v\nstatus: %q\n%s", want, err, statuses, logs.String())
			case <-deadline:
				t.Fatalf("no %s within %v\nstatus: %q\n%s", want, d, statuses, logs.String())
			}
		}
	}
	waitFor("READY=1", 90*time.Second, false)
	t.Logf("READY=1; STATUS= messages: %q", statuses)
	// WATCHDOG_USEC=2s: a ping is due every second.
	waitFor("WATCHDOG=1", 3*time.Second, false)

	out, err := exec.Command("ip", "netns", "exec", ns, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}",
		"--max-time", "5", "http://127.0.0.1:10665/readyz").CombinedOutput()
	if err != nil || string(out) != "200" {
		t.Errorf("/readyz after READY=1: %q %v\n%s", out, err, logs.String())
	}
	// What the daemon wrote went to the node's directories, as on a node:
	// its state database, and the CNI plugin (found next to /usr/bin/ovnhost
	// in the bundle) with its configuration.
	for _, p := range []string{"var/lib/openvswitch/conf.db", "opt/cni/bin/ovnhost-cni", "etc/cni/net.d/00-ovnhost.conflist"} {
		if _, err := os.Stat(filepath.Join(state, p)); err != nil {
			t.Errorf("after READY=1: %v", err)
		}
	}
	// systemctl stop: SIGTERM, STOPPING=1, then a clean exit (status 0, or
	// systemd would mark the unit failed).
	cmd.Process.Signal(syscall.SIGTERM)
	waitFor("STOPPING=1", 30*time.Second, true)
	if !stopped {
		select {
		case exitErr = <-exited:
			stopped = true
		case <-time.After(30 * time.Second):
			t.Errorf("ovnhost did not exit within 30 s of SIGTERM")
		}
	}
	if stopped && exitErr != nil {
		t.Errorf("ovnhost exited with %v after SIGTERM", exitErr)
	}
	if t.Failed() {
		t.Logf("daemon output:\n%s", logs.String())
	}
}

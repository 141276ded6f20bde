// Package netmanager runs Debian's NetworkManager for a test, inside one
// network namespace and on a private D-Bus bus, managing the interfaces of
// that namespace from keyfile profiles the test gives.
//
// The daemon is the real one (Debian 12's network-manager, 1.42): its
// package and the libraries this host lacks are unpacked into the cache
// by tests/harness/debtool, never installed, so no service starts and
// nothing outside the cache is written by apt. NetworkManager itself keeps
// state in /run/NetworkManager and /var/lib/NetworkManager (compiled in):
// the harness refuses to run where a NetworkManager already runs or those
// exist, and removes them at the end.
//
// Traps: NetworkManager waits for udev to announce each link unless /sys
// is read-only (how it knows it runs in a container): it is started in a
// mount namespace of its own with /sys remounted read-only. Its logs go
// to the test log on failure.
package netmanager

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/godbus/dbus/v5"

	"github.com/ovnhost/ovnhost/tests/harness/debtool"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Packages are network-manager and the libraries it links that a host
// running OVS and ovnhost does not usually have.
var Packages = []string{"network-manager", "libbluetooth3", "libmm-glib0", "libndp0", "libnewt0.52", "libnm0", "libteamdctl0"}

// stateDirs are where NetworkManager keeps state whatever it is told.
var stateDirs = []string{"/run/NetworkManager", "/var/lib/NetworkManager"}

// Device states (NM_DEVICE_STATE_*).
const (
	StateUnmanaged = 10
	StateActivated = 100
)

// NM is one NetworkManager.
type NM struct {
	// Bus is the private bus's address: DBUS_SYSTEM_BUS_ADDRESS for
	// whatever should talk to this NetworkManager.
	Bus  string
	ns   string
	dir  string
	root string
	p    *proc.Process
	t    testing.TB
}

// Start runs a private bus and NetworkManager in network namespace ns
// with the keyfile profiles given (file name -> contents).
func Start(t testing.TB, ns string, profiles map[string]string) *NM {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "dbus-daemon", "unshare", "ip")
	for _, d := range stateDirs {
		if _, err := os.Stat(d); err == nil {
			t.Fatalf("netmanager: %s exists: a NetworkManager runs or ran on this machine, and this harness would share its state; stop it and remove %s", d, d)
		}
	}
	t.Cleanup(func() {
		for _, d := range stateDirs {
			_ = os.RemoveAll(d)
		}
	})
	root := debtool.Tree(t, "network-manager", Packages...)
	m := &NM{ns: ns, dir: t.TempDir(), root: root, t: t}
	m.Bus = m.startBus()
	conns := filepath.Join(m.dir, "profiles")
	if err := os.MkdirAll(conns, 0o700); err != nil {
		t.Fatal(err)
	}
	for name, body := range profiles {
		if err := os.WriteFile(filepath.Join(conns, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	conf := "[main]\nplugins=keyfile\nno-auto-default=*\n[keyfile]\npath=" + conns + "\n[logging]\nlevel=INFO\n"
	if err := os.WriteFile(filepath.Join(m.dir, "NetworkManager.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Start()
	t.Cleanup(m.Stop)
	return m
}

func (m *NM) startBus() string {
	t := m.t
	p, _ := testenv.LookPath("dbus-daemon")
	addr := "unix:path=" + filepath.Join(m.dir, "bus")
	cmd := exec.Command(p, "--config-file=/usr/share/dbus-1/session.conf", "--address="+addr, "--nofork", "--nopidfile", "--print-address=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// The daemon prints its address once it listens.
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || !strings.HasPrefix(line, "unix:") {
		t.Fatalf("netmanager: dbus-daemon did not start: %q %v", line, err)
	}
	return addr
}

// Start starts NetworkManager (again, after Stop) and waits until it owns
// its bus name.
func (m *NM) Start() {
	t := m.t
	lib := filepath.Join(m.root, "usr/lib/x86_64-linux-gnu")
	script := `mount -o remount,bind,ro /sys && exec "$@"`
	m.p = proc.MustStart(t, proc.Spec{Name: "NetworkManager", Path: "ip",
		Args: []string{"netns", "exec", m.ns, "unshare", "-m", "sh", "-c", script, "sh",
			filepath.Join(m.root, "usr/sbin/NetworkManager"), "--no-daemon", "--debug",
			"--config=" + filepath.Join(m.dir, "NetworkManager.conf"),
			"--state-file=" + filepath.Join(m.dir, "state"), "--pid-file=" + filepath.Join(m.dir, "pid")},
		Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "DBUS_SYSTEM_BUS_ADDRESS=" + m.Bus, "LD_LIBRARY_PATH=" + lib},
		Log: filepath.Join(m.dir, "NetworkManager.log")})
	if err := proc.Poll("NetworkManager on its bus", 30*time.Second, 20*time.Millisecond, m.p.Exited(), func() (bool, error) {
		return m.onBus(), nil
	}); err != nil {
		t.Fatalf("netmanager: %v\n%s", err, m.p.LogTail(40))
	}
}

func (m *NM) onBus() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := dbus.Connect(m.Bus, dbus.WithContext(ctx))
	if err != nil {
		return false
	}
	defer conn.Close()
	var owned bool
	return conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, "org.freedesktop.NetworkManager").Store(&owned) == nil && owned
}

// Stop stops NetworkManager (SIGTERM: it leaves the interfaces as they are).
func (m *NM) Stop() {
	if m.p == nil || !m.p.Running() {
		return
	}
	if m.t.Failed() {
		m.t.Logf("NetworkManager's log:\n%s", m.p.LogTail(60))
	}
	m.p.Terminate(10 * time.Second)
}

// Log is NetworkManager's log so far.
func (m *NM) Log() string { return m.p.LogTail(200) }

// DeviceState is NetworkManager's state of iface, and whether it knows it.
func (m *NM) DeviceState(iface string) (state uint32, managed, known bool, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := dbus.Connect(m.Bus, dbus.WithContext(ctx))
	if err != nil {
		return 0, false, false, err
	}
	defer conn.Close()
	var p dbus.ObjectPath
	if err := conn.Object("org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager").CallWithContext(ctx, "org.freedesktop.NetworkManager.GetDeviceByIpIface", 0, iface).Store(&p); err != nil {
		if strings.Contains(err.Error(), "No device found") {
			return 0, false, false, nil
		}
		return 0, false, false, err
	}
	dev := conn.Object("org.freedesktop.NetworkManager", p)
	s, err := dev.GetProperty("org.freedesktop.NetworkManager.Device.State")
	if err != nil {
		return 0, false, true, err
	}
	mg, err := dev.GetProperty("org.freedesktop.NetworkManager.Device.Managed")
	if err != nil {
		return 0, false, true, err
	}
	st, _ := s.Value().(uint32)
	mb, _ := mg.Value().(bool)
	return st, mb, true, nil
}

// WaitState waits until NetworkManager has iface in state.
func (m *NM) WaitState(iface string, state uint32, timeout time.Duration) error {
	last := ""
	err := proc.Poll(fmt.Sprintf("NetworkManager's %s in state %d", iface, state), timeout, 50*time.Millisecond, m.p.Exited(), func() (bool, error) {
		s, managed, known, err := m.DeviceState(iface)
		last = fmt.Sprintf("state %d managed %t known %t err %v", s, managed, known, err)
		return err == nil && known && s == state, nil
	})
	if err != nil {
		return fmt.Errorf("%w (last: %s)", err, last)
	}
	return nil
}

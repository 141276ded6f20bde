package netmanager

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/debtool"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// InVM is NetworkManager running inside a qemu guest (tests/harness/qemuvm),
// where it manages the guest's real NICs on the kernel datapath's side.
// The guest sees the host's file system, so the unpacked package is used
// where debtool left it; its state goes to the guest's own /run and
// overlay, never the host's.
type InVM struct {
	// Bus is the private bus's address inside the guest.
	Bus string
	vm  *qemuvm.VM
	nm  *qemuvm.Proc
	lib string
	bin string
	n   int
}

// vmDir holds the configuration and the bus in the guest.
const vmDir = "/run/ovnhost-test-nm"

// StartInVM runs a private bus and NetworkManager in vm with the keyfile
// profiles given (file name -> contents) and waits until it owns its name.
func StartInVM(t testing.TB, vm *qemuvm.VM, profiles map[string]string) *InVM {
	t.Helper()
	root := debtool.Tree(t, "network-manager", Packages...)
	m := &InVM{Bus: "unix:path=" + vmDir + "/bus", vm: vm,
		lib: filepath.Join(root, "usr/lib/x86_64-linux-gnu"), bin: filepath.Join(root, "usr/sbin/NetworkManager")}
	for name, body := range profiles {
		vm.WriteFile(t, vmDir+"/profiles/"+name, []byte(body), 0o600)
	}
	conf := "[main]\nplugins=keyfile\nno-auto-default=*\n[keyfile]\npath=" + vmDir + "/profiles\n[logging]\nlevel=INFO\n"
	vm.WriteFile(t, vmDir+"/NetworkManager.conf", []byte(conf), 0o644)
	bus := vm.Spawn(t, vmDir+"/dbus.log", nil, "dbus-daemon", "--config-file=/usr/share/dbus-1/session.conf", "--address="+m.Bus, "--nofork", "--nopidfile", "--print-address=1")
	if err := bus.WaitLog("unix:path=", 30*time.Second); err != nil {
		t.Fatalf("netmanager: dbus-daemon in %s: %v", vm.Name, err)
	}
	m.Start(t)
	return m
}

// Start starts NetworkManager (again, after Stop): /sys read-only in its
// own mount namespace, as on the host (no udev), its log in
// <dir>/NetworkManager-<n>.log.
func (m *InVM) Start(t testing.TB) {
	t.Helper()
	m.n++
	script := `mount -o remount,bind,ro /sys && exec "$@"`
	m.nm = m.vm.Spawn(t, m.Log(), []string{"DBUS_SYSTEM_BUS_ADDRESS=" + m.Bus, "LD_LIBRARY_PATH=" + m.lib},
		"unshare", "-m", "sh", "-c", script, "sh", m.bin, "--no-daemon", "--debug",
		"--config="+vmDir+"/NetworkManager.conf", "--state-file="+vmDir+"/state", "--pid-file="+vmDir+"/pid")
	if err := m.nm.WaitLog(`acquired D-Bus service "org.freedesktop.NetworkManager"`, time.Minute); err != nil {
		t.Fatalf("netmanager in %s: %v", m.vm.Name, err)
	}
}

// Log is the current run's log file in the guest.
func (m *InVM) Log() string { return fmt.Sprintf("%s/NetworkManager-%d.log", vmDir, m.n) }

// Stop stops NetworkManager (SIGTERM: it leaves the interfaces as they are).
func (m *InVM) Stop(t testing.TB) {
	t.Helper()
	if err := m.nm.Signal(15, false); err != nil {
		t.Fatal(err)
	}
	if _, err := m.nm.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
}

// WaitLog waits for pattern in the current run's log.
func (m *InVM) WaitLog(pattern string, timeout time.Duration) error {
	return m.nm.WaitLog(pattern, timeout)
}

var (
	objectPath = regexp.MustCompile(`^o "([^"]+)"`)
	uintValue  = regexp.MustCompile(`^u (\d+)`)
)

// DeviceState is NetworkManager's state of iface (NM_DEVICE_STATE_*),
// asked over its D-Bus API with busctl; known is false when it does not
// know iface.
func (m *InVM) DeviceState(t testing.TB, iface string) (state int, known bool) {
	t.Helper()
	bc := []string{"busctl", "--address=" + m.Bus}
	r, err := m.vm.Exec(qemuvm.Cmd{Argv: append(bc, "call", "org.freedesktop.NetworkManager", "/org/freedesktop/NetworkManager",
		"org.freedesktop.NetworkManager", "GetDeviceByIpIface", "s", iface), Timeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	p := objectPath.FindStringSubmatch(strings.TrimSpace(string(r.Stdout)))
	if r.Exit != 0 || p == nil {
		return 0, false
	}
	out := m.vm.Run(t, append(bc, "get-property", "org.freedesktop.NetworkManager", p[1], "org.freedesktop.NetworkManager.Device", "State")...)
	v := uintValue.FindStringSubmatch(strings.TrimSpace(out))
	if v == nil {
		t.Fatalf("netmanager: State of %s: %q", iface, out)
	}
	s, _ := strconv.Atoi(v[1])
	return s, true
}

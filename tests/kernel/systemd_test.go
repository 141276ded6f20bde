package kernel

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// hostUnits are the host root's enabled services that must not run in the
// guest: Debian's own OVS/OVN (the unit conflicts with them, and a node
// never runs both), and what else this machine enables.
var hostUnits = []string{
	"openvswitch-switch.service", "ovsdb-server.service", "ovs-vswitchd.service",
	"ovn-host.service", "ovn-controller.service", "ovn-central.service", "ovn-northd.service",
	"ovn-ovsdb-server-nb.service", "ovn-ovsdb-server-sb.service",
	"containerd.service", "postgresql.service", "podman.service", "podman.socket",
	"podman-restart.service", "podman-auto-update.service", "e2scrub_reap.service",
	"apt-daily.timer", "apt-daily-upgrade.timer", "dpkg-db-backup.timer", "e2scrub_all.timer", "fstrim.timer",
	"getty@tty1.service", "serial-getty@ttyS0.service", "systemd-timesyncd.service",
}

// The shipped capability bounding set (systemd/ovnhost.service):
// CAP_NET_ADMIN 12, CAP_NET_RAW 13, CAP_IPC_LOCK 14, CAP_SYS_ADMIN 21,
// CAP_SYS_NICE 23.
const unitCapBnd = 1<<12 | 1<<13 | 1<<14 | 1<<21 | 1<<23

// TestSystemdHome: the systemd home for real (issue 17). A VM boots
// Debian's systemd 252 as PID 1; the RPM's unit, sysconfig and programs
// are installed where the package puts them, and:
//   - `systemctl start` returns once READY=1 came: the unit is active and
//     /readyz answers 200 at that moment;
//   - `systemctl status` shows the STATUS= line;
//   - the node runs on the unit's capability bounding set alone;
//   - a hung ovnhost (SIGSTOP) is killed by the watchdog and restarted,
//     ready again, and has adopted the datapath daemons (same pids) (a drop-in shortens WatchdogSec and TimeoutAbortSec so
//     the test does not wait out the shipped 30 s + 45 s);
//   - an upgrade's SIGUSR2 (the RPM's %postun) restarts ovnhost, which
//     adopts the daemons again;
//   - `systemctl stop` leaves no process, datapath device or socket.
func TestSystemdHome(t *testing.T) {
	b := programs(t)
	vm := qemuvm.Boot(t, qemuvm.Config{Name: "sdnode", Memory: 1536, Systemd: true, Mask: hostUnits,
		NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
	root := testenv.RepoRoot()
	vm.Sh(t, strings.Join([]string{
		"install -m 0755 " + b.ovnhost + " /usr/bin/ovnhost",
		"install -m 0755 " + b.cni + " /usr/bin/ovnhost-cni",
		"install -m 0755 " + b.netctl + " /usr/bin/netctl",
		"install -D -m 0644 " + filepath.Join(root, "systemd/ovnhost.service") + " /usr/lib/systemd/system/ovnhost.service",
		"install -D -m 0644 " + filepath.Join(root, "systemd/ovnhost.sysconfig") + " /etc/sysconfig/ovnhost",
		"install -D -m 0644 " + filepath.Join(root, "systemd/ovnhost-modules.conf") + " /usr/lib/modules-load.d/ovnhost.conf",
		"install -d -m 0750 /etc/ovnhost /var/lib/openvswitch /var/lib/ovn /var/log/openvswitch /var/log/ovn",
		"install -d -m 0755 /etc/cni/net.d",
		"mkdir -p /etc/systemd/system/ovnhost.service.d",
		"printf '[Service]\\nWatchdogSec=10\\nTimeoutAbortSec=5\\n' > /etc/systemd/system/ovnhost.service.d/test-watchdog.conf",
		"systemctl daemon-reload",
	}, "\n"))

	t0 := time.Now()
	r, err := vm.Exec(qemuvm.Cmd{Argv: []string{"systemctl", "start", "ovnhost"}, Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("systemctl start ovnhost: %v\n%s", err, tailLines(journal(t, vm), 60))
	}
	t.Logf("systemctl start returned after %s", time.Since(t0).Round(time.Millisecond))
	// Right when start returned: active, and the node says it is ready.
	if code := vm.Run(t, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:10665/readyz"); code != "200" {
		t.Errorf("/readyz right after systemctl start returned: %s (start must return only after READY=1)", code)
	}
	props := unitProps(t, vm)
	if props["ActiveState"] != "active" || props["SubState"] != "running" {
		t.Errorf("after start: ActiveState=%s SubState=%s, want active running", props["ActiveState"], props["SubState"])
	}
	if !strings.HasPrefix(props["StatusText"], "ready") {
		t.Errorf("StatusText %q, want the daemon's STATUS=ready...", props["StatusText"])
	}
	if st, _ := vm.Exec(qemuvm.Cmd{Argv: []string{"systemctl", "status", "--no-pager", "ovnhost"}}); st == nil || !strings.Contains(st.Stdout, "Status: \"ready") {
		t.Errorf("systemctl status does not show the STATUS= line:\n%v", st)
	}
	mainPid := props["MainPID"]
	bnd := capBnd(t, vm, mainPid)
	if bnd != unitCapBnd {
		t.Errorf("ovnhost's CapBnd %#x, want the unit's %#x", bnd, unitCapBnd)
	}
	for _, child := range []string{"ovs-vswitchd", "ovn-controller"} {
		pid := strings.TrimSpace(vm.Run(t, "pgrep", "-o", "-x", child))
		if got := capBnd(t, vm, pid); got&^unitCapBnd != 0 {
			t.Errorf("%s has capabilities outside the unit's set: CapBnd %#x", child, got)
		}
	}
	if dp := vm.Run(t, "ovs-dpctl", "show"); !strings.Contains(dp, "system@ovs-system") {
		t.Errorf("not on the kernel datapath under systemd:\n%s", dp)
	}

	// The watchdog: a stopped ovnhost feeds it no more. systemd kills it
	// alone (KillMode=process); the datapath daemons keep running and the
	// restarted ovnhost adopts them.
	childPids := map[string]string{}
	for _, child := range []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller"} {
		childPids[child] = strings.TrimSpace(vm.Run(t, "pgrep", "-o", "-x", child))
	}
	vm.Run(t, "kill", "-STOP", mainPid)
	t1 := time.Now()
	res, err := vm.ShResult(`until [ "$(systemctl show -p NRestarts --value ovnhost)" -ge 1 ] && systemctl is-active -q ovnhost; do sleep 0.5; done`, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut {
		t.Fatalf("a SIGSTOPped ovnhost was not restarted by the watchdog within 3 min\n%s", tailLines(journal(t, vm), 60))
	}
	t.Logf("watchdog restart: active again %s after SIGSTOP", time.Since(t1).Round(time.Millisecond))
	if j := journal(t, vm); !strings.Contains(j, "ovnhost.service: Watchdog timeout") {
		t.Errorf("the journal does not name the watchdog:\n%s", tailLines(j, 30))
	}
	if now := unitProps(t, vm)["MainPID"]; now == mainPid || now == "0" {
		t.Errorf("MainPID %s after the watchdog restart (was %s)", now, mainPid)
	}
	if code := vm.Run(t, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:10665/readyz"); code != "200" {
		t.Errorf("/readyz after the watchdog restart: %s", code)
	}
	for child, before := range childPids {
		if now := strings.TrimSpace(vm.Run(t, "pgrep", "-o", "-x", child)); now != before {
			t.Errorf("%s: pid %s after the watchdog restart, want %s adopted (KillMode=process, OVNHOST_ADOPT_CHILDREN)", child, now, before)
		}
	}
	if j := journal(t, vm); !strings.Contains(j, "adopted the running child of an earlier ovnhost") {
		t.Errorf("the journal does not show the adoption:\n%s", tailLines(j, 30))
	}

	// An upgrade of ovnhost as the RPM does it: SIGUSR2 to the main
	// process, exit 75, restarted by systemd (RestartForceExitStatus), the
	// daemons adopted again.
	mainPid = unitProps(t, vm)["MainPID"]
	vm.Run(t, "systemctl", "kill", "--signal=SIGUSR2", "--kill-who=main", "ovnhost")
	res, err = vm.ShResult(`until [ "$(systemctl show -p NRestarts --value ovnhost)" -ge 2 ] && systemctl is-active -q ovnhost; do sleep 0.5; done`, 3*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if res.TimedOut {
		t.Fatalf("ovnhost was not restarted after SIGUSR2 within 3 min\n%s", tailLines(journal(t, vm), 60))
	}
	if now := unitProps(t, vm)["MainPID"]; now == mainPid || now == "0" {
		t.Errorf("MainPID %s after the SIGUSR2 hand-over (was %s)", now, mainPid)
	}
	for child, before := range childPids {
		if now := strings.TrimSpace(vm.Run(t, "pgrep", "-o", "-x", child)); now != before {
			t.Errorf("%s: pid %s after the SIGUSR2 hand-over, want %s adopted", child, now, before)
		}
	}
	if code := vm.Run(t, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:10665/readyz"); code != "200" {
		t.Errorf("/readyz after the hand-over: %s", code)
	}

	// Stop leaves nothing.
	vm.MustExec(t, qemuvm.Cmd{Argv: []string{"systemctl", "stop", "ovnhost"}, Timeout: 2 * time.Minute})
	if props := unitProps(t, vm); props["ActiveState"] != "inactive" {
		t.Errorf("after stop: ActiveState=%s (Result=%s), want inactive", props["ActiveState"], props["Result"])
	}
	left := vm.Sh(t, `pgrep -l -x 'ovnhost|ovsdb-server|ovs-vswitchd|ovn-controller|ovn-northd' || true
for l in br-int ovn0 genev_sys_6081; do ip link show "$l" >/dev/null 2>&1 && echo "link $l"; done
find /run/ovnhost /run/openvswitch /run/ovn -mindepth 1 2>/dev/null || true`)
	if strings.TrimSpace(left) != "" {
		t.Errorf("systemctl stop left behind:\n%s", left)
	}
}

// unitProps reads ovnhost.service's state from systemd.
func unitProps(t testing.TB, vm *qemuvm.VM) map[string]string {
	t.Helper()
	out := vm.Run(t, "systemctl", "show", "-p", "ActiveState,SubState,Result,StatusText,MainPID,NRestarts", "ovnhost")
	props := map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			props[k] = v
		}
	}
	return props
}

// capBnd reads a process's capability bounding set.
func capBnd(t testing.TB, vm *qemuvm.VM, pid string) uint64 {
	t.Helper()
	status := vm.Run(t, "cat", "/proc/"+pid+"/status")
	m := regexp.MustCompile(`(?m)^CapBnd:\s*([0-9a-f]+)$`).FindStringSubmatch(status)
	if m == nil {
		t.Fatalf("no CapBnd for pid %s", pid)
	}
	v, _ := strconv.ParseUint(m[1], 16, 64)
	return v
}

func journal(t testing.TB, vm *qemuvm.VM) string {
	t.Helper()
	r, err := vm.Exec(qemuvm.Cmd{Argv: []string{"journalctl", "--no-pager", "-u", "ovnhost"}})
	if err != nil || r == nil {
		return ""
	}
	return r.Stdout
}

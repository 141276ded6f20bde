package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// With --adopt-children (the systemd home's setting), kill -9 of ovnhost
// leaves ovsdb-server, ovs-vswitchd and ovn-controller (and the all-in-one
// central) running, and the next ovnhost takes them over: the same pids,
// no packet lost between two pods, their output in the new ovnhost's log,
// an upgrade hand-over (SIGUSR2) that leaves them again, a later crash of
// an adopted child restarted as usual, and a normal stop leaves nothing.
func TestSupervisorCrashLeavesChildrenToBeAdopted(t *testing.T) {
	n := newNode(t)
	// Whatever happens, no orphan outlives the test.
	t.Cleanup(func() { killProcessesUnder(n.dir) })
	n.start("--adopt-children")
	pods := []pod{
		{hostIf: "veth-a1", lsp: "a1.default", mac: "0a:58:0a:10:00:51", ip: "10.16.0.51"},
		{hostIf: "veth-a2", lsp: "a2.default", mac: "0a:58:0a:10:00:52", ip: "10.16.0.52"},
	}
	addPods(t, n, pods...)
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("before the crash: %v", err)
	}
	children := map[string]string{
		"ovsdb-server": n.path("ovs-run", "ovsdb-server.pid"), "ovs-vswitchd": n.path("ovs-run", "ovs-vswitchd.pid"),
		"ovn-controller": n.path("ovn-run", "ovn-controller.pid"), "ovn-northd": n.path("ovn-run", "ovn-northd.pid"),
		"ovsdb-nb": n.path("ovn-run", "ovnnb_db.pid"), "ovsdb-sb": n.path("ovn-run", "ovnsb_db.pid"),
	}
	before := map[string]int{}
	for name, pf := range children {
		before[name] = n.pid(pf)
	}

	// Pings every 20 ms across the crash and the adoption: none may be lost.
	pinger := exec.Command("ip", "netns", "exec", pods[0].ns, "ping", "-n", "-i", "0.02", "-W", "1", pods[1].ip)
	var pingOut strings.Builder
	pinger.Stdout, pinger.Stderr = &pingOut, &pingOut
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	defer pinger.Process.Kill()

	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.log.Close()
	for name, pid := range before {
		if !alive(pid) {
			t.Fatalf("%s (pid %d) died with ovnhost although --adopt-children", name, pid)
		}
	}
	// A change while nobody reads their output: ovs-vswitchd logs the new
	// port to a FIFO without a reader and must not die of it (SIGPIPE).
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.path("ovs-run", "db.sock"))
	addInternalPort(t, ovs, "orphan0")
	if err := ovs.WaitUntil(context.Background(), "ovs-vswitchd to add orphan0", func() bool {
		i := &vswitch.Interface{Name: "orphan0"}
		return ovs.Get(context.Background(), i) == nil && i.Ofport != nil && *i.Ofport > 0
	}, nil); err != nil {
		t.Fatal(err)
	}
	if !alive(before["ovs-vswitchd"]) {
		t.Fatal("ovs-vswitchd died logging while ovnhost was down")
	}

	mark := n.notify.Mark()
	if err := n.startNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.notify.WaitFor(mark, "READY=1", 60*time.Second, n.exited); err != nil {
		t.Fatalf("not ready after adopting: %v\n%s", err, n.logTail())
	}
	for name, pf := range children {
		if now := n.pid(pf); now != before[name] {
			t.Errorf("%s: pid %d after the restart, want the adopted %d", name, now, before[name])
		}
	}
	if err := n.waitLog("adopted the running child of an earlier ovnhost", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The adopted ovs-vswitchd's output reaches the new ovnhost's log.
	addInternalPort(t, ovs, "adopted0")
	if err := n.waitLog("adopted0", 20*time.Second); err != nil {
		t.Fatalf("no output of the adopted ovs-vswitchd in the log: %v\n%s", err, n.logTail())
	}

	// An upgrade of ovnhost (the RPM sends SIGUSR2): exit 75 with the
	// daemons left running, and the next ovnhost adopts them again.
	_ = n.cmd.Process.Signal(syscall.SIGUSR2)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("ovnhost did not exit within 60s of SIGUSR2\n%s", n.logTail())
	}
	n.log.Close()
	if code := n.cmd.ProcessState.ExitCode(); code != 75 {
		t.Fatalf("exit %d after SIGUSR2, want 75 (stopped for an upgrade)\n%s", code, n.logTail())
	}
	for name, pid := range before {
		if !alive(pid) {
			t.Fatalf("%s (pid %d) was stopped by the hand-over\n%s", name, pid, n.logTail())
		}
	}
	mark = n.notify.Mark()
	if err := n.startNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.notify.WaitFor(mark, "READY=1", 60*time.Second, n.exited); err != nil {
		t.Fatalf("not ready after the hand-over: %v\n%s", err, n.logTail())
	}
	for name, pf := range children {
		if now := n.pid(pf); now != before[name] {
			t.Errorf("after the hand-over %s is pid %d, want the adopted %d", name, now, before[name])
		}
	}
	_ = pinger.Process.Signal(syscall.SIGINT)
	_ = pinger.Wait()
	if m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(pingOut.String()); m == nil || m[1] != m[2] || m[1] == "0" {
		t.Fatalf("pings lost across the crash and the adoption:\n%s", pingOut.String())
	}

	// An adopted child that dies is seen (it is not our child: pidfd) and
	// restarted like any other.
	mark = n.notify.Mark()
	if err := syscall.Kill(before["ovs-vswitchd"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := n.notify.WaitFor(mark, "STATUS=ovs-vswitchd died", 20*time.Second, n.exited); err != nil {
		t.Fatalf("the death of the adopted ovs-vswitchd went unseen: %v\n%s", err, n.logTail())
	}
	if _, err := n.notify.WaitFor(mark, "STATUS=ready", 30*time.Second, n.exited); err != nil {
		t.Fatalf("not ready after restarting the adopted ovs-vswitchd: %v\n%s", err, n.logTail())
	}
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("after restarting the adopted ovs-vswitchd: %v\n%s", err, n.logTail())
	}

	if code := n.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.logTail())
	}
	if left := processesUnder(n.dir); len(left) > 0 {
		t.Fatalf("processes left running after the stop:\n%s", strings.Join(left, "\n"))
	}
	for _, d := range []string{"ovs-run", "ovn-run"} {
		entries, _ := os.ReadDir(n.path(d))
		for _, e := range entries {
			t.Errorf("left in %s: %s", d, e.Name())
		}
	}
}

// Two ovnhosts on the same directories: the second exits with a message
// naming the lock, and the first keeps running.
func TestSecondOvnhostOnTheSameDirectoriesIsRefused(t *testing.T) {
	n := newNode(t)
	n.start()
	second := &node{t: t, dir: n.dir, ns: n.ns, args: n.args, notify: n.notify}
	if err := second.startNoWait("--health-addr=127.0.0.1:10675"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.exited:
	case <-time.After(60 * time.Second):
		t.Fatalf("the second ovnhost did not exit\n%s", n.logTail())
	}
	log := string(must(os.ReadFile(n.path("ovnhost.log"))))
	if second.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(log, "another ovnhost already runs on these directories") {
		t.Fatalf("second ovnhost: exit %d, want non-zero with the lock named\n%s", second.cmd.ProcessState.ExitCode(), n.logTail())
	}
	if code, _, err := n.httpGet("/readyz"); err != nil || code != 200 {
		t.Fatalf("the first ovnhost is not ready any more: %d %v", code, err)
	}
}

// addInternalPort adds an internal port to br-int (ovs-vswitchd logs it).
func addInternalPort(t *testing.T, ovs *ovsdbconn.Conn, name string) {
	t.Helper()
	ctx := context.Background()
	br := &vswitch.Bridge{Name: "br-int"}
	if err := ovs.Get(ctx, br); err != nil {
		t.Fatal(err)
	}
	o1, err := ovs.Create(&vswitch.Interface{UUID: "iface", Name: name, Type: "internal"})
	if err != nil {
		t.Fatal(err)
	}
	o2, err := ovs.Create(&vswitch.Port{UUID: "port", Name: name, Interfaces: []string{"iface"}})
	if err != nil {
		t.Fatal(err)
	}
	o3, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"port"}})
	transact(t, ovs, append(append(o1, o2...), o3...), err)
}

func alive(pid int) bool {
	return syscall.Kill(pid, 0) == nil && !isZombie(pid)
}

func isZombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && s[i+2] == 'Z'
}

// killProcessesUnder SIGKILLs every process whose command line names dir.
func killProcessesUnder(dir string) {
	for _, p := range processesUnder(dir) {
		var pid int
		if _, err := fmt.Sscanf(p, "%d", &pid); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// ovs-vswitchd died while ovnhost was down: ovsdb-server is adopted, but
// ovn-controller is restarted with the new ovs-vswitchd (as after any
// ovs-vswitchd restart) instead of being adopted with a dead OpenFlow
// connection, and the pods are reachable again.
func TestAdoptionRestartsOVNControllerWithAFreshVswitchd(t *testing.T) {
	n := newNode(t)
	t.Cleanup(func() { killProcessesUnder(n.dir) })
	n.start("--adopt-children")
	pods := []pod{
		{hostIf: "veth-b1", lsp: "b1.default", mac: "0a:58:0a:10:00:61", ip: "10.16.0.61"},
		{hostIf: "veth-b2", lsp: "b2.default", mac: "0a:58:0a:10:00:62", ip: "10.16.0.62"},
	}
	addPods(t, n, pods...)
	dbPid := n.pid(n.path("ovs-run", "ovsdb-server.pid"))
	vsPid := n.pid(n.path("ovs-run", "ovs-vswitchd.pid"))
	ctlPid := n.pid(n.path("ovn-run", "ovn-controller.pid"))
	_ = n.cmd.Process.Signal(syscall.SIGKILL)
	<-n.exited
	n.log.Close()
	if err := syscall.Kill(vsPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mark := n.notify.Mark()
	if err := n.startNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.notify.WaitFor(mark, "READY=1", 60*time.Second, n.exited); err != nil {
		t.Fatalf("not ready: %v\n%s", err, n.logTail())
	}
	if now := n.pid(n.path("ovs-run", "ovsdb-server.pid")); now != dbPid {
		t.Errorf("ovsdb-server pid %d, want %d adopted", now, dbPid)
	}
	if now := n.pid(n.path("ovn-run", "ovn-controller.pid")); now == ctlPid || alive(ctlPid) {
		t.Errorf("ovn-controller %d was kept with a fresh ovs-vswitchd (pid now %d)", ctlPid, now)
	}
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("pods after the restart: %v\n%s", err, n.logTail())
	}
	if code := n.stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.logTail())
	}
	if left := processesUnder(n.dir); len(left) > 0 {
		t.Fatalf("processes left running:\n%s", strings.Join(left, "\n"))
	}
}

package node_test

import (
	"context"
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
	"github.com/ovnhost/ovnhost/tests/harness/proc"
)

// With --adopt-children (the systemd home's setting), kill -9 of ovnhost
// leaves ovsdb-server, ovs-vswitchd and ovn-controller (and the all-in-one
// central) running, and the next ovnhost takes them over: the same pids,
// no packet lost between two pods, their output in the new ovnhost's log,
// an upgrade hand-over (SIGUSR2) that leaves them again, a later crash of
// an adopted child restarted as usual, and a normal stop leaves nothing.
func TestSupervisorCrashLeavesChildrenToBeAdopted(t *testing.T) {
	testSupervisorCrashAdoption(t, false)
}

// The same on a kernel without pidfd_open (before 5.3: CentOS 7.9's
// 3.10), forced here: the adopted children's exits are seen in /proc,
// and the log says so.
func TestSupervisorCrashLeavesChildrenToBeAdoptedWithoutPidfd(t *testing.T) {
	testSupervisorCrashAdoption(t, true)
}

// noPidfdLog is what ovnhost logs for each child adopted without a pidfd.
const noPidfdLog = "no pidfd for the adopted child: its exit is checked in /proc"

func testSupervisorCrashAdoption(t *testing.T, withoutPidfd bool) {
	n := newNode(t)
	if withoutPidfd {
		// Read by supervisor/process only; not a setting.
		n.Env = append(n.Env, "TEST_ADOPT_WITHOUT_PIDFD=1")
	}
	// Whatever happens, no orphan outlives the test.
	t.Cleanup(func() { killProcessesUnder(n.Dir) })
	n.Start("--adopt-children")
	pods := []pod{
		{hostIf: "veth-a1", lsp: "a1.default", mac: "0a:58:0a:10:00:51", ip: "10.16.0.51"},
		{hostIf: "veth-a2", lsp: "a2.default", mac: "0a:58:0a:10:00:52", ip: "10.16.0.52"},
	}
	addPods(t, n, pods...)
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("before the crash: %v", err)
	}
	children := map[string]string{
		"ovsdb-server": n.Path("ovs-run", "ovsdb-server.pid"), "ovs-vswitchd": n.Path("ovs-run", "ovs-vswitchd.pid"),
		"ovn-controller": n.Path("ovn-run", "ovn-controller.pid"), "ovn-northd": n.Path("ovn-run", "ovn-northd.pid"),
		"ovsdb-nb": n.Path("ovn-run", "ovnnb_db.pid"), "ovsdb-sb": n.Path("ovn-run", "ovnsb_db.pid"),
	}
	before := map[string]int{}
	for name, pf := range children {
		before[name] = n.ReadPid(pf)
	}

	// Pings every 20 ms across the crash and the adoption: none may be lost.
	pinger := exec.Command("ip", "netns", "exec", pods[0].ns, "ping", "-n", "-i", "0.02", "-W", "1", pods[1].ip)
	var pingOut strings.Builder
	pinger.Stdout, pinger.Stderr = &pingOut, &pingOut
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	defer pinger.Process.Kill()

	_ = n.Signal(syscall.SIGKILL)
	<-n.Exited()
	for name, pid := range before {
		if !alive(pid) {
			t.Fatalf("%s (pid %d) died with ovnhost although --adopt-children", name, pid)
		}
	}
	// A change while nobody reads their output: ovs-vswitchd logs the new
	// port to a FIFO without a reader and must not die of it (SIGPIPE).
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
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

	mark := n.Notify.Mark()
	if err := n.StartNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "READY=1", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready after adopting: %v\n%s", err, n.LogTail())
	}
	for name, pf := range children {
		if now := n.ReadPid(pf); now != before[name] {
			t.Errorf("%s: pid %d after the restart, want the adopted %d", name, now, before[name])
		}
	}
	if err := n.WaitLog("adopted the running child of an earlier ovnhost", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	wantFallback := 0
	if withoutPidfd {
		wantFallback = len(children)
	}
	if got := strings.Count(string(must(os.ReadFile(n.Log()))), noPidfdLog); got != wantFallback {
		t.Fatalf("%d children adopted without a pidfd (log %q), want %d\n%s", got, noPidfdLog, wantFallback, n.LogTail())
	}
	// The adopted ovs-vswitchd's output reaches the new ovnhost's log.
	addInternalPort(t, ovs, "adopted0")
	if err := n.WaitLog("adopted0", 20*time.Second); err != nil {
		t.Fatalf("no output of the adopted ovs-vswitchd in the log: %v\n%s", err, n.LogTail())
	}

	// An upgrade of ovnhost (the RPM sends SIGUSR2): exit 75 with the
	// daemons left running, and the next ovnhost adopts them again.
	_ = n.Signal(syscall.SIGUSR2)
	select {
	case <-n.Exited():
	case <-time.After(60 * time.Second):
		t.Fatalf("ovnhost did not exit within 60s of SIGUSR2\n%s", n.LogTail())
	}
	if code := n.ExitCode(); code != 75 {
		t.Fatalf("exit %d after SIGUSR2, want 75 (stopped for an upgrade)\n%s", code, n.LogTail())
	}
	for name, pid := range before {
		if !alive(pid) {
			t.Fatalf("%s (pid %d) was stopped by the hand-over\n%s", name, pid, n.LogTail())
		}
	}
	mark = n.Notify.Mark()
	if err := n.StartNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "READY=1", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready after the hand-over: %v\n%s", err, n.LogTail())
	}
	for name, pf := range children {
		if now := n.ReadPid(pf); now != before[name] {
			t.Errorf("after the hand-over %s is pid %d, want the adopted %d", name, now, before[name])
		}
	}
	_ = pinger.Process.Signal(syscall.SIGINT)
	_ = pinger.Wait()
	if lost := pingsLost(pingOut.String()); lost != "" {
		t.Fatalf("pings lost across the crash and the adoption (%s):\n%s", lost, pingOut.String())
	}

	// An adopted child that dies is seen (it is not our child: pidfd, or
	// /proc without one) and restarted like any other.
	mark = n.Notify.Mark()
	if err := syscall.Kill(before["ovs-vswitchd"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "STATUS=ovs-vswitchd died", 20*time.Second, n.Exited()); err != nil {
		t.Fatalf("the death of the adopted ovs-vswitchd went unseen: %v\n%s", err, n.LogTail())
	}
	if _, err := n.Notify.WaitFor(mark, "STATUS=ready", 30*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready after restarting the adopted ovs-vswitchd: %v\n%s", err, n.LogTail())
	}
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("after restarting the adopted ovs-vswitchd: %v\n%s", err, n.LogTail())
	}

	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	if left := processesUnder(n.Dir); len(left) > 0 {
		t.Fatalf("processes left running after the stop:\n%s", strings.Join(left, "\n"))
	}
	for _, d := range []string{"ovs-run", "ovn-run"} {
		entries, _ := os.ReadDir(n.Path(d))
		for _, e := range entries {
			t.Errorf("left in %s: %s", d, e.Name())
		}
	}
}

// Two ovnhosts on the same directories: the second exits with a message
// naming the lock, and the first keeps running.
func TestSecondOvnhostOnTheSameDirectoriesIsRefused(t *testing.T) {
	n := newNode(t)
	n.Start()
	second := n.Clone()
	if err := second.StartNoWait("--health-addr=127.0.0.1:10675"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-second.Exited():
	case <-time.After(60 * time.Second):
		t.Fatalf("the second ovnhost did not exit\n%s", n.LogTail())
	}
	log := string(must(os.ReadFile(n.Path("ovnhost.log"))))
	if second.ExitCode() == 0 || !strings.Contains(log, "another ovnhost already runs on these directories") {
		t.Fatalf("second ovnhost: exit %d, want non-zero with the lock named\n%s", second.ExitCode(), n.LogTail())
	}
	if code, _, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
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
	return syscall.Kill(pid, 0) == nil && !proc.Zombie(pid)
}

// killProcessesUnder SIGKILLs every process whose command line names dir.
func killProcessesUnder(dir string) { proc.KillMentioning(dir) }

// ovs-vswitchd died while ovnhost was down: ovsdb-server is adopted, but
// ovn-controller is restarted with the new ovs-vswitchd (as after any
// ovs-vswitchd restart) instead of being adopted with a dead OpenFlow
// connection, and the pods are reachable again.
func TestAdoptionRestartsOVNControllerWithAFreshVswitchd(t *testing.T) {
	n := newNode(t)
	t.Cleanup(func() { killProcessesUnder(n.Dir) })
	n.Start("--adopt-children")
	pods := []pod{
		{hostIf: "veth-b1", lsp: "b1.default", mac: "0a:58:0a:10:00:61", ip: "10.16.0.61"},
		{hostIf: "veth-b2", lsp: "b2.default", mac: "0a:58:0a:10:00:62", ip: "10.16.0.62"},
	}
	addPods(t, n, pods...)
	dbPid := n.ReadPid(n.Path("ovs-run", "ovsdb-server.pid"))
	vsPid := n.ReadPid(n.Path("ovs-run", "ovs-vswitchd.pid"))
	ctlPid := n.ReadPid(n.Path("ovn-run", "ovn-controller.pid"))
	_ = n.Signal(syscall.SIGKILL)
	<-n.Exited()
	if err := syscall.Kill(vsPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	mark := n.Notify.Mark()
	if err := n.StartNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "READY=1", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready: %v\n%s", err, n.LogTail())
	}
	if now := n.ReadPid(n.Path("ovs-run", "ovsdb-server.pid")); now != dbPid {
		t.Errorf("ovsdb-server pid %d, want %d adopted", now, dbPid)
	}
	if now := n.ReadPid(n.Path("ovn-run", "ovn-controller.pid")); now == ctlPid || alive(ctlPid) {
		t.Errorf("ovn-controller %d was kept with a fresh ovs-vswitchd (pid now %d)", ctlPid, now)
	}
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("pods after the restart: %v\n%s", err, n.LogTail())
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	if left := processesUnder(n.Dir); len(left) > 0 {
		t.Fatalf("processes left running:\n%s", strings.Join(left, "\n"))
	}
}

// pingsLost names the echo requests of ping's output that got no reply,
// but for the last one: it may have been in flight when the test stopped
// ping with SIGINT. "" when none was lost.
func pingsLost(out string) string {
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out)
	if m == nil {
		return "no ping statistics"
	}
	sent, _ := strconv.Atoi(m[1])
	if sent == 0 {
		return "no echo request sent"
	}
	got := map[int]bool{}
	for _, r := range regexp.MustCompile(`icmp_seq=(\d+) ttl=`).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(r[1])
		got[n] = true
	}
	var lost []string
	for seq := 1; seq < sent; seq++ {
		if !got[seq] {
			lost = append(lost, strconv.Itoa(seq))
		}
	}
	if len(lost) == 0 {
		return ""
	}
	return "no reply to icmp_seq " + strings.Join(lost, ",")
}

package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func TestAllInOneReachesReadyWithFlowsAndChassis(t *testing.T) {
	n := newNode(t)
	n.Start()

	code, body, err := n.HTTPGet("/readyz")
	if err != nil || code != 200 || strings.TrimSpace(body) != "ready" {
		t.Fatalf("/readyz = %d %q %v", code, body, err)
	}
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	br := &vswitch.Bridge{Name: "br-int"}
	if err := ovs.Get(context.Background(), br); err != nil {
		t.Fatalf("br-int missing from conf.db: %v", err)
	}
	if br.DatapathType != "netdev" || br.FailMode == nil || *br.FailMode != "secure" {
		t.Fatalf("br-int datapath_type=%q fail_mode=%v, want netdev/secure on a machine without the OVS module", br.DatapathType, br.FailMode)
	}
	flows, err := unixctl.Call(context.Background(), n.Path("ovs-run", "ovs-vswitchd.ctl"), "bridge/dump-flows", "br-int")
	if err != nil || strings.Count(flows, "actions=") < 5 {
		t.Fatalf("expected ovn-controller's flows on br-int, got %d flows (%v)", strings.Count(flows, "actions="), err)
	}
	id, err := os.ReadFile(n.Path("ovs-db", "system-id.conf"))
	if err != nil || strings.TrimSpace(string(id)) == "" {
		t.Fatalf("system-id.conf: %q %v", id, err)
	}
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(context.Background(), &roots); err != nil || len(roots) != 1 {
		t.Fatalf("Open_vSwitch rows: %v %v", roots, err)
	}
	ext := roots[0].ExternalIDs
	if ext["system-id"] != strings.TrimSpace(string(id)) || ext["hostname"] != "test-node" || ext["ovn-encap-type"] != "geneve" || !strings.HasPrefix(ext["ovn-remote"], "unix:") {
		t.Fatalf("Open_vSwitch external_ids = %v", ext)
	}
	sb := dial(t, sbdb.FullDatabaseModel, "unix:"+n.Path("ovn-run", "ovnsb_db.sock"))
	ch := &sbdb.Chassis{Name: ext["system-id"]}
	if err := sb.Get(context.Background(), ch); err != nil {
		t.Fatalf("no Chassis %q in SB: %v", ext["system-id"], err)
	}
	_, metrics, err := n.HTTPGet("/metrics")
	if err != nil || !strings.Contains(metrics, `ovnhost_child_ready{child="ovn-controller"} 1`) || !strings.Contains(metrics, `ovnhost_child_resident_memory_bytes{child="ovs-vswitchd"}`) {
		t.Fatalf("metrics lack per-child readiness or memory: %v\n%.2000s", err, metrics)
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, n.LogTail())
	}
}

func TestKillEachChildRestartsItAndPodsKeepConnectivity(t *testing.T) {
	n := newNode(t)
	n.Start()
	pods := []pod{
		{hostIf: "veth-p1", lsp: "p1.default", mac: "0a:58:0a:10:00:0b", ip: "10.16.0.11"},
		{hostIf: "veth-p2", lsp: "p2.default", mac: "0a:58:0a:10:00:0c", ip: "10.16.0.12"},
	}
	addPods(t, n, pods...)
	if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
		t.Fatalf("before any kill: %v", err)
	}
	children := []struct{ name, pidfile string }{
		{"ovs-vswitchd", n.Path("ovs-run", "ovs-vswitchd.pid")},
		{"ovn-controller", n.Path("ovn-run", "ovn-controller.pid")},
		{"ovsdb-server", n.Path("ovs-run", "ovsdb-server.pid")},
		{"ovn-northd", n.Path("ovn-run", "ovn-northd.pid")},
		{"ovsdb-sb", n.Path("ovn-run", "ovnsb_db.pid")},
		{"ovsdb-nb", n.Path("ovn-run", "ovnnb_db.pid")},
	}
	for _, c := range children {
		old := n.ReadPid(c.pidfile)
		mark := n.Notify.Mark()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatalf("kill %s: %v", c.name, err)
		}
		// The supervisor reports the death, then "ready" once the child
		// and whatever depends on it passed their gates again.
		if _, err := n.Notify.WaitFor(mark, "STATUS="+c.name+" died", 20*time.Second, n.Exited()); err != nil {
			t.Fatalf("%s: %v\n%s", c.name, err, n.LogTail())
		}
		if _, err := n.Notify.WaitFor(mark, "STATUS=ready", 30*time.Second, n.Exited()); err != nil {
			t.Fatalf("%s not ready again: %v\n%s", c.name, err, n.LogTail())
		}
		if now := n.ReadPid(c.pidfile); now == old {
			t.Fatalf("%s pidfile still names the killed pid %d", c.name, old)
		}
		if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
			t.Fatalf("after kill -9 of %s: %v\n%s", c.name, err, n.LogTail())
		}
	}
	_, body, _ := n.HTTPGet("/readyz?verbose")
	for _, c := range children {
		if !strings.Contains(body, c.name+" pid=") || strings.Contains(body, c.name+" pid=0") {
			t.Fatalf("/readyz?verbose does not show %s running:\n%s", c.name, body)
		}
	}
	_, metrics, _ := n.HTTPGet("/metrics")
	if !strings.Contains(metrics, `ovnhost_child_restarts_total{child="ovs-vswitchd"} 1`) {
		t.Fatalf("restart of ovs-vswitchd not counted:\n%.3000s", metrics)
	}
}

func TestSIGTERMLeavesNothingBehind(t *testing.T) {
	n := newNode(t)
	n.Start()
	mark := n.Notify.Mark()
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	if _, err := n.Notify.WaitFor(mark, "STOPPING=1", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if left := processesUnder(n.Dir); len(left) > 0 {
		t.Fatalf("processes left running:\n%s", strings.Join(left, "\n"))
	}
	links := run(t, "ip", "-n", n.NS, "-o", "link", "show")
	for _, l := range strings.Split(strings.TrimSpace(links), "\n") {
		if !strings.Contains(l, " lo:") {
			t.Fatalf("device left in the node's namespace: %s", l)
		}
	}
	for _, d := range []string{"ovs-run", "ovn-run"} {
		entries, _ := os.ReadDir(n.Path(d))
		for _, e := range entries {
			t.Errorf("left in %s: %s", d, e.Name())
		}
	}
	if _, err := os.Stat(n.Path("cni.sock")); err == nil {
		t.Error("the CNI socket was left behind")
	}
}

func TestOldSchemaDatabaseIsConvertedKeepingItsRows(t *testing.T) {
	n := newNode(t)
	// A conf.db made with an older vswitch schema (version lowered, one
	// column missing) holding a bridge with a port, as an older OVS left it.
	raw, err := os.ReadFile("/usr/share/openvswitch/vswitch.ovsschema")
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	newVersion := schema["version"].(string)
	schema["version"] = "8.0.0"
	cols := schema["tables"].(map[string]any)["Bridge"].(map[string]any)["columns"].(map[string]any)
	delete(cols, "datapath_version")
	old, _ := json.Marshal(schema)
	oldPath := filepath.Join(n.Dir, "vswitch-old.ovsschema")
	if err := os.WriteFile(oldPath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(n.Path("ovs-db"), 0o750); err != nil {
		t.Fatal(err)
	}
	db := n.Path("ovs-db", "conf.db")
	run(t, "ovsdb-tool", "create", db, oldPath)
	txn := `["Open_vSwitch",
	 {"op":"insert","table":"Open_vSwitch","row":{"bridges":["named-uuid","br"],"external_ids":["map",[["system-id","kept-id"],["user-key","user-value"]]]}},
	 {"op":"insert","table":"Bridge","uuid-name":"br","row":{"name":"br-old","ports":["named-uuid","p"],"datapath_type":"netdev"}},
	 {"op":"insert","table":"Port","uuid-name":"p","row":{"name":"p-old","interfaces":["named-uuid","i"]}},
	 {"op":"insert","table":"Interface","uuid-name":"i","row":{"name":"p-old","type":"internal"}}]`
	run(t, "ovsdb-tool", "transact", db, txn)

	n.Start()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	if v := ovs.Schema().Version; v != newVersion {
		t.Fatalf("conf.db schema version %s after start, want %s", v, newVersion)
	}
	br := &vswitch.Bridge{Name: "br-old"}
	if err := ovs.Get(context.Background(), br); err != nil || len(br.Ports) != 1 {
		t.Fatalf("bridge br-old lost in conversion: %v %+v", err, br)
	}
	p := &vswitch.Port{UUID: br.Ports[0]}
	if err := ovs.Get(context.Background(), p); err != nil || p.Name != "p-old" {
		t.Fatalf("port p-old lost in conversion: %v %+v", err, p)
	}
	var roots []vswitch.OpenvSwitch
	_ = ovs.List(context.Background(), &roots)
	if len(roots) != 1 || roots[0].ExternalIDs["user-key"] != "user-value" || roots[0].ExternalIDs["system-id"] != "kept-id" {
		t.Fatalf("external_ids after conversion = %v; the user's key and the existing system-id must be kept", roots)
	}
	backups, _ := filepath.Glob(db + ".backup8.0.0-*")
	if len(backups) != 1 {
		t.Fatalf("want one backup of the old database, got %v", backups)
	}
	n.Stop()
}

func TestSystemIDSurvivesRestart(t *testing.T) {
	n := newNode(t)
	n.Start()
	first, _ := os.ReadFile(n.Path("ovs-db", "system-id.conf"))
	n.Stop()
	n.ListenNotifyAgain()
	n.Start()
	second, _ := os.ReadFile(n.Path("ovs-db", "system-id.conf"))
	if strings.TrimSpace(string(first)) == "" || string(first) != string(second) {
		t.Fatalf("system-id changed across a restart: %q then %q", first, second)
	}
	sb := dial(t, sbdb.FullDatabaseModel, "unix:"+n.Path("ovn-run", "ovnsb_db.sock"))
	var chassis []sbdb.Chassis
	_ = sb.List(context.Background(), &chassis)
	if len(chassis) != 1 || chassis[0].Name != strings.TrimSpace(string(first)) {
		t.Fatalf("SB chassis after restart = %+v, want one named %q", chassis, first)
	}
	n.Stop()
}

func TestBadConfigExits2BeforeTouchingTheHost(t *testing.T) {
	bin := testenv.Binary(t, "ovnhost")
	dir := t.TempDir()
	for _, c := range []struct {
		name string
		env  []string
		args []string
		file string
		want []string
	}{
		{name: "bad tunnel type", env: []string{"TUNNEL_TYPE=gre"}, want: []string{"TUNNEL_TYPE", `"gre"`, "geneve, vxlan, stt"}},
		{name: "bad OVN_DB_IPS", env: []string{"OVN_DB_IPS=10.0.0.1,not-an-ip"}, want: []string{"OVN_DB_IPS", "not-an-ip", "not an IP address"}},
		{name: "typo in an OVNHOST_ variable", env: []string{"OVNHOST_HEALTH_ADRR=:1"}, want: []string{"OVNHOST_HEALTH_ADRR", "unknown setting", "OVNHOST_HEALTH_ADDR"}},
		{name: "unknown key in file", file: "node-name: n1\ntunel-type: vxlan\n", want: []string{"tunel-type", "unknown setting", "did you mean tunnel-type"}},
		{name: "relative path flag", args: []string{"--ovs-run-dir=run/ovs"}, want: []string{"--ovs-run-dir", "absolute path"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			runDir := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-"))
			args := append([]string{"run", "--ovs-run-dir=" + runDir, "--ovs-db-dir=" + runDir, "--ovn-run-dir=" + runDir, "--ovn-db-dir=" + runDir, "--health-addr="}, c.args...)
			if c.file != "" {
				f := filepath.Join(dir, "bad.yaml")
				if err := os.WriteFile(f, []byte(c.file), 0o644); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--config="+f)
			}
			cmd := exec.Command(bin, args...)
			cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, c.env...)
			out, err := cmd.CombinedOutput()
			if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 {
				t.Fatalf("exit = %v, want status 2\n%s", err, out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("message lacks %q:\n%s", w, out)
				}
			}
			if _, err := os.Stat(runDir); err == nil {
				t.Errorf("%s was created although the configuration was rejected", runDir)
			}
		})
	}
}

func TestSDNotifyReadyStatusWatchdogStopping(t *testing.T) {
	n := newNode(t)
	n.Env = []string{"WATCHDOG_USEC=200000"}
	n.Start()
	if _, err := n.Notify.WaitFor(0, "STATUS=waiting for ovs-vswitchd", time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(0, "WATCHDOG=1", 5*time.Second, n.Exited()); err != nil {
		t.Fatal(err)
	}
	ready, _ := n.Notify.WaitFor(0, "READY=1", time.Second, nil)
	all := n.Notify.All()
	readyAt := -1
	for i, m := range all {
		if m == ready {
			readyAt = i
		}
	}
	if readyAt < 0 || readyAt+1 >= len(all) || !strings.HasPrefix(all[readyAt+1], "STATUS=ready") {
		t.Fatalf("READY=1 should come with STATUS=ready...; got %q", all)
	}
	mark := n.Notify.Mark()
	n.Stop()
	if _, err := n.Notify.WaitFor(mark, "STOPPING=1", time.Second, nil); err != nil {
		t.Fatal(err)
	}
}

func TestRemoteModeJoinsAnExistingCentral(t *testing.T) {
	n := newNode(t)
	central := ovncentral.Start(t)
	n.Env = []string{"OVN_SB_ADDR=" + central.SB()}
	n.Start()
	if _, err := os.Stat(n.Path("ovn-db", "ovnnb_db.db")); err == nil {
		t.Fatal("a node of an existing cluster created its own NB database")
	}
	id := strings.TrimSpace(string(must(os.ReadFile(n.Path("ovs-db", "system-id.conf")))))
	sb := dial(t, sbdb.FullDatabaseModel, central.SB())
	if err := sb.Get(context.Background(), &sbdb.Chassis{Name: id}); err != nil {
		var all []sbdb.Chassis
		_ = sb.List(context.Background(), &all)

		t.Fatalf("chassis %q not registered in the cluster's SB: %v (chassis there: %+v)\n%s", id, err, all, n.LogTail())
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// A graceful stop removes the chassis (ovn-controller's "exit").
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := sb.WaitUntil(ctx, "chassis removal", func() bool { return sb.Get(ctx, &sbdb.Chassis{Name: id}) != nil }, nil); err != nil {
		t.Fatal(err)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestLeftoversOfACrashedRunAreClearedButALiveDaemonIsNot(t *testing.T) {
	n := newNode(t)
	for _, d := range []string{"ovs-run", "ovs-db"} {
		if err := os.MkdirAll(n.Path(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A pidfile naming a live process that is not ovsdb-server (a reused
	// pid), a dead socket and a lock file: what a crash leaves.
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	pidfile := n.Path("ovs-run", "ovsdb-server.pid")
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(other.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{n.Path("ovs-run", "db.sock"), n.Path("ovs-run", "ovsdb-server.ctl")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	n.Start()
	if got := n.ReadPid(pidfile); got == other.Process.Pid {
		t.Fatal("the stale pidfile was not replaced")
	}
	n.Stop()

	// Now a live process that really is an ovsdb-server by name holds the
	// pidfile: ovnhost must refuse, naming it, and touch nothing.
	fake := filepath.Join(t.TempDir(), "ovsdb-server")
	if err := os.Link("/bin/sleep", fake); err != nil {
		raw, _ := os.ReadFile("/bin/sleep")
		if err := os.WriteFile(fake, raw, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	live := exec.Command(fake, "60")
	if err := live.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = live.Process.Kill(); _ = live.Wait() })
	if err := os.WriteFile(pidfile, []byte(strconv.Itoa(live.Process.Pid)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.ListenNotifyAgain()
	if err := n.StartNoWait(); err != nil {
		t.Fatal(err)
	}
	<-n.Exited()
	if code := n.ExitCode(); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	log := n.LogTail()
	if !strings.Contains(log, fmt.Sprintf("still running as pid %d", live.Process.Pid)) {
		t.Fatalf("the refusal does not name the live pid:\n%s", log)
	}
	if got := n.ReadPid(pidfile); got != live.Process.Pid {
		t.Fatal("the live daemon's pidfile was removed")
	}
}

func TestFailingPreflightExits3BeforeAnyChildStarts(t *testing.T) {
	n := newNode(t)
	// These machines have no OVS kernel module and module loading is
	// disabled: asking for the kernel datapath must stop the start. A
	// read-only state directory is a second failure, reported as well.
	ro := filepath.Join(n.Dir, "ro")
	if err := os.MkdirAll(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "mount", "--bind", "-o", "ro", ro, ro)
	t.Cleanup(func() { _ = exec.Command("umount", ro).Run() })
	n.Env = []string{"DISABLE_MODULES_MANAGEMENT=true", "OPENVSWITCH_DIR=" + ro + "/ovs"}
	if err := n.StartNoWait("--datapath=kernel", "--ovs-db-dir="+ro+"/ovs"); err != nil {
		t.Fatal(err)
	}
	<-n.Exited()
	if code := n.ExitCode(); code != 3 {
		t.Fatalf("exit %d, want 3\n%s", code, n.LogTail())
	}
	log := n.LogTail()
	for _, want := range []string{"FAIL  datapath", "ovs_datapath", "FAIL  path:", "read-only", "nothing was started"} {
		if !strings.Contains(log, want) {
			t.Errorf("output lacks %q:\n%s", want, log)
		}
	}
	if _, err := os.Stat(n.Path("ovs-run")); err == nil {
		t.Error("the run directory was created although preflight failed")
	}
	if left := processesUnder(n.Dir); len(left) > 0 {
		t.Fatalf("processes started despite the failed preflight: %v", left)
	}
}

func TestConfigFileChangesAreAppliedOrReported(t *testing.T) {
	n := newNode(t)
	file := n.Path("ovnhost.yaml")
	if err := os.WriteFile(file, []byte("log-level: info\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	n.Start("--config=" + file)
	if err := os.WriteFile(file, []byte("log-level: debug\ntunnel-type: vxlan\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog("log level changed", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog("take effect at the next restart", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog("settings=TunnelType", time.Second); err != nil {
		t.Fatal(err)
	}
	// A broken file is reported and the node keeps running.
	if err := os.WriteFile(file, []byte("tunnel-type: gre\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitLog("is not valid; keeping the running configuration", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if code, _, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
		t.Fatalf("/readyz after a bad config edit: %d %v", code, err)
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestKeepDatapathLeavesChassisAndTapsForTheNextStart(t *testing.T) {
	n := newNode(t)
	central := ovncentral.Start(t)
	n.Env = []string{"OVN_SB_ADDR=" + central.SB()}
	n.Start("--keep-datapath")
	id := strings.TrimSpace(string(must(os.ReadFile(n.Path("ovs-db", "system-id.conf")))))
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	// An upgrade in progress: the chassis keeps its row (and so its port
	// bindings) and the datapath's devices stay.
	sb := dial(t, sbdb.FullDatabaseModel, central.SB())
	if err := sb.Get(context.Background(), &sbdb.Chassis{Name: id}); err != nil {
		t.Fatalf("chassis removed although --keep-datapath: %v", err)
	}
	if links := run(t, "ip", "-n", n.NS, "-o", "link", "show"); !strings.Contains(links, "br-int") {
		t.Fatalf("br-int tap removed although --keep-datapath:\n%s", links)
	}
	if left := processesUnder(n.Dir); len(left) > 0 {
		t.Fatalf("processes left running: %v", left)
	}
	// The next version starts on top of it, and a normal stop cleans up.
	n.ListenNotifyAgain()
	n.Start()
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if links := run(t, "ip", "-n", n.NS, "-o", "link", "show"); strings.Contains(links, "br-int") {
		t.Fatalf("br-int left after a normal stop:\n%s", links)
	}
	// (Chassis removal on a normal stop is TestRemoteModeJoinsAnExistingCentral's;
	// right after taking over a kept chassis, ovn-controller 23.03 may exit
	// before it owns the row and leave it.)
}

func TestCleanupRemovesWhatOvnhostPutOnTheHost(t *testing.T) {
	n := newNode(t)
	n.Start("--keep-datapath")
	cleanup := func(extra ...string) (int, string) {
		args := append([]string{"netns", "exec", n.NS, testenv.Binary(t, "ovnhost"), "cleanup"}, extra...)
		args = append(args, n.Args...)
		out, err := exec.Command("ip", args...).CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	if code, out := cleanup(); code != 1 || !strings.Contains(out, "stop ovnhost first") {
		t.Fatalf("cleanup while running: exit %d\n%s", code, out)
	}
	plugin, conflist := n.Path("cni-bin", "ovnhost-cni"), n.Path("cni-conf", "00-ovnhost.conflist")
	for _, f := range []string{plugin, conflist} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("the daemon did not install %s: %v", f, err)
		}
	}
	n.Stop()
	// Another plugin's configuration is not ours to remove.
	flannel := n.Path("cni-conf", "10-flannel.conflist")
	if err := os.WriteFile(flannel, []byte(`{"cniVersion":"1.0.0","name":"cbr0","plugins":[{"type":"flannel"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := cleanup("--purge")
	if code != 0 {
		t.Fatalf("cleanup: exit %d\n%s", code, out)
	}
	for _, f := range []string{plugin, conflist, n.Path("ovs-db", "conf.db"), n.Path("ovs-db", "system-id.conf"), n.Path("ovn-db", "ovnnb_db.db")} {
		if _, err := os.Stat(f); err == nil {
			t.Errorf("%s still there after cleanup --purge:\n%s", f, out)
		}
	}
	if _, err := os.Stat(flannel); err != nil {
		t.Error("cleanup removed another plugin's conflist")
	}
	if !strings.Contains(out, "removed link br-int") {
		t.Errorf("the kept br-int tap was not removed:\n%s", out)
	}
	links := run(t, "ip", "-n", n.NS, "-o", "link", "show")
	for _, l := range strings.Split(strings.TrimSpace(links), "\n") {
		if !strings.Contains(l, " lo:") {
			t.Errorf("device left after cleanup: %s", l)
		}
	}
}

func TestNetctlStatusShowsEachChild(t *testing.T) {
	n := newNode(t)
	n.Start()
	netctl := func(extra ...string) (int, string) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.NS, testenv.Binary(t, "netctl"), "status"}, extra...)...).CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		} else if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	code, out := netctl()
	if code != 0 || !strings.HasPrefix(out, "READY") {
		t.Fatalf("netctl status: exit %d\n%s", code, out)
	}
	for _, child := range []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovsdb-nb", "ovsdb-sb", "underlay", "host-nat", "cni-server"} {
		if !strings.Contains(out, child) {
			t.Errorf("%s missing from:\n%s", child, out)
		}
	}
	code, out = netctl("--output", "json")
	var snap struct {
		Ready    bool
		Children []struct {
			Name     string
			Pid      int
			RSSBytes int64 `json:"rss_bytes"`
		}
	}
	if err := json.Unmarshal([]byte(out), &snap); err != nil || code != 0 || !snap.Ready || len(snap.Children) != 9 {
		t.Fatalf("json: exit %d err %v\n%s", code, err, out)
	}
	for _, c := range snap.Children {
		if c.Name == "ovs-vswitchd" && (c.Pid <= 0 || c.RSSBytes <= 0) {
			t.Fatalf("ovs-vswitchd without pid or memory: %+v", c)
		}
	}
	n.Stop()
	if code, out := netctl(); code != 2 || !strings.Contains(out, "does not answer on 127.0.0.1:10665") {
		t.Fatalf("with the daemon stopped: exit %d\n%s", code, out)
	}
}

func TestChildLogFilesAreRotated(t *testing.T) {
	n := newNode(t)
	n.Start("--log-file-max-size=2Ki", "--log-rotate-interval=100ms")
	logFile := n.Path("log", "ovs-vswitchd.log")
	// Start-up alone writes more than 2 KiB; the supervisor renames the
	// file and has ovs-vswitchd reopen it, which it logs in the new file.
	err := waitFileCond(filepath.Dir(logFile), 20*time.Second, func() bool {
		old, err1 := os.Stat(logFile + ".1")
		cur, err2 := os.ReadFile(logFile)
		return err1 == nil && old.Size() > 2048 && err2 == nil && strings.Contains(string(cur), "opened log file")
	})
	if err != nil {
		entries, _ := os.ReadDir(filepath.Dir(logFile))
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("%v; log dir holds %v\n%s", err, names, n.LogTail())
	}
	if err := n.WaitLog("log rotated", time.Second); err != nil {
		t.Fatal(err)
	}
	n.Stop()
}

// waitFileCond returns once cond holds, re-checking on every change in dir.
func waitFileCond(dir string, timeout time.Duration, cond func() bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		return err
	}
	deadline := time.After(timeout)
	for !cond() {
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("condition on %s not met within %v", dir, timeout)
		}
	}
	return nil
}

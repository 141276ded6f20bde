package preflight_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/netctl/doctor"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func sbctl(t *testing.T, db string, args ...string) {
	t.Helper()
	p, err := testenv.LookPath("ovn-sbctl")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(p, append([]string{"--db=" + db}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("ovn-sbctl %v: %v: %s", args, err, out)
	}
}

func doctorCheck(t *testing.T, r *hostcheck.Report, name string) hostcheck.Check {
	t.Helper()
	return findCheck(t, r.Checks, name)
}

// nodeDirs points every ovnhost directory at a fresh temp dir, so the node
// looks like one where ovnhost is not running.
func nodeDirs(t *testing.T) (string, []string) {
	dir := t.TempDir()
	env := []string{
		"OPENVSWITCH_DIR=" + filepath.Join(dir, "ovs"), "OVS_RUNDIR=" + filepath.Join(dir, "run-ovs"),
		"OVN_DIR=" + filepath.Join(dir, "ovn"), "OVN_RUNDIR=" + filepath.Join(dir, "run-ovn"),
		"OVS_LOGDIR=" + filepath.Join(dir, "log"), "OVN_LOGDIR=" + filepath.Join(dir, "log"),
		"CNI_BIN_DIR=" + filepath.Join(dir, "cni-bin"), "CNI_CONF_DIR=" + filepath.Join(dir, "net.d"),
		"OVNHOST_CNI_SOCKET=" + filepath.Join(dir, "run", "cni.sock"), "OVNHOST_HEALTH_ADDR=",
		// Not an address of this host: doctor skips its 1 s ARP probe.
		"ENCAP_IP=192.0.2.250",
	}
	return dir, env
}

// Two chassis with this node's system-id and encap IP in a real SB
// database: one registered by another host under our system-id (cloned
// VM), one using our encap IP.
func TestDuplicateChassisRealSB(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovn-sbctl")
	c := ovncentral.Start(t)
	dir, env := nodeDirs(t)
	if err := os.MkdirAll(filepath.Join(dir, "ovs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ovs", "system-id.conf"), []byte("5b3c8a4e-clone\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sbctl(t, c.SB(), "chassis-add", "5b3c8a4e-clone", "geneve", "192.0.2.201")
	sbctl(t, c.SB(), "set", "chassis", "5b3c8a4e-clone", "hostname=golden-image-node")
	sbctl(t, c.SB(), "chassis-add", "other-node-id", "geneve", "192.0.2.200")
	sbctl(t, c.SB(), "set", "chassis", "other-node-id", "hostname=other-node")

	cfg := loadConfig(t, append(env[:len(env)-1], "OVN_SB_ADDR="+c.SB(), "ENCAP_IP=192.0.2.200")...)
	r := doctor.Run(context.Background(), cfg, doctor.Options{Timeout: 5 * time.Second})
	if ch := doctorCheck(t, r, "sb-reachable"); ch.Status != hostcheck.Pass {
		t.Fatalf("SB: %+v", ch)
	}
	ch := doctorCheck(t, r, "chassis")
	for _, want := range []string{
		"chassis 5b3c8a4e-clone in the SB database belongs to host golden-image-node",
		"from " + filepath.Join(dir, "ovs", "system-id.conf"),
		"chassis other-node-id (host other-node) uses this node's encap IP 192.0.2.200",
	} {
		if !strings.Contains(ch.Found, want) {
			t.Errorf("chassis check lacks %q: %+v", want, ch)
		}
	}
	if ch.Status != hostcheck.Fail || !strings.Contains(ch.Fix, "chassis-del 5b3c8a4e-clone") || r.ExitCode() != 2 {
		t.Errorf("%+v exit %d", ch, r.ExitCode())
	}
}

// A conflist that sorts before ours, and a stale one after it.
func TestConflistOutranked(t *testing.T) {
	testenv.RequireRoot(t)
	dir, env := nodeDirs(t)
	confDir := filepath.Join(dir, "net.d")
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(confDir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(cniconf.Conflist, `{"cniVersion":"1.0.0","name":"ovnhost","plugins":[{"type":"ovnhost-cni"}]}`)
	write("10-flannel.conflist", `{"name":"cbr0","cniVersion":"0.3.1","plugins":[{"type":"flannel"},{"type":"portmap"}]}`)
	r := doctor.Run(context.Background(), loadConfig(t, env...), doctor.Options{})
	if ch := doctorCheck(t, r, "cni-config"); ch.Status != hostcheck.Warn || !strings.Contains(ch.Found, "10-flannel.conflist (flannel+portmap, network cbr0)") {
		t.Errorf("stale: %+v", ch)
	}
	write("00-calico.conflist", `{"name":"k8s-pod-network","cniVersion":"0.3.1","plugins":[{"type":"calico"}]}`)
	r = doctor.Run(context.Background(), loadConfig(t, env...), doctor.Options{})
	ch := doctorCheck(t, r, "cni-config")
	if ch.Status != hostcheck.Fail || !strings.Contains(ch.Found, "00-calico.conflist (calico, network k8s-pod-network) sorts before 00-ovnhost.conflist") ||
		!strings.Contains(ch.Fix, "rm "+filepath.Join(confDir, "00-calico.conflist")) {
		t.Errorf("outranked: %+v", ch)
	}
	if r.ExitCode() != 2 {
		t.Errorf("exit %d", r.ExitCode())
	}
}

// The real plugin built by `make build` carries the Makefile's stamp, read
// without -ldflags in its build information (-trimpath).
func TestPluginStamp(t *testing.T) {
	bin := testenv.Binary(t, "ovnhost-cni")
	v, err := cniconf.BuildStamp(context.Background(), bin)
	if err != nil || v == "" {
		t.Fatalf("stamp %q %v", v, err)
	}
	t.Logf("ovnhost-cni stamp %q", v)
}

// netctl doctor, the built binary, on a node where ovnhost is not running:
// a table by default, JSON with --output json, exit status from the worst
// check.
func TestNetctlDoctorBinary(t *testing.T) {
	testenv.RequireRoot(t)
	bin := testenv.Binary(t, "netctl")
	dir, env := nodeDirs(t)
	if err := os.MkdirAll(filepath.Join(dir, "cni-bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) ([]byte, int) {
		cmd := exec.Command(bin, append([]string{"doctor"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		if stderr.Len() > 0 {
			t.Logf("stderr: %s", stderr.String())
		}
		return out, code
	}
	out, code := run("--output", "json")
	var rep struct {
		Status string
		Checks []hostcheck.Check
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := map[string]int{"pass": 0, "warn": 1, "fail": 2}[rep.Status]
	if code != want {
		t.Errorf("status %s, exit %d", rep.Status, code)
	}
	// No plugin, no conflist: failures, and the daemon checks say it is not running.
	got := map[string]hostcheck.Status{}
	for _, c := range rep.Checks {
		got[c.Name] = c.Status
	}
	if got["cni-plugin"] != hostcheck.Fail || got["cni-config"] != hostcheck.Fail || got["cni-server"] != hostcheck.Warn ||
		got["ovsdb:Open_vSwitch"] != hostcheck.Warn || got["ovn-controller"] != hostcheck.Warn {
		t.Errorf("%v", got)
	}
	table, code2 := run()
	if code2 != code || !strings.Contains(string(table), "STATUS") || !strings.Contains(string(table), "fix: ") {
		t.Errorf("table (exit %d):\n%s", code2, table)
	}
	// Installing the plugin and our conflist fixes both.
	copyFile(t, testenv.Binary(t, "ovnhost-cni"), filepath.Join(dir, "cni-bin", "ovnhost-cni"), 0o755)
	if err := os.MkdirAll(filepath.Join(dir, "net.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "net.d", cniconf.Conflist), []byte(`{"name":"ovnhost","plugins":[{"type":"ovnhost-cni"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = run("-o", "json")
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatal(err)
	}
	for _, c := range rep.Checks {
		if (c.Name == "cni-plugin" || c.Name == "cni-config") && c.Status != hostcheck.Pass {
			t.Errorf("%+v", c)
		}
	}
}

// A real ovn-controller against a real SB (no ovs-vswitchd needed for the
// SB connection): doctor finds its control socket through the pidfile and
// reports it connected, and finds this node's chassis registered once.
func TestControllerConnected(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool", "ovs-vsctl", "ovn-controller")
	c := ovncentral.Start(t)
	dir, err := os.MkdirTemp("", "pfovs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db := filepath.Join(dir, "conf.db")
	mustRun(t, "ovsdb-tool", "create", db, "/usr/share/openvswitch/vswitch.ovsschema")
	sock := filepath.Join(dir, "db.sock")
	startDaemon(t, dir, "ovsdb-server", "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "ovsdb.ctl"),
		"--log-file="+filepath.Join(dir, "ovsdb.log"), "-vconsole:off", "--no-chdir", db)
	waitFor(t, 10*time.Second, func() error { _, err := os.Stat(sock); return err })
	host, _ := os.Hostname()
	mustRun(t, "ovs-vsctl", "--db=unix:"+sock, "--no-wait", "--", "init", "--", "set", "open", ".",
		"external_ids:system-id=doctor-test-node", "external_ids:ovn-remote="+c.SB(),
		"external_ids:ovn-encap-type=geneve", "external_ids:ovn-encap-ip=192.0.2.77", "external_ids:hostname="+host)
	startDaemon(t, dir, "ovn-controller", "unix:"+sock, "--pidfile="+filepath.Join(dir, "ovn-controller.pid"),
		"--log-file="+filepath.Join(dir, "ovn-controller.log"), "-vconsole:off", "--no-chdir")

	cfg := loadConfig(t, "OVS_RUNDIR="+dir, "OVN_RUNDIR="+dir, "OVN_SB_ADDR="+c.SB(), "OPENVSWITCH_DIR="+dir, "OVNHOST_HEALTH_ADDR=", "ENCAP_IP=192.0.2.77")
	var r *hostcheck.Report
	// ovn-controller connects asynchronously: ask until it says connected.
	waitFor(t, 15*time.Second, func() error {
		r = doctor.Run(context.Background(), cfg, doctor.Options{Timeout: 2 * time.Second})
		if ch := doctorCheck(t, r, "ovn-controller"); ch.Status != hostcheck.Pass {
			return fmt.Errorf("%+v", ch)
		}
		if ch := doctorCheck(t, r, "chassis"); ch.Status != hostcheck.Pass || !strings.Contains(ch.Found, "registered once") {
			return fmt.Errorf("%+v", ch)
		}
		return nil
	})
	if ch := doctorCheck(t, r, "ovsdb:Open_vSwitch"); ch.Status != hostcheck.Pass {
		t.Errorf("%+v", ch)
	}
	// No ovs-vswitchd runs here.
	if ch := doctorCheck(t, r, "ovs-vswitchd"); ch.Status != hostcheck.Fail || !strings.Contains(ch.Found, "ovs-vswitchd does not") {
		t.Errorf("%+v", ch)
	}
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %v: %v: %s", name, args, err, out)
	}
}

// startDaemon runs a child in dir with OVS_RUNDIR/OVN_RUNDIR=dir; it is
// killed and reaped by t.Cleanup.
func startDaemon(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(p, args...)
	cmd.Env = append(os.Environ(), "OVS_RUNDIR="+dir, "OVN_RUNDIR="+dir, "OVS_DBDIR="+dir, "OVS_LOGDIR="+dir, "OVN_LOGDIR="+dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready after %s: %v", d, err)
		}
		<-tick.C
	}
}

// Two namespaces joined by a veth, both claiming 10.9.0.1 (a cloned VM):
// the ARP probe from one sees the other's MAC; with distinct addresses no
// one answers.
func TestARPProbeDuplicate(t *testing.T) {
	testenv.RequireRoot(t)
	a, b := newNS(t), newNS(t)
	ha, err := netlink.NewHandleAt(a)
	if err != nil {
		t.Fatal(err)
	}
	defer ha.Close()
	if err := ha.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "va"}, PeerName: "vb", PeerNamespace: netlink.NsFd(int(b))}); err != nil {
		t.Fatal(err)
	}
	hb, err := netlink.NewHandleAt(b)
	if err != nil {
		t.Fatal(err)
	}
	defer hb.Close()
	setup := func(h *netlink.Handle, name, cidr string) netlink.Link {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr(cidr)
		if err := h.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
		return l
	}
	setup(ha, "va", "10.9.0.1/24")
	lb := setup(hb, "vb", "10.9.0.2/24")

	ip := netip.MustParseAddr("10.9.0.1")
	macs, err := hostcheck.ARPProbeIn(a, "va", ip, 300*time.Millisecond)
	if err != nil || len(macs) != 0 {
		t.Fatalf("distinct addresses: %v %v", macs, err)
	}
	addr, _ := netlink.ParseAddr("10.9.0.1/24")
	if err := hb.AddrAdd(lb, addr); err != nil {
		t.Fatal(err)
	}
	macs, err = hostcheck.ARPProbeIn(a, "va", ip, time.Second)
	if err != nil || len(macs) != 1 || macs[0] != lb.Attrs().HardwareAddr.String() {
		t.Fatalf("duplicate: %v %v (want %s)", macs, err, lb.Attrs().HardwareAddr)
	}
	c := hostcheck.CheckDuplicateAddress("va", ip.String(), "02:00:00:00:00:aa", macs, nil)
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, macs[0]) {
		t.Fatalf("%+v", c)
	}
}

// newNS creates an unnamed network namespace, closed by t.Cleanup.
func newNS(t *testing.T) netns.NsHandle {
	t.Helper()
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		t.Fatalf("back to the original netns: %v", err) // the thread stays locked and is discarded
	}
	runtime.UnlockOSThread()
	t.Cleanup(func() { ns.Close() })
	return ns
}

// inNS runs fn on a thread moved into ns; commands started by fn fork from
// that thread and so run in ns too.
func inNS(t *testing.T, ns netns.NsHandle, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		// Never unlocked: the thread ends with the goroutine instead of
		// going back to the pool inside ns.
		if err := netns.Set(ns); err != nil {
			t.Errorf("setns: %v", err)
			return
		}
		fn()
	}()
	<-done
}

// Real iptables state, written in a throwaway network namespace (the
// host's rules are never touched): a CentOS-style REJECT in iptables-nft,
// then a rule in iptables-legacy as well.
func TestFirewallRulesInNetns(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "iptables-nft", "iptables-legacy")
	ns := newNS(t)
	cfg := loadConfig(t)
	h := hostcheck.NewDoctorHost(cfg.HostSettings())
	ipt := func(bin string, args ...string) {
		p, err := testenv.LookPath(bin)
		if err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(p, args...).CombinedOutput(); err != nil {
			t.Errorf("%s %v: %v: %s", bin, args, err, out)
		}
	}
	var nft, legacy string
	var nerr, lerr error
	inNS(t, ns, func() {
		ipt("iptables-nft", "-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT")
		ipt("iptables-nft", "-A", "INPUT", "-j", "REJECT")
		nft, nerr = h.IptablesSave("nft", false)
		legacy, lerr = h.IptablesSave("legacy", false)
	})
	if nerr != nil {
		t.Fatal(nerr)
	}
	c := hostcheck.CheckTunnelPort("tunnel-port:nft", "iptables-nft", nft, "udp", 6081)
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "-A INPUT -j REJECT") {
		t.Errorf("%+v\n%s", c, nft)
	}
	if c := hostcheck.CheckMixedBackends(legacy, nft, lerr, nerr); c.Status != hostcheck.Pass {
		t.Errorf("%+v", c)
	}
	inNS(t, ns, func() {
		ipt("iptables-nft", "-I", "INPUT", "-p", "udp", "--dport", "6081", "-j", "ACCEPT")
		ipt("iptables-legacy", "-A", "FORWARD", "-j", "ACCEPT")
		nft, nerr = h.IptablesSave("nft", false)
		legacy, lerr = h.IptablesSave("legacy", false)
	})
	if nerr != nil || lerr != nil {
		t.Fatal(nerr, lerr)
	}
	if c := hostcheck.CheckTunnelPort("tunnel-port:nft", "iptables-nft", nft, "udp", 6081); c.Status != hostcheck.Pass {
		t.Errorf("%+v\n%s", c, nft)
	}
	if c := hostcheck.CheckMixedBackends(legacy, nft, lerr, nerr); c.Status != hostcheck.Warn {
		t.Errorf("%+v\nlegacy:\n%s\nnft:\n%s", c, legacy, nft)
	}
}

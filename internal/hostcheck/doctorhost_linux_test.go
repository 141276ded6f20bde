package hostcheck

import (
	"bufio"
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The real collectors against a real NB and SB: the databases each serves,
// and the SB chassis with their encapsulations.
func TestHostOVSDBRealCentral(t *testing.T) {
	testenv.RequireCommands(t, "ovn-sbctl")
	c := ovncentral.Start(t)
	sbctl, _ := testenv.LookPath("ovn-sbctl")
	for _, args := range [][]string{
		{"chassis-add", "ch-1", "geneve", "192.0.2.31"},
		{"set", "chassis", "ch-1", "hostname=node-a"},
	} {
		if out, err := exec.Command(sbctl, append([]string{"--db=" + c.SB()}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ovn-sbctl %v: %v: %s", args, err, out)
		}
	}
	h := &DoctorHost{}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for remote, want := range map[string][]string{c.SB(): {"OVN_Southbound", "_Server"}, c.NB(): {"OVN_Northbound", "_Server"}} {
		dbs, err := h.ListDBs(ctx, remote)
		if err != nil || !slices.Equal(dbs, want) {
			t.Errorf("ListDBs(%s) = %v, %v; want %v", remote, dbs, err, want)
		}
	}

	chassis, encaps, err := h.SBChassis(ctx, c.SB())
	if err != nil {
		t.Fatal(err)
	}
	if len(chassis) != 1 || chassis[0].Name != "ch-1" || chassis[0].Hostname != "node-a" || len(chassis[0].Encaps) != 1 {
		t.Fatalf("chassis %+v", chassis)
	}
	if len(encaps) != 1 || encaps[0].UUID != chassis[0].Encaps[0] || encaps[0].IP != "192.0.2.31" {
		t.Fatalf("encaps %+v (chassis %+v)", encaps, chassis)
	}
	// The same through the check's reading of them.
	rows, err := readChassis(ctx, h, c.SB())
	if err != nil || len(rows) != 1 || !slices.Equal(rows[0].EncapIPs, []string{"192.0.2.31"}) {
		t.Fatalf("readChassis: %+v %v", rows, err)
	}
}

// A socket file nobody listens on (a dead ovsdb-server's): the question
// ends with the deadline and the error names the socket.
func TestHostListDBsStaleSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "db.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	l.SetUnlinkOnClose(false)
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = (&DoctorHost{}).ListDBs(ctx, "unix:"+sock)
	if err == nil || !strings.Contains(err.Error(), sock) || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("stale socket: %v", err)
	}
	t.Logf("stale socket: %v", err)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %s with a 300ms deadline", d)
	}
}

// An SB ovsdb-server on SSL: the configured key, certificate and CA are
// used, and a server whose certificate another CA signed is refused.
func TestHostListDBsSSL(t *testing.T) {
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool")
	dir := t.TempDir()
	pki := testenv.NewPKI(t, dir)
	srvKey, srvCert := pki.Issue(t, "sb", "ovn-sb")
	key, cert := pki.Issue(t, "ovn", "node-chassis")
	otherDir := filepath.Join(dir, "other")
	if err := os.Mkdir(otherDir, 0o700); err != nil {
		t.Fatal(err)
	}
	testenv.NewPKI(t, otherDir)

	tool, _ := testenv.LookPath("ovsdb-tool")
	db := filepath.Join(dir, "sb.db")
	if out, err := exec.Command(tool, "create", db, ovncentral.SBSchema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool: %v: %s", err, out)
	}
	srv, _ := testenv.LookPath("ovsdb-server")
	cmd := exec.Command(srv, db, "--remote=pssl:0:127.0.0.1", "--private-key="+srvKey, "--certificate="+srvCert,
		"--ca-cert="+filepath.Join(dir, "cacert.pem"), "--unixctl="+filepath.Join(dir, "sb.ctl"), "--no-chdir",
		"-vconsole:info", "-vfile:off")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// ovsdb-server logs the port it bound for pssl:0 once it listens.
	port := ""
	portRe := regexp.MustCompile(`listening on port (\d+)`)
	sc := bufio.NewScanner(stderr)
	for port == "" && sc.Scan() {
		if m := portRe.FindStringSubmatch(sc.Text()); m != nil {
			port = m[1]
		}
	}
	if port == "" {
		t.Fatalf("ovsdb-server exited without listening: %v", sc.Err())
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	remote := "ssl:127.0.0.1:" + port

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := &DoctorHost{ssl: sslFiles{key, cert, filepath.Join(dir, "cacert.pem")}}
	if dbs, err := h.ListDBs(ctx, remote); err != nil || !slices.Contains(dbs, "OVN_Southbound") {
		t.Fatalf("ListDBs over SSL: %v %v", dbs, err)
	}
	if _, _, err := h.SBChassis(ctx, remote); err != nil {
		t.Fatalf("SBChassis over SSL: %v", err)
	}

	wrong := &DoctorHost{ssl: sslFiles{key, cert, filepath.Join(otherDir, "cacert.pem")}}
	wctx, wcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer wcancel()
	if _, err := wrong.ListDBs(wctx, remote); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a server signed by another CA was accepted: %v", err)
	} else {
		t.Logf("other CA: %v", err)
	}
	missing := &DoctorHost{ssl: sslFiles{filepath.Join(dir, "nokey.pem"), cert, filepath.Join(dir, "cacert.pem")}}
	if _, err := missing.ListDBs(ctx, remote); err == nil || !strings.Contains(err.Error(), "SSL key pair") {
		t.Fatalf("missing key: %v", err)
	}
}

// TestHostIptablesSaveOnly: on a host whose only program is iptables-save
// (CentOS 7's iptables 1.4.21; here the legacy multi-call binary under that
// name, in a bin dir of its own) doctor reads the real kernel rules of a
// throwaway network namespace and checks the tunnel port.
func TestHostIptablesSaveOnly(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "xtables-legacy-multi", "iptables-legacy", "ip")
	multi, _ := testenv.LookPath("xtables-legacy-multi")
	bin := t.TempDir()
	if err := os.Symlink(multi, filepath.Join(bin, "iptables-save")); err != nil {
		t.Fatal(err)
	}
	ns := "dociptsave" + strconv.Itoa(os.Getpid()%100000)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	ipt, _ := testenv.LookPath("iptables-legacy")
	for _, rule := range [][]string{
		{"-A", "INPUT", "-p", "tcp", "--dport", "22", "-j", "ACCEPT"},
		{"-A", "INPUT", "-j", "REJECT"},
	} {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", ns, ipt}, rule...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables %v: %v %s", rule, err, out)
		}
	}
	h := NewDoctorHost(nodeconfig.HostSettings{BinDirs: []string{bin}})
	var checks []Check
	inNetns(t, ns, func() { checks = firewallChecks("geneve", "", h) })
	byName := map[string]Check{}
	for _, c := range checks {
		byName[c.Name] = c
	}
	c, ok := byName["tunnel-port:legacy"]
	if !ok || c.Status != Fail || !strings.Contains(c.Found, "iptables-save v") || !strings.Contains(c.Found, "-A INPUT -j REJECT") {
		t.Fatalf("tunnel-port:legacy = %+v (all: %+v)", c, checks)
	}
	if b := byName["iptables-backends"]; b.Status != Pass || !strings.Contains(b.Found, "only iptables-save") {
		t.Fatalf("iptables-backends = %+v", b)
	}
}

// inNetns runs fn on a thread in the named network namespace; programs it
// starts inherit it.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = netns.Set(orig) }()
	fn()
}

func TestProcessStartedReadsThisProcessesStartSinceBoot(t *testing.T) {
	started, err := (&DoctorHost{}).ProcessStarted(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		t.Fatal(err)
	}
	if up := time.Duration(ts.Nano()); started <= 0 || started > up {
		t.Fatalf("this process started %v after boot; the machine is up %v", started, up)
	}
}

package central_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/central"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The members of these tests are real bin/ovnhost processes (role=central)
// running Debian's ovsdb-server and ovn-northd, each in its own network
// namespace. The namespaces hang off a Linux bridge in the test's own
// namespace, so the test process reaches every member the way a node or
// the controller would: over TCP to the three addresses of OVN_DB_IPS.

var seq atomic.Int32

// lan is the bridge and the subnet the members share.
type lan struct {
	t      testing.TB
	bridge string
	prefix string // "198.18.N."
	n      int
}

func newLAN(t testing.TB) *lan {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "ovsdb-server", "ovsdb-tool", "ovsdb-client", "ovn-northd")
	s := int(seq.Add(1))
	// 198.18.0.0/15 is for benchmarking networks: no host routes there.
	l := &lan{t: t, bridge: fmt.Sprintf("ohcb%d-%d", os.Getpid()%10000, s), prefix: fmt.Sprintf("198.18.%d.", (os.Getpid()+s*7)%250+1)}
	run(t, "ip", "link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.bridge).Run() })
	run(t, "ip", "addr", "add", l.prefix+"254/24", "dev", l.bridge)
	run(t, "ip", "link", "set", l.bridge, "up")
	return l
}

// host is a network namespace on the lan with address prefix+n.
type host struct {
	ns string
	ip string
}

func (l *lan) addHost() host {
	l.t.Helper()
	l.n++
	name := fmt.Sprintf("ohc%d-%d-%d", os.Getpid()%10000, seq.Load(), l.n)
	run(l.t, "ip", "netns", "add", name)
	l.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	veth := fmt.Sprintf("ohv%d-%d-%d", os.Getpid()%1000, seq.Load(), l.n)
	run(l.t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
	l.t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	run(l.t, "ip", "link", "set", veth, "master", l.bridge, "up")
	ip := fmt.Sprintf("%s%d", l.prefix, l.n)
	run(l.t, "ip", "-n", name, "addr", "add", ip+"/24", "dev", "eth0")
	run(l.t, "ip", "-n", name, "link", "set", "eth0", "up")
	run(l.t, "ip", "-n", name, "link", "set", "lo", "up")
	return host{ns: name, ip: ip}
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// cluster is a set of central members on one lan.
type cluster struct {
	t       testing.TB
	lan     *lan
	members []*member
}

// newCluster plans n members; none is started.
func newCluster(t testing.TB, n int) *cluster {
	t.Helper()
	c := &cluster{t: t, lan: newLAN(t)}
	for i := 0; i < n; i++ {
		c.members = append(c.members, c.newMember())
	}
	return c
}

func (c *cluster) newMember() *member {
	h := c.lan.addHost()
	dir, err := os.MkdirTemp("", "ovnhost-central-")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { os.RemoveAll(dir) })
	m := &member{t: c.t, host: h, dir: dir, name: fmt.Sprintf("m%d", len(c.members)+1)}
	m.notify = listenNotify(c.t, dir)
	return m
}

// ips is OVN_DB_IPS of the cluster.
func (c *cluster) ips() string {
	var ips []string
	for _, m := range c.members {
		ips = append(ips, m.ip)
	}
	return strings.Join(ips, ",")
}

// nbRemote and sbRemote are the three-address remotes clients use.
func (c *cluster) nbRemote() string {
	nb, _ := ovsdbconn.ClusterRemotes(strings.Split(c.ips(), ","), false)
	return nb
}

func (c *cluster) sbRemote() string {
	_, sb := ovsdbconn.ClusterRemotes(strings.Split(c.ips(), ","), false)
	return sb
}

// startAll starts every member at once and waits for each READY=1.
func (c *cluster) startAll(extra ...string) {
	c.t.Helper()
	for _, m := range c.members {
		m.startNoWait(c.ips(), extra...)
	}
	for _, m := range c.members {
		m.waitReady(90 * time.Second)
	}
}

// member is one `ovnhost run --role=central`.
type member struct {
	t testing.TB
	host
	name   string
	dir    string
	cmd    *exec.Cmd
	log    *os.File
	notify *notifyListener
	exited chan struct{}
	mark   int
}

func (m *member) path(p ...string) string { return filepath.Join(append([]string{m.dir}, p...)...) }

func (m *member) args(ips string) []string {
	return []string{"--role=central", "--ovn-db-ips=" + ips,
		"--ovn-db-dir=" + m.path("db"), "--ovn-run-dir=" + m.path("run"), "--ovn-log-dir=" + m.path("log"),
		"--node-name=" + m.name, "--health-addr=127.0.0.1:10665", "--stop-timeout=5s", "--start-timeout=60s",
		"--cluster-status-interval=200ms"}
}

func (m *member) startNoWait(ips string, extra ...string) {
	m.t.Helper()
	bin := testenv.Binary(m.t, "ovnhost")
	args := append([]string{"netns", "exec", m.ns, bin, "run"}, m.args(ips)...)
	cmd := exec.Command("ip", append(args, extra...)...)
	log, err := os.OpenFile(m.path("ovnhost.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		m.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "NOTIFY_SOCKET=" + m.notify.Path()}
	m.mark = m.notify.Mark()
	if err := cmd.Start(); err != nil {
		m.t.Fatal(err)
	}
	m.cmd, m.log, m.exited = cmd, log, make(chan struct{})
	exited := m.exited
	go func() { _ = cmd.Wait(); close(exited) }()
	m.t.Cleanup(m.kill)
}

func (m *member) waitReady(d time.Duration) {
	m.t.Helper()
	if _, err := m.notify.WaitFor(m.mark, "READY=1", d, m.exited); err != nil {
		m.t.Fatalf("%s: %v\n%s", m.name, err, m.logTail())
	}
}

// stop sends SIGTERM and returns the exit code.
func (m *member) stop() int {
	m.t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	return m.wait(60 * time.Second)
}

func (m *member) wait(d time.Duration) int {
	m.t.Helper()
	select {
	case <-m.exited:
	case <-time.After(d):
		m.t.Fatalf("%s did not exit within %v\n%s", m.name, d, m.logTail())
	}
	m.log.Close()
	return m.cmd.ProcessState.ExitCode()
}

// crash kills ovnhost and its children at once: a member whose machine
// died (the children's SIGTERM from PR_SET_PDEATHSIG is not a graceful
// exit: no leadership transfer).
func (m *member) crash() {
	m.t.Helper()
	for _, pidfile := range []string{m.path("run", "ovnnb_db.pid"), m.path("run", "ovnsb_db.pid"), m.path("run", "ovn-northd.pid")} {
		if raw, err := os.ReadFile(pidfile); err == nil {
			var pid int
			fmt.Sscan(string(raw), &pid)
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	_ = m.cmd.Process.Kill()
	m.wait(30 * time.Second)
}

func (m *member) kill() {
	if m.cmd == nil || m.exited == nil {
		return
	}
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(30 * time.Second):
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
}

func (m *member) running() bool {
	if m.exited == nil {
		return false
	}
	select {
	case <-m.exited:
		return false
	default:
		return true
	}
}

func (m *member) logTail() string {
	raw, _ := os.ReadFile(m.path("ovnhost.log"))
	lines := strings.Split(string(raw), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return "--- " + m.name + " ovnhost log tail ---\n" + strings.Join(lines, "\n")
}

func (m *member) logText() string {
	raw, _ := os.ReadFile(m.path("ovnhost.log"))
	return string(raw)
}

func (m *member) ctl(db string) string {
	if db == "OVN_Northbound" {
		return m.path("run", "ovnnb_db.ctl")
	}
	return m.path("run", "ovnsb_db.ctl")
}

// status is cluster/status of db on this member, as the operator reads it
// (ovn-appctl -t <ctl> cluster/status), parsed.
func (m *member) status(db string) (*central.ClusterStatus, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := unixctl.Call(ctx, m.ctl(db), "cluster/status", db)
	if err != nil {
		return nil, err
	}
	return central.ParseClusterStatus(out)
}

// waitStatus waits until cond holds for cluster/status of db on m.
func (m *member) waitStatus(db, what string, d time.Duration, cond func(*central.ClusterStatus) bool) *central.ClusterStatus {
	m.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last *central.ClusterStatus
	var lastErr error
	for {
		st, err := m.status(db)
		if err == nil && cond(st) {
			return st
		}
		last, lastErr = st, err
		if time.Now().After(deadline) {
			m.t.Fatalf("%s %s: %s not reached within %v (last: %+v, %v)\n%s", m.name, db, what, d, last, lastErr, m.logTail())
		}
		<-tick.C
	}
}

// snapshot is GET /status of the member's health endpoint.
func (m *member) snapshot() (*health.Snapshot, error) {
	code, body, err := httpGet(m.ns, "/status")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/status: %d %s", code, body)
	}
	var s health.Snapshot
	return &s, json.Unmarshal([]byte(body), &s)
}

// waitSnapshot waits until the member's /status satisfies cond (the
// member refreshes its Raft state every --cluster-status-interval).
func (m *member) waitSnapshot(what string, cond func(*health.Snapshot) bool) *health.Snapshot {
	m.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		s, err := m.snapshot()
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s /status: %s not reached in 20s (last %+v, %v)", m.name, what, s, err)
		}
		time.Sleep(50 * time.Millisecond) // paces re-reading /status; the deadline bounds it
	}
}

// httpGet fetches path from the health endpoint inside ns.
func httpGet(ns, path string) (int, string, error) {
	var conn net.Conn
	err := inNetns(ns, func() (err error) {
		conn, err = net.DialTimeout("tcp", "127.0.0.1:10665", 5*time.Second)
		return err
	})
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://127.0.0.1:10665"+path, nil)
	if err := req.Write(conn); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

func inNetns(name string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(name)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	defer func() { _ = netns.Set(orig) }()
	return fn()
}

// leaderOf returns the member that leads db, as the members agree.
func (c *cluster) leaderOf(db string) *member {
	c.t.Helper()
	for _, m := range c.members {
		if !m.running() {
			continue
		}
		if st, err := m.status(db); err == nil && st.Role == "leader" {
			return m
		}
	}
	c.t.Fatalf("no member leads %s", db)
	return nil
}

// dial opens a libovsdb connection (the controller's and the node's
// access layer) to endpoint.
func dial(t testing.TB, dbModel func() (model.ClientDBModel, error), endpoint string) *ovsdbconn.Conn {
	t.Helper()
	m, err := dbModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := ovsdbconn.Dial(ctx, m, endpoint, ovsdbconn.Options{Timeout: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// notifyListener is testenv's sd_notify listener.
type notifyListener = testenv.NotifyListener

func listenNotify(t testing.TB, dir string) *notifyListener { return testenv.ListenNotify(t, dir) }

// waitLog returns once file contains sub, re-reading it on every write.
func waitLog(file, sub string, timeout time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(file); err != nil {
		return err
	}
	deadline := time.After(timeout)
	for {
		raw, _ := os.ReadFile(file)
		if bytes.Contains(raw, []byte(sub)) {
			return nil
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("%q not in %s within %v", sub, file, timeout)
		}
	}
}

// Package centralcluster runs a clustered OVN central made of real
// bin/ovnhost processes (role=central) running Debian's ovsdb-server and
// ovn-northd, each member in its own network namespace. The namespaces hang
// off a Linux bridge in the test's own namespace, so the test process
// reaches every member the way a node or the controller would: over TCP to
// the addresses of OVN_DB_IPS.
//
//	c := centralcluster.New(t, 3)
//	c.StartAll()                       // every member READY=1
//	nb := c.NBRemote()                 // tcp:a:6641,tcp:b:6641,tcp:c:6641
//	c.LeaderOf("OVN_Northbound").Crash()
package centralcluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/ovncluster"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/nodedaemon"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// HealthAddr is every member's --health-addr, inside its namespace.
const HealthAddr = "127.0.0.1:10665"

var seq atomic.Int32

// LAN is the bridge and the subnet the members share.
type LAN struct {
	t      testing.TB
	bridge string
	prefix string // "198.18.N."
	n      int
	seq    int32
}

// NewLAN creates the bridge, removed at cleanup.
func NewLAN(t testing.TB) *LAN {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ip", "ovsdb-server", "ovsdb-tool", "ovsdb-client", "ovn-northd")
	s := seq.Add(1)
	// 198.18.0.0/15 is for benchmarking networks: no host routes there.
	l := &LAN{t: t, seq: s, bridge: fmt.Sprintf("ohcb%d-%d", os.Getpid()%10000, s), prefix: fmt.Sprintf("198.18.%d.", (os.Getpid()+int(s)*7)%250+1)}
	netns.Run(t, "ip", "link", "add", l.bridge, "type", "bridge")
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", l.bridge).Run() })
	netns.Run(t, "ip", "addr", "add", l.prefix+"254/24", "dev", l.bridge)
	netns.Run(t, "ip", "link", "set", l.bridge, "up")
	return l
}

// Host is a network namespace on the LAN with address IP (its eth0).
type Host struct {
	NS string
	IP string
}

// AddHost creates the next host (prefix+n), removed at cleanup.
func (l *LAN) AddHost() Host {
	l.t.Helper()
	l.n++
	name := fmt.Sprintf("ohc%d-%d-%d", os.Getpid()%10000, l.seq, l.n)
	netns.Run(l.t, "ip", "netns", "add", name)
	l.t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	veth := fmt.Sprintf("ohv%d-%d-%d", os.Getpid()%1000, l.seq, l.n)
	netns.Run(l.t, "ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", name)
	l.t.Cleanup(func() { _ = exec.Command("ip", "link", "del", veth).Run() })
	netns.Run(l.t, "ip", "link", "set", veth, "master", l.bridge, "up")
	ip := fmt.Sprintf("%s%d", l.prefix, l.n)
	netns.Run(l.t, "ip", "-n", name, "addr", "add", ip+"/24", "dev", "eth0")
	netns.Run(l.t, "ip", "-n", name, "link", "set", "eth0", "up")
	netns.Run(l.t, "ip", "-n", name, "link", "set", "lo", "up")
	return Host{NS: name, IP: ip}
}

// Cluster is a set of central members on one LAN.
type Cluster struct {
	t       testing.TB
	LAN     *LAN
	Members []*Member
}

// New plans n members; none is started.
func New(t testing.TB, n int) *Cluster {
	t.Helper()
	c := &Cluster{t: t, LAN: NewLAN(t)}
	for i := 0; i < n; i++ {
		c.Members = append(c.Members, c.NewMember())
	}
	return c
}

// NewMember plans one more member (not in Members: the caller adds it).
func (c *Cluster) NewMember() *Member {
	h := c.LAN.AddHost()
	dir, err := os.MkdirTemp("", "ovnhost-central-")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { os.RemoveAll(dir) })
	m := &Member{t: c.t, Host: h, Dir: dir, Name: fmt.Sprintf("m%d", len(c.Members)+1)}
	m.Notify = testenv.ListenNotify(c.t, dir)
	return m
}

// IPs is OVN_DB_IPS of the cluster.
func (c *Cluster) IPs() string {
	var ips []string
	for _, m := range c.Members {
		ips = append(ips, m.IP)
	}
	return strings.Join(ips, ",")
}

// NBRemote is the every-address northbound remote clients use.
func (c *Cluster) NBRemote() string {
	nb, _ := ovsdbconn.ClusterRemotes(strings.Split(c.IPs(), ","), false)
	return nb
}

// SBRemote is the every-address southbound remote clients use.
func (c *Cluster) SBRemote() string {
	_, sb := ovsdbconn.ClusterRemotes(strings.Split(c.IPs(), ","), false)
	return sb
}

// StartAll starts every member at once and waits for each READY=1.
func (c *Cluster) StartAll(extra ...string) {
	c.t.Helper()
	for _, m := range c.Members {
		m.StartNoWait(c.IPs(), extra...)
	}
	for _, m := range c.Members {
		m.WaitReady(90 * time.Second)
	}
}

// LeaderOf returns the member that leads db, as the members agree.
func (c *Cluster) LeaderOf(db string) *Member {
	c.t.Helper()
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		if st, err := m.Status(db); err == nil && st.Role == "leader" {
			return m
		}
	}
	c.t.Fatalf("no member leads %s", db)
	return nil
}

// SameCluster checks that every running member is in one cluster of size
// members for db, with one leader they all name.
func (c *Cluster) SameCluster(db string, size int) {
	c.t.Helper()
	var cid string
	leaders := map[string]bool{}
	for _, m := range c.Members {
		if !m.Running() {
			continue
		}
		st := m.WaitStatus(db, "membership with a known leader and "+strconv.Itoa(size)+" servers", 30*time.Second, func(s *ovncluster.Status) bool {
			return s.Member() && s.LeaderKnown() && len(s.Servers) == size
		})
		if cid == "" {
			cid = st.ClusterID
		}
		if st.ClusterID != cid {
			c.t.Fatalf("%s %s is in cluster %s, another member in %s", m.Name, db, st.ClusterID, cid)
		}
		l := st.Leader
		if l == "self" {
			l = st.SelfShort
		}
		leaders[l] = true
	}
	if len(leaders) != 1 {
		c.t.Fatalf("%s: members name different leaders %v", db, leaders)
	}
}

// StartNode runs an ovnhost node (role=node) on the LAN, standalone against
// the central through OVN_DB_IPS, and waits for its READY=1.
func (c *Cluster) StartNode(name string) *nodedaemon.Node {
	c.t.Helper()
	dir, err := os.MkdirTemp("", "ovnhost-cnode-")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { os.RemoveAll(dir) })
	n := nodedaemon.New(c.t, nodedaemon.Options{NS: c.LAN.AddHost().NS, Dir: dir, Name: name, StartTimeout: "60s", ReadyTimeout: 90 * time.Second})
	n.Env = []string{"OVN_DB_IPS=" + c.IPs(), "IFACE=eth0"}
	n.Start()
	return n
}

// Member is one `ovnhost run --role=central`.
type Member struct {
	t testing.TB
	Host
	Name   string
	Dir    string
	Notify *testenv.NotifyListener
	// DefaultSSL: leave ENABLE_SSL to the central's default (SSL on);
	// otherwise the member is told --enable-ssl=false.
	DefaultSSL bool
	proc       *proc.Process
}

// Path is a path under the member's directory.
func (m *Member) Path(p ...string) string { return filepath.Join(append([]string{m.Dir}, p...)...) }

// Args are the member's flags for a cluster of ips.
func (m *Member) Args(ips string) []string {
	args := []string{"--role=central", "--ovn-db-ips=" + ips,
		"--ovn-db-dir=" + m.Path("db"), "--ovn-run-dir=" + m.Path("run"), "--ovn-log-dir=" + m.Path("log"),
		"--node-name=" + m.Name, "--health-addr=" + HealthAddr, "--stop-timeout=5s", "--start-timeout=60s",
		"--cluster-status-interval=200ms"}
	if !m.DefaultSSL {
		// SSL is the central's default; these members talk TCP unless a
		// test adds --enable-ssl (a later flag wins).
		args = append(args, "--enable-ssl=false")
	}
	return args
}

// StartNoWait runs the member; it is terminated at cleanup.
func (m *Member) StartNoWait(ips string, extra ...string) {
	m.t.Helper()
	p := proc.MustStart(m.t, proc.Spec{
		Name:   m.Name,
		Path:   testenv.Binary(m.t, "ovnhost"),
		Args:   append(append([]string{"run"}, m.Args(ips)...), extra...),
		Env:    []string{"PATH=" + os.Getenv("PATH")},
		NetNS:  m.NS,
		Log:    m.Path("ovnhost.log"),
		Notify: m.Notify,
	})
	m.proc = p
	m.t.Cleanup(func() { p.Terminate(30 * time.Second) })
}

// WaitReady waits up to d for READY=1 since the last start.
func (m *Member) WaitReady(d time.Duration) {
	m.t.Helper()
	if _, err := m.proc.WaitNotify("READY=1", d); err != nil {
		m.t.Fatalf("%v\n%s", err, m.LogTail())
	}
}

// Stop sends SIGTERM and returns the exit code.
func (m *Member) Stop() int {
	m.t.Helper()
	_ = m.proc.Signal(syscall.SIGTERM)
	return m.Wait(60 * time.Second)
}

// Wait waits up to d for the exit and returns its code.
func (m *Member) Wait(d time.Duration) int {
	m.t.Helper()
	code, err := m.proc.Wait(d)
	if err != nil {
		m.t.Fatalf("%v\n%s", err, m.LogTail())
	}
	return code
}

// Crash kills ovnhost and its children at once: a member whose machine
// died (the children's SIGTERM from PR_SET_PDEATHSIG is not a graceful
// exit: no leadership transfer).
func (m *Member) Crash() {
	m.t.Helper()
	for _, pidfile := range []string{m.Path("run", "ovnnb_db.pid"), m.Path("run", "ovnsb_db.pid"), m.Path("run", "ovn-northd.pid")} {
		if pid, err := proc.ReadPidfile(pidfile); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	_ = m.proc.Signal(syscall.SIGKILL)
	m.Wait(30 * time.Second)
}

// Running reports whether the member was started and has not exited.
func (m *Member) Running() bool { return m.proc.Running() }

// Proc is the running (or last) process.
func (m *Member) Proc() *proc.Process { return m.proc }

// LogTail is the end of the member's log, for failure messages.
func (m *Member) LogTail() string {
	return "--- " + m.Name + " ovnhost log tail ---\n" + proc.LastLines(m.LogText(), 40)
}

// LogText is the member's whole log.
func (m *Member) LogText() string {
	raw, _ := os.ReadFile(m.Path("ovnhost.log"))
	return string(raw)
}

// Ctl is the unixctl socket of db's ovsdb-server.
func (m *Member) Ctl(db string) string {
	if db == "OVN_Northbound" {
		return m.Path("run", "ovnnb_db.ctl")
	}
	return m.Path("run", "ovnsb_db.ctl")
}

// Status is cluster/status of db on this member, as the operator reads it
// (ovn-appctl -t <ctl> cluster/status), parsed.
func (m *Member) Status(db string) (*ovncluster.Status, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := unixctl.Call(ctx, m.Ctl(db), "cluster/status", db)
	if err != nil {
		return nil, err
	}
	return ovncluster.ParseStatus(out)
}

// WaitStatus waits until cond holds for cluster/status of db on m.
func (m *Member) WaitStatus(db, what string, d time.Duration, cond func(*ovncluster.Status) bool) *ovncluster.Status {
	m.t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last *ovncluster.Status
	var lastErr error
	for {
		st, err := m.Status(db)
		if err == nil && cond(st) {
			return st
		}
		last, lastErr = st, err
		if time.Now().After(deadline) {
			m.t.Fatalf("%s %s: %s not reached within %v (last: %+v, %v)\n%s", m.Name, db, what, d, last, lastErr, m.LogTail())
		}
		<-tick.C // paces re-reading cluster/status; the deadline bounds it
	}
}

// Snapshot is GET /status of the member's health endpoint.
func (m *Member) Snapshot() (*nodeapi.Snapshot, error) {
	code, body, err := netns.HTTPGet(m.NS, HealthAddr, "/status")
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("/status: %d %s", code, body)
	}
	var s nodeapi.Snapshot
	return &s, json.Unmarshal([]byte(body), &s)
}

// WaitSnapshot waits until the member's /status satisfies cond (the
// member refreshes its Raft state every --cluster-status-interval).
func (m *Member) WaitSnapshot(what string, cond func(*nodeapi.Snapshot) bool) *nodeapi.Snapshot {
	m.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		s, err := m.Snapshot()
		if err == nil && cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s /status: %s not reached in 20s (last %+v, %v)", m.Name, what, s, err)
		}
		<-tick.C // paces re-reading /status; the deadline bounds it
	}
}

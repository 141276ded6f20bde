// Package nodedaemon runs the built node daemon (`bin/ovnhost run`) for a
// test, against Debian's OVS/OVN daemons (userspace datapath), in its own
// network namespace so that the tap devices of one test never meet
// another's, with every directory under one directory of the test.
//
//	n := nodedaemon.New(t, nodedaemon.Options{})
//	n.Env = []string{"OVN_SB_ADDR=" + sb}
//	n.Start()            // waits for sd_notify READY=1
//	code := n.Stop()     // SIGTERM, the exit code
package nodedaemon

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// HealthAddr is the daemon's --health-addr, inside its namespace.
const HealthAddr = "127.0.0.1:10665"

// Options shape a node; the zero value is a node of its own.
type Options struct {
	// NS is an existing network namespace to run in; "" makes one.
	NS string
	// Dir holds the node's directories; "" makes a temporary one,
	// removed at cleanup unless $OVNHOST_BENCH_KEEP is set.
	Dir string
	// Name is --node-name ("test-node").
	Name string
	// StartTimeout is --start-timeout ("30s").
	StartTimeout string
	// ReadyTimeout bounds Start's wait for READY=1 (60s).
	ReadyTimeout time.Duration
}

// Node is one `ovnhost run` under test. Args and Env may be changed
// between runs.
type Node struct {
	t   testing.TB
	Dir string
	NS  string
	// Args are the flags of `ovnhost run`: every directory under Dir, the
	// health address, node name and timeouts.
	Args []string
	// Env is the environment beyond PATH and NOTIFY_SOCKET.
	Env []string
	// Notify is the sd_notify socket the daemon reports to (replaceable
	// between runs).
	Notify       *testenv.NotifyListener
	readyTimeout time.Duration
	proc         *proc.Process
}

// New checks the prerequisites (root, the OVS/OVN programs) and plans a
// node; nothing runs yet.
func New(t testing.TB, o Options) *Node {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovsdb-tool", "ip")
	dir := o.Dir
	if dir == "" {
		var err error
		if dir, err = os.MkdirTemp("", "ovnhost-node-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if os.Getenv("OVNHOST_BENCH_KEEP") == "" {
				os.RemoveAll(dir)
			}
		})
	}
	ns := o.NS
	if ns == "" {
		ns = netns.New(t, "ohn")
	}
	name, startTimeout, ready := o.Name, o.StartTimeout, o.ReadyTimeout
	if name == "" {
		name = "test-node"
	}
	if startTimeout == "" {
		startTimeout = "30s"
	}
	if ready == 0 {
		ready = 60 * time.Second
	}
	n := &Node{t: t, Dir: dir, NS: ns, readyTimeout: ready}
	n.Args = []string{
		"--ovs-db-dir=" + n.Path("ovs-db"), "--ovs-run-dir=" + n.Path("ovs-run"), "--ovs-log-dir=" + n.Path("log"),
		"--ovn-db-dir=" + n.Path("ovn-db"), "--ovn-run-dir=" + n.Path("ovn-run"), "--ovn-log-dir=" + n.Path("log"),
		"--health-addr=" + HealthAddr, "--node-name=" + name, "--stop-timeout=5s", "--start-timeout=" + startTimeout,
		"--cni-socket=" + n.Path("cni.sock"), "--cni-bin-dir=" + n.Path("cni-bin"), "--cni-conf-dir=" + n.Path("cni-conf"),
	}
	n.Notify = testenv.ListenNotify(t, dir)
	return n
}

// Path is a path under the node's directory.
func (n *Node) Path(p ...string) string { return filepath.Join(append([]string{n.Dir}, p...)...) }

// Log is the daemon's output file.
func (n *Node) Log() string { return n.Path("ovnhost.log") }

// Start runs ovnhost with extra flags and waits for READY=1.
func (n *Node) Start(extra ...string) {
	n.t.Helper()
	if err := n.StartNoWait(extra...); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.proc.WaitNotify("READY=1", n.readyTimeout); err != nil {
		n.t.Fatalf("%v\n%s", err, n.LogTail())
	}
}

// StartNoWait runs ovnhost with extra flags; it is terminated at cleanup.
func (n *Node) StartNoWait(extra ...string) error {
	p, err := proc.Start(proc.Spec{
		Name:   "ovnhost",
		Path:   testenv.Binary(n.t, "ovnhost"),
		Args:   append(append([]string{"run"}, n.Args...), extra...),
		Env:    append([]string{"PATH=" + os.Getenv("PATH")}, n.Env...),
		NetNS:  n.NS,
		Log:    n.Log(),
		Notify: n.Notify,
	})
	if err != nil {
		return err
	}
	n.proc = p
	n.t.Cleanup(func() { p.Terminate(30 * time.Second) })
	return nil
}

// WaitReady waits for READY=1 since the last start, failing t.
func (n *Node) WaitReady(d time.Duration) {
	n.t.Helper()
	if _, err := n.proc.WaitNotify("READY=1", d); err != nil {
		n.t.Fatalf("%v\n%s", err, n.LogTail())
	}
}

// Stop sends SIGTERM and returns the exit code, failing t after 60s.
func (n *Node) Stop() int {
	n.t.Helper()
	code, err := n.proc.Stop(60 * time.Second)
	if err != nil {
		n.t.Fatalf("%v\n%s", err, n.LogTail())
	}
	return code
}

// Terminate stops the daemon whatever its state: SIGTERM, SIGKILL after grace.
func (n *Node) Terminate(grace time.Duration) { n.proc.Terminate(grace) }

// Proc is the running (or last) process.
func (n *Node) Proc() *proc.Process { return n.proc }

// Exited is closed when the last started daemon has exited.
func (n *Node) Exited() <-chan struct{} { return n.proc.Exited() }

// Running reports whether the daemon runs.
func (n *Node) Running() bool { return n.proc.Running() }

// ExitCode waits for the exit and returns its code.
func (n *Node) ExitCode() int { return n.proc.ExitCode() }

// Signal sends sig to the daemon.
func (n *Node) Signal(sig syscall.Signal) error { return n.proc.Signal(sig) }

// PID is the daemon's process id.
func (n *Node) PID() int { return n.proc.PID() }

// LogTail is the end of the daemon's log, for failure messages.
func (n *Node) LogTail() string {
	raw, _ := os.ReadFile(n.Log())
	return "--- ovnhost log tail ---\n" + proc.LastLines(string(raw), 60)
}

// WaitLog returns once the daemon's log contains sub.
func (n *Node) WaitLog(sub string, timeout time.Duration) error {
	if err := proc.WaitFileContains(n.Log(), sub, timeout); err != nil {
		return fmt.Errorf("ovnhost: %w", err)
	}
	return nil
}

// ReadPid reads the pidfile of one of the node's daemons.
func (n *Node) ReadPid(pidfile string) int {
	n.t.Helper()
	p, err := proc.ReadPidfile(pidfile)
	if err != nil {
		n.t.Fatalf("reading %s: %v", pidfile, err)
	}
	return p
}

// HTTPGet fetches path from the daemon's health endpoint, inside its namespace.
func (n *Node) HTTPGet(path string) (int, string, error) {
	return netns.HTTPGet(n.NS, HealthAddr, path)
}

// ListenNotifyAgain replaces the notify socket (for a second run whose
// messages must not mix with the first's).
func (n *Node) ListenNotifyAgain() {
	os.Remove(n.Notify.Path())
	n.Notify.Close()
	n.Notify = testenv.ListenNotify(n.t, n.Dir)
}

// Clone is another node on the same directories, namespace, flags,
// environment and notify socket, not started (two daemons on one node).
func (n *Node) Clone() *Node {
	c := *n
	c.Args = append([]string(nil), n.Args...)
	c.Env = append([]string(nil), n.Env...)
	c.proc = nil
	return &c
}

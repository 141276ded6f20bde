package node_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// These tests run the real bin/ovnhost against Debian's OVS/OVN daemons
// (userspace datapath), each node in its own network namespace so the tap
// devices of one test never meet another's.

var nsSeq atomic.Int32

// newNetns creates a network namespace with lo up, removed at cleanup.
func newNetns(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s%d-%d", prefix, os.Getpid()%10000, nsSeq.Add(1))
	run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run(t, "ip", "-n", name, "link", "set", "lo", "up")
	return name
}

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// notifyListener is testenv's sd_notify listener.
type notifyListener = testenv.NotifyListener

func listenNotify(t testing.TB, dir string) *notifyListener { return testenv.ListenNotify(t, dir) }

// node is one ovnhost process under test.
type node struct {
	t      testing.TB
	dir    string
	ns     string
	args   []string
	env    []string
	cmd    *exec.Cmd
	log    *os.File
	notify *notifyListener
	exited chan struct{}
	err    error
}

func (n *node) path(p ...string) string { return filepath.Join(append([]string{n.dir}, p...)...) }

// newNode plans a node with every directory under a fresh temp dir.
func newNode(t testing.TB) *node {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovsdb-tool", "ip", "ping", "ethtool")
	dir, err := os.MkdirTemp("", "ovnhost-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("OVNHOST_BENCH_KEEP") == "" {
			os.RemoveAll(dir)
		}
	})
	n := &node{t: t, dir: dir, ns: newNetns(t, "ohn")}
	n.args = []string{
		"--ovs-db-dir=" + n.path("ovs-db"), "--ovs-run-dir=" + n.path("ovs-run"), "--ovs-log-dir=" + n.path("log"),
		"--ovn-db-dir=" + n.path("ovn-db"), "--ovn-run-dir=" + n.path("ovn-run"), "--ovn-log-dir=" + n.path("log"),
		"--health-addr=127.0.0.1:10665", "--node-name=test-node", "--stop-timeout=5s", "--start-timeout=30s",
		"--cni-socket=" + n.path("cni.sock"), "--cni-bin-dir=" + n.path("cni-bin"), "--cni-conf-dir=" + n.path("cni-conf"),
	}
	n.notify = listenNotify(t, dir)
	return n
}

// start runs ovnhost and waits for READY=1.
func (n *node) start(extra ...string) {
	n.t.Helper()
	if err := n.startNoWait(extra...); err != nil {
		n.t.Fatal(err)
	}
	if _, err := n.notify.WaitFor(0, "READY=1", 60*time.Second, n.exited); err != nil {
		n.t.Fatalf("%v\n%s", err, n.logTail())
	}
}

func (n *node) startNoWait(extra ...string) error {
	bin := testenv.Binary(n.t, "ovnhost")
	args := append([]string{"netns", "exec", n.ns, bin, "run"}, n.args...)
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	log, err := os.OpenFile(n.path("ovnhost.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "NOTIFY_SOCKET=" + n.notify.Path()}, n.env...)
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd, n.log, n.exited = cmd, log, make(chan struct{})
	go func() { n.err = cmd.Wait(); close(n.exited) }()
	n.t.Cleanup(func() { n.kill() })
	return nil
}

// stop sends SIGTERM and returns the exit code.
func (n *node) stop() int {
	n.t.Helper()
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		n.t.Fatalf("ovnhost did not exit within 60s of SIGTERM\n%s", n.logTail())
	}
	n.log.Close()
	return n.cmd.ProcessState.ExitCode()
}

func (n *node) kill() {
	if n.cmd == nil || n.exited == nil {
		return
	}
	select {
	case <-n.exited:
	default:
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(30 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
	}
}

func (n *node) logTail() string {
	raw, _ := os.ReadFile(n.path("ovnhost.log"))
	lines := strings.Split(string(raw), "\n")
	if len(lines) > 60 {
		lines = lines[len(lines)-60:]
	}
	return "--- ovnhost log tail ---\n" + strings.Join(lines, "\n")
}

// pid reads a daemon's pidfile.
func (n *node) pid(pidfile string) int {
	n.t.Helper()
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		n.t.Fatalf("reading %s: %v", pidfile, err)
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		n.t.Fatalf("%s: %v", pidfile, err)
	}
	return p
}

// httpGet fetches url from inside the node's network namespace.
func (n *node) httpGet(path string) (int, string, error) {
	conn, err := dialInNetns(n.ns, "127.0.0.1:10665")
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

// dialInNetns opens a TCP connection from inside the named namespace.
func dialInNetns(name, addr string) (c net.Conn, err error) {
	err = inNetns(name, func() error {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// inNetns runs fn on a thread switched into the named namespace: sockets
// fn creates belong to that namespace and stay there afterwards.
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

// processesUnder lists live processes whose command line mentions dir.
func processesUnder(dir string) []string {
	var out []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte(dir)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue // exited, awaiting a lazy reaper
		}
		out = append(out, fmt.Sprintf("%d %s", pid, bytes.ReplaceAll(raw, []byte{0}, []byte{' '})))
	}
	return out
}

// waitLog returns once the node's log contains sub, re-reading the file on
// every write to it.
func (n *node) waitLog(sub string, timeout time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(n.path("ovnhost.log")); err != nil {
		return err
	}
	deadline := time.After(timeout)
	for {
		raw, _ := os.ReadFile(n.path("ovnhost.log"))
		if bytes.Contains(raw, []byte(sub)) {
			return nil
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("%q not logged within %v", sub, timeout)
		}
	}
}

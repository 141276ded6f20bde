package node_test

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// A child that hangs (SIGSTOP: alive, its sockets accept, nothing answers)
// is found by its probe on its own channel, /readyz turns false naming
// it, it is killed and restarted, and the node is ready again (issue 14,
// Medium 4). ovsdb-server is probed with an OVSDB echo on its database
// socket, ovs-vswitchd and ovn-controller with unixctl "version".
func TestHungChildIsDetectedKilledAndRestarted(t *testing.T) {
	n := newNode(t)
	n.Start("--child-probe-interval=1s", "--child-probe-misses=2")
	pods := []pod{
		{hostIf: "veth-h1", lsp: "h1.default", mac: "0a:58:0a:10:00:15", ip: "10.16.0.21"},
		{hostIf: "veth-h2", lsp: "h2.default", mac: "0a:58:0a:10:00:16", ip: "10.16.0.22"},
	}
	addPods(t, n, pods...)
	for _, c := range []struct{ name, pidfile string }{
		{"ovs-vswitchd", n.Path("ovs-run", "ovs-vswitchd.pid")},
		{"ovn-controller", n.Path("ovn-run", "ovn-controller.pid")},
		{"ovsdb-server", n.Path("ovs-run", "ovsdb-server.pid")},
	} {
		old := n.ReadPid(c.pidfile)
		mark := n.Notify.Mark()
		if err := syscall.Kill(old, syscall.SIGSTOP); err != nil {
			t.Fatalf("SIGSTOP %s: %v", c.name, err)
		}
		// Not ready, with the reason, while it does not answer.
		if _, err := n.Notify.WaitFor(mark, "STATUS="+c.name+" is unresponsive", 15*time.Second, n.Exited()); err != nil {
			_ = syscall.Kill(old, syscall.SIGCONT)
			t.Fatalf("%s stopped: no unresponsive status: %v\n%s", c.name, err, n.LogTail())
		}
		code, body, err := n.HTTPGet("/readyz")
		if err != nil || code == 200 || !strings.Contains(body, c.name) || !strings.Contains(body, "probe") {
			t.Errorf("/readyz while %s hangs: %d %v\n%s", c.name, code, err, body)
		}
		// Killed (not merely waited for) and restarted.
		if _, err := n.Notify.WaitFor(mark, "STATUS="+c.name+" died (hung: killed after 2 missed probes", 15*time.Second, n.Exited()); err != nil {
			_ = syscall.Kill(old, syscall.SIGCONT)
			t.Fatalf("%s was not killed as hung: %v\n%s", c.name, err, n.LogTail())
		}
		if _, err := n.Notify.WaitFor(mark, "STATUS=ready", 30*time.Second, n.Exited()); err != nil {
			t.Fatalf("%s not ready again: %v\n%s", c.name, err, n.LogTail())
		}
		if now := n.ReadPid(c.pidfile); now == old {
			t.Fatalf("%s: still the stopped pid %d", c.name, old)
		}
		if err := syscall.Kill(old, 0); err == nil {
			t.Fatalf("%s: the hung process %d is still alive", c.name, old)
		}
		if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
			t.Fatalf("/readyz after %s's restart: %d %v\n%s", c.name, code, err, body)
		}
		if err := ping(pods[0].ns, pods[1].ip, 3); err != nil {
			t.Fatalf("pods after %s hung and was restarted: %v\n%s", c.name, err, n.LogTail())
		}
	}
}

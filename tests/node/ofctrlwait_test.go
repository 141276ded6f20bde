package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// ovn-ofctrl-wait-before-clear: 0 in conf.db after a start with a fresh
// ovs-vswitchd (nothing to keep), the setting (2000 ms by default) when
// ovn-controller alone is killed and restarted against the running
// ovs-vswitchd, whose flows then stay: no ping lost at 10 ms, flows back
// no sooner than the wait (OVN 23.03 obeys it), doctor reporting it with
// ovn-controller's longest flow generation. Then the same kill with the
// wait at 0, which measures how long ovn-controller takes after a
// restart to install the pods' flows (the default's justification,
// docs/reliability.md).
func TestOVNControllerRestartKeepsFlows(t *testing.T) {
	n := newNode(t)
	n.Start()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	waitWait(t, ovs, "0")

	var pods []pod
	for i := 1; i <= 10; i++ {
		pods = append(pods, pod{hostIf: fmt.Sprintf("veth-w%d", i), lsp: fmt.Sprintf("w%d.default", i),
			mac: fmt.Sprintf("0a:58:0a:10:00:%02x", 0x60+i), ip: fmt.Sprintf("10.16.0.%d", 60+i)})
	}
	addPods(t, n, pods...)
	if err := ping(pods[0].ns, pods[9].ip, 3); err != nil {
		t.Fatal(err)
	}

	took, lost, gen := killController(t, n, pods)
	t.Logf("ovn-ofctrl-wait-before-clear=2000: ovn-controller killed to ready %v, pings lost: %s, its longest flow generation %s", took, orNone(lost), gen)
	waitWait(t, ovs, "2000")
	if lost != "" {
		t.Errorf("pings lost across the restart of ovn-controller with the wait: %s", lost)
	}
	if took < 2*time.Second {
		t.Errorf("flows back %v after the kill, before the 2000 ms wait: ovn-controller did not wait\n%s", took, n.LogTail())
	}
	if err := n.WaitLog("ovn-controller keeps br-int's flows while it computes new ones", time.Second); err != nil {
		t.Error(err)
	}
	c := doctorCheck(t, n, "ofctrl-wait-before-clear")
	if c.Status != hostcheck.Pass || !strings.Contains(c.Found, "up to 2000 ms") || !strings.Contains(c.Found, "longest flow generation: ") {
		t.Errorf("doctor's ofctrl-wait-before-clear: %+v", c)
	}

	// Without the wait: what the restart costs and how long the flows take.
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	n.Args = append(n.Args, "--ovn-ofctrl-wait-before-clear=0") // doctor reads it too
	n.Start()
	ovs = dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	if err := ping(pods[0].ns, pods[9].ip, 3); err != nil {
		t.Fatal(err)
	}
	took, lost, gen = killController(t, n, pods)
	waitWait(t, ovs, "0")
	t.Logf("ovn-ofctrl-wait-before-clear=0: ovn-controller killed to ready %v, pings lost: %s, its longest flow generation %s", took, orNone(lost), gen)
	if c := doctorCheck(t, n, "ofctrl-wait-before-clear"); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "deletes every flow") {
		t.Errorf("doctor's ofctrl-wait-before-clear at 0: %+v", c)
	}
}

// killController kills ovn-controller while pods[0] pings pods[9] every
// 10 ms, and returns the time until ovnhost reports ready again (its gate:
// the flows on br-int), the pings lost, and the new ovn-controller's
// longest flow generation.
func killController(t *testing.T, n *node, pods []pod) (time.Duration, string, string) {
	t.Helper()
	pinger := exec.Command("ip", "netns", "exec", pods[0].ns, "ping", "-n", "-i", "0.01", "-W", "1", pods[9].ip)
	stdout, err := pinger.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	pinger.Stderr = pinger.Stdout
	if err := pinger.Start(); err != nil {
		t.Fatal(err)
	}
	defer pinger.Process.Kill()
	var pingOut strings.Builder
	replies, done := make(chan struct{}, 1<<16), make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			pingOut.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "icmp_seq=") && strings.Contains(sc.Text(), " ttl=") {
				replies <- struct{}{}
			}
		}
	}()
	// An established stream: replies before the kill and after the flows
	// are back.
	awaitReplies(t, replies, 10, "before the kill")
	pidfile := n.Path("ovn-run", "ovn-controller.pid")
	mark := n.Notify.Mark()
	start := time.Now()
	if err := syscall.Kill(n.ReadPid(pidfile), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "STATUS=ovn-controller died", 20*time.Second, n.Exited()); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}
	if _, err := n.Notify.WaitFor(mark, "STATUS=ready", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready again: %v\n%s", err, n.LogTail())
	}
	took := time.Since(start)
	for len(replies) > 0 {
		<-replies
	}
	awaitReplies(t, replies, 10, "after ovn-controller is ready again")
	_ = pinger.Process.Signal(syscall.SIGINT)
	<-done
	_ = pinger.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	gen, err := unixctl.Call(ctx, n.Path("ovn-run", fmt.Sprintf("ovn-controller.%d.ctl", n.ReadPid(pidfile))), "stopwatch/show", "flow-generation")
	if err != nil {
		t.Fatal(err)
	}
	max := "unknown"
	if d, ok := hostcheck.FlowGenerationMax(gen); ok {
		max = d.String()
	}
	return took, pingsLost(pingOut.String()), max
}

// awaitReplies waits for k echo replies of a running ping.
func awaitReplies(t *testing.T, replies <-chan struct{}, k int, when string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for i := 0; i < k; i++ {
		select {
		case <-replies:
		case <-deadline:
			t.Fatalf("%d of %d echo replies %s within 10s", i, k, when)
		}
	}
}

// waitWait waits for Open_vSwitch external_ids:ovn-ofctrl-wait-before-clear.
func waitWait(t *testing.T, ovs *ovsdbconn.Conn, want string) {
	t.Helper()
	waitExternalID(t, ovs, "ovn-ofctrl-wait-before-clear", want)
}

// waitExternalID waits for an Open_vSwitch external_ids key's value.
func waitExternalID(t *testing.T, ovs *ovsdbconn.Conn, key, want string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := ""
	if err := ovs.WaitUntil(ctx, "external_ids:"+key+"="+want, func() bool {
		var rows []vswitch.OpenvSwitch
		_ = ovs.List(ctx, &rows)
		if len(rows) == 1 {
			got = rows[0].ExternalIDs[key]
		}
		return got == want
	}, nil); err != nil {
		t.Fatalf("%v (it is %q)", err, got)
	}
}

// doctorCheck runs netctl doctor on the node with its settings and returns
// the named check.
func doctorCheck(t *testing.T, n *node, name string) hostcheck.Check {
	t.Helper()
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS, testenv.Binary(t, "netctl"), "doctor", "--output=json"}, n.Args...)...)
	cmd.Env = append(os.Environ(), n.Env...)
	out, runErr := cmd.Output()
	var rep struct{ Checks []hostcheck.Check }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("netctl doctor: %v (exit: %v)\n%s", err, runErr, out)
	}
	for _, c := range rep.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("netctl doctor has no %s check:\n%s", name, out)
	return hostcheck.Check{}
}

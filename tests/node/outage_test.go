package node_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// The OVN central unreachable (issue 14, chaos): the southbound database is
// stopped while pods on two nodes exchange traffic. The pods keep their
// connectivity on the flows they have; neither node daemon exits or
// restarts a child; /readyz turns false naming ovn-controller's lost
// southbound connection; when the SB is back both nodes are ready again
// and a new pod is wired. OVNHOST_CENTRAL_OUTAGE sets the outage (default
// 20s; the five minutes: OVNHOST_CENTRAL_OUTAGE=5m).
func TestCentralUnreachableKeepsPodsAndRecovers(t *testing.T) {
	outage := 20 * time.Second
	if v := os.Getenv("OVNHOST_CENTRAL_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 5*time.Second {
			t.Fatalf("OVNHOST_CENTRAL_OUTAGE=%q: want a Go duration of at least 5s (e.g. 5m)", v)
		}
		outage = d
	}
	c := startCluster(t, 2, "--child-probe-interval=1s")
	c.ensureNamespace(t, "outage", nil)
	a := c.addPod(t, 0, "outage", "pa", nil, nil)
	b := c.addPod(t, 1, "outage", "pb", nil, nil)
	if err := ping(a.netns, b.ip, 3); err != nil {
		t.Fatalf("before the outage: %v", err)
	}
	type pids map[string]int
	childPids := func(n *node) pids {
		return pids{
			"ovsdb-server":   n.ReadPid(n.Path("ovs-run", "ovsdb-server.pid")),
			"ovs-vswitchd":   n.ReadPid(n.Path("ovs-run", "ovs-vswitchd.pid")),
			"ovn-controller": n.ReadPid(n.Path("ovn-run", "ovn-controller.pid")),
		}
	}
	before := []pids{childPids(c.nodes[0]), childPids(c.nodes[1])}
	marks := []int{c.nodes[0].Notify.Mark(), c.nodes[1].Notify.Mark()}

	t0 := time.Now()
	c.cp.central.StopSB()
	sbBack := false
	defer func() {
		if !sbBack {
			c.cp.central.StartSB(t)
		}
	}()
	for i, n := range c.nodes {
		if _, err := n.Notify.WaitFor(marks[i], "STATUS=ovn-controller is not ready; waiting for its OVN southbound database", 30*time.Second, n.Exited()); err != nil {
			t.Fatalf("%s with the SB stopped: %v\n%s", c.names[i], err, n.LogTail())
		}
		code, body, err := n.HTTPGet("/readyz")
		if err != nil || code == 200 || !strings.Contains(body, "southbound") {
			t.Errorf("%s /readyz with the SB stopped: %d %v %q, want 503 naming the southbound database", c.names[i], code, err, body)
		}
	}
	t.Logf("both nodes not ready %s after the SB stopped", time.Since(t0).Round(time.Millisecond))
	marks = []int{c.nodes[0].Notify.Mark(), c.nodes[1].Notify.Mark()}

	// Traffic across the nodes for the rest of the outage.
	rest := outage - time.Since(t0)
	if rest < 3*time.Second {
		rest = 3 * time.Second
	}
	out, _ := exec.Command("ip", "netns", "exec", a.netns, "ping", "-i", "0.2", "-W", "1", "-w", fmt.Sprint(int(rest.Seconds())), b.ip).CombinedOutput()
	loss := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(string(out))
	if loss == nil || loss[1] != loss[2] || loss[1] == "0" {
		t.Errorf("pods across the nodes during the SB outage: want every ping answered:\n%s", out)
	} else {
		t.Logf("during the outage (%s): %s pings, all answered", rest.Round(time.Second), loss[1])
	}
	for i, n := range c.nodes {
		select {
		case <-n.Exited():
			t.Fatalf("%s's daemon exited during the SB outage\n%s", c.names[i], n.LogTail())
		default:
		}
		if now := childPids(n); fmt.Sprint(now) != fmt.Sprint(before[i]) {
			t.Errorf("%s restarted a child during the SB outage: pids %v, before %v", c.names[i], now, before[i])
		}
	}

	c.cp.central.StartSB(t)
	sbBack = true
	for i, n := range c.nodes {
		if _, err := n.Notify.WaitFor(marks[i], "STATUS=ready", 60*time.Second, n.Exited()); err != nil {
			t.Fatalf("%s after the SB came back: %v\n%s", c.names[i], err, n.LogTail())
		}
		if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
			t.Errorf("%s /readyz after the SB came back: %d %v %q", c.names[i], code, err, body)
		}
		if now := childPids(n); fmt.Sprint(now) != fmt.Sprint(before[i]) {
			t.Errorf("%s restarted a child when the SB came back: pids %v, before %v", c.names[i], now, before[i])
		}
	}
	if err := ping(a.netns, b.ip, 3); err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	p := c.addPod(t, 0, "outage", "pc", nil, nil)
	if err := ping(p.netns, b.ip, 3); err != nil {
		t.Fatalf("a pod created after the outage: %v", err)
	}
}

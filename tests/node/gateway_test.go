package node_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// A centralized subnet (Kube-OVN's gatewayType: centralized, gatewayNode
// "node-b,node-c") sends its pods' outside traffic through the first gateway
// node, masqueraded to that node's uplink address, whatever node the pod is
// on. With the controller down, stopping node-b's daemon moves new
// connections to node-c (OVN's BFD between the HA chassis, no controller),
// and the Subnet status names the active gateway.
func TestCentralizedGatewayFailsOverWithoutTheController(t *testing.T) {
	c := startCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "cgw"
	c.ensureNamespace(t, ns, nil)
	if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "central"},
		"spec": map[string]any{"cidrBlock": "10.80.0.0/16", "gatewayType": "centralized", "gatewayNode": "node-b,node-c",
			"natOutgoing": true, "namespaces": []any{ns}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Bad input first: a gateway node that does not exist is named in the
	// condition, and nothing is programmed for that subnet.
	if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "typo"},
		"spec": map[string]any{"cidrBlock": "10.81.0.0/16", "gatewayType": "centralized", "gatewayNode": "node-x"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if cond := c.waitSubnetCondition(t, "typo", "GatewayReady", 60*time.Second); cond["status"] != "False" || cond["reason"] != "UnknownGatewayNode" ||
		!strings.Contains(fmt.Sprint(cond["message"]), "node-x") {
		t.Fatalf("Subnet typo (gatewayNode node-x): GatewayReady %v, want False UnknownGatewayNode naming node-x", cond)
	}
	cond := c.waitSubnetCondition(t, "central", "GatewayReady", 60*time.Second)
	if cond["status"] != "True" {
		t.Fatalf("Subnet central: GatewayReady %v, want True\n%s", cond, c.diag())
	}
	p := c.addPod(t, 0, ns, "leaver", nil, nil)
	if !strings.HasPrefix(p.ip, "10.80.") {
		t.Fatalf("pod in namespace %s got %s, want an address of the centralized subnet 10.80.0.0/16", ns, p.ip)
	}
	nodeB, nodeC := "192.168.208.2", "192.168.209.2"
	// The first packets may go while the router learns the gateway's MAC.
	if src, err := c.sourceUntil(p, nodeB, 20*time.Second); err != nil {
		t.Fatalf("pod on node-a in a subnet centralized through node-b,node-c: outside saw %q (%v), want node-b's %s\n%s", src, err, nodeB, c.diag())
	}
	if got := c.activeGateway(t, "central", "node-b", 30*time.Second); got != "node-b" {
		t.Fatalf("Subnet central status.activateGateway = %q, want node-b", got)
	}
	// A stale write (a node that held the port for a moment, before its
	// BFD session to node-b was up, reporting late) is put right by the
	// node that holds the gateway port.
	if _, err := c.cp.dc.Resource(subnetsGVR).Patch(ctx, "central", types.MergePatchType, []byte(`{"status":{"activateGateway":"node-c"}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if got := c.activeGateway(t, "central", "node-b", 10*time.Second); got != "node-b" {
		t.Fatalf("after a stale write of node-c, Subnet central status.activateGateway = %q, want node-b back", got)
	}

	c.cp.stopController()
	t0 := time.Now()
	if code := c.nodes[1].Stop(); code != 0 {
		t.Fatalf("node-b's daemon exited %d on SIGTERM\n%s", code, c.nodes[1].LogTail())
	}
	stopped := time.Since(t0)
	// What node-b put on its host for the gateway went with it.
	if out, err := exec.Command("ip", "-n", c.nodes[1].NS, "link", "show", "br-egw").CombinedOutput(); err == nil {
		t.Errorf("node-b's daemon stopped, but its gateway bridge is still there: %s", out)
	}
	if out, _ := exec.Command("ip", "-n", c.nodes[1].NS, "rule", "show").CombinedOutput(); strings.Contains(string(out), "10.80.0.0/16") {
		t.Errorf("node-b's daemon stopped, but its return-path rules for 10.80.0.0/16 are still there:\n%s", out)
	}
	src, err := c.sourceUntil(p, nodeC, 30*time.Second)
	if err != nil {
		t.Fatalf("after node-b's daemon stopped (controller down): outside saw %q (%v), want node-c's %s\n%s", src, err, nodeC, c.diag())
	}
	t.Logf("failover without the controller: first new connection through node-c %s after SIGTERM to node-b (daemon stop took %s)",
		time.Since(t0).Round(time.Millisecond), stopped.Round(time.Millisecond))
	if got := c.activeGateway(t, "central", "node-c", 30*time.Second); got != "node-c" {
		t.Fatalf("Subnet central status.activateGateway = %q after failover, want node-c", got)
	}

	// node-b comes back with the controller up again: as in Kube-OVN the
	// subnet stays on its active gateway while that one is ready...
	c.cp.startController(t)
	c.nodes[1].ListenNotifyAgain()
	c.nodes[1].Start("--userspace-tunnel", "--node-name="+c.names[1])
	c.waitGatewayRank(t, "central", []string{"node-c", "node-b"}, 60*time.Second)
	// Until node-b's BFD session to node-c is up, node-b counts node-c as
	// down and claims the gateway port itself (OVN's HA rule): steady
	// state is when both nodes' sessions forward and node-c holds it.
	c.waitBFDForwarding(t, 1, 30*time.Second)
	c.waitBFDForwarding(t, 2, 30*time.Second)
	c.waitRedirect(t, "cr-ovn-cluster-ovnhost-egw-central", c.chassisOf(t, "node-c"), 30*time.Second)
	for i := 0; i < 10; i++ {
		if src, err := c.world.sourceSeen(p.netns, 3*time.Second); err != nil || src != nodeC {
			t.Fatalf("connection %d after node-b came back: outside saw %q (%v), want the active gateway node-c's %s\n%s", i, src, err, nodeC, c.diag())
		}
	}
	// ...unless the user asks for traffic to go back to the first.
	patch := []byte(`{"metadata":{"annotations":{"ovnhost.io/gateway-failback":"true"}}}`)
	if _, err := c.cp.dc.Resource(subnetsGVR).Patch(ctx, "central", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if src, err := c.sourceUntil(p, nodeB, 30*time.Second); err != nil {
		t.Fatalf("with ovnhost.io/gateway-failback=true: outside saw %q (%v), want node-b's %s again\n%s", src, err, nodeB, c.diag())
	}
	if got := c.activeGateway(t, "central", "node-b", 30*time.Second); got != "node-b" {
		t.Fatalf("Subnet central status.activateGateway = %q after failback, want node-b", got)
	}

	// A NotReady node (kubelet gone) leaves the group although its daemon runs.
	nd, err := c.cp.kc.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "KubeletNotReady",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if _, err := c.cp.kc.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if src, err := c.sourceUntil(p, nodeC, 30*time.Second); err != nil {
		t.Fatalf("node-b NotReady: outside saw %q (%v), want node-c's %s\n%s", src, err, nodeC, c.diag())
	}
	c.waitGatewayRank(t, "central", []string{"node-c"}, 30*time.Second)

	// gatewayNode "node:IP" (Kube-OVN's format): the subnet leaves node-c
	// with the address given for it, one of node-c's own.
	run(t, "ip", "-n", c.nodes[2].NS, "addr", "add", "192.168.209.9/24", "dev", "wan0")
	setGatewayNode := func(v string) {
		t.Helper()
		patch := []byte(fmt.Sprintf(`{"spec":{"gatewayNode":%q}}`, v))
		if _, err := c.cp.dc.Resource(subnetsGVR).Patch(ctx, "central", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setGatewayNode("node-b,node-c:192.168.209.9")
	if src, err := c.sourceUntil(p, "192.168.209.9", 30*time.Second); err != nil {
		t.Fatalf(`gatewayNode "node-b,node-c:192.168.209.9": outside saw %q (%v), want node-c's egress address 192.168.209.9`+"\n%s\n%s", src, err, c.diag(), c.nodes[2].LogTail())
	}
	// An address node-c does not hold would black-hole the replies: the
	// node masquerades as before and says why in its log.
	setGatewayNode("node-b,node-c:192.168.209.77")
	if src, err := c.sourceUntil(p, nodeC, 30*time.Second); err != nil {
		t.Fatalf(`gatewayNode "node-b,node-c:192.168.209.77" (not an address of node-c): outside saw %q (%v), want the masqueraded %s`+"\n%s", src, err, nodeC, c.nodes[2].LogTail())
	}
	if raw, _ := os.ReadFile(c.nodes[2].Log()); !strings.Contains(string(raw), "egress address it does not hold") || !strings.Contains(string(raw), "192.168.209.77") {
		t.Errorf("node-c's log does not name the egress address it does not hold (192.168.209.77):\n%s", c.nodes[2].LogTail())
	}
}

// waitGatewayRank waits until the subnet's HA chassis group in NB ranks the
// chassis of nodes in that order (highest priority first).
func (c *cluster) waitGatewayRank(t testing.TB, subnet string, nodes []string, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var want []string
	for _, name := range nodes {
		nd, err := c.cp.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, nd.Annotations["ovn.kubernetes.io/chassis"])
	}
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	defer nb.Close()
	var got []string
	err := nb.WaitUntil(ctx, "the gateway ranking", func() bool {
		got = haRank(ctx, nb, "ovnhost-egw-"+subnet)
		return slices.Equal(got, want)
	}, nil)
	if err == nil {
		return
	}
	t.Fatalf("HA chassis group of subnet %s ranks %v, want %v (%v)\n%s", subnet, got, want, nodes, c.diag())
}

// sourceUntil connects from p to the outside until the outside sees want as
// the source, or the deadline passes (returns the last source seen).
func (c *cluster) sourceUntil(p *clusterPod, want string, limit time.Duration) (string, error) {
	return c.world.sourceUntil(p, want, limit)
}

// sourceUntil connects from p to o until o sees want as the source, or the
// deadline passes (returns the last source seen).
func (o *outside) sourceUntil(p *clusterPod, want string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	var last string
	var err error
	for time.Now().Before(deadline) {
		last, err = o.sourceSeen(p.netns, 500*time.Millisecond)
		if err == nil && last == want {
			return last, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("no connection seen from %s within %s", want, limit)
	}
	return last, err
}

// waitSubnetCondition watches the Subnet until it has condition typ.
func (c *cluster) waitSubnetCondition(t testing.TB, name, typ string, limit time.Duration) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var last any
	for ctx.Err() == nil {
		w, err := c.cp.dc.Resource(subnetsGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			break
		}
		for ev := range w.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			last = conds
			for _, x := range conds {
				if m, ok := x.(map[string]any); ok && m["type"] == typ {
					w.Stop()
					return m
				}
			}
		}
	}
	t.Fatalf("Subnet %s: no condition %s within %s (conditions: %v)\n%s", name, typ, limit, last, c.diag())
	return nil
}

// activeGateway waits until the Subnet's status.activateGateway is want and
// returns what it last saw.
func (c *cluster) activeGateway(t testing.TB, name, want string, limit time.Duration) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var got string
	for ctx.Err() == nil {
		w, err := c.cp.dc.Resource(subnetsGVR).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			break
		}
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok {
				got, _, _ = unstructured.NestedString(u.Object, "status", "activateGateway")
				if got == want {
					w.Stop()
					return got
				}
			}
		}
	}
	return got
}

// diag is what a reader of a failure needs: NB and SB, the controller's
// log tail, each node's daemon log tail.
func (c *cluster) diag() string {
	var b strings.Builder
	for _, cmd := range [][]string{{"ovn-nbctl", "--db=" + c.cp.central.NB(), "show"}, {"ovn-nbctl", "--db=" + c.cp.central.NB(), "lr-policy-list", "ovn-cluster"},
		{"ovn-sbctl", "--db=" + c.cp.central.SB(), "show"}, {"ovn-sbctl", "--db=" + c.cp.central.SB(), "find", "port_binding", "type=chassisredirect"}} {
		o, _ := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		b.WriteString("$ " + strings.Join(cmd, " ") + "\n" + string(o))
	}
	if raw, err := os.ReadFile(c.cp.ctrlLog); err == nil {
		lines := strings.Split(string(raw), "\n")
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		b.WriteString("--- controller log tail ---\n" + strings.Join(lines, "\n") + "\n")
	}
	for i, n := range c.nodes {
		b.WriteString(fmt.Sprintf("=== %s ===\n%s\n", c.names[i], n.LogTail()))
		for _, cmd := range [][]string{{"ip", "-n", n.NS, "-br", "addr"}, {"ip", "-n", n.NS, "route"}, {"ip", "-n", n.NS, "rule"}, {"ip", "-n", n.NS, "route", "show", "table", "all", "type", "unicast"}, {"ip", "netns", "exec", n.NS, "nft", "list", "ruleset"}} {
			o, _ := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
			b.WriteString("$ " + strings.Join(cmd, " ") + "\n" + string(o))
		}
	}
	return b.String()
}

// haRank lists the chassis of the HA chassis group named group, highest
// priority first.
func haRank(ctx context.Context, nb *ovsdbconn.Conn, group string) []string {
	var groups []nbdb.HAChassisGroup
	_ = nb.List(ctx, &groups)
	for _, g := range groups {
		if g.Name != group {
			continue
		}
		var ch []nbdb.HAChassis
		for _, id := range g.HaChassis {
			h := nbdb.HAChassis{UUID: id}
			if nb.Get(ctx, &h) == nil {
				ch = append(ch, h)
			}
		}
		sort.Slice(ch, func(i, j int) bool { return ch[i].Priority > ch[j].Priority })
		var out []string
		for _, h := range ch {
			out = append(out, h.ChassisName)
		}
		return out
	}
	return nil
}

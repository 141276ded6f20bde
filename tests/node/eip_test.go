package node_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Kube-OVN's default-VPC EIP/SNAT, end to end: the ConfigMap
// kube-system/ovn-external-gw-config names node-b and node-c as gateway
// nodes with ext0 (a veth to the outside's external network 172.56.0.0/16)
// as their NIC; pods on node-a carry ovn.kubernetes.io/eip or snat.

const (
	extCM     = "ovn-external-gw-config"
	extNS     = "kube-system"
	worldExt  = "172.56.0.1"
	worldEcho = worldExt + ":7000" // the outside's responder on the external network
)

func extConfig(nodes string) map[string]string {
	return map[string]string{"enable-external-gw": "true", "type": "centralized", "external-gw-nodes": nodes, "external-gw-nic": "ext0",
		"external-gw-addr": "172.56.0.1/16", "nic-ip": "172.56.0.254/16", "nic-mac": "16:52:f3:13:6a:25",
		// Every test namespace may take the external addresses (one tenant: the tests);
		// who may take what is unit-tested in controller/extgw/policy_test.go.
		"namespace-external-addresses": "*: 172.56.0.2-172.56.0.250"}
}

func (c *cluster) setExternalConfig(t testing.TB, data map[string]string) {
	t.Helper()
	ctx := context.Background()
	cms := c.cp.kc.CoreV1().ConfigMaps(extNS)
	cur, err := cms.Get(ctx, extCM, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: extCM, Namespace: extNS}, Data: data}, metav1.CreateOptions{})
	} else if err == nil {
		cur.Data = data
		_, err = cms.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// waitEvent waits for an event on the object with that reason whose
// message contains all of subs, and returns it.
func (c *cluster) waitEvent(t testing.TB, ns, kind, name, reason string, limit time.Duration, subs ...string) corev1.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	sel := fields.Set{"involvedObject.name": name, "involvedObject.kind": kind, "reason": reason}.AsSelector().String()
	var seen []string
	match := func(e *corev1.Event) bool {
		for _, s := range subs {
			if !strings.Contains(e.Message, s) {
				return false
			}
		}
		return true
	}
	for ctx.Err() == nil {
		list, err := c.cp.kc.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			break
		}
		for i := range list.Items {
			if match(&list.Items[i]) {
				return list.Items[i]
			}
			seen = append(seen, list.Items[i].Message)
		}
		w, err := c.cp.kc.CoreV1().Events(ns).Watch(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: list.ResourceVersion})
		if err != nil {
			break
		}
		for ev := range w.ResultChan() {
			if e, ok := ev.Object.(*corev1.Event); ok {
				if match(e) {
					w.Stop()
					return *e
				}
				seen = append(seen, e.Message)
			}
		}
	}
	t.Fatalf("no %s event %s on %s %s/%s with %q within %s (seen: %q)\n%s", kind, reason, kind, ns, name, subs, limit, seen, c.diag())
	return corev1.Event{}
}

// servePodName makes a pod answer each TCP connection on :8000 with its
// name and the source it saw.
func servePodName(t testing.TB, p *clusterPod) {
	t.Helper()
	netns.ServeTCP(t, p.netns, ":8000", func(conn net.Conn) {
		host, _, _ := net.SplitHostPort(conn.RemoteAddr().String())
		_, _ = fmt.Fprintf(conn, "%s %s\n", p.name, host)
		conn.Close()
	})
}

// askFrom connects from netns to addr and returns the line it answers.
func askFrom(netns, addr string, timeout time.Duration) (string, error) {
	var conn net.Conn
	err := inNetns(netns, func() (err error) {
		conn, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(conn).ReadString('\n')
	return strings.TrimSpace(line), err
}

// askUntil asks until the answer is want or the time is up (the data path
// converges after the NB write: flows on every chassis, MAC learning).
func askUntil(netns, addr, want string, limit time.Duration) (string, error) {
	deadline := time.Now().Add(limit)
	var last string
	var err error
	for time.Now().Before(deadline) {
		last, err = askFrom(netns, addr, 500*time.Millisecond)
		if err == nil && last == want {
			return last, nil
		}
	}
	if err == nil {
		err = fmt.Errorf("answer %q, not %q, within %s", last, want, limit)
	}
	return last, err
}

func (c *cluster) annotatePod(t testing.TB, p *clusterPod, key string, value *string) {
	t.Helper()
	var v any
	if value != nil {
		v = *value
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{key: v}}})
	if _, err := c.cp.kc.CoreV1().Pods(p.namespace).Patch(context.Background(), p.name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ptr(s string) *string { return &s }

// natRows lists the cluster router's NAT rules as "type external logical".
func natRows(ctx context.Context, nb *ovsdbconn.Conn) []string {
	var rs []nbdb.LogicalRouter
	_ = nb.List(ctx, &rs)
	var out []string
	for _, r := range rs {
		if r.Name != "ovn-cluster" {
			continue
		}
		for _, u := range r.Nat {
			x := &nbdb.NAT{UUID: u}
			if nb.Get(ctx, x) == nil {
				out = append(out, x.Type+" "+x.ExternalIP+" "+x.LogicalIP)
			}
		}
	}
	slices.Sort(out)
	return out
}

// waitNAT waits until the router's NAT rules are exactly want.
func (c *cluster) waitNAT(t testing.TB, nb *ovsdbconn.Conn, want []string, limit time.Duration) {
	t.Helper()
	c.waitNATRows(t, nb, natRows, want, limit)
}

// waitNATRows waits until rows (natRows or natRowsFull) reads exactly want.
func (c *cluster) waitNATRows(t testing.TB, nb *ovsdbconn.Conn, rows func(context.Context, *ovsdbconn.Conn) []string, want []string, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	slices.Sort(want)
	var got []string
	if err := nb.WaitUntil(ctx, "the NAT rules", func() bool { got = rows(ctx, nb); return slices.Equal(got, want) }, nil); err != nil {
		t.Fatalf("ovn-cluster NAT rules\n  %q\nwant\n  %q\n%s", got, want, c.diag())
	}
}

// bridgeState is what a node's conf.db says about br-external: its ports
// and ovn-bridge-mappings ("" when the bridge is absent).
func bridgeState(ctx context.Context, ovs *ovsdbconn.Conn) (ports []string, mappings string) {
	var roots []vswitch.OpenvSwitch
	_ = ovs.List(ctx, &roots)
	if len(roots) > 0 {
		mappings = roots[0].ExternalIDs["ovn-bridge-mappings"]
	}
	br := &vswitch.Bridge{Name: "br-external"}
	if ovs.Get(ctx, br) != nil {
		return nil, mappings
	}
	for _, u := range br.Ports {
		// ovn-controller's patch port to br-int comes and goes with the mapping.
		p := &vswitch.Port{UUID: u}
		if ovs.Get(ctx, p) == nil && !strings.HasPrefix(p.Name, "patch-") {
			ports = append(ports, p.Name)
		}
	}
	slices.Sort(ports)
	return ports, mappings
}

func (c *cluster) waitBridge(t testing.TB, i int, wantPorts []string, limit time.Duration) {
	t.Helper()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+c.nodes[i].Path("ovs-run", "db.sock"))
	defer ovs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var ports []string
	var mappings string
	err := ovs.WaitUntil(ctx, "br-external", func() bool {
		ports, mappings = bridgeState(ctx, ovs)
		has := strings.Contains(mappings, "external:br-external")
		return slices.Equal(ports, wantPorts) && has == (len(wantPorts) > 0)
	}, nil)
	if err != nil {
		t.Fatalf("%s: br-external ports %q, ovn-bridge-mappings %q; want ports %q\n%s", c.names[i], ports, mappings, wantPorts, c.diag())
	}
}

func TestEIPAndSNATFollowTheirPodsAndFailOver(t *testing.T) {
	c := startCluster(t, 3)
	c.addExternalNetwork(t, "ext0", 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	defer nb.Close()

	c.setExternalConfig(t, extConfig("node-b,node-c"))
	ev := c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 60*time.Second, "node-b, node-c")
	t.Logf("controller: %s", ev.Message)
	c.waitBridge(t, 1, []string{"br-external", "ext0"}, 10*time.Second)
	c.waitBridge(t, 2, []string{"br-external", "ext0"}, 10*time.Second)
	c.waitBridge(t, 0, nil, time.Second)
	for _, n := range []string{"node-b", "node-c"} {
		nd, err := c.cp.kc.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{})
		if err != nil || nd.Labels["ovn.kubernetes.io/external-gw"] != "true" {
			t.Fatalf("node %s labels %v (%v), want ovn.kubernetes.io/external-gw=true", n, nd.Labels, err)
		}
	}

	const ns = "eip"
	c.ensureNamespace(t, ns, nil)
	withEIP := c.addPod(t, 0, ns, "with-eip", nil, map[string]string{"ovn.kubernetes.io/eip": "172.56.0.10"})
	withSNAT := c.addPod(t, 0, ns, "with-snat", nil, map[string]string{"ovn.kubernetes.io/snat": "172.56.0.20"})
	plain := c.addPod(t, 0, ns, "plain", nil, nil)
	for _, p := range []*clusterPod{withEIP, withSNAT, plain} {
		servePodName(t, p)
	}
	c.waitNAT(t, nb, []string{"dnat_and_snat 172.56.0.10 " + withEIP.ip, "snat 172.56.0.20 " + withSNAT.ip}, 30*time.Second)
	c.waitEvent(t, ns, "Pod", "with-eip", "ExternalNATProgrammed", 10*time.Second, "172.56.0.10")

	// The outside reaches the pod at its EIP (the pod sees the outside's own address)...
	t0 := time.Now()
	if got, err := askUntil(c.world.ns, "172.56.0.10:8000", "with-eip "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("outside -> EIP 172.56.0.10: %q (%v), want with-eip answering %s\n%s", got, err, worldExt, c.diag())
	}
	t.Logf("outside reached the EIP %s after the NAT rule was in the NB", time.Since(t0).Round(time.Millisecond))
	// ...and the pod's own connections leave from the EIP.
	if got, err := askUntil(withEIP.netns, worldEcho, "172.56.0.10", 10*time.Second); err != nil {
		t.Fatalf("pod with EIP -> outside: outside saw %q (%v), want 172.56.0.10\n%s", got, err, c.diag())
	}
	if got, err := askUntil(withSNAT.netns, worldEcho, "172.56.0.20", 10*time.Second); err != nil {
		t.Fatalf("pod with SNAT -> outside: outside saw %q (%v), want 172.56.0.20\n%s", got, err, c.diag())
	}
	// Not reachable from outside at its SNAT address (snat only), and a
	// pod without annotations still leaves through its own node.
	if got, err := askFrom(c.world.ns, "172.56.0.20:8000", time.Second); err == nil {
		t.Fatalf("outside -> SNAT address 172.56.0.20 answered %q; snat must not accept connections", got)
	}
	if got, err := c.world.sourceSeen(plain.netns, 5*time.Second); err != nil || got != "192.168.207.2" {
		t.Fatalf("pod without EIP/SNAT -> outside: %q (%v), want node-a's 192.168.207.2", got, err)
	}

	// Moving the EIP: the second pod to ask is refused while the first holds it...
	c.annotatePod(t, plain, "ovn.kubernetes.io/eip", ptr("172.56.0.10"))
	c.waitEvent(t, ns, "Pod", "plain", "EIPConflict", 20*time.Second, "172.56.0.10", "eip/with-eip")
	if got, err := askFrom(c.world.ns, "172.56.0.10:8000", 2*time.Second); err != nil || got != "with-eip "+worldExt {
		t.Fatalf("after a second pod asked for the EIP: outside -> 172.56.0.10 answered %q (%v), want the holder with-eip", got, err)
	}
	// ...and gets it once the first lets go; the traffic follows.
	c.annotatePod(t, withEIP, "ovn.kubernetes.io/eip", nil)
	c.waitNAT(t, nb, []string{"dnat_and_snat 172.56.0.10 " + plain.ip, "snat 172.56.0.20 " + withSNAT.ip}, 30*time.Second)
	if got, err := askUntil(c.world.ns, "172.56.0.10:8000", "plain "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("after moving the EIP: outside -> 172.56.0.10 %q (%v), want plain\n%s", got, err, c.diag())
	}
	if got, err := askUntil(plain.netns, worldEcho, "172.56.0.10", 10*time.Second); err != nil {
		t.Fatalf("after moving the EIP: the new holder's connections arrive from %q (%v), want 172.56.0.10", got, err)
	}
	if got, err := c.world.sourceSeen(withEIP.netns, 5*time.Second); err != nil || got != "192.168.207.2" {
		t.Fatalf("after moving the EIP: the old holder leaves from %q (%v), want its node's 192.168.207.2", got, err)
	}

	// node-b (the first gateway) stops, with the controller down: OVN moves the NAT to node-c.
	chassisC := c.chassisOf(t, "node-c")
	c.cp.stopController()
	t0 = time.Now()
	if code := c.nodes[1].Stop(); code != 0 {
		t.Fatalf("node-b's daemon exited %d\n%s", code, c.nodes[1].LogTail())
	}
	if got, err := askUntil(c.world.ns, "172.56.0.10:8000", "plain "+worldExt, 30*time.Second); err != nil {
		t.Fatalf("node-b stopped: outside -> 172.56.0.10 %q (%v), want plain through node-c\n%s", got, err, c.diag())
	}
	t.Logf("EIP failover without the controller: outside reached the EIP through node-c %s after SIGTERM to node-b", time.Since(t0).Round(time.Millisecond))
	if got, err := askUntil(withSNAT.netns, worldEcho, "172.56.0.20", 10*time.Second); err != nil {
		t.Fatalf("node-b stopped: SNAT pod's connections arrive from %q (%v), want 172.56.0.20", got, err)
	}
	if on := c.redirectChassis(t, "cr-ovn-cluster-ovn-external"); on != chassisC {
		t.Fatalf("cr-ovn-cluster-ovn-external is bound to %q, want node-c's chassis %s", on, chassisC)
	}

	// What node-b's stop left: no bridge, no mapping, no device; cleanup finds nothing of ours.
	db := c.nodes[1].Path("ovs-db", "conf.db")
	out := run(t, "ovsdb-tool", "query", db, `["Open_vSwitch",{"op":"select","table":"Bridge","where":[["name","==","br-external"]]},{"op":"select","table":"Open_vSwitch","where":[],"columns":["external_ids"]}]`)
	if strings.Contains(out, `"br-external"`) || strings.Contains(out, "external:br-external") {
		t.Fatalf("node-b stopped: conf.db still has br-external or its mapping:\n%s", out)
	}
	if o, err := exec.Command("ip", "-n", c.nodes[1].NS, "link", "show", "br-external").CombinedOutput(); err == nil {
		t.Fatalf("node-b stopped: device br-external is still there:\n%s", o)
	}
	cl := exec.Command("ip", append([]string{"netns", "exec", c.nodes[1].NS, testenv.Binary(t, "ovnhost"), "cleanup"}, c.nodes[1].Args...)...)
	if o, err := cl.CombinedOutput(); err != nil || strings.Contains(string(o), "br-external") {
		t.Fatalf("ovnhost cleanup on node-b: %v\n%s", err, o)
	}
	if o, err := exec.Command("ip", "-n", c.nodes[1].NS, "link", "show", "ext0").CombinedOutput(); err != nil {
		t.Fatalf("node-b's NIC ext0 is gone after stop: %v\n%s", err, o)
	}
}

// chassisOf is a node's chassis as its daemon announced it.
func (c *cluster) chassisOf(t testing.TB, node string) string {
	t.Helper()
	nd, err := c.cp.kc.CoreV1().Nodes().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return nd.Annotations["ovn.kubernetes.io/chassis"]
}

// redirectChassis is the chassis name a chassisredirect port is bound to.
func (c *cluster) redirectChassis(t testing.TB, port string) string {
	t.Helper()
	out, _ := exec.Command("ovn-sbctl", "--db="+c.cp.central.SB(), "--bare", "--columns=chassis", "find", "port_binding", "logical_port="+port).CombinedOutput()
	uuid := strings.TrimSpace(string(out))
	if uuid == "" {
		return ""
	}
	name, _ := exec.Command("ovn-sbctl", "--db="+c.cp.central.SB(), "--bare", "--columns=name", "list", "chassis", uuid).CombinedOutput()
	return strings.TrimSpace(string(name))
}

// Bad input gets an event with the reason and touches nothing else.
func TestEIPBadInputIsReportedAndTouchesNothingElse(t *testing.T) {
	c := startCluster(t, 3)
	// node-c's NIC to the external network is called ext1, not ext0.
	c.addExternalNetwork(t, "ext0", 1)
	c.addExternalNetwork(t, "ext1", 2)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	defer nb.Close()

	// An unknown gateway node: nothing is programmed, no node is labelled or bridged.
	c.setExternalConfig(t, extConfig("node-b,node-z"))
	c.waitEvent(t, extNS, "ConfigMap", extCM, "UnknownGatewayNode", 30*time.Second, "node-z", "node-a, node-b, node-c")
	if c.hasSwitch(ctx, nb, "ovn-external") {
		t.Fatalf("ovn-external was created from a ConfigMap naming an unknown node\n%s", c.diag())
	}
	if nd, _ := c.cp.kc.CoreV1().Nodes().Get(ctx, "node-b", metav1.GetOptions{}); nd.Labels["ovn.kubernetes.io/external-gw"] != "" {
		t.Fatalf("node-b labelled %v from a refused ConfigMap", nd.Labels)
	}
	c.waitBridge(t, 1, nil, time.Second)

	// A NIC that does not exist on one gateway node: that node says so
	// (a Warning event on the ConfigMap from node-c), the other carries the EIPs.
	c.setExternalConfig(t, extConfig("node-c,node-b"))
	ev := c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayNICNotFound", 60*time.Second, "node node-c", "ext0", "ext1")
	if ev.Source.Host != "node-c" {
		t.Fatalf("NIC event from %+v, want node-c's daemon", ev.Source)
	}
	c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 60*time.Second, "priority order: node-b", "left out: node-c")
	c.waitBridge(t, 2, nil, time.Second)
	if got := haRank(ctx, nb, "ovn-external"); !slices.Equal(got, []string{c.chassisOf(t, "node-b")}) {
		t.Fatalf("HA chassis of ovn-external %v, want node-b's alone", got)
	}

	const ns = "eipbad"
	c.ensureNamespace(t, ns, nil)
	first := c.addPod(t, 0, ns, "first", nil, map[string]string{"ovn.kubernetes.io/eip": "172.56.0.30"})
	servePodName(t, first)
	c.waitNAT(t, nb, []string{"dnat_and_snat 172.56.0.30 " + first.ip}, 30*time.Second)
	if got, err := askUntil(c.world.ns, "172.56.0.30:8000", "first "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("outside -> EIP through node-b (node-c lacks the NIC): %q (%v)\n%s", got, err, c.diag())
	}
	// An EIP outside the external subnet, and a second pod asking for a held EIP.
	c.addPod(t, 0, ns, "outside-subnet", nil, map[string]string{"ovn.kubernetes.io/eip": "10.99.0.5"})
	c.waitEvent(t, ns, "Pod", "outside-subnet", "InvalidEIP", 20*time.Second, "10.99.0.5", "outside the external subnet 172.56.0.0/16")
	c.addPod(t, 0, ns, "second", nil, map[string]string{"ovn.kubernetes.io/eip": "172.56.0.30"})
	c.waitEvent(t, ns, "Pod", "second", "EIPConflict", 20*time.Second, "172.56.0.30 is held by pod eipbad/first")
	c.waitNAT(t, nb, []string{"dnat_and_snat 172.56.0.30 " + first.ip}, time.Second)
	if got, err := askFrom(c.world.ns, "172.56.0.30:8000", 2*time.Second); err != nil || got != "first "+worldExt {
		t.Fatalf("after the bad pods: outside -> 172.56.0.30 answered %q (%v), want first", got, err)
	}

	// An invalid edit of the ConfigMap changes nothing (the port keeps its address, the EIP works).
	bad := extConfig("node-c,node-b")
	bad["nic-ip"] = "172.56.0.254"
	c.setExternalConfig(t, bad)
	c.waitEvent(t, extNS, "ConfigMap", extCM, "InvalidExternalGatewayConfig", 20*time.Second, "nic-ip", "nothing was changed")
	if got, err := askFrom(c.world.ns, "172.56.0.30:8000", 2*time.Second); err != nil || got != "first "+worldExt {
		t.Fatalf("after an invalid ConfigMap edit: outside -> 172.56.0.30 answered %q (%v), want first", got, err)
	}
	c.waitBridge(t, 1, []string{"br-external", "ext0"}, time.Second)

	// Deleting the ConfigMap removes everything: NAT, policies, port, switch, bridges, labels.
	if err := c.cp.kc.CoreV1().ConfigMaps(extNS).Delete(ctx, extCM, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitNAT(t, nb, nil, 30*time.Second)
	c.waitBridge(t, 1, nil, 30*time.Second)
	if err := nb.WaitUntil(ctx, "ovn-external and the EIP policies to go", func() bool {
		return !c.hasSwitch(ctx, nb, "ovn-external") && !c.hasPolicy(ctx, nb, 29750)
	}, nil); err != nil {
		t.Fatalf("after deleting the ConfigMap: %v\n%s", err, c.diag())
	}
	c.waitNodeLabel(t, "node-b", "", 10*time.Second)
}

// waitNodeLabel waits until the node's ovn.kubernetes.io/external-gw label is want.
func (c *cluster) waitNodeLabel(t testing.TB, node, want string, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	w, err := c.cp.kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + node})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got map[string]string
	for ev := range w.ResultChan() {
		if nd, ok := ev.Object.(*corev1.Node); ok {
			got = nd.Labels
			if nd.Labels["ovn.kubernetes.io/external-gw"] == want {
				return
			}
		}
	}
	t.Fatalf("node %s labels %v within %s, want ovn.kubernetes.io/external-gw=%q", node, got, limit, want)
}

func (c *cluster) hasSwitch(ctx context.Context, nb *ovsdbconn.Conn, name string) bool {
	var ls []nbdb.LogicalSwitch
	_ = nb.List(ctx, &ls)
	return slices.ContainsFunc(ls, func(s nbdb.LogicalSwitch) bool { return s.Name == name })
}

func (c *cluster) hasPolicy(ctx context.Context, nb *ovsdbconn.Conn, prio int) bool {
	var ps []nbdb.LogicalRouterPolicy
	_ = nb.List(ctx, &ps)
	return slices.ContainsFunc(ps, func(p nbdb.LogicalRouterPolicy) bool { return p.Priority == prio })
}

package node_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Kube-OVN's `type: distributed` EIPs: every node bridges external-gw-nic,
// and a pod's EIP is NATed on the pod's own node, whose NIC carries the
// packets, while the gateway chassis (external-gw-nodes first) keeps snat
// and the router's own address. The fixture is the EIP test's; node-a
// starts without the NIC (bad input on one node).

// natRowsFull lists the cluster router's NAT rules as
// "type external logical logical_port external_mac" ("-" for none).
func natRowsFull(ctx context.Context, nb *ovsdbconn.Conn) []string {
	var rs []nbdb.LogicalRouter
	_ = nb.List(ctx, &rs)
	or := func(p *string) string {
		if p == nil || *p == "" {
			return "-"
		}
		return *p
	}
	var out []string
	for _, r := range rs {
		if r.Name != "ovn-cluster" {
			continue
		}
		for _, u := range r.Nat {
			x := &nbdb.NAT{UUID: u}
			if nb.Get(ctx, x) == nil {
				out = append(out, strings.Join([]string{x.Type, x.ExternalIP, x.LogicalIP, or(x.LogicalPort), or(x.ExternalMAC)}, " "))
			}
		}
	}
	slices.Sort(out)
	return out
}

func (c *cluster) waitNATFull(t testing.TB, nb *ovsdbconn.Conn, want []string, limit time.Duration) {
	t.Helper()
	c.waitNATRows(t, nb, natRowsFull, want, limit)
}

// linkPackets is what node i's external NIC ext0 has received and sent.
type linkPackets struct{ rx, tx uint64 }

func (c *cluster) extPackets(t testing.TB, i int) linkPackets {
	t.Helper()
	out := run(t, "ip", "-n", c.nodes[i].NS, "-s", "-j", "link", "show", "dev", "ext0")
	var l []struct {
		Stats struct {
			RX struct{ Packets uint64 } `json:"rx"`
			TX struct{ Packets uint64 } `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil || len(l) != 1 {
		t.Fatalf("%s: ip -s -j link show ext0: %v\n%s", c.names[i], err, out)
	}
	return linkPackets{l[0].Stats.RX.Packets, l[0].Stats.TX.Packets}
}

// crossings runs traffic and returns how many packets each node's ext0
// received and sent meanwhile.
func (c *cluster) crossings(t testing.TB, nodes []int, traffic func()) map[int]linkPackets {
	t.Helper()
	before := map[int]linkPackets{}
	for _, i := range nodes {
		before[i] = c.extPackets(t, i)
	}
	traffic()
	d := map[int]linkPackets{}
	for _, i := range nodes {
		a := c.extPackets(t, i)
		d[i] = linkPackets{a.rx - before[i].rx, a.tx - before[i].tx}
	}
	return d
}

// connections makes n TCP connections from netns to addr, each answered by want.
func connections(t testing.TB, netns, addr, want string, n int) {
	t.Helper()
	for k := 0; k < n; k++ {
		if got, err := askFrom(netns, addr, 5*time.Second); err != nil || got != want {
			t.Fatalf("connection %d from %s to %s: %q (%v), want %q", k, netns, addr, got, err, want)
		}
	}
}

// assertCrossed checks that each of n connections crossed node on's
// external NIC (at least a packet each way per connection) and none
// crossed the others' (fewer packets than connections: ARP and gratuitous
// ARP only).
func (c *cluster) assertCrossed(t testing.TB, what string, d map[int]linkPackets, on, n int) {
	t.Helper()
	for i, p := range d {
		switch {
		case i == on && (p.rx < uint64(n) || p.tx < uint64(n)):
			t.Fatalf("%s: %d connections, but %s's ext0 received %d and sent %d packets; they did not go through %s (all: %v)\n%s", what, n, c.names[i], p.rx, p.tx, c.names[i], d, c.diag())
		case i != on && p.rx+p.tx >= uint64(n):
			t.Fatalf("%s: %d connections, and %s's ext0 carried %d+%d packets; they should have gone through %s alone (all: %v)", what, n, c.names[i], p.rx, p.tx, c.names[on], d)
		}
	}
	t.Logf("%s: ext0 packets (rx, tx) per node index: %v", what, d)
}

// waitRedirect waits until the chassisredirect port is bound to chassis
// (the gateway's name for it: the node's system-id).
func (c *cluster) waitRedirect(t testing.TB, port, chassis string, limit time.Duration) {
	t.Helper()
	sb := dial(t, sbdb.FullDatabaseModel, c.cp.central.SB())
	defer sb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var on string
	err := sb.WaitUntil(ctx, port+" bound to "+chassis, func() bool {
		on = ""
		pb := &sbdb.PortBinding{}
		var pbs []sbdb.PortBinding
		if sb.List(ctx, &pbs) != nil {
			return false
		}
		for i := range pbs {
			if pbs[i].LogicalPort == port {
				pb = &pbs[i]
			}
		}
		if pb.Chassis != nil {
			ch := &sbdb.Chassis{UUID: *pb.Chassis}
			if sb.Get(ctx, ch) == nil {
				on = ch.Name
			}
		}
		return on == chassis
	}, nil)
	if err != nil {
		t.Fatalf("%s is bound to %q, want %s\n%s", port, on, chassis, c.diag())
	}
}

// bfdFlaps is the sum of node i's BFD sessions' flap counts.
func (c *cluster) bfdFlaps(t testing.TB, i int) int {
	t.Helper()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+c.nodes[i].Path("ovs-run", "db.sock"))
	defer ovs.Close()
	var ifs []vswitch.Interface
	if err := ovs.List(context.Background(), &ifs); err != nil {
		t.Fatalf("%s: interfaces: %v", c.names[i], err)
	}
	n := 0
	for _, f := range ifs {
		if f.BFD["enable"] == "true" {
			k, _ := strconv.Atoi(f.BFDStatus["flap_count"])
			n += k
		}
	}
	return n
}

// crossingsWithoutFlaps is crossings measured while no BFD session of the
// nodes flapped: a flap (a session timed out, as on a starved CI machine)
// moves a gateway port for a moment, which is OVN's HA working, not what
// the test checks. It measures again, at most twice, only then; a wrong
// path without a flap is left for the caller to fail on.
func (c *cluster) crossingsWithoutFlaps(t testing.TB, nodes []int, traffic func()) map[int]linkPackets {
	t.Helper()
	flaps := func() int {
		n := 0
		for _, i := range nodes {
			n += c.bfdFlaps(t, i)
		}
		return n
	}
	for attempt := 1; ; attempt++ {
		before := flaps()
		d := c.crossings(t, nodes, traffic)
		after := flaps()
		if after == before || attempt == 3 {
			return d
		}
		t.Logf("BFD sessions flapped %d times during the measurement (%v); measuring again once they forward", after-before, d)
		for _, i := range nodes {
			c.waitBFDForwarding(t, i, 30*time.Second)
		}
	}
}

// waitBFDForwarding waits until node i's BFD sessions (ovn-controller
// enables them on the tunnels to the gateway chassis of an HA port) all
// forward. Until a session is up, the node counts the higher-priority
// gateway as down and handles the gateway port's traffic itself.
func (c *cluster) waitBFDForwarding(t testing.TB, i int, limit time.Duration) {
	t.Helper()
	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+c.nodes[i].Path("ovs-run", "db.sock"))
	defer ovs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var state map[string]map[string]string
	err := ovs.WaitUntil(ctx, c.names[i]+"'s BFD sessions forwarding", func() bool {
		var ifs []vswitch.Interface
		if ovs.List(ctx, &ifs) != nil {
			return false
		}
		state = map[string]map[string]string{}
		ok := true
		for _, f := range ifs {
			if f.BFD["enable"] != "true" {
				continue
			}
			state[f.Name] = f.BFDStatus
			ok = ok && f.BFDStatus["forwarding"] == "true"
		}
		return ok && len(state) > 0
	}, nil)
	if err != nil {
		t.Fatalf("%s: BFD sessions %v, want at least one and all forwarding: %v\n%s", c.names[i], state, err, c.diag())
	}
}

func TestEIPDistributedIsNATedOnThePodsNode(t *testing.T) {
	c := startCluster(t, 3)
	// node-b and node-c have ext0 on the external network; node-a has no such NIC yet.
	c.addExternalNetwork(t, "ext0", 1, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	defer nb.Close()

	// Centralized first, on node-b.
	c.setExternalConfig(t, extConfig("node-b"))
	c.waitBridge(t, 1, []string{"br-external", "ext0"}, 60*time.Second)
	c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 30*time.Second, "node-b")
	const ns = "eipdist"
	c.ensureNamespace(t, ns, nil)
	far := c.addPod(t, 2, ns, "far", nil, map[string]string{"ovn.kubernetes.io/eip": "172.56.0.40"})
	onA := c.addPod(t, 0, ns, "on-a", nil, map[string]string{"ovn.kubernetes.io/eip": "172.56.0.41"})
	snatC := c.addPod(t, 2, ns, "snat-c", nil, map[string]string{"ovn.kubernetes.io/snat": "172.56.0.50"})
	near := c.addPod(t, 0, ns, "near", nil, nil)
	for _, p := range []*clusterPod{far, onA, snatC, near} {
		servePodName(t, p)
	}
	c.waitNATFull(t, nb, []string{"dnat_and_snat 172.56.0.40 " + far.ip + " - -", "dnat_and_snat 172.56.0.41 " + onA.ip + " - -",
		"snat 172.56.0.50 " + snatC.ip + " - -"}, 30*time.Second)
	c.waitBridge(t, 2, nil, time.Second)

	// Switch to distributed: node-c bridges its NIC too, node-a says it has none.
	dist := extConfig("node-b")
	dist["type"] = "distributed"
	c.setExternalConfig(t, dist)
	ev := c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayNICNotFound", 60*time.Second, "node node-a", "ext0", "no such interface")
	if ev.Source.Host != "node-a" {
		t.Fatalf("NIC event from %+v, want node-a's daemon", ev.Source)
	}
	c.waitBridge(t, 2, []string{"br-external", "ext0"}, 60*time.Second)
	c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 30*time.Second, "distributed", "priority order: node-b, node-c", "left out: node-a")
	c.waitBridge(t, 0, nil, time.Second)
	c.waitBridge(t, 1, []string{"br-external", "ext0"}, time.Second)
	// far's EIP now names its port and MAC; on-a's stays centralized (its node lacks the NIC), and snat is never distributed.
	c.waitNATFull(t, nb, []string{"dnat_and_snat 172.56.0.40 " + far.ip + " far." + ns + " 02:e1:ac:38:00:28",
		"dnat_and_snat 172.56.0.41 " + onA.ip + " - -", "snat 172.56.0.50 " + snatC.ip + " - -"}, 30*time.Second)
	c.waitEvent(t, ns, "Pod", "on-a", "EIPNotDistributed", 10*time.Second, "172.56.0.41", "node-a", "ext0")
	for _, n := range []string{"node-a", "node-c"} {
		if nd, err := c.cp.kc.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); err != nil || nd.Labels["ovn.kubernetes.io/external-gw"] != "true" {
			t.Fatalf("distributed: node %s labels %v (%v), want ovn.kubernetes.io/external-gw=true on every node (as Kube-OVN)", n, nd.Labels, err)
		}
	}

	// far (on node-c, not the gateway) is reached at its EIP and leaves from it, through node-c's NIC.
	t0 := time.Now()
	if got, err := askUntil(c.world.ns, "172.56.0.40:8000", "far "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("outside -> distributed EIP 172.56.0.40: %q (%v), want far answering %s\n%s", got, err, worldExt, c.diag())
	}
	t.Logf("outside reached the distributed EIP %s after its rule was in the NB", time.Since(t0).Round(time.Millisecond))
	if got, err := askUntil(far.netns, worldEcho, "172.56.0.40", 10*time.Second); err != nil {
		t.Fatalf("far -> outside: outside saw %q (%v), want 172.56.0.40", got, err)
	}
	const n = 10
	d := c.crossings(t, []int{1, 2}, func() {
		connections(t, c.world.ns, "172.56.0.40:8000", "far "+worldExt, n)
		connections(t, far.netns, worldEcho, "172.56.0.40", n)
	})
	c.assertCrossed(t, "distributed EIP of far on node-c", d, 2, 2*n)
	c.waitRedirect(t, "cr-ovn-cluster-ovn-external", c.chassisOf(t, "node-b"), 10*time.Second)
	c.waitBFDForwarding(t, 2, 30*time.Second)
	// snat-c, on node-c too, leaves from its SNAT address through the gateway node-b.
	if got, err := askUntil(snatC.netns, worldEcho, "172.56.0.50", 10*time.Second); err != nil {
		t.Fatalf("snat-c -> outside: outside saw %q (%v), want 172.56.0.50", got, err)
	}
	d = c.crossingsWithoutFlaps(t, []int{1, 2}, func() { connections(t, snatC.netns, worldEcho, "172.56.0.50", n) })
	c.assertCrossed(t, "snat of snat-c on node-c (centralized)", d, 1, n)
	// on-a's EIP works, centrally through node-b, although node-a lacks the NIC.
	if got, err := askUntil(c.world.ns, "172.56.0.41:8000", "on-a "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("outside -> EIP 172.56.0.41 of a pod on node-a (no NIC there): %q (%v)\n%s", got, err, c.diag())
	}

	// The NIC appears on node-a: its daemon bridges it, on-a's EIP moves to node-a.
	c.addExternalNetwork(t, "ext0", 0)
	c.waitBridge(t, 0, []string{"br-external", "ext0"}, 30*time.Second)
	c.waitNATFull(t, nb, []string{"dnat_and_snat 172.56.0.40 " + far.ip + " far." + ns + " 02:e1:ac:38:00:28",
		"dnat_and_snat 172.56.0.41 " + onA.ip + " on-a." + ns + " 02:e1:ac:38:00:29", "snat 172.56.0.50 " + snatC.ip + " - -"}, 30*time.Second)

	// Moving far's EIP to near on node-a: the traffic follows, through node-a's NIC.
	c.annotatePod(t, far, "ovn.kubernetes.io/eip", nil)
	c.annotatePod(t, near, "ovn.kubernetes.io/eip", ptr("172.56.0.40"))
	c.waitNATFull(t, nb, []string{"dnat_and_snat 172.56.0.40 " + near.ip + " near." + ns + " 02:e1:ac:38:00:28",
		"dnat_and_snat 172.56.0.41 " + onA.ip + " on-a." + ns + " 02:e1:ac:38:00:29", "snat 172.56.0.50 " + snatC.ip + " - -"}, 30*time.Second)
	t0 = time.Now()
	if got, err := askUntil(c.world.ns, "172.56.0.40:8000", "near "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("after moving the EIP to node-a: outside -> 172.56.0.40 %q (%v), want near\n%s", got, err, c.diag())
	}
	t.Logf("outside reached the moved EIP on node-a %s after its rule was in the NB", time.Since(t0).Round(time.Millisecond))
	d = c.crossings(t, []int{0, 1, 2}, func() {
		connections(t, c.world.ns, "172.56.0.40:8000", "near "+worldExt, n)
		connections(t, near.netns, worldEcho, "172.56.0.40", n)
	})
	c.assertCrossed(t, "EIP moved to near on node-a", d, 0, 2*n)
	if got, err := c.world.sourceSeen(far.netns, 5*time.Second); err != nil || got != "192.168.209.2" {
		t.Fatalf("far without its EIP leaves from %q (%v), want its node's 192.168.209.2", got, err)
	}

	// node-c's daemon stops: its br-external goes, as with centralized gateways; cleanup finds nothing.
	if code := c.nodes[2].Stop(); code != 0 {
		t.Fatalf("node-c's daemon exited %d\n%s", code, c.nodes[2].LogTail())
	}
	if o, err := exec.Command("ip", "-n", c.nodes[2].NS, "link", "show", "br-external").CombinedOutput(); err == nil {
		t.Fatalf("node-c stopped: device br-external is still there:\n%s", o)
	}
	db := c.nodes[2].Path("ovs-db", "conf.db")
	if out := run(t, "ovsdb-tool", "query", db, `["Open_vSwitch",{"op":"select","table":"Bridge","where":[["name","==","br-external"]]},{"op":"select","table":"Open_vSwitch","where":[],"columns":["external_ids"]}]`); strings.Contains(out, `"br-external"`) || strings.Contains(out, "external:br-external") {
		t.Fatalf("node-c stopped: conf.db still has br-external or its mapping:\n%s", out)
	}
	cl := exec.Command("ip", append([]string{"netns", "exec", c.nodes[2].NS, testenv.Binary(t, "ovnhost"), "cleanup"}, c.nodes[2].Args...)...)
	if o, err := cl.CombinedOutput(); err != nil || strings.Contains(string(o), "br-external") {
		t.Fatalf("ovnhost cleanup on node-c: %v\n%s", err, o)
	}

	// Back to centralized: node-a drops its bridge, the EIPs lose their ports and go through node-b.
	c.setExternalConfig(t, extConfig("node-b"))
	c.waitBridge(t, 0, nil, 30*time.Second)
	c.waitNATFull(t, nb, []string{"dnat_and_snat 172.56.0.40 " + near.ip + " - -", "dnat_and_snat 172.56.0.41 " + onA.ip + " - -",
		"snat 172.56.0.50 " + snatC.ip + " - -"}, 30*time.Second)
	if got, err := askUntil(c.world.ns, "172.56.0.40:8000", "near "+worldExt, 20*time.Second); err != nil {
		t.Fatalf("centralized again: outside -> 172.56.0.40 %q (%v), want near through node-b\n%s", got, err, c.diag())
	}
	d = c.crossings(t, []int{0, 1}, func() { connections(t, c.world.ns, "172.56.0.40:8000", "near "+worldExt, n) })
	c.assertCrossed(t, "centralized again: EIP of near", d, 1, n)
}

package node_test

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/physswitch"
)

var (
	vlanGVR   = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "vlans"}
	subnetGVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}
)

// Underlay VLAN Subnets on two nodes, as Kube-OVN users run them: a
// physical switch (a Linux bridge with VLAN filtering, in its own
// namespace) trunks VLANs 100 and 200 to each node's eth1 and to a
// physical router that holds each VLAN's gateway. A ProviderNetwork
// bridges eth1 on both nodes; Vlans 100 and 200 and one Subnet on each
// are applied as a Kube-OVN user writes them. Pods on VLAN 100 on the two
// nodes reach each other and their physical gateway across the switch
// (their MACs learned there on VLAN 100: not through Geneve), with the
// provider network's MTU; the pod on VLAN 200 reaches its own gateway but
// not the VLAN 100 pod even with a route straight onto its segment. A
// pod's connection to an OVN database port on its network is dropped by
// the guard on its switch, another port answers. A NetworkPolicy admitting
// only the physical router to VLAN 100's pods cuts a100 off b100 and
// keeps the router; deleted, a100 is back. Then
// u2oInterconnection on VLAN 100: the cluster router gets an address
// there (Subnet status), a new pod's default gateway is that address, and
// the pod reaches an overlay pod on the other node both ways, a ClusterIP
// Service backed by it, its physical gateway, and what lies beyond it.
// VLAN 300 with logicalGateway: the router's port is the gateway. Last, a
// node excluded from the network refuses a new VLAN pod, saying why.
func TestUnderlayVLANPodsAcrossNodes(t *testing.T) {
	sc := startServiceCluster(t, 2)
	c := sc.cluster
	sw := physswitch.Start(t, newNetns(t, "ohs"))
	router := newNetns(t, "ohr")
	for i, n := range c.nodes {
		port := fmt.Sprintf("n%c", 'a'+i)
		run(t, "ip", "link", "add", "eth1", "netns", n.NS, "type", "veth", "peer", "name", port, "netns", sw.NS)
		run(t, "ip", "netns", "exec", n.NS, "ethtool", "-K", "eth1", "tx", "off")
		run(t, "ip", "-n", n.NS, "link", "set", "eth1", "up")
		sw.Trunk(t, port, 100, 200, 300)
	}
	// The physical router: one interface per VLAN (on an access port)
	// holding its gateway, not forwarding between them.
	run(t, "ip", "netns", "exec", router, "sysctl", "-qw", "net.ipv4.ip_forward=0")
	for _, vid := range []int{100, 200} {
		v := fmt.Sprint(vid)
		run(t, "ip", "link", "add", "r"+v, "netns", router, "type", "veth", "peer", "name", "s"+v, "netns", sw.NS)
		sw.Access(t, "s"+v, vid)
		run(t, "ip", "netns", "exec", router, "ethtool", "-K", "r"+v, "tx", "off")
		run(t, "ip", "-n", router, "addr", "add", "10."+v+".0.254/24", "dev", "r"+v)
		run(t, "ip", "-n", router, "link", "set", "r"+v, "up")
	}

	ctx := context.Background()
	apply := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		t.Helper()
		if _, err := c.cp.dc.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apply(providerNetworkGVR, "ProviderNetwork", "physnet1", map[string]any{"defaultInterface": "eth1"})
	for _, name := range c.names {
		waitNodeReady := func(nd *corev1.Node) bool {
			return nd.Labels["physnet1.provider-network.kubernetes.io/ready"] == "true"
		}
		waitNode(t, c, name, "physnet1 ready=true", waitNodeReady)
	}
	for _, vid := range []int64{100, 200} {
		v := fmt.Sprint(vid)
		apply(vlanGVR, "Vlan", "vlan"+v, map[string]any{"id": vid, "provider": "physnet1"})
		c.ensureNamespace(t, "u"+v, nil)
		apply(subnetGVR, "Subnet", "sub"+v, map[string]any{"protocol": "IPv4", "cidrBlock": "10." + v + ".0.0/24", "gateway": "10." + v + ".0.254",
			"excludeIps": []any{"10." + v + ".0.254"}, "vlan": "vlan" + v, "namespaces": []any{"u" + v}})
	}

	a100 := c.addPod(t, 0, "u100", "a100", nil, nil)
	b100 := c.addPod(t, 1, "u100", "b100", nil, nil)
	a200 := c.addPod(t, 0, "u200", "a200", nil, nil)
	// ADD answers once the pod's own node installed its port; the other
	// node learns where it is a moment later.
	sc.waitChassisCaughtUp(t)
	for _, p := range []*clusterPod{a100, b100, a200} {
		if !strings.HasPrefix(p.ip, "10."+strings.TrimPrefix(p.namespace, "u")+".0.") {
			t.Fatalf("%s/%s got %s, not an address of its VLAN's network", p.namespace, p.name, p.ip)
		}
		// The provider network's MTU (eth1's 1500): no tunnel header to leave room for.
		if link := run(t, "ip", "-n", p.netns, "link", "show", "eth0"); !strings.Contains(link, " mtu 1500 ") {
			t.Errorf("%s's eth0 is not at the provider network's MTU 1500:\n%s", p.name, link)
		}
	}
	pod, err := c.cp.kc.CoreV1().Pods("u100").Get(ctx, "a100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pod.Annotations[annotations.VlanID] != "100" || pod.Annotations[annotations.ProviderNetwork] != "physnet1" {
		t.Errorf("a100's annotations vlan_id %q provider_network %q, want 100 and physnet1", pod.Annotations[annotations.VlanID], pod.Annotations[annotations.ProviderNetwork])
	}

	if err := ping(a100.netns, b100.ip, 3); err != nil {
		t.Fatalf("VLAN 100 pod on node-a to the one on node-b: %v\n%s\n%s", err, a100.node.LogTail(), underlayState(sw, c))
	}
	if err := ping(a100.netns, "10.100.0.254", 3); err != nil {
		t.Fatalf("VLAN 100 pod to its physical gateway: %v", err)
	}
	if err := ping(a200.netns, "10.200.0.254", 3); err != nil {
		t.Fatalf("VLAN 200 pod to its physical gateway: %v", err)
	}
	// The pods' frames crossed the physical switch, tagged with their VLAN.
	for _, p := range []struct {
		pod  *clusterPod
		want string
	}{{a100, "na vlan 100"}, {b100, "nb vlan 100"}, {a200, "na vlan 200"}} {
		if got := sw.Learned(t, podMAC(t, p.pod)); !slices.Equal(got, []string{p.want}) {
			t.Errorf("the physical switch learned %s's MAC at %v, want [%s]", p.pod.name, got, p.want)
		}
	}

	// VLAN separation: a route straight onto VLAN 100's segment gets the
	// VLAN 200 pod nowhere, and its MAC never shows up on VLAN 100.
	run(t, "ip", "-n", a200.netns, "route", "add", "10.100.0.0/24", "dev", "eth0")
	if out, err := exec.Command("ip", "netns", "exec", a200.netns, "ping", "-c", "3", "-i", "0.2", "-W", "1", b100.ip).CombinedOutput(); err == nil {
		t.Fatalf("the VLAN 200 pod reached the VLAN 100 pod %s:\n%s", b100.ip, out)
	}
	if got := sw.Learned(t, podMAC(t, a200)); !slices.Equal(got, []string{"na vlan 200"}) {
		t.Errorf("the VLAN 200 pod's MAC was learned at %v, want only [na vlan 200]", got)
	}
	if neigh := run(t, "ip", "-n", router, "neigh", "show", "dev", "r100"); strings.Contains(neigh, a200.ip) {
		t.Errorf("the router's VLAN 100 interface heard from the VLAN 200 pod:\n%s", neigh)
	}

	// The node guard on the underlay switch (docs/security.md): the pod's
	// connection attempts to an OVN database port on its physical network
	// (the router stands in for a node's address there) are dropped in
	// OVN, whatever NetworkPolicy says; another port of the same host
	// answers, and a host of the physical network still reaches a pod's
	// own listener on a guarded port.
	serveName(t, router, 6640, false, "open")
	serveName(t, router, 6641, false, "nb")
	if got, err := ask(a100.netns, "10.100.0.254:6640", 5*time.Second); err != nil || got != "open" {
		t.Fatalf("VLAN 100 pod to a host on its network, port 6640: %q %v", got, err)
	}
	if got, err := ask(a100.netns, "10.100.0.254:6641", 2*time.Second); err == nil {
		out, _ := exec.Command("ovn-nbctl", "--db="+c.cp.central.NB(), "acl-list", "sub100").CombinedOutput()
		lf, _ := exec.Command("sh", "-c", "ovn-sbctl --db="+c.cp.central.SB()+" lflow-list sub100 | grep -E 'ls_(in|out)_acl '").CombinedOutput()
		t.Fatalf("VLAN 100 pod connected to port 6641 (OVN NB) on its network: %q\nsub100's ACLs:\n%s\nits logical flows:\n%s", got, out, lf)
	}
	serveName(t, a100.netns, 6642, false, "pod")
	if got, err := ask(router, a100.ip+":6642", 5*time.Second); err != nil || got != "pod" {
		t.Fatalf("the physical network to the VLAN 100 pod's port 6642: %q %v", got, err)
	}

	// NetworkPolicy on underlay pods: ingress to u100's pods only from
	// the physical router. a100 loses b100, the router keeps it; gone
	// again, a100 has it back.
	serveName(t, b100.netns, 7000, false, "b100")
	for _, from := range []string{a100.netns, router} {
		if got, err := ask(from, b100.ip+":7000", 5*time.Second); err != nil || got != "b100" {
			t.Fatalf("before the policy, %s to b100:7000: %q %v", from, got, err)
		}
	}
	np := netpolObj("u100", "only-router", networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.100.0.254/32"}}}}}})
	if _, err := c.cp.kc.NetworkingV1().NetworkPolicies("u100").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reaches := func(from string) bool {
		got, err := ask(from, b100.ip+":7000", time.Second)
		return err == nil && got == "b100"
	}
	for deadline := time.Now().Add(30 * time.Second); reaches(a100.netns); {
		if time.Now().After(deadline) {
			t.Fatal("NetworkPolicy u100/only-router: a100 still reaches b100:7000 after 30 s")
		}
	}
	if got, err := ask(router, b100.ip+":7000", 5*time.Second); err != nil || got != "b100" {
		t.Fatalf("NetworkPolicy u100/only-router: the physical router (allowed by ipBlock) to b100:7000: %q %v", got, err)
	}
	if err := c.cp.kc.NetworkingV1().NetworkPolicies("u100").Delete(ctx, "only-router", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !reaches(a100.netns); {
		if time.Now().After(deadline) {
			t.Fatal("a100 does not reach b100:7000 30 s after the policy was deleted")
		}
	}

	// u2oInterconnection: the cluster router gets an address on VLAN
	// 100; a pod started then has it as its default gateway and reaches an
	// overlay pod on the other node (and is reached from it), its
	// physical gateway on its segment, and beyond that gateway (the
	// router's VLAN 200 address) through the cluster router.
	if _, err := c.cp.dc.Resource(subnetGVR).Patch(ctx, "sub100", types.MergePatchType, []byte(`{"spec":{"u2oInterconnection":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	st := waitSubnetStatus(t, c, "sub100", "u2oInterconnectionIP")
	u2oIP := st["u2oInterconnectionIP"]
	if !strings.HasPrefix(u2oIP, "10.100.0.") || u2oIP == "10.100.0.254" || u2oIP == a100.ip || u2oIP == b100.ip || st["u2oInterconnectionVPC"] != "ovn-cluster" || st["u2oInterconnectionMAC"] == "" {
		t.Fatalf("Subnet sub100 status after u2oInterconnection: %v", st)
	}
	if out, errb, code := c.netctlIn(t, c.nodes[0], "subnet", "show", "sub100"); code != 0 ||
		!strings.Contains(out, "Vlan:          vlan100 (physical gateway 10.100.0.254, interconnected through the cluster router at "+u2oIP+")") {
		t.Errorf("netctl subnet show sub100 (exit %d) does not say the VLAN and the interconnection:\n%s%s", code, out, errb)
	}
	c100 := c.addPod(t, 0, "u100", "c100", nil, nil)
	over := c.addPod(t, 1, "default", "over", map[string]string{"app": "over"}, nil)
	sc.waitChassisCaughtUp(t)
	if r := run(t, "ip", "-n", c100.netns, "route", "show", "default"); !strings.Contains(r, "via "+u2oIP+" ") {
		t.Fatalf("c100's default route is not via the interconnection address %s:\n%s", u2oIP, r)
	}
	diag := func(from *clusterPod, dst string) string {
		return u2oState(c, sw, from, "sub100", st["u2oInterconnectionMAC"], dst)
	}
	if err := ping(c100.netns, over.ip, 3); err != nil {
		t.Fatalf("interconnected underlay pod to an overlay pod on the other node: %v\n%s", err, diag(c100, over.ip))
	}
	if err := ping(over.netns, c100.ip, 3); err != nil {
		t.Fatalf("overlay pod to the interconnected underlay pod: %v", err)
	}
	if err := ping(c100.netns, "10.100.0.254", 3); err != nil {
		t.Fatalf("interconnected underlay pod to its physical gateway: %v", err)
	}
	// A ClusterIP Service whose backend is the overlay pod, from the
	// interconnected underlay pod (the load balancer on its switch, the
	// backend reached through the router).
	sc.markReady(t, over)
	serveName(t, over.netns, 8080, false, "over")
	vip := sc.createService(t, "default", "over", map[string]string{"app": "over"}, corev1.ProtocolTCP, 80, 8080, false)
	sc.waitBackends(t, "default", "over", corev1.ProtocolTCP, vip+":80", over.ip)
	sc.waitChassisCaughtUp(t) // the load balancer is on node-a's flows too
	if got, err := ask(c100.netns, vip+":80", 5*time.Second); err != nil || got != "over" {
		t.Fatalf("interconnected underlay pod to ClusterIP %s:80 (backend the overlay pod): %q %v\n%s", vip, got, err, diag(c100, over.ip))
	}
	if err := ping(c100.netns, "10.200.0.254", 3); err != nil {
		t.Fatalf("interconnected underlay pod beyond its physical gateway (through the cluster router): %v\nrouter neigh: %s\n%s", err, run(t, "ip", "-n", router, "neigh"), diag(c100, "10.200.0.254"))
	}
	// logicalGateway on VLAN 300: the gateway is the cluster router's port;
	// pods on the two nodes reach each other across the VLAN and the
	// overlay pod through the router, both ways.
	apply(vlanGVR, "Vlan", "vlan300", map[string]any{"id": int64(300), "provider": "physnet1"})
	c.ensureNamespace(t, "u300", nil)
	apply(subnetGVR, "Subnet", "sub300", map[string]any{"protocol": "IPv4", "cidrBlock": "10.30.0.0/24", "gateway": "10.30.0.1",
		"vlan": "vlan300", "logicalGateway": true, "namespaces": []any{"u300"}})
	e300 := c.addPod(t, 0, "u300", "e300", nil, nil)
	f300 := c.addPod(t, 1, "u300", "f300", nil, nil)
	sc.waitChassisCaughtUp(t)
	if r := run(t, "ip", "-n", e300.netns, "route", "show", "default"); !strings.Contains(r, "via 10.30.0.1 ") {
		t.Fatalf("e300's default route is not via the logical gateway 10.30.0.1:\n%s", r)
	}
	for _, p := range []struct{ from, to *clusterPod }{{e300, f300}, {e300, over}, {over, e300}, {f300, over}} {
		if err := ping(p.from.netns, p.to.ip, 3); err != nil {
			t.Fatalf("logicalGateway VLAN 300: %s to %s: %v\n%s", p.from.name, p.to.name, err, u2oState(c, sw, p.from, "", "", p.to.ip))
		}
	}
	if got := sw.Learned(t, podMAC(t, f300)); !slices.Equal(got, []string{"nb vlan 300"}) {
		t.Errorf("the physical switch learned f300's MAC at %v, want [nb vlan 300]", got)
	}

	for i, n := range c.nodes {
		out := run(t, "ovs-vsctl", "--db=unix:"+n.Path("ovs-run", "db.sock"), "get", "Open_vSwitch", ".", "external_ids:ovn-chassis-mac-mappings")
		if !regexp.MustCompile(`physnet1:[0-9a-f]{2}(:[0-9a-f]{2}){5}`).MatchString(out) {
			t.Errorf("%s has no chassis MAC on physnet1: %s", c.names[i], out)
		}
	}

	// node-b leaves physnet1: a new VLAN 100 pod there is refused with
	// why and the fix (wired, it would have no way onto its VLAN).
	if _, err := c.cp.dc.Resource(providerNetworkGVR).Patch(ctx, "physnet1", types.MergePatchType, []byte(`{"spec":{"excludeNodes":["node-b"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, c, "node-b", "physnet1 labels removed", func(nd *corev1.Node) bool {
		_, ok := nd.Labels["physnet1.provider-network.kubernetes.io/ready"]
		return !ok
	})
	if _, err := c.cp.kc.CoreV1().Pods("u100").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "d100"},
		Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podNS := newNetns(t, "ohk")
	out, err := cniIn(c.nodes[1], "ADD", podNS, "u100", "d100")
	t.Cleanup(func() { _, _ = cniIn(c.nodes[1], "DEL", podNS, "u100", "d100") })
	if err == nil || !strings.Contains(string(out), "provider network physnet1, which is not bridged on this node") || !strings.Contains(string(out), "nodeSelector physnet1.provider-network.kubernetes.io/ready") {
		t.Fatalf("ADD of a VLAN pod on a node without the network: %v\n%s", err, out)
	}
}

// u2oState is what to look at when an interconnected pod's ping fails:
// the router's policies, OVN's logical trace of the echo request from the
// pod (sent to the router port's MAC; when ls is given), the MAC bindings, the physical
// switch's table and each node's datapath flows.
func u2oState(c *cluster, sw *physswitch.Switch, from *clusterPod, ls, routerMAC, dst string) string {
	cmd := func(name string, args ...string) string {
		out, _ := exec.Command(name, args...).CombinedOutput()
		return string(out)
	}
	mac := cmd("ip", "-n", from.netns, "-o", "link", "show", "eth0")
	if m := regexp.MustCompile(`link/ether ([0-9a-f:]{17})`).FindStringSubmatch(mac); m != nil {
		mac = m[1]
	}
	var b strings.Builder
	b.WriteString("policies:\n" + cmd("ovn-nbctl", "--db="+c.cp.central.NB(), "lr-policy-list", "ovn-cluster"))
	if ls != "" {
		b.WriteString("trace:\n" + cmd("ovn-trace", "--db="+c.cp.central.SB(), ls, fmt.Sprintf("inport==%q && eth.src==%s && eth.dst==%s && ip4.src==%s && ip4.dst==%s && ip.ttl==64 && icmp4.type==8",
			from.name+"."+from.namespace, mac, routerMAC, from.ip, dst)))
	}
	b.WriteString("MAC bindings:\n" + cmd("ovn-sbctl", "--db="+c.cp.central.SB(), "--columns=ip,mac,logical_port", "list", "MAC_Binding"))
	b.WriteString("physical switch:\n" + sw.FDB())
	for i, n := range c.nodes {
		b.WriteString(c.names[i] + " datapath:\n" + cmd("ip", "netns", "exec", n.NS, "ovs-appctl", "--target="+n.Path("ovs-run", "ovs-vswitchd.ctl"), "dpctl/dump-flows"))
	}
	return b.String()
}

// waitSubnetStatus watches Subnet name until its status has field, and
// returns the status's string fields.
func waitSubnetStatus(t *testing.T, c *cluster, name, field string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res := c.cp.dc.Resource(subnetGVR)
	w, err := res.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var last map[string]any
	for ev := range w.ResultChan() {
		u, ok := ev.Object.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		last, _, _ = unstructured.NestedMap(u.Object, "status")
		if v, _ := last[field].(string); v != "" {
			out := map[string]string{}
			for k, v := range last {
				if s, ok := v.(string); ok {
					out[k] = s
				}
			}
			return out
		}
	}
	t.Fatalf("Subnet %s: no status.%s within 30s; status %v", name, field, last)
	return nil
}

// podMAC is the MAC of a pod's eth0.
func podMAC(t *testing.T, p *clusterPod) string {
	t.Helper()
	out := run(t, "ip", "-n", p.netns, "-o", "link", "show", "eth0")
	m := regexp.MustCompile(`link/ether ([0-9a-f:]{17})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no MAC on %s's eth0: %s", p.name, out)
	}
	return m[1]
}

// underlayState is what to look at when an underlay crossing fails: the
// switch's log and each node's bridges.
func underlayState(sw *physswitch.Switch, c *cluster) string {
	var b strings.Builder
	b.WriteString("physical switch log:\n" + sw.Log())
	for i, n := range c.nodes {
		out, _ := exec.Command("ovs-vsctl", "--db=unix:"+n.Path("ovs-run", "db.sock"), "show").CombinedOutput()
		fmt.Fprintf(&b, "%s ovs-vsctl show:\n%s\n", c.names[i], out)
	}
	return b.String()
}

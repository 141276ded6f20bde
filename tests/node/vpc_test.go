package node_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// TestVPCIsolationRoutesAndPeering: custom VPCs (issue 26) on two nodes
// with the real daemons and apiserver, checked by packets.
//
//   - vpc-a and vpc-b have the same CIDR 10.200.0.0/24, each a pod on
//     both nodes: a VPC's pods reach each other across nodes; the address
//     both VPCs hold answers with the asking VPC's pod (its MAC), an
//     address only vpc-b holds is unreachable from vpc-a;
//   - a custom VPC's pod reaches neither a ClusterIP Service of the
//     default VPC nor the node (its InternalIP, the join gateway), which a
//     default pod does;
//   - a Vpc bound to namespaces refuses a pod of another namespace
//     (SubnetNotAllowed naming the Vpc);
//   - a policy route with action drop stops pings to one destination;
//   - peering vpc-c and vpc-d opens exactly the prefix their routes send
//     over it: a reroute policy one way (overriding a static route into
//     a black hole), a static route back (removing it stops the pings),
//     a bad route failing that entry only.
func TestVPCIsolationRoutesAndPeering(t *testing.T) {
	c := startServiceCluster(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	for _, ns := range []string{"ns-a", "ns-b"} {
		c.ensureNamespace(t, ns, nil)
	}
	vpcClient := c.cp.dc.Resource(kubeovnv1.VpcGVR)
	createVpc := func(name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Vpc",
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := vpcClient.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	patchVpc := func(name string, spec map[string]any) {
		t.Helper()
		b, _ := json.Marshal(map[string]any{"spec": spec})
		if _, err := vpcClient.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createSubnet := func(name, vpc, cidr string, namespaces ...string) {
		t.Helper()
		spec := map[string]any{"cidrBlock": cidr, "vpc": vpc, "protocol": "IPv4"}
		if len(namespaces) > 0 {
			var nss []any // unstructured content holds []any, not []string
			for _, n := range namespaces {
				nss = append(nss, n)
			}
			spec["namespaces"] = nss
		}
		if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": name}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A Subnet created before its Vpc waits (VpcNotFound) and is
	// programmed once the Vpc exists.
	createSubnet("sa", "vpc-a", "10.200.0.0/24", "ns-a")
	waitSubnetCondition(t, c, "sa", "False", "VpcNotFound")
	createVpc("vpc-a", map[string]any{"namespaces": []any{"ns-a"}})
	createVpc("vpc-b", map[string]any{"namespaces": []any{"ns-b"}})
	// sa2 binds no namespace itself: vpc-a's namespaces do.
	createSubnet("sa2", "vpc-a", "10.201.0.0/24")
	createSubnet("sb", "vpc-b", "10.200.0.0/24", "ns-b")
	for _, s := range []string{"sa", "sa2", "sb"} {
		waitSubnetCondition(t, c, s, "True", "")
	}

	pod := func(node int, ns, name, subnet, ip string) *clusterPod {
		t.Helper()
		ann := map[string]string{"ovn.kubernetes.io/logical_switch": subnet}
		if ip != "" {
			ann["ovn.kubernetes.io/ip_address"] = ip
		}
		return c.addPod(t, node, ns, name, nil, ann)
	}
	a0 := pod(0, "ns-a", "a0", "sa", "10.200.0.10")
	a1 := pod(1, "ns-a", "a1", "sa", "10.200.0.11")
	a2 := pod(1, "ns-a", "a2", "sa2", "10.201.0.12")
	b0 := pod(0, "ns-b", "b0", "sb", "10.200.0.10")
	b1 := pod(1, "ns-b", "b1", "sb", "10.200.0.12")
	web := c.addPod(t, 0, "default", "web", map[string]string{"app": "web"}, nil)
	client := c.addPod(t, 1, "default", "client", nil, nil)

	// The controller wrote the pod's VPC as Kube-OVN does.
	if p, err := c.cp.kc.CoreV1().Pods("ns-b").Get(ctx, "b0", metav1.GetOptions{}); err != nil || p.Annotations["ovn.kubernetes.io/logical_router"] != "vpc-b" {
		t.Fatalf("b0's logical_router annotation: %v %v", err, p.Annotations)
	}

	// Inside each VPC, across nodes.
	waitPing(t, a0.netns, a1.ip, "vpc-a pod a0 (node-a) to a1 (node-b)")
	waitPing(t, b1.netns, b0.ip, "vpc-b pod b1 (node-b) to b0 (node-a)")
	waitPing(t, a0.netns, a2.ip, "vpc-a pod a0 to a2 in vpc-a's other subnet (routed by vpc-a's router)")
	// 10.200.0.10 is a0 in vpc-a and b0 in vpc-b: a1 reaches a0.
	if mac, want := neighMAC(t, a1.netns, "10.200.0.10"), ifaceMAC(t, a0.netns); mac != want {
		t.Fatalf("a1's 10.200.0.10 has MAC %s, want vpc-a's a0 (%s); vpc-b's b0 is %s", mac, want, ifaceMAC(t, b0.netns))
	}
	if mac, want := neighMAC(t, b1.netns, "10.200.0.10"), ifaceMAC(t, b0.netns); mac != want {
		t.Fatalf("b1's 10.200.0.10 has MAC %s, want vpc-b's b0 (%s)", mac, want)
	}
	// 10.200.0.12 is b1, in vpc-b only.
	mustNotPing(t, a0.netns, b1.ip, "vpc-a pod a0 to vpc-b's b1 (10.200.0.12, no such pod in vpc-a)")

	// The default VPC's Service and the node: a default pod reaches both,
	// a custom VPC's pod neither.
	serveName(t, web.netns, 8080, false, "web")
	c.markReady(t, web)
	vip := c.createService(t, "default", "web", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, false)
	c.waitBackends(t, "default", "web", corev1.ProtocolTCP, vip+":80", web.ip)
	c.waitChassisCaughtUp(t) // every chassis has the backends in its flows
	if got, err := ask(client.netns, vip+":80", 5*time.Second); err != nil || got != "web" {
		t.Fatalf("default pod (node-b) to Service %s: %q %v", vip, got, err)
	}
	if got, err := ask(a0.netns, vip+":80", 3*time.Second); err == nil {
		t.Fatalf("vpc-a pod a0 reached the default VPC's Service %s (answer %q): isolation broken", vip, got)
	}
	waitPing(t, web.netns, "192.168.100.1", "default pod to node-a's InternalIP (through ovn0)")
	mustNotPing(t, a0.netns, "192.168.100.1", "vpc-a pod a0 to node-a's InternalIP")
	mustNotPing(t, a0.netns, "100.64.0.1", "vpc-a pod a0 to the join gateway")

	// spec.namespaces of vpc-a: a pod of ns-b naming vpc-a's subnet is refused.
	if _, err := c.cp.kc.CoreV1().Pods("ns-b").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "intruder",
		Annotations: map[string]string{"ovn.kubernetes.io/logical_switch": "sa2"}},
		Spec: corev1.PodSpec{NodeName: c.names[0], Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPodEvent(t, c, "ns-b", "intruder", "SubnetNotAllowed", `namespace "ns-b"`)

	// A policy route with action drop: pings to a2 stop, and come back
	// when it is removed.
	patchVpc("vpc-a", map[string]any{"policyRoutes": []any{map[string]any{"priority": 31000, "match": "ip4.dst == " + a2.ip, "action": "drop"}}})
	waitNoPing(t, a0.netns, a2.ip, "a0 to a2 with vpc-a's policy route dropping ip4.dst == "+a2.ip)
	mustPing(t, a0.netns, a1.ip, "a0 to a1 (same subnet, not routed) while the drop policy is in place")
	patchVpc("vpc-a", map[string]any{"policyRoutes": nil})
	waitPing(t, a0.netns, a2.ip, "a0 to a2 once the drop policy is removed")

	// The Vpc's status as Kube-OVN users read it.
	waitFor(t, "vpc-a's status: standby, router vpc-a, subnets [sa sa2]", func() bool {
		u, err := vpcClient.Get(ctx, "vpc-a", metav1.GetOptions{})
		if err != nil {
			return false
		}
		v, err := kubeovnv1.VpcFromUnstructured(u)
		return err == nil && v.Status.Standby && v.Status.Router == "vpc-a" && strings.Join(v.Status.Subnets, " ") == "sa sa2"
	})

	// Peering: vpc-c (10.230.0.0/24) and vpc-d (10.240.0.0/24 and
	// 10.241.0.0/24). vpc-c sends 10.240/24 over the link with a policy
	// route (reroute), vpc-d sends 10.230/24 back with a static route; a
	// peering alone routes nothing, and 10.241/24 is not peered.
	createVpc("vpc-c", map[string]any{})
	createVpc("vpc-d", map[string]any{})
	createSubnet("sc", "vpc-c", "10.230.0.0/24")
	createSubnet("sd", "vpc-d", "10.240.0.0/24")
	createSubnet("sd2", "vpc-d", "10.241.0.0/24")
	for _, s := range []string{"sc", "sd", "sd2"} {
		waitSubnetCondition(t, c, s, "True", "")
	}
	pc := pod(0, "default", "pc", "sc", "")
	pd := pod(1, "default", "pd", "sd", "")
	pd2 := pod(1, "default", "pd2", "sd2", "")
	mustNotPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod before the peering")
	patchVpc("vpc-c", map[string]any{
		"vpcPeerings": []any{map[string]any{"remoteVpc": "vpc-d", "localConnectIP": "169.254.10.1/30"}},
	})
	patchVpc("vpc-d", map[string]any{
		"vpcPeerings":  []any{map[string]any{"remoteVpc": "vpc-c", "localConnectIP": "169.254.10.2/30"}},
		"staticRoutes": []any{map[string]any{"cidr": "10.230.0.0/24", "nextHopIP": "169.254.10.1", "policy": "policyDst"}},
	})
	waitFor(t, "the peering ports vpc-c-vpc-d and vpc-d-vpc-c in the NB", func() bool {
		out, _ := exec.Command("ovn-nbctl", "--db="+c.cp.central.NB(), "--bare", "--columns=peer", "find", "Logical_Router_Port", "name=vpc-c-vpc-d").CombinedOutput()
		return strings.TrimSpace(string(out)) == "vpc-d-vpc-c"
	})
	mustNotPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod with the peering but no route in vpc-c")
	// OVN applies router policies to routed packets only: vpc-c's static
	// route sends 10.240/24 to an address nobody holds (a black hole),
	// then a reroute policy sends it over the link instead.
	patchVpc("vpc-c", map[string]any{"staticRoutes": []any{map[string]any{"cidr": "10.240.0.0/24", "nextHopIP": "10.230.0.254", "policy": "policyDst"}}})
	waitFor(t, "vpc-c's static route 10.240.0.0/24 via 10.230.0.254 in the NB", func() bool {
		out, _ := exec.Command("ovn-nbctl", "--db="+c.cp.central.NB(), "lr-route-list", "vpc-c").CombinedOutput()
		return strings.Contains(string(out), "10.230.0.254")
	})
	mustNotPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod with vpc-c's route to 10.240.0.0/24 leading nowhere")
	patchVpc("vpc-c", map[string]any{"policyRoutes": []any{map[string]any{"priority": 31000, "match": "ip4.dst == 10.240.0.0/24", "action": "reroute", "nextHopIP": "169.254.10.2"}}})
	waitPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod over the peering (vpc-c's reroute policy, vpc-d's static route)")
	mustNotPing(t, pc.netns, pd2.ip, "vpc-c pod to vpc-d's 10.241.0.0/24 (not peered: vpc-c routes only 10.240.0.0/24 over the link)")
	mustNotPing(t, pc.netns, a1.ip, "vpc-c pod to vpc-a")
	// vpc-d's static route is the way back: without it the pings stop.
	patchVpc("vpc-d", map[string]any{"staticRoutes": nil})
	waitNoPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod once vpc-d's static route back to 10.230.0.0/24 is removed")
	// A route whose next hop is outside the VPC: that entry only is left
	// out, named in the Vpc's condition.
	patchVpc("vpc-d", map[string]any{"staticRoutes": []any{
		map[string]any{"cidr": "10.230.0.0/24", "nextHopIP": "169.254.10.1", "policy": "policyDst"},
		map[string]any{"cidr": "192.0.2.0/24", "nextHopIP": "198.51.100.1", "policy": "policyDst"},
	}})
	waitPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod once vpc-d's route back is there again (beside a bad one)")
	waitFor(t, "vpc-d's Validated=False naming the next hop 198.51.100.1", func() bool {
		u, err := vpcClient.Get(ctx, "vpc-d", metav1.GetOptions{})
		if err != nil {
			return false
		}
		v, err := kubeovnv1.VpcFromUnstructured(u)
		cond := v.Condition(kubeovnv1.Validated)
		return err == nil && cond != nil && cond.Status == "False" && strings.Contains(cond.Message, "nextHopIP 198.51.100.1 is outside every Subnet")
	})

	// A restart of the controller leaves the VPCs' routers as they are:
	// the same rows (UUIDs) with the same content, and the paths work.
	// A row removed and put back meanwhile would have a new UUID.
	routers := []string{"vpc-a", "vpc-b", "vpc-c", "vpc-d"}
	before := vpcRouterRows(t, c, routers)
	c.cp.stopController()
	c.cp.startController(t)
	// The Vpc worker takes the start-up's full syncs first (one worker,
	// in order): a Vpc created now is programmed after them.
	createVpc("vpc-probe", map[string]any{})
	waitFor(t, "the restarted controller's router for a new Vpc vpc-probe (after the start-up syncs)", func() bool {
		var rs []nbdb.LogicalRouter
		_ = c.nb.List(ctx, &rs)
		return slices.ContainsFunc(rs, func(r nbdb.LogicalRouter) bool { return r.Name == "vpc-probe" })
	})
	if after := vpcRouterRows(t, c, routers); after != before {
		t.Fatalf("the VPC routers changed across a controller restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	mustPing(t, a0.netns, a1.ip, "a0 to a1 after the controller's restart")
	mustPing(t, a0.netns, a2.ip, "a0 to a2 (routed by vpc-a) after the controller's restart")
	mustPing(t, pc.netns, pd.ip, "vpc-c pod to vpc-d pod over the peering after the controller's restart")
	mustNotPing(t, a0.netns, b1.ip, "vpc-a pod a0 to vpc-b's b1 after the controller's restart")
}

// vpcRouterRows describes the routers with every port, static route and
// policy they hold, by UUID and content, one line each.
func vpcRouterRows(t *testing.T, c *svcCluster, names []string) string {
	t.Helper()
	ctx := context.Background()
	var rs []nbdb.LogicalRouter
	var ports []nbdb.LogicalRouterPort
	var routes []nbdb.LogicalRouterStaticRoute
	var pols []nbdb.LogicalRouterPolicy
	for _, err := range []error{c.nb.List(ctx, &rs), c.nb.List(ctx, &ports), c.nb.List(ctx, &routes), c.nb.List(ctx, &pols)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	sorted := func(s []string) string { s = slices.Clone(s); slices.Sort(s); return strings.Join(s, ",") }
	var out []string
	for _, name := range names {
		i := slices.IndexFunc(rs, func(r nbdb.LogicalRouter) bool { return r.Name == name })
		if i < 0 {
			t.Fatalf("router %s is not in the NB", name)
		}
		r := rs[i]
		var rows []string
		out = append(out, fmt.Sprintf("router %s %s ports=[%s] routes=[%s] policies=[%s] nat=[%s] lbs=[%s] ids=%v", r.Name, r.UUID,
			sorted(r.Ports), sorted(r.StaticRoutes), sorted(r.Policies), sorted(r.Nat), sorted(r.LoadBalancer), r.ExternalIDs))
		for _, p := range ports {
			if slices.Contains(r.Ports, p.UUID) {
				rows = append(rows, fmt.Sprintf("  port %s %s mac=%s networks=%v peer=%v ids=%v", p.UUID, p.Name, p.MAC, p.Networks, deref(p.Peer), p.ExternalIDs))
			}
		}
		for _, x := range routes {
			if slices.Contains(r.StaticRoutes, x.UUID) {
				rows = append(rows, fmt.Sprintf("  route %s %s via %s policy=%v ids=%v", x.UUID, x.IPPrefix, x.Nexthop, deref(x.Policy), x.ExternalIDs))
			}
		}
		for _, x := range pols {
			if slices.Contains(r.Policies, x.UUID) {
				rows = append(rows, fmt.Sprintf("  policy %s %d %q %s %v ids=%v", x.UUID, x.Priority, x.Match, x.Action, x.Nexthops, x.ExternalIDs))
			}
		}
		slices.Sort(rows)
		out = append(out, rows...)
	}
	return strings.Join(out, "\n")
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// waitSubnetCondition waits for the Subnet's Validated condition (reason
// "" = any).
func waitSubnetCondition(t *testing.T, c *svcCluster, name, status, reason string) {
	t.Helper()
	last := ""
	waitFor(t, fmt.Sprintf("Subnet %s Validated=%s %s", name, status, reason), func() bool {
		u, err := c.cp.dc.Resource(subnetsGVR).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false
		}
		s, err := kubeovnv1.FromUnstructured(u)
		if err != nil {
			return false
		}
		cond := s.Condition(kubeovnv1.Validated)
		if cond == nil {
			return false
		}
		last = cond.Status + " " + cond.Reason + ": " + cond.Message
		return cond.Status == status && (reason == "" || cond.Reason == reason)
	}, func() string { return last })
}

// waitPodEvent waits for an event of that reason on the pod whose message contains want.
func waitPodEvent(t *testing.T, c *svcCluster, ns, pod, reason, want string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("event %s on pod %s/%s containing %q", reason, ns, pod, want), func() bool {
		evs, err := c.cp.kc.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return false
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Name == pod && e.Reason == reason && strings.Contains(e.Message, want) && strings.Contains(e.Message, "Vpc") {
				return true
			}
		}
		return false
	})
}

// waitFor polls ok (every 200 ms, up to a minute); the failure names what
// was awaited and, when given, the last state seen.
func waitFor(t *testing.T, what string, ok func() bool, last ...func() string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !ok() {
		if time.Now().After(deadline) {
			seen := ""
			if len(last) > 0 {
				seen = " (last seen: " + last[0]() + ")"
			}
			t.Fatalf("timed out waiting for %s%s", what, seen)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitPing waits until one echo from ns to ip comes back.
func waitPing(t *testing.T, ns, ip, what string) {
	t.Helper()
	var err error
	waitFor(t, what, func() bool { err = ping(ns, ip, 1); return err == nil }, func() string { return fmt.Sprint(err) })
}

// waitNoPing waits until pings from ns to ip are lost, and stay lost (3 of 3).
func waitNoPing(t *testing.T, ns, ip, what string) {
	t.Helper()
	waitFor(t, "no answer: "+what, func() bool { return ping(ns, ip, 1) != nil })
	mustNotPing(t, ns, ip, what)
}

func mustPing(t *testing.T, ns, ip, what string) {
	t.Helper()
	if err := ping(ns, ip, 3); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func mustNotPing(t *testing.T, ns, ip, what string) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "ping", "-c", "3", "-i", "0.3", "-W", "1", ip).CombinedOutput()
	if err == nil {
		t.Fatalf("%s: answered, want no answer\n%s", what, out)
	}
}

// neighMAC is the MAC ns resolved ip to (after a ping).
func neighMAC(t *testing.T, ns, ip string) string {
	t.Helper()
	_ = ping(ns, ip, 1)
	out := run(t, "ip", "-n", ns, "neigh", "show", ip)
	m := regexp.MustCompile(`lladdr ([0-9a-f:]{17})`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("%s has no neighbour entry for %s: %q", ns, ip, out)
	}
	return m[1]
}

// ifaceMAC is the MAC of the pod's eth0.
func ifaceMAC(t *testing.T, ns string) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/sys/class/net/eth0/address").CombinedOutput()
	if err != nil {
		t.Fatalf("eth0 MAC in %s: %v %s", ns, err, out)
	}
	return strings.TrimSpace(string(out))
}

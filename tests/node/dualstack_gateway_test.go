package node_test

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// A dual-stack centralized subnet (gatewayNode "node-b,node-c") in a
// dual-stack cluster: its pod on node-a leaves through node-b in both
// families, masqueraded to node-b's 192.168.208.2 and fd00:208::2; with
// the controller down, stopping node-b's daemon moves both families to
// node-c (OVN's BFD, one gateway port with a transit network per family),
// and node-b leaves no return-path rule or route of either family behind.
// An IPv6-only centralized subnet is served too (it was refused before).
func TestDualStackCentralizedGatewayFailsOver(t *testing.T) {
	c := startClusterWith(t, clusterSpec{nodes: 3, dualStack: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, ns6 = "cgw6", "cgw6only"
	c.ensureNamespace(t, ns, nil)
	c.ensureNamespace(t, ns6, nil)
	for _, s := range []struct{ name, cidr, ns string }{
		{"central6", "10.80.0.0/16,fd00:10:80::/64", ns},
		{"central6only", "fd00:10:81::/64", ns6},
	} {
		if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": s.name},
			"spec": map[string]any{"cidrBlock": s.cidr, "gatewayType": "centralized", "gatewayNode": "node-b,node-c",
				"natOutgoing": true, "namespaces": []any{s.ns}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if cond := c.waitSubnetCondition(t, s.name, "GatewayReady", 60*time.Second); cond["status"] != "True" {
			t.Fatalf("Subnet %s (%s): GatewayReady %v, want True\n%s", s.name, s.cidr, cond, c.diag())
		}
	}
	sub, err := c.cp.dc.Resource(subnetsGVR).Get(ctx, "central6", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if a := sub.GetAnnotations(); !strings.HasPrefix(a[ovnnet.TransitAnnotation], "169.254.") || !strings.HasPrefix(a[ovnnet.TransitAnnotation6], "fd00:a9fe:4000::") {
		t.Fatalf("Subnet central6's transit annotations %v: want an IPv4 and an IPv6 transit network", a)
	}
	p := c.addPod(t, 0, ns, "leaver", nil, nil)
	if len(p.ips) != 2 || !strings.HasPrefix(p.ips[0], "10.80.") || !strings.HasPrefix(p.ips[1], "fd00:10:80::") {
		t.Fatalf("pod in namespace %s got %v, want one address of each of central6's CIDRs", ns, p.ips)
	}
	p6 := c.addPod(t, 0, ns6, "leaver6", nil, nil)
	if len(p6.ips) != 1 || !strings.HasPrefix(p6.ips[0], "fd00:10:81::") {
		t.Fatalf("pod in namespace %s got %v, want one address of fd00:10:81::/64", ns6, p6.ips)
	}
	v4 := c.world
	v6 := &outside{ns: c.world.ns, addr: "[fd00:207::1]:7000"}
	through := func(when string, node int) {
		t.Helper()
		want4, want6 := c.uplink4(node), c.uplink6(node)
		// The first packets may go while the router learns the gateway's MAC.
		for _, probe := range []struct {
			o    *outside
			p    *clusterPod
			want string
		}{{v4, p, want4}, {v6, p, want6}, {v6, p6, want6}} {
			if src, err := probe.o.sourceUntil(probe.p, probe.want, 30*time.Second); err != nil {
				t.Fatalf("%s: pod %s (%v) to %s: outside saw %q (%v), want %s's %s\n%s%s", when, probe.p.name, probe.p.ips, probe.o.addr,
					src, err, c.names[node], probe.want, c.diag(), gatewayState6(c, node))
			}
		}
	}
	through("pod on node-a, subnets centralized through node-b,node-c", 1)
	if got := c.activeGateway(t, "central6", "node-b", 30*time.Second); got != "node-b" {
		t.Fatalf("Subnet central6 status.activateGateway = %q, want node-b", got)
	}

	c.cp.stopController()
	t0 := time.Now()
	if code := c.nodes[1].Stop(); code != 0 {
		t.Fatalf("node-b's daemon exited %d on SIGTERM\n%s", code, c.nodes[1].LogTail())
	}
	for _, fam := range []string{"-4", "-6"} {
		rules, _ := exec.Command("ip", "-n", c.nodes[1].NS, fam, "rule", "show").CombinedOutput()
		routes, _ := exec.Command("ip", "-n", c.nodes[1].NS, fam, "route", "show", "table", "30264").CombinedOutput()
		if strings.Contains(string(rules), "10.80.0.0/16") || strings.Contains(string(rules), "fd00:10:8") || strings.TrimSpace(string(routes)) != "" {
			t.Errorf("node-b's daemon stopped, but its %s return path is still there:\n%s%s", fam, rules, routes)
		}
	}
	through("after node-b's daemon stopped (controller down)", 2)
	t.Logf("failover without the controller: both families through node-c %s after SIGTERM to node-b", time.Since(t0).Round(time.Millisecond))
	if got := c.activeGateway(t, "central6", "node-c", 30*time.Second); got != "node-c" {
		t.Fatalf("Subnet central6 status.activateGateway = %q after failover, want node-c", got)
	}
}

// uplink4 and uplink6 are node i's addresses on its link to the outside
// (cluster_fixture_test.go): what the outside sees of its masquerade.
func (c *cluster) uplink4(i int) string { return fmt.Sprintf("192.168.%d.2", 207+i) }
func (c *cluster) uplink6(i int) string { return fmt.Sprintf("fd00:%d::2", 207+i) }

// gatewayState6 is what a user looks at when a gateway node does not pass
// IPv6: its IPv6 rules, neighbours and forwarding, OVN's MAC bindings and
// the trace of the pod's packet through OVN.
func gatewayState6(c *cluster, node int) string {
	ns := c.nodes[node].NS
	var b strings.Builder
	for _, cmd := range [][]string{
		{"ip", "-n", ns, "-6", "rule"},
		{"ip", "-n", ns, "-6", "neigh"},
		{"ip", "netns", "exec", ns, "sysctl", "net.ipv6.conf.all.forwarding", "net.ipv6.conf.br-egw.disable_ipv6"},
		{"ovn-sbctl", "--db=" + c.cp.central.SB(), "list", "mac_binding"},
		{"ovn-sbctl", "--db=" + c.cp.central.SB(), "list", "port_binding", "cr-ovn-cluster-ovnhost-egw-central6"},
		{"ovn-nbctl", "--db=" + c.cp.central.NB(), "list", "logical_router_port", "ovn-cluster-ovnhost-egw-central6"},
	} {
		out, _ := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		b.WriteString("$ " + strings.Join(cmd, " ") + "\n" + string(out))
	}
	nb, sb := "--db="+c.cp.central.NB(), "--db="+c.cp.central.SB()
	addrs, _ := exec.Command("ovn-nbctl", nb, "lsp-get-addresses", "leaver.cgw6").CombinedOutput()
	rmac, _ := exec.Command("ovn-nbctl", nb, "get", "logical_router_port", "ovn-cluster-central6", "mac").CombinedOutput()
	f := strings.Fields(string(addrs))
	if len(f) >= 3 {
		flow := fmt.Sprintf(`inport=="leaver.cgw6" && eth.src==%s && eth.dst==%s && ip6.src==%s && ip6.dst==fd00:207::1 && ip.ttl==64 && tcp && tcp.dst==7000`,
			f[0], strings.Trim(strings.TrimSpace(string(rmac)), `"`), f[2])
		out, _ := exec.Command("ovn-trace", sb, "central6", flow).CombinedOutput()
		b.WriteString("$ ovn-trace " + flow + "\n" + string(out))
	}
	return b.String()
}

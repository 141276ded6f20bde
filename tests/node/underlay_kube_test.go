package node_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
)

var providerNetworkGVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "provider-networks"}

// A Kubernetes node takes its underlay networks from the ProviderNetwork
// objects that select it and reports each on its Node as Kube-OVN does: a
// ProviderNetwork created → eth1 bridged, labels ready=true, interface,
// mtu; the node excluded (excludeNodes) → eth1 given back as it was, the
// labels removed; a network naming a missing NIC → ready=false and the
// error annotation naming the interfaces there are; deleted → removed.
func TestUnderlayFromProviderNetworkObjects(t *testing.T) {
	c := startCluster(t, 1)
	n, name := c.nodes[0], c.names[0]
	gw := newUnderlayGateway(t, n.NS, "eth1", "192.168.213")
	before := clusterHostConfig(t, n.NS)
	ctx := context.Background()
	pns := c.cp.dc.Resource(providerNetworkGVR)
	create := func(pn string, spec map[string]any) {
		t.Helper()
		if _, err := pns.Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
			"metadata": map[string]any{"name": pn}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = pns.Delete(context.Background(), pn, metav1.DeleteOptions{}) })
	}

	create("physnet1", map[string]any{"defaultInterface": "eth1"})
	node := waitNode(t, c, name, "physnet1 ready=true", func(nd *corev1.Node) bool {
		return nd.Labels["physnet1.provider-network.kubernetes.io/ready"] == "true"
	})
	if got := node.Labels["physnet1.provider-network.kubernetes.io/interface"]; got != "eth1" {
		t.Errorf("interface label %q, want eth1", got)
	}
	if got := node.Labels["physnet1.provider-network.kubernetes.io/mtu"]; got != "1500" {
		t.Errorf("mtu label %q, want 1500", got)
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "addr", "show", "dev", "br-physnet1"); !strings.Contains(addrs, "192.168.213.2/24") {
		t.Fatalf("br-physnet1 lacks eth1's address:\n%s", addrs)
	}
	if err := ping(n.NS, "192.168.213.1", 3); err != nil {
		t.Fatalf("the host cannot reach its underlay gateway once bridged: %v", err)
	}

	// The node excluded: given back, labels gone.
	if _, err := pns.Patch(ctx, "physnet1", types.MergePatchType, []byte(`{"spec":{"excludeNodes":["`+name+`"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, c, name, "physnet1 labels removed", func(nd *corev1.Node) bool {
		for k := range nd.Labels {
			if strings.HasPrefix(k, "physnet1.provider-network.") {
				return false
			}
		}
		return true
	})
	if err := n.WaitLog("underlay: network no longer wanted on this node, given back", 10*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}
	if after := clusterHostConfig(t, n.NS); after != before {
		t.Errorf("the host after the exclusion is not as before:\n%s", lineDiff(before, after))
	}
	if links := run(t, "ip", "-n", n.NS, "-o", "link", "show"); strings.Contains(links, "br-physnet1") {
		t.Errorf("br-physnet1 left after the exclusion:\n%s", links)
	}

	// A missing NIC: not ready, and why.
	create("physnet2", map[string]any{"defaultInterface": "eth9"})
	node = waitNode(t, c, name, "physnet2 ready=false", func(nd *corev1.Node) bool {
		return nd.Labels["physnet2.provider-network.kubernetes.io/ready"] == "false"
	})
	if msg := node.Annotations["physnet2.provider-network.ovnhost.io/error"]; !strings.Contains(msg, "eth9 not found; this host has ") || !strings.Contains(msg, "eth1") {
		t.Errorf("error annotation %q does not name the missing NIC and the interfaces there are", msg)
	}
	if err := pns.Delete(ctx, "physnet2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNode(t, c, name, "physnet2 label and annotation removed", func(nd *corev1.Node) bool {
		_, l := nd.Labels["physnet2.provider-network.kubernetes.io/ready"]
		_, a := nd.Annotations["physnet2.provider-network.ovnhost.io/error"]
		return !l && !a
	})
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	_ = gw
}

// waitNode watches the Node until ok holds for it, and returns it.
func waitNode(t testing.TB, c *cluster, name, what string, ok func(*corev1.Node) bool) *corev1.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	nodes := c.cp.kc.CoreV1().Nodes()
	cur, err := nodes.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ok(cur) {
		return cur
	}
	w, err := nodes.Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: cur.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if nd, isNode := ev.Object.(*corev1.Node); isNode && ev.Type != watch.Deleted {
			cur = nd
			if ok(nd) {
				return nd
			}
		}
	}
	t.Fatalf("Node %s: no %s within 30s; labels %v, annotations %v\n%s", name, what, cur.Labels, cur.Annotations, c.nodes[0].LogTail())
	return nil
}

// clusterHostConfig is hostConfig on a cluster node, without the IPv6
// link-local routes of its tunnel and outside links (ul0, wan0, created
// before newUnderlayGateway turned them off: they come up as their
// duplicate address detection ends, whenever that is).
func clusterHostConfig(t *testing.T, ns string) string {
	var keep []string
	for _, l := range strings.SplitAfter(hostConfig(t, ns), "\n") {
		if strings.Contains(l, "fe80::") && (strings.Contains(l, "dev ul0") || strings.Contains(l, "dev wan0") || strings.Contains(l, "dev br-phy")) {
			continue
		}
		keep = append(keep, l)
	}
	return strings.Join(keep, "")
}

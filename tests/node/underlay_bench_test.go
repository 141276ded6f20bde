package node_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/physswitch"
)

// BenchmarkUnderlayCNIAdd: the time from a pod's creation in the API to
// its CNI ADD answering (the controller's annotations, the node's wiring,
// OVN's port up), for pods on an underlay VLAN Subnet against pods on the
// default overlay Subnet, interleaved on one node of a real cluster
// (userspace datapath; the physical switch is tests/harness/physswitch).
// Reports each median and p90 and the ratio of the medians (underlay /
// overlay: what a Kube-OVN user moving a workload to a VLAN pays per pod).
func BenchmarkUnderlayCNIAdd(b *testing.B) {
	const perKind = 30
	c := startCluster(b, 1)
	sw := physswitch.Start(b, newNetns(b, "ohs"))
	n := c.nodes[0]
	run(b, "ip", "link", "add", "eth1", "netns", n.NS, "type", "veth", "peer", "name", "na", "netns", sw.NS)
	run(b, "ip", "-n", n.NS, "link", "set", "eth1", "up")
	sw.Trunk(b, "na", 100)
	ctx := context.Background()
	apply := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		if _, err := c.cp.dc.Resource(gvr).Create(ctx, &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	apply(providerNetworkGVR, "ProviderNetwork", "physnet1", map[string]any{"defaultInterface": "eth1"})
	waitNode(b, c, c.names[0], "physnet1 ready=true", func(nd *corev1.Node) bool {
		return nd.Labels["physnet1.provider-network.kubernetes.io/ready"] == "true"
	})
	apply(vlanGVR, "Vlan", "vlan100", map[string]any{"id": int64(100), "provider": "physnet1"})
	c.ensureNamespace(b, "u100", nil)
	c.ensureNamespace(b, "ov", nil)
	apply(subnetGVR, "Subnet", "sub100", map[string]any{"protocol": "IPv4", "cidrBlock": "10.100.0.0/24", "gateway": "10.100.0.254",
		"excludeIps": []any{"10.100.0.254"}, "vlan": "vlan100", "namespaces": []any{"u100"}})
	// One pod of each first: the Subnet is programmed and nothing is cold.
	c.addPod(b, 0, "u100", "warm-u", nil, nil)
	c.addPod(b, 0, "ov", "warm-o", nil, nil)

	var underlay, overlay []time.Duration
	b.ResetTimer()
	for i := 0; i < perKind; i++ {
		for _, k := range []struct {
			ns  string
			out *[]time.Duration
		}{{"u100", &underlay}, {"ov", &overlay}} {
			t0 := time.Now()
			c.addPod(b, 0, k.ns, fmt.Sprintf("p%d", i), nil, nil)
			*k.out = append(*k.out, time.Since(t0))
		}
	}
	b.StopTimer()
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[int(p*float64(len(s)-1))].Microseconds()) / 1000
	}
	um, om := q(underlay, 0.5), q(overlay, 0.5)
	b.ReportMetric(um, "underlay-p50-ms")
	b.ReportMetric(om, "overlay-p50-ms")
	b.ReportMetric(um/om, "underlay/overlay-p50")
	b.Logf("pod created -> CNI ADD answered, %d pods each, interleaved, one node, userspace datapath:", perKind)
	b.Logf("  underlay (VLAN 100 on physnet1) p50 %.1f ms p90 %.1f ms | overlay p50 %.1f ms p90 %.1f ms | p50 ratio %.2fx",
		um, q(underlay, 0.9), om, q(overlay, 0.9), um/om)
	benchresult.Figure(b, fmt.Sprintf("underlay pod (VLAN 100 on physnet1) created to CNI ADD answered, p50 of %d", perKind), um, "ms").
		Against("overlay pods, interleaved", om).
		Note("p90 %.1f ms against %.1f ms", q(underlay, 0.9), q(overlay, 0.9)).Report()
}

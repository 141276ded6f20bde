package podsource

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// subnet is a Subnet object as the controller leaves it: spec, the
// Validated condition, and the transit annotation of centralized ones.
func subnet(name string, validated bool, spec map[string]any, ann map[string]string) *unstructured.Unstructured {
	status := "False"
	if validated {
		status = "True"
	}
	meta := map[string]any{"name": name}
	if ann != nil {
		m := map[string]any{}
		for k, v := range ann {
			m[k] = v
		}
		meta["annotations"] = m
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": meta, "spec": spec,
		"status": map[string]any{"conditions": []any{map[string]any{"type": "Validated", "status": status}}},
	}}
}

func withSubnets(t *testing.T, node string, subnets ...*unstructured.Unstructured) *Kube {
	t.Helper()
	k := NewKube(nil, nil, KubeOptions{Node: node, Log: slog.Default()})
	k.subnets = cache.NewSharedIndexInformer(&cache.ListWatch{}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	for _, u := range subnets {
		if err := k.subnets.GetStore().Add(u); err != nil {
			t.Fatal(err)
		}
	}
	return k
}

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// The egress plan is read from validated Subnets only: their CIDRs are the
// cluster's, the natOutgoing ones are masqueraded, and a centralized
// subnet naming this node in gatewayNode (with the controller's transit
// annotation) makes this node one of its gateways, in the families the
// controller gave transit networks for.
func TestEgressPlanFromValidatedSubnets(t *testing.T) {
	transit := map[string]string{ovnnet.TransitAnnotation: "172.31.0.0/30"}
	transit46 := map[string]string{ovnnet.TransitAnnotation: "169.254.64.5/30", ovnnet.TransitAnnotation6: "fd00:a9fe:4000::5/126"}
	transit6 := map[string]string{ovnnet.TransitAnnotation6: "fd00:a9fe:4000::9/126"}
	k := withSubnets(t, "n1",
		subnet("ovn-default", true, map[string]any{"cidrBlock": "10.16.0.0/16", "natOutgoing": true}, nil),
		subnet("join", true, map[string]any{"cidrBlock": "100.64.0.0/16"}, nil),
		subnet("no-nat", true, map[string]any{"cidrBlock": "10.20.0.0/16,fd00:20::/64"}, nil),
		subnet("forged", false, map[string]any{"cidrBlock": "10.30.0.0/16", "natOutgoing": true}, nil),
		subnet("central", true, map[string]any{"cidrBlock": "10.40.0.0/24,fd00:40::/64", "natOutgoing": true,
			"gatewayType": "centralized", "gatewayNode": "n0,n1:192.0.2.9"}, transit),
		subnet("central-elsewhere", true, map[string]any{"cidrBlock": "10.41.0.0/24",
			"gatewayType": "centralized", "gatewayNode": "n0"}, transit),
		subnet("central-unprogrammed", true, map[string]any{"cidrBlock": "10.42.0.0/24",
			"gatewayType": "centralized", "gatewayNode": "n1"}, nil),
		subnet("central-dual", true, map[string]any{"cidrBlock": "10.43.0.0/24,fd00:43::/64",
			"gatewayType": "centralized", "gatewayNode": "n1"}, transit46),
		subnet("central-v6", true, map[string]any{"cidrBlock": "fd00:44::/64",
			"gatewayType": "centralized", "gatewayNode": "n1"}, transit6),
	)
	plan := k.egressPlan(prefixes("100.64.0.0/16"))
	wantCluster := prefixes("10.16.0.0/16", "10.20.0.0/16", "10.40.0.0/24", "10.41.0.0/24", "10.42.0.0/24", "10.43.0.0/24",
		"10.96.0.0/12", "100.64.0.0/16", "100.64.0.0/16", "fd00:20::/64", "fd00:40::/64", "fd00:43::/64", "fd00:44::/64")
	if !slices.Equal(plan.Cluster, wantCluster) {
		t.Errorf("cluster %v, want %v", plan.Cluster, wantCluster)
	}
	if want := prefixes("10.16.0.0/16", "10.40.0.0/24", "fd00:40::/64"); !slices.Equal(plan.NATOutgoing, want) {
		t.Errorf("natOutgoing %v, want %v", plan.NATOutgoing, want)
	}
	// central's controller gave an IPv4 transit network only (as one
	// before IPv6 gateways did): its IPv6 CIDR is not served by this node.
	want := []GatewayPlan{
		{Subnet: "central", CIDRs: prefixes("10.40.0.0/24"), Transit: ovnnet.Transit{V4: netip.MustParsePrefix("172.31.0.0/30")},
			EgressIP: netip.MustParseAddr("192.0.2.9"), NATOutgoing: true},
		{Subnet: "central-dual", CIDRs: prefixes("10.43.0.0/24", "fd00:43::/64"),
			Transit: ovnnet.Transit{V4: netip.MustParsePrefix("169.254.64.5/30"), V6: netip.MustParsePrefix("fd00:a9fe:4000::5/126")}},
		{Subnet: "central-v6", CIDRs: prefixes("fd00:44::/64"), Transit: ovnnet.Transit{V6: netip.MustParsePrefix("fd00:a9fe:4000::9/126")}},
	}
	if !slices.EqualFunc(plan.Gateways, want, gatewayEqual) {
		t.Errorf("gateways %+v, want %+v", plan.Gateways, want)
	}
	// Without a Subnet informer the source does not say: the host's NAT is
	// left alone.
	if p := NewKube(nil, nil, KubeOptions{Node: "n1"}).egressPlan(nil); p != nil {
		t.Errorf("plan without Subnets: %+v", p)
	}
}

func gatewayEqual(a, b GatewayPlan) bool {
	return a.Subnet == b.Subnet && slices.Equal(a.CIDRs, b.CIDRs) && a.Transit == b.Transit && a.EgressIP == b.EgressIP && a.NATOutgoing == b.NATOutgoing
}

func TestNodeAnnotations(t *testing.T) {
	ann := map[string]string{annotations.IPAddress: "100.64.0.2", annotations.CIDR: "100.64.0.0/16", annotations.Gateway: "100.64.0.1",
		annotations.MACAddress: "0a:58:64:40:00:02", annotations.PortName: "node-n1"}
	nn, err := parseNodeAnnotations(ann)
	if err != nil || nn.PortName != "node-n1" || fmt.Sprint(nn.Addrs) != "[100.64.0.2/16]" || fmt.Sprint(nn.Gateways) != "[100.64.0.1]" || nn.MAC.String() != "0a:58:64:40:00:02" {
		t.Fatalf("%+v %v", nn, err)
	}
	for _, k := range []string{annotations.IPAddress, annotations.CIDR, annotations.Gateway, annotations.MACAddress, annotations.PortName} {
		bad := map[string]string{}
		for kk, v := range ann {
			if kk != k {
				bad[kk] = v
			}
		}
		if _, err := parseNodeAnnotations(bad); err == nil {
			t.Errorf("without %s: accepted", k)
		}
	}
}

// A dual-stack join subnet: ovn0 gets an address and a gateway in each
// family; lists that do not pair up are refused.
func TestDualStackNodeAnnotations(t *testing.T) {
	ann := map[string]string{annotations.IPAddress: "100.64.0.2,fd00:100:64::2", annotations.CIDR: "100.64.0.0/16,fd00:100:64::/112",
		annotations.Gateway: "100.64.0.1,fd00:100:64::1", annotations.MACAddress: "0a:58:64:40:00:02", annotations.PortName: "node-n1"}
	nn, err := parseNodeAnnotations(ann)
	if err != nil || fmt.Sprint(nn.Addrs) != "[100.64.0.2/16 fd00:100:64::2/112]" || fmt.Sprint(nn.Gateways) != "[100.64.0.1 fd00:100:64::1]" ||
		fmt.Sprint(nn.Joins()) != "[100.64.0.0/16 fd00:100:64::/112]" {
		t.Fatalf("%+v %v", nn, err)
	}
	if gw, ok := nn.GatewayOf(netip.MustParsePrefix("fd00:10:16::/64")); !ok || gw.String() != "fd00:100:64::1" {
		t.Errorf("IPv6 gateway: %v %v", gw, ok)
	}
	v4 := &NodeNetwork{Addrs: nn.Addrs[:1], Gateways: nn.Gateways[:1]}
	if _, ok := v4.GatewayOf(netip.MustParsePrefix("fd00:10:16::/64")); ok {
		t.Error("an IPv4 join subnet has an IPv6 gateway")
	}
	for _, bad := range []map[string]string{
		{annotations.IPAddress: "100.64.0.2", annotations.CIDR: "100.64.0.0/16,fd00:100:64::/112", annotations.Gateway: "100.64.0.1,fd00:100:64::1"},
		{annotations.IPAddress: "100.64.0.2,fd00:100:64::2", annotations.CIDR: "fd00:100:64::/112,100.64.0.0/16", annotations.Gateway: "100.64.0.1,fd00:100:64::1"},
		{annotations.IPAddress: "100.64.0.2,100.64.0.3", annotations.CIDR: "100.64.0.0/16,100.64.0.0/16", annotations.Gateway: "100.64.0.1,100.64.0.1"},
	} {
		bad[annotations.MACAddress], bad[annotations.PortName] = "0a:58:64:40:00:02", "node-n1"
		if nn, err := parseNodeAnnotations(bad); err == nil {
			t.Errorf("%v: accepted as %+v", bad, nn)
		}
	}
}

// Through the informers: the node's network once annotated, a signal when
// the node changes, the rates of a known pod.
func TestKubeNodeNetworkWatchAndRates(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns",
		Annotations: map[string]string{annotations.IngressRate: "10", annotations.EgressRate: "3"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "ns",
		Annotations: map[string]string{annotations.IngressRate: "fast"}}, Spec: corev1.PodSpec{NodeName: "n1"}}
	cs := fake.NewSimpleClientset(node, pod, bad)
	k := NewKube(cs, nil, KubeOptions{Node: "n1", Log: slog.Default()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := k.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer k.Stop()
	if err := k.WaitSynced(ctx); err != nil {
		t.Fatal(err)
	}
	if r, ok, err := k.PodRates("ns/p"); !ok || err != nil || r != (Rates{10, 3}) {
		t.Errorf("rates of ns/p: %+v %v %v", r, ok, err)
	}
	if _, ok, err := k.PodRates("ns/bad"); !ok || err == nil || !strings.Contains(err.Error(), annotations.IngressRate) {
		t.Errorf("rates of ns/bad: %v %v", ok, err)
	}
	if _, ok, _ := k.PodRates("ns/unknown"); ok {
		t.Error("an unknown pod has rates")
	}
	nodeChanged, _, stop := k.WatchNode()
	defer stop()
	// Not annotated yet: NodeNetwork waits until its context ends.
	short, scancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := k.NodeNetwork(short)
	scancel()
	if err == nil || !strings.Contains(err.Error(), "node n1 has no complete") {
		t.Fatalf("unannotated node: %v", err)
	}
	node.Annotations = map[string]string{annotations.IPAddress: "100.64.0.2", annotations.CIDR: "100.64.0.0/16", annotations.Gateway: "100.64.0.1",
		annotations.MACAddress: "0a:58:64:40:00:02", annotations.PortName: "node-n1"}
	if _, err := cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-nodeChanged:
	case <-ctx.Done():
		t.Fatal("no signal for the node's update")
	}
	nn, err := k.NodeNetwork(ctx)
	if err != nil || nn.PortName != "node-n1" || fmt.Sprint(nn.Addrs) != "[100.64.0.2/16]" || nn.PodCIDRs != nil || nn.Egress != nil {
		t.Fatalf("node network %+v %v (no Subnet informer: no routes, no egress plan)", nn, err)
	}
}

// Underlay subnets with a physical gateway are outside the host's egress
// plan (their pods never cross the host; overlay pods reach them as the
// outside, masqueraded); an interconnected one is a cluster CIDR but its
// natOutgoing is not the host's; one with a logical gateway is an
// overlay subnet for egress.
func TestEgressPlanLeavesPhysicalUnderlaySubnetsOut(t *testing.T) {
	k := withSubnets(t, "n1",
		subnet("ovn-default", true, map[string]any{"cidrBlock": "10.16.0.0/16", "natOutgoing": true}, nil),
		subnet("vlan-phys", true, map[string]any{"cidrBlock": "10.100.0.0/24", "vlan": "v100", "natOutgoing": true}, nil),
		subnet("vlan-u2o", true, map[string]any{"cidrBlock": "10.101.0.0/24", "vlan": "v101", "natOutgoing": true, "u2oInterconnection": true}, nil),
		subnet("vlan-logical", true, map[string]any{"cidrBlock": "10.102.0.0/24", "vlan": "v102", "natOutgoing": true, "logicalGateway": true}, nil),
	)
	plan := k.egressPlan(prefixes("100.64.0.0/16"))
	if want := prefixes("10.101.0.0/24", "10.102.0.0/24", "10.16.0.0/16", "10.96.0.0/12", "100.64.0.0/16"); !slices.Equal(plan.Cluster, want) {
		t.Errorf("cluster %v, want %v", plan.Cluster, want)
	}
	if want := prefixes("10.102.0.0/24", "10.16.0.0/16"); !slices.Equal(plan.NATOutgoing, want) {
		t.Errorf("natOutgoing %v, want %v", plan.NATOutgoing, want)
	}
}

// An interconnected underlay pod's gateway is the router's address from
// the Subnet's status (not the annotation's physical gateway, which is
// still checked against spec.gateway); without that status it waits.
func TestInterconnectedUnderlayPodsGetTheRoutersAddress(t *testing.T) {
	spec := map[string]any{"cidrBlock": "10.100.0.0/24", "gateway": "10.100.0.254", "vlan": "v100", "u2oInterconnection": true}
	u := subnet("sub100", true, spec, nil)
	pending := withSubnets(t, "n1", u.DeepCopy())
	_ = unstructured.SetNestedField(u.Object, "10.100.0.3", "status", "u2oInterconnectionIP")
	k := withSubnets(t, "n1", u)
	pod := PodRef{Namespace: "u100", Name: "c100"}
	network := func() *PodNetwork {
		return &PodNetwork{Switch: "sub100", Addrs: prefixes("10.100.0.4/24"), Gateways: []netip.Addr{netip.MustParseAddr("10.100.0.254")}}
	}
	n := network()
	if wait, mm := k.checkAgainstSubnet(pod, nil, n); wait != "" || mm != nil {
		t.Fatalf("refused or waiting: %q %v", wait, mm)
	}
	if want := []netip.Addr{netip.MustParseAddr("10.100.0.3")}; !slices.Equal(n.Gateways, want) {
		t.Errorf("gateways %v, want the interconnection address %v", n.Gateways, want)
	}
	if wait, _ := pending.checkAgainstSubnet(pod, nil, network()); !strings.Contains(wait, "no u2oInterconnectionIP") {
		t.Errorf("without the status address: waits for %q", wait)
	}
	bad := network()
	bad.Gateways = []netip.Addr{netip.MustParseAddr("10.100.0.3")} // a forged annotation naming the router's address
	if _, mm := k.checkAgainstSubnet(pod, nil, bad); mm == nil || mm.Field != annotations.Gateway {
		t.Errorf("a gateway annotation other than spec.gateway accepted: %v", mm)
	}
}

// A dual-stack cluster's Service ranges (SVC_CIDR) are cluster
// destinations in both families: the node never masquerades pod traffic
// to them, and its IPv6 natOutgoing prefixes are in the plan.
func TestEgressPlanUsesTheClustersServiceCIDRs(t *testing.T) {
	k := withSubnets(t, "n1",
		subnet("ovn-default", true, map[string]any{"cidrBlock": "10.16.0.0/16,fd00:10:16::/64", "natOutgoing": true}, nil))
	k.serviceCIDRs = prefixes("10.96.0.0/12", "fd00:10:96::/112")
	plan := k.egressPlan(prefixes("100.64.0.0/16", "fd00:100:64::/112"))
	if want := prefixes("10.16.0.0/16", "10.96.0.0/12", "100.64.0.0/16", "fd00:100:64::/112", "fd00:10:16::/64", "fd00:10:96::/112"); !slices.Equal(plan.Cluster, want) {
		t.Errorf("cluster %v, want %v", plan.Cluster, want)
	}
	if want := prefixes("10.16.0.0/16", "fd00:10:16::/64"); !slices.Equal(plan.NATOutgoing, want) {
		t.Errorf("natOutgoing %v, want %v", plan.NATOutgoing, want)
	}
}

// A custom VPC's Subnets are another address space: not the cluster's,
// never masqueraded by the host, not routed through ovn0 (even when they
// overlap the default VPC's and ask for natOutgoing).
func TestEgressPlanLeavesCustomVpcSubnetsOut(t *testing.T) {
	k := withSubnets(t, "n1",
		subnet("ovn-default", true, map[string]any{"cidrBlock": "10.16.0.0/16", "natOutgoing": true}, nil),
		subnet("named-default", true, map[string]any{"cidrBlock": "10.17.0.0/16", "vpc": "ovn-cluster"}, nil),
		subnet("vpc-a-net", true, map[string]any{"cidrBlock": "10.16.0.0/24", "vpc": "vpc-a", "natOutgoing": true}, nil),
		subnet("vpc-b-net", true, map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-b"}, nil),
	)
	plan := k.egressPlan(prefixes("100.64.0.0/16"))
	if want := prefixes("10.16.0.0/16", "10.17.0.0/16", "10.96.0.0/12", "100.64.0.0/16"); !slices.Equal(plan.Cluster, want) {
		t.Errorf("cluster %v, want %v", plan.Cluster, want)
	}
	if want := prefixes("10.16.0.0/16"); !slices.Equal(plan.NATOutgoing, want) {
		t.Errorf("natOutgoing %v, want %v", plan.NATOutgoing, want)
	}
	if got, want := k.routedCIDRs(prefixes("100.64.0.0/16")), prefixes("10.16.0.0/16", "10.17.0.0/16"); !slices.Equal(got, want) {
		t.Errorf("routed through ovn0 %v, want %v", got, want)
	}
}

package pods

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// Issue 23, item 1: a tenant's pod cannot join another tenant's Subnet.

func namespace(name string, lbls, ann map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls, Annotations: ann}}
}

// eventLog keeps every event recorded, so that events can be awaited in
// any order.
type eventLog struct {
	f    *fixture
	seen []string
}

// await waits for an event starting with prefix that contains every one of
// parts (seen before or recorded later).
func (l *eventLog) await(t *testing.T, prefix string, parts ...string) string {
	t.Helper()
	match := func(ev string) bool {
		if !strings.HasPrefix(ev, prefix) {
			return false
		}
		for _, p := range parts {
			if !strings.Contains(ev, p) {
				return false
			}
		}
		return true
	}
	for _, ev := range l.seen {
		if match(ev) {
			return ev
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-l.f.Recorder.Events:
			l.seen = append(l.seen, ev)
			if match(ev) {
				return ev
			}
		case <-deadline:
			t.Fatalf("no event %q with %q; events seen:\n%s", prefix, parts, strings.Join(l.seen, "\n"))
			return ""
		}
	}
}

// awaitEventWith is eventLog.await on a log of its own (events that do not
// match are dropped).
func (f *fixture) awaitEventWith(t *testing.T, prefix string, parts ...string) string {
	t.Helper()
	return (&eventLog{f: f}).await(t, prefix, parts...)
}

// refusedOutOf asserts what a refused pod has: no logical switch port, no
// address, and the subnet holds only the owners listed.
func (f *fixture) refusedOutOf(t *testing.T, ns, name, subnet string, owners ...string) {
	t.Helper()
	if p, ok, err := f.NB.GetPort(f.Ctx, ovnnet.PortName(ns, name)); err != nil || ok {
		t.Fatalf("refused pod %s/%s has a logical switch port: %+v (%v)", ns, name, p, err)
	}
	if a, held := f.Net.IPAM.Lookup(ovnnet.PodOwner(ns, name)); held {
		t.Fatalf("refused pod %s/%s holds an address: %+v", ns, name, a)
	}
	if got := f.Net.IPAM.OwnersIn(subnet); !slices.Equal(got, owners) {
		t.Fatalf("subnet %s is held by %v, want %v", subnet, got, owners)
	}
}

func TestPodCannotJoinAnotherTenantsSubnetByAnnotation(t *testing.T) {
	typed := []runtime.Object{node("n1", "192.168.0.11"),
		namespace("tenant-a", nil, nil), namespace("evil", nil, nil), namespace("evil-pool", nil, nil),
		// The namespace's annotation is refused as well (an admin's slip, or a
		// namespace annotated by a tool the tenant drives).
		namespace("evil-ns", nil, map[string]string{annotations.LogicalSwitch: "a-net"}),
		pod("evil", "intruder", "n1", map[string]string{annotations.LogicalSwitch: "a-net", annotations.IPAddress: "10.70.0.10"}),
		pod("evil-pool", "pooled", "n1", map[string]string{annotations.LogicalSwitch: "a-net", annotations.IPPool: "10.70.0.11,10.70.0.12"}),
		pod("evil-ns", "follower", "n1", nil),
		// The tenant's own pod, by annotation and by binding.
		pod("tenant-a", "web", "n1", map[string]string{annotations.LogicalSwitch: "a-net"}),
		pod("tenant-a", "db", "n1", nil),
	}
	f := start(t, typed, ctltest.Subnet("a-net", map[string]any{"cidrBlock": "10.70.0.0/24", "private": true, "namespaces": []any{"tenant-a"}}))

	events := &eventLog{f: f}
	ev := events.await(t, "Warning SubnetNotAllowed", `namespace "evil"`)
	for _, want := range []string{`subnet "a-net"`, "spec.namespaces [tenant-a]", "the pod's ovn.kubernetes.io/logical_switch annotation",
		"the pod gets no address in it", "remove that ovn.kubernetes.io/logical_switch annotation", `an admin adds "evil" to the Subnet's spec.namespaces`} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q does not say %q", ev, want)
		}
	}
	events.await(t, "Warning SubnetNotAllowed", `namespace "evil-pool"`, `subnet "a-net"`)
	ev = events.await(t, "Warning SubnetNotAllowed", `namespace "evil-ns"`, `subnet "a-net"`)
	if !strings.Contains(ev, `namespace "evil-ns"'s ovn.kubernetes.io/logical_switch annotation`) {
		t.Errorf("event %q does not name the namespace's annotation as the chooser", ev)
	}

	for _, ok := range []string{"tenant-a/web", "tenant-a/db"} {
		p := f.awaitPod(t, ok, allocated)
		if p.Annotations[annotations.LogicalSwitch] != "a-net" || !strings.HasPrefix(p.Annotations[annotations.IPAddress], "10.70.0.") {
			t.Fatalf("%s, of the Subnet's own namespace: %v", ok, p.Annotations)
		}
	}
	f.refusedOutOf(t, "evil", "intruder", "a-net", "tenant-a/db", "tenant-a/web")
	f.refusedOutOf(t, "evil-pool", "pooled", "a-net", "tenant-a/db", "tenant-a/web")
	f.refusedOutOf(t, "evil-ns", "follower", "a-net", "tenant-a/db", "tenant-a/web")
	for _, k := range []string{"evil/intruder", "evil-pool/pooled", "evil-ns/follower"} {
		if p := f.awaitPod(t, k, func(*corev1.Pod) bool { return true }); allocated(p) {
			t.Fatalf("refused pod %s annotated as allocated: %v", k, p.Annotations)
		}
	}
}

func TestUnboundSubnetStaysOpenToAnnotations(t *testing.T) {
	// Kube-OVN's behaviour, kept: a Subnet bound to no namespace takes any
	// pod that names it (docs: an admin binds a Subnet to protect it).
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), namespace("other", nil, nil),
		pod("other", "p", "n1", map[string]string{annotations.LogicalSwitch: "open"})},
		ctltest.Subnet("open", map[string]any{"cidrBlock": "10.72.0.0/24"}))
	p := f.awaitPod(t, "other/p", allocated)
	if p.Annotations[annotations.LogicalSwitch] != "open" {
		t.Fatalf("annotations %v", p.Annotations)
	}
}

func TestNamespaceSelectorBindingFollowsTheNamespacesLabels(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"),
		namespace("blue", map[string]string{"team": "blue"}, nil), namespace("red", map[string]string{"team": "red"}, nil),
		pod("blue", "app", "n1", nil),
		pod("red", "x", "n1", map[string]string{annotations.LogicalSwitch: "blue-net"})},
		ctltest.Subnet("blue-net", map[string]any{"cidrBlock": "10.71.0.0/24",
			"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"team": "blue"}}}}))
	p := f.awaitPod(t, "blue/app", allocated)
	ip := p.Annotations[annotations.IPAddress]
	if p.Annotations[annotations.LogicalSwitch] != "blue-net" || !strings.HasPrefix(ip, "10.71.0.") {
		t.Fatalf("blue/app: %v", p.Annotations)
	}
	ev := f.awaitEventWith(t, "Warning SubnetNotAllowed", `namespace "red"`, `subnet "blue-net"`)
	if !strings.Contains(ev, "spec.namespaceSelectors [team=blue]") {
		t.Fatalf("event %q does not name the selector", ev)
	}
	f.refusedOutOf(t, "red", "x", "blue-net", "blue/app")

	// Decision: the binding holds at all times. The namespace no longer
	// matches: its pod loses its port and address in the Subnet, told by an event.
	relabel := func(team string) {
		t.Helper()
		ns, err := f.Kube.CoreV1().Namespaces().Get(f.Ctx, "blue", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ns.Labels["team"] = team
		if _, err := f.Kube.CoreV1().Namespaces().Update(f.Ctx, ns, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	relabel("green")
	ev = f.awaitEventWith(t, "Warning SubnetNotAllowed", `namespace "blue"`, `subnet "blue-net"`)
	if !strings.Contains(ev, "the port and address the pod had there were removed") {
		t.Fatalf("event %q does not say the pod lost its port", ev)
	}
	f.refusedOutOf(t, "blue", "app", "blue-net")

	// Matching again: the pod gets its recorded address back.
	relabel("blue")
	f.AwaitNB("blue/app's port back", func() bool {
		port, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("blue", "app"))
		return ok && port.Switch == "blue-net" && len(port.IPs) == 1 && port.IPs[0] == netip.MustParseAddr(ip)
	})
}

func TestSubnetDroppingANamespaceRemovesItsPods(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), namespace("a", nil, nil), namespace("b", nil, nil),
		pod("a", "p", "n1", nil), pod("b", "q", "n1", nil)},
		ctltest.Subnet("shared", map[string]any{"cidrBlock": "10.73.0.0/24", "namespaces": []any{"a", "b"}}))
	f.awaitPod(t, "a/p", allocated)
	f.awaitPod(t, "b/q", allocated)
	u, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Get(f.Ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["namespaces"] = []any{"a"}
	u.SetGeneration(2)
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Update(f.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := f.awaitEventWith(t, "Warning SubnetNotAllowed", `namespace "b"`, `subnet "shared"`, "spec.namespaces [a]")
	if !strings.Contains(ev, "were removed") {
		t.Fatalf("event %q", ev)
	}
	f.refusedOutOf(t, "b", "q", "shared", "a/p")
}

func TestRestartDoesNotKeepAForgedAddressInABoundSubnet(t *testing.T) {
	// The pod's author wrote the controller's annotations himself: Rebuild
	// re-claims them, the pod's sync must give them up.
	forged := map[string]string{annotations.Allocated: "true", annotations.IPAddress: "10.70.0.20", annotations.MACAddress: "0a:58:0a:46:00:14",
		annotations.LogicalSwitch: "a-net"}
	f := setUp(t, []runtime.Object{node("n1", "192.168.0.11"), namespace("tenant-a", nil, nil), namespace("evil", nil, nil),
		pod("evil", "forger", "n1", forged)},
		ctltest.Subnet("a-net", map[string]any{"cidrBlock": "10.70.0.0/24", "namespaces": []any{"tenant-a"}}))
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.run()
	f.awaitEventWith(t, "Warning SubnetNotAllowed", `namespace "evil"`, `subnet "a-net"`)
	f.refusedOutOf(t, "evil", "forger", "a-net")
}

// Low item: router port and node MACs are reserved.

func TestPodCannotTakeItsGatewaysMAC(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11")})
	lrp := &nbdb.LogicalRouterPort{Name: ovnnb.RouterPortName(ovnnet.DefaultRouter, ovnnet.DefaultSubnet)}
	if err := f.NB.Raw().Get(f.Ctx, lrp); err != nil || lrp.MAC == "" {
		t.Fatalf("router port of ovn-default: %+v %v", lrp, err)
	}
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, pod("default", "spoof", "n1", map[string]string{annotations.MACAddress: strings.ToUpper(lrp.MAC)}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ev := f.awaitEventWith(t, "Warning MACConflict", lrp.MAC)
	for _, want := range []string{"router port ovn-cluster-ovn-default", "the gateway of subnet ovn-default", "remove the mac_address annotation"} {
		if !strings.Contains(ev, want) {
			t.Errorf("event %q does not say %q", ev, want)
		}
	}
	if _, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", "spoof")); ok {
		t.Fatal("the pod got a port with its gateway's MAC")
	}
	if a, held := f.Net.IPAM.Lookup(ovnnet.PodOwner("default", "spoof")); held {
		t.Fatalf("the pod holds %+v", a)
	}
}

func TestPodCannotTakeANodesMAC(t *testing.T) {
	// At start-up the pod's annotations come first in no order that lets
	// it: a pod older than the node that records the node's MAC as its own
	// is re-addressed, the node keeps its MAC.
	const nodeMAC = "0a:58:64:40:00:02"
	n1 := node("n1", "192.168.0.11")
	n1.Annotations = map[string]string{annotations.IPAddress: "100.64.0.2", annotations.MACAddress: nodeMAC}
	forged := map[string]string{annotations.Allocated: "true", annotations.IPAddress: "10.16.0.50", annotations.MACAddress: nodeMAC,
		annotations.LogicalSwitch: "ovn-default"}
	f := setUp(t, []runtime.Object{n1, pod("default", "early", "n1", forged)})
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	if a, ok := f.Net.IPAM.Lookup(ovnnet.NodeOwner("n1")); !ok || a.MAC != nodeMAC {
		t.Fatalf("node n1 after Rebuild: %+v %v, want its MAC %s", a, ok, nodeMAC)
	}
	f.run()
	f.awaitEventWith(t, "Warning AddressReassigned", "node:n1")
	p := f.awaitPod(t, "default/early", func(p *corev1.Pod) bool { return allocated(p) && p.Annotations[annotations.MACAddress] != nodeMAC })
	if port, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", "early")); !ok || port.MAC == nodeMAC {
		t.Fatalf("pod port %+v %v (pod %v)", port, ok, p.Annotations)
	}
	// A new pod asking for it is refused.
	if _, err := f.Kube.CoreV1().Pods("default").Create(f.Ctx, pod("default", "late", "n1", map[string]string{annotations.MACAddress: nodeMAC}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitEventWith(t, "Warning MACConflict", nodeMAC, "node:n1")
	if _, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", "late")); ok {
		t.Fatal("the pod got a port with a node's MAC")
	}
}

package pods

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// The Kubernetes side is client-go's fake clientsets (no apiserver in a
// unit test; tests/controller runs the real one), the OVN side libovsdb's
// in-memory NB. The subnet reconciler is the real one; the centralized
// gateways and IP objects are stand-ins (they have their own tests).

type noGateways struct{}

func (noGateways) Condition(string) *kubeovnv1.Condition { return nil }
func (noGateways) Queue(string)                          {}
func (noGateways) Remove(context.Context, string) error  { return nil }

// ipsStandIn records the IP objects asked for; the pod and node
// reconcilers ask after each change, so a test waits on it for a change to
// be done.
type ipsStandIn struct {
	mu      sync.Mutex
	queued  []string
	changed chan struct{}
}

func (i *ipsStandIn) Queue(key string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.queued = append(i.queued, key)
	select {
	case i.changed <- struct{}{}:
	default:
	}
}

func (i *ipsStandIn) count(key string) int {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := 0
	for _, k := range i.queued {
		if k == key {
			n++
		}
	}
	return n
}

func (i *ipsStandIn) has(key string) bool { return i.count(key) > 0 }

// until waits until ok, looking again after each IP object asked for.
func (i *ipsStandIn) until(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !ok() {
		select {
		case <-i.changed:
		case <-deadline:
			t.Fatalf("never: %s", what)
		}
	}
}

type fixture struct {
	*ctltest.Env
	r       *Reconciler
	subnets *subnets.Reconciler
	ips     *ipsStandIn
}

var defaultSubnets = []runtime.Object{
	ctltest.Subnet("join", map[string]any{"cidrBlock": "100.64.0.0/16"}),
	ctltest.Subnet("ovn-default", map[string]any{"cidrBlock": "10.16.0.0/16", "default": true}),
}

func node(name, ip string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}
}

func pod(ns, name, node string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Annotations: ann,
		CreationTimestamp: metav1.NewTime(time.Unix(1700000000, 0))},
		Spec: corev1.PodSpec{NodeName: node}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// setUp builds the reconcilers and runs start-up as the assembly does,
// without starting the workers.
func setUp(t *testing.T, typed []runtime.Object, custom ...runtime.Object) *fixture {
	t.Helper()
	return setUpWith(t, nil, typed, custom...)
}

// setUpWith is setUp with NetworkAttachmentDefinitions (nil: no NAD CRD).
func setUpWith(t *testing.T, nads NADs, typed []runtime.Object, custom ...runtime.Object) *fixture {
	t.Helper()
	e := ctltest.New(t, typed, append(slices.Clone(defaultSubnets), custom...)...)
	sr, err := subnets.New(subnets.Config{Log: e.Log, Recorder: e.Recorder, Dynamic: e.Dynamic, Informers: e.DInformers, Net: e.Net,
		IPAM: e.Net.IPAM, Registry: prometheus.NewRegistry(), StatusDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, subnets: sr, ips: &ipsStandIn{changed: make(chan struct{}, 1)}}
	f.r, err = New(Config{Log: e.Log, Kube: e.Kube, Recorder: e.Recorder, Informers: e.Informers, Net: e.Net, IPAM: e.Net.IPAM, NB: e.NB,
		Subnets: sr, IPs: f.ips, Registry: prometheus.NewRegistry(), Workers: 4, NADs: nads})
	if err != nil {
		t.Fatal(err)
	}
	sr.Use(f.r, noGateways{})
	e.Start()
	if _, err := sr.ProgramAll(e.Ctx); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) run() {
	f.subnets.Start(f.Ctx, &f.WG, nil)
	f.r.Start(f.Ctx, &f.WG)
}

func start(t *testing.T, typed []runtime.Object, custom ...runtime.Object) *fixture {
	t.Helper()
	f := setUp(t, typed, custom...)
	if _, err := f.r.Rebuild(f.Ctx); err != nil {
		t.Fatal(err)
	}
	f.run()
	return f
}

// awaitPod waits until the informer shows the pod so.
func (f *fixture) awaitPod(t *testing.T, key string, ok func(p *corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	inf := f.Informers.Core().V1().Pods().Informer()
	ctltest.Await(t, inf, key, func(obj any) bool {
		p, _ := obj.(*corev1.Pod)
		return ok(p)
	})
	obj, _, _ := inf.GetIndexer().GetByKey(key)
	p, _ := obj.(*corev1.Pod)
	return p
}

func allocated(p *corev1.Pod) bool { return p != nil && p.Annotations[annotations.Allocated] == "true" }

func TestPodGetsItsAddressPortAndAnnotations(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), pod("default", "web", "n1", nil)})
	p := f.awaitPod(t, "default/web", allocated)
	ip, err := netip.ParseAddr(p.Annotations[annotations.IPAddress])
	if err != nil || !netip.MustParsePrefix("10.16.0.0/16").Contains(ip) {
		t.Fatalf("ip_address %q, want one of ovn-default", p.Annotations[annotations.IPAddress])
	}
	if p.Annotations[annotations.LogicalSwitch] != "ovn-default" || p.Annotations[annotations.CIDR] != "10.16.0.0/16" ||
		p.Annotations[annotations.Gateway] != "10.16.0.1" || p.Annotations[annotations.MACAddress] == "" {
		t.Fatalf("annotations %v", p.Annotations)
	}
	port, ok, err := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", "web"))
	if err != nil || !ok || port.Switch != "ovn-default" || !slices.Equal(port.IPs, []netip.Addr{ip}) || port.MAC != p.Annotations[annotations.MACAddress] {
		t.Fatalf("port %+v %v %v", port, ok, err)
	}
	if ovnnb.OwnerOf(port.ExternalIDs) != ovnnb.PodPortOwner("default", "web") {
		t.Fatalf("port owner %q", ovnnb.OwnerOf(port.ExternalIDs))
	}
	// The worker asks for the IP object after its patch returns, which may
	// be after the informer showed the annotations: wait for it.
	f.ips.until(t, "the pod's IP object queued", func() bool { return f.ips.has("pod/default/web") })
	// The node got its join port and annotations too.
	ctltest.Await(t, f.Informers.Core().V1().Nodes().Informer(), "n1", func(obj any) bool {
		n, _ := obj.(*corev1.Node)
		return n != nil && n.Annotations[annotations.PortName] == "node-n1" && strings.HasPrefix(n.Annotations[annotations.IPAddress], "100.64.")
	})
	if _, ok, _ := f.NB.GetPort(f.Ctx, "node-n1"); !ok {
		t.Fatal("node n1 has no join port")
	}

	// Deleted: port and address go.
	if err := f.Kube.CoreV1().Pods("default").Delete(f.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.ips.until(t, "the deleted pod's address released", func() bool {
		_, held := f.Net.IPAM.Lookup(ovnnet.PodOwner("default", "web"))
		return !held
	})
	if _, ok, _ := f.NB.GetPort(f.Ctx, "web.default"); ok {
		t.Fatal("the deleted pod's port is still there")
	}
}

func TestPodOnTheJoinSubnetIsRefused(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), pod("default", "sneaky", "n1", map[string]string{annotations.LogicalSwitch: "join"})})
	ev := f.AwaitEvent("Warning SubnetNotAllowed")
	if !strings.Contains(ev, "join") {
		t.Fatalf("event %q", ev)
	}
	if _, ok, _ := f.NB.GetPort(f.Ctx, ovnnet.PortName("default", "sneaky")); ok {
		t.Fatal("refused pod got a port")
	}
	if _, held := f.Net.IPAM.Lookup(ovnnet.PodOwner("default", "sneaky")); held {
		t.Fatal("refused pod got an address")
	}
}

func TestPodInAnInvalidSubnetWaitsForItsFix(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), pod("default", "a", "n1", map[string]string{annotations.LogicalSwitch: "bad"})},
		ctltest.Subnet("bad", map[string]any{"cidrBlock": "10.60.0.0/24", "vlan": "v1"}))
	if ev := f.AwaitEvent("Warning SubnetNotValid"); !strings.Contains(ev, "VlanNotFound") {
		t.Fatalf("event %q", ev)
	}
	// Fixed: the subnet reconciler programs it and wakes the pod.
	u, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Get(f.Ctx, "bad", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(u.Object["spec"].(map[string]any), "vlan")
	u.SetGeneration(2)
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Update(f.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := f.awaitPod(t, "default/a", allocated)
	if p.Annotations[annotations.LogicalSwitch] != "bad" || !strings.HasPrefix(p.Annotations[annotations.IPAddress], "10.60.0.") {
		t.Fatalf("annotations %v", p.Annotations)
	}
}

func TestExhaustedSubnetPodWaitsForAFreedAddress(t *testing.T) {
	// A /29 holds 5 pods (network, gateway and broadcast aside).
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "small"}}
	objs := []runtime.Object{node("n1", "192.168.0.11"), ns}
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		objs = append(objs, pod("small", n, "n1", nil))
	}
	f := start(t, objs, ctltest.Subnet("tiny", map[string]any{"cidrBlock": "10.61.0.0/29", "namespaces": []any{"small"}}))
	for _, n := range []string{"p1", "p2", "p3", "p4", "p5"} {
		f.awaitPod(t, "small/"+n, allocated)
	}
	if _, err := f.Kube.CoreV1().Pods("small").Create(f.Ctx, pod("small", "late", "n1", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitEvent("Warning SubnetExhausted")
	if n := f.r.Exhausted("tiny"); n != 1 {
		t.Fatalf("Exhausted(tiny) = %d, want 1", n)
	}
	if err := f.Kube.CoreV1().Pods("small").Delete(f.Ctx, "p3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p := f.awaitPod(t, "small/late", allocated)
	if !strings.HasPrefix(p.Annotations[annotations.IPAddress], "10.61.0.") {
		t.Fatalf("late pod: %v", p.Annotations)
	}
	if n := f.r.Exhausted("tiny"); n != 0 {
		t.Fatalf("Exhausted(tiny) = %d after the pod got its address", n)
	}
}

func TestUnimplementedAnnotationsAreNamedOnce(t *testing.T) {
	f := start(t, []runtime.Object{node("n1", "192.168.0.11"), pod("default", "fancy", "n1", map[string]string{"ovn.kubernetes.io/vip": "x"})})
	ev := f.AwaitEvent("Warning AnnotationNotImplemented")
	if !strings.Contains(ev, "ovn.kubernetes.io/vip") {
		t.Fatalf("event %q", ev)
	}
	p := f.awaitPod(t, "default/fancy", allocated)
	if p.Annotations[annotations.NotImplemented] != "ovn.kubernetes.io/vip" {
		t.Fatalf("%s = %q", annotations.NotImplemented, p.Annotations[annotations.NotImplemented])
	}
}

func TestRebuildKeepsRecordedAddressesAndCollectsOrphanPorts(t *testing.T) {
	recorded := map[string]string{annotations.Allocated: "true", annotations.IPAddress: "10.16.0.77", annotations.MACAddress: "0a:58:0a:10:00:4d",
		annotations.LogicalSwitch: "ovn-default"}
	f := setUp(t, []runtime.Object{node("n1", "192.168.0.11"), pod("default", "old", "n1", recorded)})
	// A port whose pod is gone (deleted while no controller ran).
	if err := f.NB.EnsurePort(f.Ctx, ovnnb.Port{Name: "ghost.default", Switch: "ovn-default", MAC: "0a:58:0a:10:00:63",
		IPs: []netip.Addr{netip.MustParseAddr("10.16.0.99")}, ExternalIDs: map[string]string{ovnnb.KeyPod: "default/ghost"}}); err != nil {
		t.Fatal(err)
	}
	n, err := f.r.Rebuild(f.Ctx)
	if err != nil || n != 1 {
		t.Fatalf("Rebuild: %d pods restored, %v", n, err)
	}
	if a, ok := f.Net.IPAM.Lookup(ovnnet.PodOwner("default", "old")); !ok || a.IPString() != "10.16.0.77" {
		t.Fatalf("restored %+v %v, want 10.16.0.77", a, ok)
	}
	deleted, err := f.r.CollectPorts(f.Ctx)
	if err != nil || !slices.Equal(deleted, []string{"ghost.default"}) {
		t.Fatalf("CollectPorts: %v %v, want [ghost.default]", deleted, err)
	}
	f.run()
	f.ips.until(t, "the restored pod synced", func() bool { return f.ips.has("pod/default/old") })
	p, err := f.Kube.CoreV1().Pods("default").Get(f.Ctx, "old", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations[annotations.IPAddress] != "10.16.0.77" {
		t.Fatalf("the pod's recorded address changed: %v", p.Annotations)
	}
	if port, ok, _ := f.NB.GetPort(f.Ctx, "old.default"); !ok || port.IPs[0] != netip.MustParseAddr("10.16.0.77") {
		t.Fatalf("port of the restored pod: %+v %v", port, ok)
	}
}

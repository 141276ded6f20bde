package ips

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// The Kubernetes side is client-go's fake clientsets (no apiserver in a
// unit test; tests/controller runs the real one); the IPAM and the NB
// (the nodes' port names) are the real ovnnet library on libovsdb's
// in-memory server.

func ipObj(name string, labels map[string]any, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": "IP",
		"metadata": map[string]any{"name": name, "labels": labels}, "spec": spec}}
}

func start(t *testing.T, crd bool, typed []runtime.Object, custom ...runtime.Object) (*ctltest.Env, *Reconciler) {
	t.Helper()
	e := ctltest.New(t, typed, custom...)
	if crd {
		e.Kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
			{GroupVersion: kubeovnv1.GroupVersion.String(), APIResources: []metav1.APIResource{{Name: "subnets"}, {Name: "ips"}}}}
	}
	r := New(Config{Log: e.Log, Discovery: e.Kube.Discovery(), Dynamic: e.Dynamic, Informers: e.Informers, DInformers: e.DInformers,
		IPAM: e.Net.IPAM, Net: e.Net})
	e.Start()
	for _, s := range []struct{ name, cidr string }{{"join", "100.64.0.0/16"}, {"ovn-default", "10.16.0.0/16"}} {
		cfg, err := ipam.ParseSubnet(s.name, s.cidr, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Net.AddSubnet(e.Ctx, cfg, nil); err != nil {
			t.Fatal(err)
		}
	}
	return e, r
}

func getIP(t *testing.T, e *ctltest.Env, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := e.Dynamic.Resource(kubeovnv1.IPGVR).Get(e.Ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil
	}
	return u
}

func runningPod(ns, name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func TestPodAndNodeAddressesGetKubeOVNsIPObjects(t *testing.T) {
	e, r := start(t, true, []runtime.Object{runningPod("default", "web", "n1"), &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}})
	a, err := e.Net.AddPod(e.Ctx, ovnnet.PodRequest{Namespace: "default", Name: "web", Node: "n1", PoolIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.sync(e.Ctx, "pod/default/web"); err != nil {
		t.Fatal(err)
	}
	u := getIP(t, e, "web.default")
	if u == nil {
		t.Fatal("no IP object web.default")
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	if spec["podName"] != "web" || spec["namespace"] != "default" || spec["ipAddress"] != a.IPString() || spec["v4IpAddress"] != a.IPString() ||
		spec["macAddress"] != a.MAC || spec["subnet"] != "ovn-default" || spec["nodeName"] != "n1" {
		t.Fatalf("spec %v", spec)
	}
	l := u.GetLabels()
	if l[labelSubnet] != "ovn-default" || l[labelNode] != "n1" || l[labelReserved] != "false" || l["ovn-default"] != "" {
		t.Fatalf("labels %v", l)
	}

	if _, err := e.Net.AddNode(e.Ctx, ovnnet.NodeRequest{Name: "n1", InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.0.11")}}); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(e.Ctx, "node/n1"); err != nil {
		t.Fatal(err)
	}
	if n := getIP(t, e, "node-n1"); n == nil || n.GetLabels()[labelSubnet] != "join" {
		t.Fatalf("node IP object %v", n)
	}

	// The pod lets its address go: its object goes (once the cache shows it).
	ctltest.Await(t, r.inf, "web.default", func(obj any) bool { return obj != nil })
	if err := e.Net.DeletePod(e.Ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(e.Ctx, "pod/default/web"); err != nil {
		t.Fatal(err)
	}
	if getIP(t, e, "web.default") != nil {
		t.Fatal("IP object of a released address left")
	}
}

func TestWithoutTheCRDNothingIsWritten(t *testing.T) {
	e, r := start(t, false, []runtime.Object{runningPod("default", "web", "n1")})
	if _, err := e.Net.AddPod(e.Ctx, ovnnet.PodRequest{Namespace: "default", Name: "web", Node: "n1", PoolIndex: -1}); err != nil {
		t.Fatal(err)
	}
	r.Queue("pod/default/web")
	if r.q.Len() != 0 {
		t.Fatal("queued without the CRD")
	}
	if err := r.ensureIP(e.Ctx, "web.default", "web", "default", "n1", ipam.Allocation{}); err != nil {
		t.Fatal(err)
	}
	if getIP(t, e, "web.default") != nil {
		t.Fatal("IP object written without the CRD")
	}
}

func TestStartCollectsIPObjectsOfPodsAndNodesGone(t *testing.T) {
	e, r := start(t, true, []runtime.Object{runningPod("default", "alive", "n1")},
		ipObj("alive.default", map[string]any{labelReserved: "false"}, map[string]any{"podName": "alive", "namespace": "default"}),
		ipObj("gone.default", map[string]any{labelReserved: "false"}, map[string]any{"podName": "gone", "namespace": "default"}),
		ipObj("node-old", map[string]any{labelReserved: "false"}, map[string]any{"podName": "old", "namespace": ""}),
		ipObj("kept.default", map[string]any{labelReserved: "true"}, map[string]any{"podName": "kept", "namespace": "default"}),
		ipObj("vm.default", map[string]any{labelReserved: "false"}, map[string]any{"podName": "vm", "namespace": "default", "podType": "VirtualMachine"}),
	)
	n, err := r.Collect(e.Ctx)
	if err != nil || n != 2 {
		t.Fatalf("Collect: %d %v, want 2 (gone.default, node-old)", n, err)
	}
	for name, want := range map[string]bool{"alive.default": true, "gone.default": false, "node-old": false, "kept.default": true, "vm.default": true} {
		if got := getIP(t, e, name) != nil; got != want {
			t.Errorf("IP object %s present %v, want %v", name, got, want)
		}
	}
}

// A KubeVirt VM's address is recorded as Kube-OVN records it: <vm>.<ns>,
// podType VirtualMachine, on the node of the VM's oldest pod; it goes with
// the address.
func TestVirtualMachineAddressGetsKubeOVNsIPObject(t *testing.T) {
	src, dst := runningPod("default", "virt-launcher-vm1-a", "n1"), runningPod("default", "virt-launcher-vm1-b", "n2")
	src.Annotations = map[string]string{"ovn.kubernetes.io/virtualmachine": "vm1"}
	dst.Annotations = map[string]string{"ovn.kubernetes.io/virtualmachine": "vm1"}
	src.CreationTimestamp, dst.CreationTimestamp = metav1.Unix(1700000000, 0), metav1.Unix(1700000060, 0)
	e, r := start(t, true, []runtime.Object{src, dst})
	a, err := e.Net.AddPod(e.Ctx, ovnnet.PodRequest{Namespace: "default", Name: src.Name, VM: "vm1", Node: "n1", PoolIndex: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.sync(e.Ctx, "vm/default/vm1"); err != nil {
		t.Fatal(err)
	}
	u := getIP(t, e, "vm1.default")
	if u == nil {
		t.Fatal("no IP object vm1.default")
	}
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	if spec["podName"] != "vm1" || spec["podType"] != "VirtualMachine" || spec["ipAddress"] != a.IPString() || spec["macAddress"] != a.MAC || spec["nodeName"] != "n1" {
		t.Fatalf("IP object spec %v", spec)
	}
	if err := e.Net.DeleteVM(e.Ctx, "default", "vm1"); err != nil {
		t.Fatal(err)
	}
	if err := r.sync(e.Ctx, "vm/default/vm1"); err != nil {
		t.Fatal(err)
	}
	if getIP(t, e, "vm1.default") != nil {
		t.Fatal("the VM's IP object outlived its address")
	}
}

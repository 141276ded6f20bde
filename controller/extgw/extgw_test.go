package extgw

import (
	"net/netip"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The Kubernetes side is client-go's fake clientset (no apiserver in a
// unit test; tests/node runs the real one and sends packets through the
// EIPs), the OVN side a real ovsdb-server (the gateway's HA chassis group
// is replaced when its nodes change, which the in-memory server refuses).

func gatewayConfig(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ovnnet.ExternalGatewayNamespace, Name: ovnnet.ExternalGatewayConfigMap}, Data: data}
}

var centralized = map[string]string{ovnnet.KeyEnable: "true", ovnnet.KeyNodes: "n1", ovnnet.KeyNIC: "eth1",
	ovnnet.KeyGatewayAddr: "172.56.0.1", ovnnet.KeyNICIP: "172.56.0.254/16", ovnnet.KeyNamespaceAddresses: "default: 172.56.0.10-172.56.0.99"}

// with is centralized with the keys of extra changed ("" removes one).
func with(extra map[string]string) map[string]string {
	data := map[string]string{}
	for k, v := range centralized {
		data[k] = v
	}
	for k, v := range extra {
		if v == "" {
			delete(data, k)
		} else {
			data[k] = v
		}
	}
	return data
}

func gatewayNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.Chassis: "ch-" + name, annotations.ExternalGatewayNIC: "eth1"}},
		Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}}}
}

func eipPod(name, ip string, ann map[string]string) *corev1.Pod {
	return nsPod("default", name, ip, ann)
}

func nsPod(ns, name, ip string, ann map[string]string) *corev1.Pod {
	a := map[string]string{annotations.Allocated: "true", annotations.IPAddress: ip}
	for k, v := range ann {
		a[k] = v
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: a},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

func startExternal(t *testing.T, typed ...runtime.Object) *ctltest.Env {
	t.Helper()
	e := ctltest.NewOVSDB(t, typed)
	x, err := New(Config{Log: e.Log, Kube: e.Kube, Recorder: e.Recorder, Informers: e.Informers, Net: e.Net})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := x.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	return e
}

// nat is the dnat_and_snat rule of an EIP (nil: none).
func nat(t *testing.T, e *ctltest.Env, eip string) *nbdb.NAT {
	for _, n := range nbtest.Rows[*nbdb.NAT](t, e.NBServer, e.NB, nbdb.NATTable) {
		if n.Type == nbdb.NATTypeDNATAndSNAT && n.ExternalIP == eip {
			return n
		}
	}
	return nil
}

func TestEIPGoesToItsHolderAndThenToTheNextPod(t *testing.T) {
	e := startExternal(t, gatewayConfig(centralized), gatewayNode("n1"), eipPod("a", "10.16.0.5", map[string]string{annotations.EIP: "172.56.0.10"}))
	if ev := e.AwaitEvent("Normal ExternalGatewayProgrammed"); !strings.Contains(ev, "n1") {
		t.Fatalf("event %q", ev)
	}
	e.AwaitNB("a's EIP rule", func() bool { n := nat(t, e, "172.56.0.10"); return n != nil && n.LogicalIP == "10.16.0.5" })
	cm, err := e.Kube.CoreV1().ConfigMaps(ovnnet.ExternalGatewayNamespace).Get(e.Ctx, ovnnet.ExternalGatewayConfigMap, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cm.Annotations[ovnnet.ExternalDigestAnnotation] != ovnnet.ExternalGatewayDigest(centralized) {
		t.Fatalf("ConfigMap digest %q: the nodes would not act on it", cm.Annotations[ovnnet.ExternalDigestAnnotation])
	}
	if n1, _ := e.Kube.CoreV1().Nodes().Get(e.Ctx, "n1", metav1.GetOptions{}); n1.Labels[annotations.ExternalGatewayLabel] != "true" {
		t.Fatalf("gateway node labels %v", n1.Labels)
	}

	// b asks for the same EIP: refused while a holds it.
	if _, err := e.Kube.CoreV1().Pods("default").Create(e.Ctx, eipPod("b", "10.16.0.6", map[string]string{annotations.EIP: "172.56.0.10"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := e.AwaitEvent("Warning EIPConflict"); !strings.Contains(ev, "held by pod default/a") {
		t.Fatalf("event %q", ev)
	}
	if n := nat(t, e, "172.56.0.10"); n.LogicalIP != "10.16.0.5" {
		t.Fatalf("the holder lost its EIP: %+v", n)
	}

	// a lets go: b gets it.
	if err := e.Kube.CoreV1().Pods("default").Delete(e.Ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("b's EIP rule", func() bool { n := nat(t, e, "172.56.0.10"); return n != nil && n.LogicalIP == "10.16.0.6" })
}

func TestBadEIPIsReportedAndProgramsNothing(t *testing.T) {
	e := startExternal(t, gatewayConfig(centralized), gatewayNode("n1"), eipPod("a", "10.16.0.5", map[string]string{annotations.EIP: "192.0.2.10"}))
	if ev := e.AwaitEvent("Warning InvalidEIP"); !strings.Contains(ev, "192.0.2.10") {
		t.Fatalf("event %q", ev)
	}
	for _, n := range nbtest.Rows[*nbdb.NAT](t, e.NBServer, e.NB, nbdb.NATTable) {
		if n.LogicalIP == "10.16.0.5" {
			t.Fatalf("NAT rule for a bad EIP: %+v", n)
		}
	}
}

func TestWithoutTheConfigMapPodsAreToldWhy(t *testing.T) {
	e := startExternal(t, gatewayNode("n1"), eipPod("a", "10.16.0.5", map[string]string{annotations.EIP: "172.56.0.10"}))
	if ev := e.AwaitEvent("Warning ExternalGatewayNotReady"); !strings.Contains(ev, ovnnet.ExternalGatewayConfigMap) {
		t.Fatalf("event %q", ev)
	}
	if n := len(nbtest.Rows[*nbdb.NAT](t, e.NBServer, e.NB, nbdb.NATTable)); n != 0 {
		t.Fatalf("%d NAT rules without a gateway", n)
	}
}

func TestUnknownGatewayNodeChangesNothing(t *testing.T) {
	data := with(map[string]string{ovnnet.KeyNodes: "n1,nx"})
	e := startExternal(t, gatewayConfig(data), gatewayNode("n1"))
	if ev := e.AwaitEvent("Warning UnknownGatewayNode"); !strings.Contains(ev, "nx") {
		t.Fatalf("event %q", ev)
	}
	if on, _ := e.Net.ExternalGatewayProgrammed(e.Ctx); on {
		t.Fatal("gateway programmed with an unknown node listed")
	}
}

// An address a custom VPC's OvnEip holds (UseReserved) is refused as a
// pod's EIP with the holder named; once let go, the pod gets it. Gateway
// and PodHolder say what is programmed, and OnChange is told.
func TestReservedAddressIsRefusedToPods(t *testing.T) {
	e := ctltest.NewOVSDB(t, []runtime.Object{gatewayConfig(centralized), gatewayNode("n1"),
		eipPod("a", "10.16.0.5", map[string]string{annotations.EIP: "172.56.0.10"}), eipPod("b", "10.16.0.6", map[string]string{annotations.SNAT: "172.56.0.11"})})
	x, err := New(Config{Log: e.Log, Kube: e.Kube, Recorder: e.Recorder, Informers: e.Informers, Net: e.Net})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	reserved := map[netip.Addr]string{netip.MustParseAddr("172.56.0.10"): "OvnEip eip-f"}
	x.UseReserved(func(a netip.Addr) string { mu.Lock(); defer mu.Unlock(); return reserved[a] })
	changed := make(chan struct{}, 100)
	x.OnChange(func() { changed <- struct{}{} })
	e.Start()
	if err := x.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	<-x.Started()
	if ev := e.AwaitEvent("Warning EIPConflict"); !strings.Contains(ev, "172.56.0.10 is OvnEip eip-f") {
		t.Fatalf("event %q", ev)
	}
	e.AwaitNB("b's SNAT rule", func() bool { return x.PodHolder(netip.MustParseAddr("172.56.0.11")) == "default/b" })
	if cfg, nodes, ok, _ := x.Gateway(); !ok || cfg.GatewayIP.String() != "172.56.0.1" || len(nodes) != 1 || nodes[0].Chassis != "ch-n1" {
		t.Fatalf("Gateway() = %+v %v %v", cfg, nodes, ok)
	}
	select {
	case <-changed:
	default:
		t.Fatal("OnChange was not told of the gateway or the SNAT")
	}
	if n := nat(t, e, "172.56.0.10"); n != nil {
		t.Fatalf("a reserved address became a pod's EIP: %+v", n)
	}
	mu.Lock()
	delete(reserved, netip.MustParseAddr("172.56.0.10"))
	mu.Unlock()
	x.WakeWaiting()
	e.AwaitNB("a's EIP rule once the OvnEip let go", func() bool { n := nat(t, e, "172.56.0.10"); return n != nil && n.LogicalIP == "10.16.0.5" })
}

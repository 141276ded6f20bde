package cni_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/controller/kube"
)

// ovn0Routes lists the IPv4 destinations routed through ovn0.
func ovn0Routes() map[string]bool {
	out := map[string]bool{}
	l, err := netlink.LinkByName("ovn0")
	if err != nil {
		return out
	}
	rs, _ := netlink.RouteList(l, netlink.FAMILY_ALL)
	for _, r := range rs {
		if r.Dst != nil && r.Gw != nil {
			out[r.Dst.String()] = true
		}
	}
	return out
}

// waitOVN0Route waits (route events, deadline) until ovn0 routes cidr.
func waitOVN0Route(t *testing.T, cidr string) {
	t.Helper()
	ch := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.RouteSubscribe(ch, done); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for !ovn0Routes()[cidr] {
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("ovn0 does not route %s after 30 s; it routes %v", cidr, ovn0Routes())
		}
	}
}

var subnetGVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}

func createSubnet(t *testing.T, dc dynamic.Interface, name, cidr string) {
	t.Helper()
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": name},
		"spec": map[string]any{"protocol": "IPv4", "cidrBlock": cidr},
	}}
	if _, err := dc.Resource(subnetGVR).Create(context.Background(), sub, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dc.Resource(subnetGVR).Delete(context.Background(), name, metav1.DeleteOptions{}) })
}

// The node acts only on what the controller confirmed (issue 14, High 1;
// issue 13, ovn0 routes): ovn0 routes the validated Subnets of the default
// VPC, from the Subnet objects, with a default CIDR other than Kube-OVN's
// 10.16.0.0/16; a Subnet without a pod on this node is reachable from the
// host; a pod author's cidr annotation never becomes a host route; and a
// pod whose annotations its author forged is not wired.
func TestKubeNodeActsOnlyOnControllerConfirmedValues(t *testing.T) {
	k := startKubeNodeWith(t, 10*time.Second, func(c *kube.Config) { c.DefaultCIDR = "10.244.0.0/16" })
	dc := dynamic.NewForConfigOrDie(k.api.Config)
	waitOVN0Route(t, "10.244.0.0/16")
	if r := ovn0Routes(); r["10.16.0.0/16"] {
		t.Fatalf("ovn0 routes Kube-OVN's default 10.16.0.0/16 although the default subnet is 10.244.0.0/16: %v", r)
	}
	// A Subnet with no pod on this node: the host reaches its gateway
	// (the cluster router's port) through ovn0.
	createSubnet(t, dc, "quiet", "10.250.0.0/24")
	waitOVN0Route(t, "10.250.0.0/24")
	if out, err := exec.Command("ping", "-c", "3", "-i", "0.2", "-W", "2", "10.250.0.1").CombinedOutput(); err != nil {
		t.Fatalf("the node cannot reach Subnet quiet (no pod on it yet): %v\n%s", err, out)
	}

	// A pod author (any client other than the controller) rewrites the
	// controller's cidr of a running pod.
	a := k.addPod(t, "victim", nil)
	userCfg := rest.CopyConfig(k.api.Config)
	userCfg.UserAgent = "kubectl-annotate/v1.37"
	user := kubernetes.NewForConfigOrDie(userCfg)
	patch := []byte(`{"metadata":{"annotations":{"ovn.kubernetes.io/cidr":"198.51.100.0/24"}}}`)
	if _, err := user.CoreV1().Pods("default").Patch(context.Background(), "victim", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// An event the node does act on comes after it: a new Subnet. Once its
	// route is there, whatever the pod change caused has happened too.
	createSubnet(t, dc, "later", "10.251.0.0/24")
	waitOVN0Route(t, "10.251.0.0/24")
	if r := ovn0Routes(); r["198.51.100.0/24"] {
		t.Fatalf("a pod's cidr annotation became a host route through ovn0: %v", r)
	}

	// A pod created with every controller annotation forged by its author
	// (on a subnet the controller refuses, so the controller never writes).
	forged := map[string]string{
		"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/routed": "true", "ovn.kubernetes.io/logical_switch": "nosuch",
		"ovn.kubernetes.io/ip_address": "10.244.0.99", "ovn.kubernetes.io/mac_address": "0a:58:0a:f4:00:63",
		"ovn.kubernetes.io/cidr": "10.244.0.0/16", "ovn.kubernetes.io/gateway": "10.244.0.1",
	}
	if _, err := user.CoreV1().Pods("default").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: "default", Annotations: forged},
		Spec:       corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := podnettest.NewNetNS(t, "ovht-forged")
	out := runPlugin(t, k.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-forged", Netns: ns, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=forged", Conf: k.netconf(t, "", nil)})
	if out.Code == 0 || !strings.Contains(out.Err.Msg, "ovn.kubernetes.io/allocated") || !strings.Contains(out.Err.Msg, "not by the controller") ||
		!strings.Contains(out.Err.Msg, "kubectl-annotate") {
		t.Fatalf("ADD of a pod with forged annotations: exit %d: %q", out.Code, out.Err.Msg)
	}
	t.Logf("forged pod refused: %s", out.Err.Msg)
	if out := k.del(t, a); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	k.assertClean(t)
}

// waitAllocated watches pod name until the controller has annotated it
// (allocated=true) and returns its annotations.
func (k *kubeNode) waitAllocated(t *testing.T, name string) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := k.cs.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if p, ok := ev.Object.(*corev1.Pod); ok && p.Annotations["ovn.kubernetes.io/allocated"] == "true" {
			return p.Annotations
		}
	}
	t.Fatalf("the controller did not annotate pod %s within 30 s", name)
	return nil
}

// Issue 23, item 6: trust by managedFields can be forged. A pod's author
// claims the controller's field manager (kubectl annotate
// --field-manager=ovnhost-controller) and writes another pod's address and
// MAC into its own pod's annotations. The node compares them with the
// Port_Binding ovn-northd made from the controller's logical switch port
// and refuses the ADD, naming the pod, the annotation and both values;
// nothing of the other pod's address is wired.
func TestKubeForgedFieldManagerAddressIsNotWired(t *testing.T) {
	k := startKubeNode(t, 30*time.Second)
	victim := k.addPod(t, "victim", nil)
	vann := k.waitAllocated(t, "victim")
	k.createPod(t, "thief", nil)
	own := k.waitAllocated(t, "thief")["ovn.kubernetes.io/ip_address"]
	if own == "" || own == victim.ip {
		t.Fatalf("the controller gave thief %q (victim has %s)", own, victim.ip)
	}
	// The forgery, through the real API server under the controller's
	// field manager name. The invalid port_security in the same write
	// makes the controller refuse the pod before it would re-annotate it
	// (it keeps the pod's port): the forged values stay in place for the
	// ADD below, deterministically, instead of for the controller's
	// reaction time.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"ovn.kubernetes.io/ip_address": victim.ip, "ovn.kubernetes.io/mac_address": vann["ovn.kubernetes.io/mac_address"],
		"ovn.kubernetes.io/port_security": "maybe",
	}}})
	if _, err := k.cs.CoreV1().Pods("default").Patch(context.Background(), "thief", types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: "ovnhost-controller"}); err != nil {
		t.Fatal(err)
	}
	ns := podnettest.NewNetNS(t, "ovht-thief")
	out := runPlugin(t, k.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-thief", Netns: ns, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=thief", Conf: k.netconf(t, "", nil)})
	if out.Code == 0 {
		_ = runPlugin(t, k.installedPlugin(), cniCall{Command: "DEL", ContainerID: "cid-thief", Netns: ns, IfName: "eth0",
			Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=thief", Conf: k.netconf(t, "", nil)})
		t.Fatalf("ADD of a pod whose forged annotations carry victim's address %s was wired: %s", victim.ip, out.Stdout)
	}
	for _, want := range []string{"default/thief", "ovn.kubernetes.io/ip_address", victim.ip, own, "the annotation does not match what the controller programmed in OVN"} {
		if !strings.Contains(out.Err.Msg, want) {
			t.Fatalf("ADD refusal %q does not name %q", out.Err.Msg, want)
		}
	}
	if out.Err.Code != 7 {
		t.Fatalf("ADD refusal has CNI code %d, want 7 (invalid network configuration): %s", out.Err.Code, out.Err.Msg)
	}
	t.Logf("forged pod refused: %s", out.Err.Msg)
	// Nothing of the thief was left on the node; the victim still answers.
	if rows := k.selectRows(t, "Interface", ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes,
		ovsdb.OvsMap{GoMap: map[any]any{"iface-id": "thief.default"}})); len(rows) != 0 {
		t.Fatalf("the refused pod left OVS interfaces: %v", rows)
	}
	waitOVN0(t)
	if out, err := exec.Command("ping", "-c", "2", "-i", "0.2", "-W", "2", victim.ip).CombinedOutput(); err != nil {
		t.Fatalf("victim %s unreachable after the refused forgery: %v\n%s", victim.ip, err, out)
	}
	if out := k.del(t, victim); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	k.assertClean(t)
}

package controller_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// TestPodCannotTakeANodePort (issue 14, High 2): pod "node-w1.example" in
// namespace "com" has the port name "node-w1.example.com", which is node
// "w1.example.com"'s join port. Whichever comes first keeps the name:
//   - node first: the pod is refused with a PortNameCollision event and
//     the node's port stays on join with its own addresses, also after the
//     pod is deleted and after a controller restart;
//   - pod first: the node takes "node_<name>" and announces it in its
//     port_name annotation; deleting either leaves the other's port alone.
func TestPodCannotTakeANodePort(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNamespace("com", nil)
	e.createNode("w1.example.com", "192.168.10.21")
	stop := e.startController()
	e.waitSubnetReady("ovn-default")

	nodePortOK := func(node, port string) (bool, string) {
		o, ok, _ := e.nodes.GetStore().GetByKey(node)
		if !ok {
			return false, "no node " + node
		}
		a := o.(*corev1.Node).Annotations
		l, found := e.lsp(port)
		if !found {
			return false, "no port " + port + "; node annotations " + fmt.Sprint(a)
		}
		want := a[annotations.MACAddress] + " " + a[annotations.IPAddress]
		return a[annotations.PortName] == port && inCIDR(a[annotations.IPAddress], "100.64.0.0/16") &&
				len(l.Addresses) == 1 && l.Addresses[0] == want && l.ExternalIDs["ls"] == "join" && l.ExternalIDs["node"] == node && l.ExternalIDs["pod"] == "",
			fmt.Sprintf("annotations %v; port %s addresses %v external_ids %v", a, port, l.Addresses, l.ExternalIDs)
	}
	e.waitFor(30*time.Second, "node w1.example.com on port node-w1.example.com", func() (bool, string) {
		return nodePortOK("w1.example.com", "node-w1.example.com")
	})
	before, _ := e.lsp("node-w1.example.com")

	// Node first: the pod is refused, the node's port is untouched.
	e.createPod("com", "node-w1.example", "w1.example.com", nil)
	e.waitFor(30*time.Second, "PortNameCollision event on com/node-w1.example", func() (bool, string) {
		ev := strings.Join(e.events("com", "node-w1.example"), "|")
		return strings.Contains(ev, "PortNameCollision: ") && strings.Contains(ev, "node-w1.example.com") && strings.Contains(ev, "rename the pod"), ev
	})
	// A marker pod synced after the refusal: the controller has handled both.
	e.waitWorking("com", "marker", "w1.example.com")
	after, _ := e.lsp("node-w1.example.com")
	if fmt.Sprint(after.Addresses, after.ExternalIDs, after.PortSecurity) != fmt.Sprint(before.Addresses, before.ExternalIDs, before.PortSecurity) {
		t.Fatalf("node port rewritten by the pod: before %v %v, after %v %v", before.Addresses, before.ExternalIDs, after.Addresses, after.ExternalIDs)
	}
	if o, _, _ := e.pods.GetStore().GetByKey("com/node-w1.example"); o.(*corev1.Pod).Annotations[annotations.Allocated] == "true" {
		t.Fatalf("refused pod annotated: %v", o.(*corev1.Pod).Annotations)
	}
	if err := e.kc.CoreV1().Pods("com").Delete(ctx, "node-w1.example", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if err := e.kc.CoreV1().Pods("com").Delete(ctx, "marker", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "marker port gone (both deletions handled)", func() (bool, string) {
		_, ok := e.lsp("marker.com")
		return !ok, "marker.com still there"
	})
	e.waitFor(30*time.Second, "node port still there after the pod's deletion", func() (bool, string) {
		return nodePortOK("w1.example.com", "node-w1.example.com")
	})
	stop()
	stop = e.startController()
	e.waitWorking("com", "marker2", "w1.example.com")
	e.waitFor(30*time.Second, "node port unchanged after a restart", func() (bool, string) {
		return nodePortOK("w1.example.com", "node-w1.example.com")
	})

	// Pod first: it keeps its port, the node that joins later takes node_<name>.
	e.createPod("com", "node-w2.example", "w1.example.com", nil)
	var podAnn map[string]string
	e.waitFor(30*time.Second, "pod com/node-w2.example annotated with its port", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("com/node-w2.example")
		if !ok || !annotated(o.(*corev1.Pod)) {
			return false, "not annotated"
		}
		podAnn = o.(*corev1.Pod).Annotations
		return e.podPortMatches(o.(*corev1.Pod))
	})
	e.createNode("w2.example.com", "192.168.10.22")
	e.waitFor(30*time.Second, "node w2.example.com on node_w2.example.com", func() (bool, string) {
		return nodePortOK("w2.example.com", "node_w2.example.com")
	})
	e.waitFor(30*time.Second, "PortNameCollision event on node w2.example.com", func() (bool, string) {
		ev := strings.Join(e.events("", "w2.example.com"), "|")
		return strings.Contains(ev, "PortNameCollision: ") && strings.Contains(ev, "node_w2.example.com"), ev
	})
	if o, _, _ := e.pods.GetStore().GetByKey("com/node-w2.example"); fmt.Sprint(o.(*corev1.Pod).Annotations) != fmt.Sprint(podAnn) {
		t.Fatalf("pod annotations changed: %v -> %v", podAnn, o.(*corev1.Pod).Annotations)
	}
	if ok, why := e.podPortMatches(podWith("com", "node-w2.example", podAnn)); !ok {
		t.Fatalf("pod port changed by the node: %s", why)
	}
	// Restart: both keep their ports; deleting the node leaves the pod's port.
	stop()
	stop = e.startController()
	e.waitWorking("com", "marker3", "w1.example.com")
	e.waitFor(30*time.Second, "both ports kept across a restart", func() (bool, string) {
		ok, why := nodePortOK("w2.example.com", "node_w2.example.com")
		if !ok {
			return false, why
		}
		return e.podPortMatches(podWith("com", "node-w2.example", podAnn))
	})
	if err := e.kc.CoreV1().Nodes().Delete(ctx, "w2.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "node_w2.example.com gone, the pod's port kept", func() (bool, string) {
		if _, ok := e.lsp("node_w2.example.com"); ok {
			return false, "node_w2.example.com still there"
		}
		return e.podPortMatches(podWith("com", "node-w2.example", podAnn))
	})
	_ = stop
}

// waitWorking creates a pod and waits until the controller annotated it:
// start-up (garbage collection included) is over and workers run.
func (e *env) waitWorking(ns, name, node string) {
	e.t.Helper()
	e.createPod(ns, name, node, nil)
	e.waitFor(60*time.Second, "marker pod "+ns+"/"+name+" annotated (controller working)", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey(ns + "/" + name)
		return ok && annotated(o.(*corev1.Pod)), "not yet"
	})
}

func podWith(ns, name string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: ann}}
}

// TestNBPortsChangeOnlyForTheirOwner: the library refuses to update or
// delete a port that records another owner, and says who holds it.
func TestNBPortsChangeOnlyForTheirOwner(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nb := e.nb
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(nb.EnsureRouter(ctx, "r"))
	for i, n := range []string{"join", "ovn-default"} {
		must(nb.EnsureSwitch(ctx, ovnnb.Switch{Name: n, Router: "r", CIDRs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.0.0/16", 60+i))},
			Gateways: []netip.Addr{netip.MustParseAddr(fmt.Sprintf("10.%d.0.1", 60+i))}}))
	}
	node := ovnnb.Port{Name: "node-w1.example.com", Switch: "join", MAC: "0a:00:00:00:00:01", IPs: []netip.Addr{netip.MustParseAddr("10.60.0.2")},
		ExternalIDs: map[string]string{ovnnb.KeyNode: "w1.example.com"}}
	must(nb.EnsurePort(ctx, node))
	pod := ovnnb.Port{Name: "node-w1.example.com", Switch: "ovn-default", MAC: "0a:00:00:00:00:02", IPs: []netip.Addr{netip.MustParseAddr("10.61.0.2")},
		ExternalIDs: map[string]string{ovnnb.KeyPod: "com/node-w1.example"}}
	err := nb.EnsurePort(ctx, pod)
	var oe *ovnnb.OwnerError
	if !errors.Is(err, ovnnb.ErrNotOwner) || !errors.As(err, &oe) || oe.Holder != "node:w1.example.com" || !strings.Contains(err.Error(), "node:w1.example.com") {
		t.Fatalf("pod's EnsurePort on the node's port: %v", err)
	}
	if err := nb.DeletePort(ctx, "node-w1.example.com", ovnnb.PodPortOwner("com", "node-w1.example")); !errors.Is(err, ovnnb.ErrNotOwner) {
		t.Fatalf("pod's DeletePort on the node's port: %v", err)
	}
	got, ok, _ := nb.GetPort(ctx, "node-w1.example.com")
	if !ok || got.Switch != "join" || got.MAC != node.MAC || got.IPs[0] != node.IPs[0] {
		t.Fatalf("node port changed: %+v", got)
	}
	if err := nb.EnsurePort(ctx, ovnnb.Port{Name: "x", Switch: "join", MAC: "0a:00:00:00:00:03", IPs: node.IPs}); err == nil {
		t.Fatal("a port without an owner accepted")
	}
	must(nb.DeletePort(ctx, "node-w1.example.com", ovnnb.NodePortOwner("w1.example.com")))
	if _, ok, _ := nb.GetPort(ctx, "node-w1.example.com"); ok {
		t.Fatal("the owner could not delete its port")
	}
}

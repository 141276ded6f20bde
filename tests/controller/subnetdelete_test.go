package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// TestSubnetDeletionWaitsForItsPods (issue 14.6): deleting a Subnet that
// pods use does not free their addresses. The Subnet carries a finalizer;
// deletion waits with Ready=False naming the pods; the controller is killed
// and restarted meanwhile and keeps waiting (its pods keep address and
// port); no new pod gets an address from it; the condition follows the pods
// as they go, and when the last one is gone the switch and the Subnet are
// removed. A Subnet of the same name and CIDR created afterwards starts
// from its first address: nothing was handed out twice on the way.
func TestSubnetDeletionWaitsForItsPods(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("doomed", map[string]any{"cidrBlock": "10.90.0.0/24"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := e.startControllerProcess()
	p.waitReady(t, 60*time.Second)
	e.waitSubnetReady("doomed")
	e.waitFor(30*time.Second, "finalizer on Subnet doomed", func() (bool, string) {
		s := e.subnet("doomed")
		return s != nil && slices.Contains(s.Finalizers, subnets.SubnetFinalizer), fmt.Sprint(s.Finalizers)
	})
	on := map[string]string{annotations.LogicalSwitch: "doomed"}
	e.createPod("default", "a", "node-a", on)
	e.createPod("default", "b", "node-a", on)
	addrs := map[string]string{}
	e.waitFor(30*time.Second, "pods a and b in doomed", func() (bool, string) {
		for _, n := range []string{"a", "b"} {
			o, ok, _ := e.pods.GetStore().GetByKey("default/" + n)
			if !ok || !annotated(o.(*corev1.Pod)) {
				return false, n + " not annotated"
			}
			addrs[n] = o.(*corev1.Pod).Annotations[annotations.IPAddress]
		}
		return true, ""
	})

	if err := e.dc.Resource(kubeovnv1.SubnetGVR).Delete(ctx, "doomed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waiting := func(want ...string) {
		t.Helper()
		e.waitFor(30*time.Second, fmt.Sprintf("doomed waiting for %v", want), func() (bool, string) {
			s := e.subnet("doomed")
			r := cond(s, kubeovnv1.Ready)
			if s == nil || s.DeletionTimestamp == nil || r == nil {
				return false, fmt.Sprintf("%+v", s)
			}
			ok := r.Status == "False" && r.Reason == "DeletionWaitsForPods" && strings.Contains(r.Message, fmt.Sprintf("%d pod(s)", len(want)))
			for _, w := range want {
				ok = ok && strings.Contains(r.Message, w)
			}
			return ok, r.Message
		})
	}
	waiting("default/a", "default/b")

	// Killed and restarted while the deletion waits.
	p.kill()
	p = e.startControllerProcess()
	p.waitReady(t, 60*time.Second)
	e.createPod("default", "late", "node-a", on)
	e.waitFor(30*time.Second, "late refused: the subnet is being deleted", func() (bool, string) {
		ev := strings.Join(e.events("default", "late"), "|")
		return strings.Contains(ev, "SubnetTerminating: "), ev
	})
	waiting("default/a", "default/b")
	for _, n := range []string{"a", "b"} {
		o, _, _ := e.pods.GetStore().GetByKey("default/" + n)
		if ok, why := e.podPortMatches(o.(*corev1.Pod)); !ok || o.(*corev1.Pod).Annotations[annotations.IPAddress] != addrs[n] {
			t.Fatalf("pod %s lost its address or port across the restart: %s %v", n, why, o.(*corev1.Pod).Annotations)
		}
	}

	del := func(n string) {
		t.Helper()
		if err := e.kc.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	del("a")
	waiting("default/b")
	del("b")
	del("late")
	e.waitFor(30*time.Second, "Subnet doomed and its switch gone", func() (bool, string) {
		if s := e.subnet("doomed"); s != nil {
			return false, fmt.Sprintf("subnet still there: %+v", s.Status.Conditions)
		}
		_, ok := e.lsp("doomed-ovn-cluster")
		return !ok, "switch port doomed-ovn-cluster still there"
	})

	// Same name and CIDR again: its first pod gets the first address.
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("doomed", map[string]any{"cidrBlock": "10.90.0.0/24"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createPod("default", "c", "node-a", on)
	e.waitFor(30*time.Second, "c on 10.90.0.2", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/c")
		if !ok || !annotated(o.(*corev1.Pod)) {
			return false, "not annotated"
		}
		return o.(*corev1.Pod).Annotations[annotations.IPAddress] == "10.90.0.2", o.(*corev1.Pod).Annotations[annotations.IPAddress]
	})
}

package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// TestPodAnnotationsKubeOVNUsersSet (issues 13 and 14):
//   - annotations ovnhost does not implement are named in one Warning event
//     per pod: not again when the pod changes, not again after a restart;
//     port_security "false" is named too (the port keeps its port security);
//   - a pod cannot choose the join subnet through logical_switch;
//   - ip_pool: StatefulSet pods take the entry of their ordinal (the same
//     again when re-created), an ordinal beyond the pool is refused with an
//     event; other pods take the first free entry and wait when all are held.
func TestPodAnnotationsKubeOVNUsersSet(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	stop := e.startController()
	e.waitSubnetReady("ovn-default")

	// Not implemented: one event naming them.
	e.createPod("default", "extras", "node-a", map[string]string{
		"ovn.kubernetes.io/vip": "10.16.9.9", "ovn.kubernetes.io/latency": "10", annotations.PortSecurity: "false"})
	e.createPod("default", "plain", "node-a", map[string]string{annotations.PortSecurity: "true"})
	notImpl := func() []*corev1.Event {
		var out []*corev1.Event
		for _, o := range e.evs.GetStore().List() {
			ev := o.(*corev1.Event)
			if ev.Reason == "AnnotationNotImplemented" {
				out = append(out, ev)
			}
		}
		return out
	}
	e.waitFor(30*time.Second, "extras annotated, with its port security, and one AnnotationNotImplemented event", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/extras")
		if !ok || !annotated(o.(*corev1.Pod)) {
			return false, "not annotated"
		}
		if good, why := e.podPortMatches(o.(*corev1.Pod)); !good {
			return false, why
		}
		evs := notImpl()
		return len(evs) == 1 && evs[0].InvolvedObject.Name == "extras" && evs[0].Type == corev1.EventTypeWarning &&
			strings.Contains(evs[0].Message, "ovn.kubernetes.io/latency, ovn.kubernetes.io/port_security, ovn.kubernetes.io/vip") &&
			strings.Contains(evs[0].Message, "port security"), fmt.Sprint(e.events("default", "extras"))
	})
	e.waitFor(30*time.Second, "plain annotated", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/plain")
		return ok && annotated(o.(*corev1.Pod)), "not annotated"
	})
	// A change of the pod, then a restart: no second event.
	patch := []byte(`{"metadata":{"annotations":{"touched":"yes"}}}`)
	if _, err := e.kc.CoreV1().Pods("default").Patch(ctx, "extras", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitWorking("default", "marker1", "node-a")
	stop()
	stop = e.startController()
	e.waitWorking("default", "marker2", "node-a")
	if evs := notImpl(); len(evs) != 1 || evs[0].Count != 1 {
		t.Fatalf("AnnotationNotImplemented events after a change and a restart: %d (count %d), want 1", len(evs), evs[0].Count)
	}

	// join is the nodes' subnet.
	e.createPod("default", "sneaky", "node-a", map[string]string{annotations.LogicalSwitch: "join"})
	e.waitFor(30*time.Second, "SubnetNotAllowed event on sneaky", func() (bool, string) {
		ev := strings.Join(e.events("default", "sneaky"), "|")
		return strings.Contains(ev, "SubnetNotAllowed: ") && strings.Contains(ev, "join"), ev
	})
	if _, ok := e.lsp("sneaky.default"); ok {
		t.Fatal("pod sneaky got a port")
	}

	// ip_pool on a StatefulSet.
	sts, err := e.kc.AppsV1().StatefulSets("default").Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec: appsv1.StatefulSetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "db"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pool := map[string]string{annotations.IPPool: "10.16.1.10, 10.16.1.11,10.16.1.12"}
	createSTSPod := func(name string) {
		t.Helper()
		p := podSpec("default", name, "node-a", pool)
		p.Labels = map[string]string{"app": "db"}
		p.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(sts, appsv1.SchemeGroupVersion.WithKind("StatefulSet"))}
		if _, err := e.kc.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range []string{"db-2", "db-0", "db-1", "db-3"} {
		createSTSPod(n)
	}
	addr := func(key string) string {
		o, ok, _ := e.pods.GetStore().GetByKey(key)
		if !ok || !annotated(o.(*corev1.Pod)) {
			return ""
		}
		return o.(*corev1.Pod).Annotations[annotations.IPAddress]
	}
	e.waitFor(30*time.Second, "db-0..2 on their pool entries, db-3 refused", func() (bool, string) {
		got := strings.Join([]string{addr("default/db-0"), addr("default/db-1"), addr("default/db-2")}, " ")
		ev := strings.Join(e.events("default", "db-3"), "|")
		return got == "10.16.1.10 10.16.1.11 10.16.1.12" && strings.Contains(ev, "ordinal 3") && addr("default/db-3") == "", got + " / " + ev
	})
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "db-1", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "db-1 gone", func() (bool, string) {
		_, ok, _ := e.pods.GetStore().GetByKey("default/db-1")
		return !ok, "still there"
	})
	createSTSPod("db-1")
	e.waitFor(30*time.Second, "re-created db-1 on 10.16.1.11 again", func() (bool, string) {
		return addr("default/db-1") == "10.16.1.11", addr("default/db-1")
	})

	// ip_pool on other pods: the first free entry, then wait.
	free := map[string]string{annotations.IPPool: "10.16.2.20,10.16.2.21"}
	e.createPod("default", "w-a", "node-a", free)
	e.createPod("default", "w-b", "node-a", free)
	e.waitFor(30*time.Second, "w-a and w-b on the two pool entries", func() (bool, string) {
		a, b := addr("default/w-a"), addr("default/w-b")
		return a != b && strings.HasPrefix(a, "10.16.2.2") && strings.HasPrefix(b, "10.16.2.2") && len(a) == 10 && len(b) == 10, a + " " + b
	})
	e.createPod("default", "w-c", "node-a", free)
	e.waitFor(30*time.Second, "w-c waits: every pool address is held", func() (bool, string) {
		ev := strings.Join(e.events("default", "w-c"), "|")
		return strings.Contains(ev, "SubnetExhausted: ") && strings.Contains(ev, "ip_pool") && addr("default/w-c") == "", ev
	})
	freed := addr("default/w-a")
	if err := e.kc.CoreV1().Pods("default").Delete(ctx, "w-a", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "w-c takes the freed pool address "+freed, func() (bool, string) {
		return addr("default/w-c") == freed, addr("default/w-c")
	})
	_ = stop
}

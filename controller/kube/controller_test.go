package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// The assembly on client-go's fake clientsets (no apiserver in a unit
// test; tests/controller runs the real one, with leader election, health
// and metrics) and libovsdb's in-memory NB: start-up in order, and the
// reconcilers wired to one another.

func TestStartUpCreatesTheDefaultSubnetsAndPodsGetAddresses(t *testing.T) {
	e := ctltest.New(t, []runtime.Object{
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.11"}}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "uid-web"}, Spec: corev1.PodSpec{NodeName: "n1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning}},
	})
	c, err := newWith(Config{Rest: nil, Logger: e.Log, StatusDelay: time.Millisecond, EnableLB: true, EnableNP: true}, e.Kube, e.Dynamic, e.NB)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(e.Ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	podInf := c.factory.Core().V1().Pods().Informer()
	ctltest.Await(t, podInf, "default/web", func(obj any) bool {
		p, _ := obj.(*corev1.Pod)
		return p != nil && p.Annotations[annotations.LogicalSwitch] == "ovn-default" && strings.HasPrefix(p.Annotations[annotations.IPAddress], "10.16.")
	})
	if !c.Ready() {
		t.Fatal("not ready after start-up")
	}
	for _, name := range []string{"join", "ovn-default"} {
		if s := e.GetSubnet(name); s.Spec.CIDRBlock == "" {
			t.Fatalf("default Subnet %s: %+v", name, s.Spec)
		}
	}
	subnetInf := c.dfactory.ForResource(kubeovnv1.SubnetGVR).Informer()
	ctltest.Await(t, subnetInf, "ovn-default", func(obj any) bool {
		s, _ := subnetOf(obj)
		return s != nil && s.Status.V4UsingIPs == 1 && s.Condition(kubeovnv1.Ready) != nil && s.Condition(kubeovnv1.Ready).Status == "True"
	})

	// A Subnet for namespace team, then a pod there: the pod waits for the
	// Subnet to be programmed and takes its address there.
	if _, err := e.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(ctx, ctltest.Subnet("team-net", map[string]any{"cidrBlock": "10.80.0.0/24", "namespaces": []any{"team"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The controller's informer must have seen the Subnet: a pod created
	// before that goes to the namespace's Subnet of the moment, the
	// default (CI saw that under load).
	ctltest.Await(t, subnetInf, "team-net", func(obj any) bool { return obj != nil })
	if _, err := e.Kube.CoreV1().Pods("team").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "app", UID: "uid-app"},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, podInf, "team/app", func(obj any) bool {
		p, _ := obj.(*corev1.Pod)
		return p != nil && p.Annotations[annotations.LogicalSwitch] == "team-net" && strings.HasPrefix(p.Annotations[annotations.IPAddress], "10.80.0.")
	})
}

func subnetOf(obj any) (*kubeovnv1.Subnet, error) {
	u, ok := obj.(interface{ UnstructuredContent() map[string]any })
	if !ok {
		return nil, nil
	}
	var s kubeovnv1.Subnet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), &s); err != nil {
		return nil, err
	}
	return &s, nil
}

package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// TestSubnetMTUIsAnnotatedOnItsPods: a Subnet's spec.mtu reaches its pods as
// ovn.kubernetes.io/mtu (what the CNI server sets on eth0, over the node's
// own pod MTU), whether the pod lands there through its namespace or its own
// logical_switch annotation; pods on a Subnet without mtu (a custom one or
// ovn-default) get no such annotation, so the node's MTU applies.
func TestSubnetMTUIsAnnotatedOnItsPods(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.createNode("node-a", "192.168.10.11")
	for name, spec := range map[string]map[string]any{
		"small-mtu": {"cidrBlock": "10.70.0.0/16", "mtu": int64(1300), "namespaces": []any{"mtu-ns"}},
		"plain":     {"cidrBlock": "10.71.0.0/16"},
	} {
		if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj(name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.createNamespace("mtu-ns", nil)
	e.startController()
	for _, s := range []string{"ovn-default", "small-mtu", "plain"} {
		e.waitSubnetReady(s)
	}
	if got := e.subnet("small-mtu").Spec.MTU; got != 1300 {
		t.Fatalf("Subnet small-mtu spec.mtu %d after admission, want 1300", got)
	}

	pods := []struct {
		ns, name string
		ann      map[string]string
		subnet   string
		mtu      string // "" = no annotation
	}{
		{"mtu-ns", "by-namespace", nil, "small-mtu", "1300"},
		// small-mtu is bound to mtu-ns: only that namespace's pods may name it.
		{"mtu-ns", "by-pod", map[string]string{annotations.LogicalSwitch: "small-mtu"}, "small-mtu", "1300"},
		{"default", "plain", map[string]string{annotations.LogicalSwitch: "plain"}, "plain", ""},
		{"default", "default", nil, "ovn-default", ""},
	}
	for _, p := range pods {
		e.createPod(p.ns, p.name, "node-a", p.ann)
	}
	for _, p := range pods {
		e.waitFor(30*time.Second, fmt.Sprintf("pod %s/%s annotated on subnet %s", p.ns, p.name, p.subnet), func() (bool, string) {
			o, ok, _ := e.pods.GetStore().GetByKey(p.ns + "/" + p.name)
			if !ok {
				return false, "no pod"
			}
			pp := o.(*corev1.Pod)
			return annotated(pp) && pp.Annotations[annotations.LogicalSwitch] == p.subnet, fmt.Sprint(pp.Annotations)
		})
	}
	for _, p := range pods {
		o, _, _ := e.pods.GetStore().GetByKey(p.ns + "/" + p.name)
		a := o.(*corev1.Pod).Annotations
		got, has := a[annotations.MTU]
		switch {
		case p.mtu != "" && got != p.mtu:
			t.Errorf("pod %s/%s on %s: %s=%q, want %q (the Subnet's mtu); annotations %v", p.ns, p.name, p.subnet, annotations.MTU, got, p.mtu, a)
		case p.mtu == "" && has:
			t.Errorf("pod %s/%s on %s (no mtu): has %s=%q, want none; annotations %v", p.ns, p.name, p.subnet, annotations.MTU, got, a)
		}
	}
}

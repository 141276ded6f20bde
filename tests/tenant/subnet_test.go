package tenant_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// pod is a tenant's pod scheduled on node1 (no kubelet: the controller
// addresses pods once they have a node).
func pod(name string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// A tenant asks, by annotation, for a Subnet the admin bound to another
// tenant's namespace: by the pod's annotation, with a static address or a
// pool there, or by annotating their own namespace (which a namespace
// admin cannot do: RBAC refuses it). Each pod is refused with an event
// naming the Subnet and the fix and gets no port; the owning tenant's pod
// on the same Subnet works.
func TestTenantCannotJoinAnotherTenantsSubnet(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant-a", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	c.createSubnet("b-private", map[string]any{"cidrBlock": "10.77.0.0/24", "protocol": "IPv4",
		"namespaces": []any{"tenant-b"}, "private": true})
	ctx := context.Background()

	// The owner's pod gets an address there.
	if _, err := bob.kc.CoreV1().Pods(bob.ns).Create(ctx, pod("db", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(60*time.Second, "bob's pod addressed in b-private", func() (bool, string) {
		l, ok := c.lsp("db.tenant-b")
		if !ok {
			return false, "no port db.tenant-b"
		}
		return l.ExternalIDs["ls"] == "b-private", "port on " + l.ExternalIDs["ls"]
	})

	for _, a := range []struct {
		name string
		ann  map[string]string
	}{
		{"by-annotation", map[string]string{annotations.LogicalSwitch: "b-private"}},
		{"static-ip", map[string]string{annotations.LogicalSwitch: "b-private", annotations.IPAddress: "10.77.0.50"}},
		{"ip-pool", map[string]string{annotations.LogicalSwitch: "b-private", annotations.IPPool: "10.77.0.60,10.77.0.61"}},
	} {
		t.Run(a.name, func(t *testing.T) {
			name := "spy-" + a.name
			if _, err := alice.kc.CoreV1().Pods(alice.ns).Create(ctx, pod(name, a.ann), metav1.CreateOptions{}); err != nil {
				t.Fatalf("alice could not create her pod at all: %v", err)
			}
			ev := c.waitEvent(alice, "Pod", name, "SubnetNotAllowed")
			for _, want := range []string{`"b-private"`, `"tenant-a"`, "spec.namespaces"} {
				if !strings.Contains(ev.Message, want) {
					t.Errorf("event %q does not name %s", ev.Message, want)
				}
			}
			if l, ok := c.lsp(name + ".tenant-a"); ok {
				t.Errorf("alice's pod got a port %v on %s", l.Addresses, l.ExternalIDs["ls"])
			}
			p, err := alice.kc.CoreV1().Pods(alice.ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if p.Annotations[annotations.Allocated] == "true" {
				t.Errorf("alice's pod was given an address: %v", p.Annotations)
			}
		})
	}

	// Her own namespace's logical_switch annotation is the admin's to
	// set: the namespace admin role cannot patch namespaces.
	patch := []byte(`{"metadata":{"annotations":{"` + annotations.LogicalSwitch + `":"b-private"}}}`)
	if _, err := alice.kc.CoreV1().Namespaces().Patch(ctx, alice.ns, types.MergePatchType, patch, metav1.PatchOptions{}); err == nil {
		t.Error("alice annotated her own namespace with another tenant's Subnet; a namespace admin must not be able to")
	}
}

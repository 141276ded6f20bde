package tenant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// createNAD writes an OVN NetworkAttachmentDefinition (Kube-OVN's type
// kube-ovn) with the given provider, as whoever dyn belongs to.
func createNAD(t *testing.T, dyn dynamic.Interface, ns, name, provider string) {
	t.Helper()
	cfg := fmt.Sprintf(`{"cniVersion":"0.3.1","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":%q}`, provider)
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"config": cfg}}}
	if _, err := dyn.Resource(nadGVR).Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating NetworkAttachmentDefinition %s/%s: %v", ns, name, err)
	}
}

// Attachment networks (issue 27) against a hostile tenant, in a cluster
// where namespace owners manage their own NetworkAttachmentDefinitions
// (an aggregated role grants them: the worst case). Bob has a private
// attachment network (his NAD, its Subnet bound to tenant-b); a shared one
// (the admin's NAD in shared-nets, its Subnet open to all) carries both.
// Alice tries: Bob's NAD by name; her own NAD whose provider names Bob's
// network; Bob's address and Bob's MAC on the shared network by the
// provider's annotations. Each of her pods is refused with an event she
// can read and gets no attachment port; Bob's ports are unchanged; a plain
// pod of hers on the shared network gets its own address.
func TestTenantCannotJoinOrSpoofAnotherTenantsAttachmentNetwork(t *testing.T) {
	c := newClusterWith(t, "tests/runtime/testdata/crd-network-attachment-definitions.yaml")
	ctx := context.Background()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "nad-editor", Labels: map[string]string{"rbac.authorization.k8s.io/aggregate-to-admin": "true"}},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"k8s.cni.cncf.io"}, Resources: []string{"network-attachment-definitions"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}}}}
	if _, err := c.admin.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	alice := c.newTenant("alice", "tenant-a", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	// The aggregation reaches the admin role asynchronously.
	for _, tn := range []*tenant{alice, bob} {
		c.waitGrantedFor(tn, authzv1.ResourceAttributes{Namespace: tn.ns, Verb: "create", Resource: "network-attachment-definitions", Group: "k8s.cni.cncf.io"})
	}
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shared-nets"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createNAD(t, bob.dyn, bob.ns, "private", "private.tenant-b.ovn")
	createNAD(t, c.adyn, "shared-nets", "shared", "shared.shared-nets.ovn")
	c.createSubnet("b-private", map[string]any{"cidrBlock": "10.70.0.0/24", "protocol": "IPv4", "provider": "private.tenant-b.ovn", "namespaces": []any{"tenant-b"}})
	c.createSubnet("shared", map[string]any{"cidrBlock": "10.71.0.0/24", "protocol": "IPv4", "provider": "shared.shared-nets.ovn"})

	if _, err := bob.kc.CoreV1().Pods(bob.ns).Create(ctx, pod("web", map[string]string{annotations.NetworksAnnotation: "private, shared-nets/shared"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	victim := map[string][]string{} // port -> "MAC IP"
	c.waitFor(60*time.Second, "bob's pod's two attachment ports", func() (bool, string) {
		var seen []string
		for _, port := range []string{"web.tenant-b.private.tenant-b.ovn", "web.tenant-b.shared.shared-nets.ovn"} {
			l, ok := c.lsp(port)
			if !ok || len(l.Addresses) != 1 {
				seen = append(seen, port+" missing")
				continue
			}
			victim[port] = strings.Fields(l.Addresses[0])
		}
		return len(seen) == 0, strings.Join(seen, ", ")
	})
	shared := victim["web.tenant-b.shared.shared-nets.ovn"]
	ipKey := annotations.ProviderKey("shared.shared-nets.ovn", annotations.KeyIPAddress)
	macKey := annotations.ProviderKey("shared.shared-nets.ovn", annotations.KeyMACAddress)
	createNAD(t, alice.dyn, alice.ns, "mine", "private.tenant-b.ovn")
	for _, a := range []struct {
		name, reason, provider string
		ann                    map[string]string
	}{
		{"bobs-nad", "SubnetNotAllowed", "private.tenant-b.ovn", map[string]string{annotations.NetworksAnnotation: "tenant-b/private"}},
		{"own-nad-bobs-provider", "InvalidNAD", "private.tenant-b.ovn", map[string]string{annotations.NetworksAnnotation: "mine"}},
		{"bobs-ip", "IPConflict", "shared.shared-nets.ovn", map[string]string{annotations.NetworksAnnotation: "shared-nets/shared", ipKey: shared[1]}},
		{"bobs-mac", "MACConflict", "shared.shared-nets.ovn", map[string]string{annotations.NetworksAnnotation: "shared-nets/shared", macKey: shared[0]}},
	} {
		t.Run(a.name, func(t *testing.T) {
			if _, err := alice.kc.CoreV1().Pods(alice.ns).Create(ctx, pod(a.name, a.ann), metav1.CreateOptions{}); err != nil {
				t.Fatalf("alice could not create her pod at all: %v", err)
			}
			ev := c.waitEvent(alice, "Pod", a.name, a.reason)
			t.Logf("%s: %s", a.reason, ev.Message)
			if l, ok := c.lsp(a.name + ".tenant-a." + a.provider); ok {
				t.Errorf("alice's pod got the attachment port %v (event %q)", l.Addresses, ev.Message)
			}
		})
	}
	for port, want := range victim {
		if l, ok := c.lsp(port); !ok || len(l.Addresses) != 1 || l.Addresses[0] != strings.Join(want, " ") {
			t.Errorf("bob's port %s changed: %+v, want %v", port, l, want)
		}
	}
	// The shared network itself works for her.
	if _, err := alice.kc.CoreV1().Pods(alice.ns).Create(ctx, pod("plain", map[string]string{annotations.NetworksAnnotation: "shared-nets/shared"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(60*time.Second, "alice's plain pod's port on the shared network", func() (bool, string) {
		l, ok := c.lsp("plain.tenant-a.shared.shared-nets.ovn")
		if !ok || len(l.Addresses) != 1 {
			return false, "no port yet"
		}
		f := strings.Fields(l.Addresses[0])
		return len(f) == 2 && f[1] != shared[1] && f[0] != shared[0], l.Addresses[0]
	})
}

package tenant_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// A tenant's NetworkPolicies act on her own pods only, whatever they
// name: alice, owning namespace "tenant", writes a policy whose name
// sanitises to the same OVN name as bob's ("tenant"/"b-allow-web" and
// "tenant-b"/"allow-web" are both tenant_b_allow_web), selecting bob's pod
// label and allowing every namespace. Bob's port group keeps exactly his
// pod and his ACLs; alice's holds none of his ports.
func TestTenantPolicyCannotTouchAnotherTenantsPolicy(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	ctx := context.Background()
	if _, err := bob.kc.CoreV1().Pods(bob.ns).Create(ctx, withLabels(pod("web", nil), map[string]string{"app": "web"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sel := metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	bobs := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow-web"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}}}}
	if _, err := bob.kc.NetworkingV1().NetworkPolicies(bob.ns).Create(ctx, bobs, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var bobPG nbdb.PortGroup
	var bobACLs []string
	c.waitFor(60*time.Second, "bob's policy port group with his pod", func() (bool, string) {
		pg, ok := c.policyPortGroup("tenant-b/allow-web")
		if !ok {
			return false, "no port group for tenant-b/allow-web"
		}
		bobPG, bobACLs = pg, c.aclMatches(pg.ACLs)
		return len(pg.Ports) == 1 && len(pg.ACLs) > 0, fmt.Sprintf("ports %v ACLs %d", pg.Ports, len(pg.ACLs))
	})

	everywhere := &metav1.LabelSelector{}
	alices := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "b-allow-web"}, Spec: networkingv1.NetworkPolicySpec{
		PodSelector: sel, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: everywhere}}}}}}
	if _, err := alice.kc.NetworkingV1().NetworkPolicies(alice.ns).Create(ctx, alices, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice could not create her policy at all: %v", err)
	}
	c.waitFor(60*time.Second, "alice's policy programmed in a port group of its own", func() (bool, string) {
		pg, ok := c.policyPortGroup("tenant/b-allow-web")
		if !ok {
			return false, "no port group for tenant/b-allow-web"
		}
		return pg.Name != bobPG.Name && len(pg.ACLs) > 0, fmt.Sprintf("%s with %d ACLs", pg.Name, len(pg.ACLs))
	})
	alicePG, _ := c.policyPortGroup("tenant/b-allow-web")
	if len(alicePG.Ports) != 0 {
		t.Errorf("alice's policy port group %s holds ports %v; she has no pod", alicePG.Name, alicePG.Ports)
	}
	now, ok := c.policyPortGroup("tenant-b/allow-web")
	if !ok || now.Name != bobPG.Name || !slices.Equal(now.Ports, bobPG.Ports) || !slices.Equal(c.aclMatches(now.ACLs), bobACLs) {
		t.Errorf("bob's port group changed: %+v (ACLs %q), was %+v (ACLs %q)", now, c.aclMatches(now.ACLs), bobPG, bobACLs)
	}
}

// policyPortGroup is the port group the NB holds for policy "ns/name".
func (c *cluster) policyPortGroup(key string) (nbdb.PortGroup, bool) {
	var pgs []nbdb.PortGroup
	_ = c.nb.Raw().List(context.Background(), &pgs)
	for _, pg := range pgs {
		if pg.ExternalIDs["np"] == key {
			return pg, true
		}
	}
	return nbdb.PortGroup{}, false
}

// aclMatches are the sorted matches of the ACLs with these UUIDs.
func (c *cluster) aclMatches(uuids []string) []string {
	var out []string
	for _, u := range uuids {
		a := &nbdb.ACL{UUID: u}
		if c.nb.Raw().Get(context.Background(), a) == nil {
			out = append(out, a.Direction+" "+a.Match+" "+a.Action)
		}
	}
	slices.Sort(out)
	return out
}

func withLabels(p *corev1.Pod, l map[string]string) *corev1.Pod {
	p.Labels = l
	return p
}

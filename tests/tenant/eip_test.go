package tenant_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// EIP and SNAT by annotation (item 7): the admin gives tenant-b the
// external addresses 172.56.0.40-49 in kube-system/ovn-external-gw-config.
// Alice asks for one of bob's EIPs, for an address nobody was given (a
// live host's on the external LAN, say) as SNAT, and writes a policy of
// her own in her namespace that would allow it all. Each pod is refused
// with an event naming the address and the rule, and no NAT rule is
// written for it.
func TestTenantCannotSquatAnotherTenantsExternalAddresses(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant-a", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	ctx := context.Background()
	policy := map[string]string{"enable-external-gw": "true", "type": "centralized", "external-gw-nodes": "node1", "external-gw-nic": "ext0",
		"external-gw-addr": "172.56.0.1/16", "nic-ip": "172.56.0.254/16", "nic-mac": "16:52:f3:13:6a:25",
		"namespace-external-addresses": "tenant-b: 172.56.0.40-172.56.0.49"}
	// The gateway node as the API server knows it, with the annotations
	// its daemon writes once it has joined and bridged the NIC (a fake: no
	// daemon runs in this suite; the refusals are the controller's, before
	// any node acts).
	if _, err := c.admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1", Annotations: map[string]string{annotations.Chassis: "5b7e7a3c-0d2f-4bb0-9f53-3c1e8c0d2a11", annotations.ExternalGatewayNIC: "ext0"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.admin.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ovn-external-gw-config"}, Data: policy}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Her own copy of the policy, allowing everything: never read.
	mine := map[string]string{"enable-external-gw": "true", "namespace-external-addresses": "*: 0.0.0.0/0"}
	if _, err := alice.kc.CoreV1().ConfigMaps(alice.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "ovn-external-gw-config"}, Data: mine}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Bob's EIP, his by the policy, is programmed.
	if _, err := bob.kc.CoreV1().Pods(bob.ns).Create(ctx, pod("web", map[string]string{annotations.EIP: "172.56.0.41"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(60*time.Second, "bob's EIP 172.56.0.41 programmed", func() (bool, string) {
		nats := c.natRules()
		return len(nats) == 1 && strings.HasPrefix(nats[0], "dnat_and_snat 172.56.0.41 "), fmt.Sprintf("NAT rules %q", nats)
	})
	bobs := c.natRules()
	for _, a := range []struct{ name, key, addr string }{
		{"bobs-eip", annotations.EIP, "172.56.0.41"},
		{"lan-host-snat", annotations.SNAT, "172.56.0.100"},
	} {
		t.Run(a.name, func(t *testing.T) {
			if _, err := alice.kc.CoreV1().Pods(alice.ns).Create(ctx, pod(a.name, map[string]string{a.key: a.addr}), metav1.CreateOptions{}); err != nil {
				t.Fatalf("alice could not create her pod at all: %v", err)
			}
			ev := c.waitEvent(alice, "Pod", a.name, "ExternalAddressNotAllowed")
			if !strings.Contains(ev.Message, a.addr) || !strings.Contains(ev.Message, "namespace-external-addresses") {
				t.Errorf("event %q does not name %s and the rule", ev.Message, a.addr)
			}
		})
	}
	if nats := c.natRules(); !slices.Equal(nats, bobs) {
		t.Errorf("NAT rules %q after alice's pods, want bob's alone %q", nats, bobs)
	}
}

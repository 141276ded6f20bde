package tenant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// On the shared default Subnet a tenant asks for another tenant's pod's
// address, for its MAC, and for the gateway's MAC (to answer for the
// gateway on the segment). Each pod is refused with an event naming the
// holder; the victim keeps its port as it was.
func TestTenantCannotTakeAnotherPodsAddressOrTheGatewaysMAC(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant-a", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	ctx := context.Background()
	if _, err := bob.kc.CoreV1().Pods(bob.ns).Create(ctx, pod("web", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var victim []string // "MAC IP" of bob's port
	c.waitFor(60*time.Second, "bob's pod addressed", func() (bool, string) {
		l, ok := c.lsp("web.tenant-b")
		if !ok || len(l.Addresses) != 1 {
			return false, "no port web.tenant-b yet"
		}
		victim = strings.Fields(l.Addresses[0])
		return len(victim) == 2, fmt.Sprint(l.Addresses)
	})
	gwMAC := ""
	c.waitFor(60*time.Second, "the ovn-default gateway's router port", func() (bool, string) {
		var lrps []nbdb.LogicalRouterPort
		_ = c.nb.Raw().List(ctx, &lrps)
		for _, p := range lrps {
			if strings.HasSuffix(p.Name, "ovn-default") {
				gwMAC = p.MAC
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d router ports", len(lrps))
	})

	for _, a := range []struct {
		name, reason string
		ann          map[string]string
	}{
		{"bobs-ip", "IPConflict", map[string]string{annotations.IPAddress: victim[1]}},
		{"bobs-mac", "MACConflict", map[string]string{annotations.MACAddress: victim[0]}},
		{"gateway-mac", "MACConflict", map[string]string{annotations.MACAddress: gwMAC}},
	} {
		t.Run(a.name, func(t *testing.T) {
			if _, err := alice.kc.CoreV1().Pods(alice.ns).Create(ctx, pod(a.name, a.ann), metav1.CreateOptions{}); err != nil {
				t.Fatalf("alice could not create her pod at all: %v", err)
			}
			ev := c.waitEvent(alice, "Pod", a.name, a.reason)
			if l, ok := c.lsp(a.name + ".tenant-a"); ok {
				t.Errorf("alice's pod got a port %v (event %q)", l.Addresses, ev.Message)
			}
		})
	}
	l, ok := c.lsp("web.tenant-b")
	if !ok || len(l.Addresses) != 1 || l.Addresses[0] != victim[0]+" "+victim[1] {
		t.Errorf("bob's port changed: %+v", l)
	}
}

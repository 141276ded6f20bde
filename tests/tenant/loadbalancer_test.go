package tenant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The LoadBalancer variants of CVE-2020-8554: a tenant asks, as
// spec.loadBalancerIP, for a pod address (refused with an event: it is in
// a range no external address may take) and for the address:port another
// tenant's Service serves (a request to a load balancer implementation,
// never a VIP by itself: nothing is programmed for it); and she tries to
// write her Service's status.loadBalancer herself, which is what would
// make it a VIP: the built-in admin role does not allow that (only the
// load balancer implementation writes status, and an ingress address it
// writes is checked like externalIPs, controller/services). Bob's VIP
// stays his.
func TestTenantCannotTakeAnotherServicesAddressWithALoadBalancer(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant-a", nil)
	bob := c.newTenant("bob", "tenant-b", nil)
	ctx := context.Background()
	web := service("web", "", corev1.ProtocolTCP, 80, "192.0.2.20")
	if _, err := bob.kc.CoreV1().Services(bob.ns).Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitFor(60*time.Second, "bob's external address 192.0.2.20:80 programmed", func() (bool, string) {
		v := c.lbVIPs()
		return v["tenant-b/web"]["192.0.2.20:80"], fmt.Sprintf("VIPs: %v", v)
	})

	for _, a := range []struct {
		name, ip string
		refused  bool
	}{
		{"pod-address", "10.16.0.9", true},    // inside the default pod Subnet
		{"bobs-address", "192.0.2.20", false}, // the address:port bob's Service serves
	} {
		t.Run(a.name, func(t *testing.T) {
			lb := service(a.name, "", corev1.ProtocolTCP, 80)
			lb.Spec.Type = corev1.ServiceTypeLoadBalancer
			lb.Spec.LoadBalancerIP = a.ip
			created, err := alice.kc.CoreV1().Services(alice.ns).Create(ctx, lb, metav1.CreateOptions{})
			if err != nil {
				t.Fatalf("alice could not create her Service at all: %v", err)
			}
			if a.refused {
				ev := c.waitEvent(alice, "Service", a.name, "ExternalAddressRefused")
				if !strings.Contains(ev.Message, a.ip) || !strings.Contains(ev.Message, "loadBalancerIP") {
					t.Errorf("event %q does not name loadBalancerIP %s", ev.Message, a.ip)
				}
			} else {
				// Programmed with its ClusterIP only.
				c.waitFor(60*time.Second, "alice's Service programmed", func() (bool, string) {
					v := c.lbVIPs()["tenant-a/"+a.name]
					return len(v) > 0, fmt.Sprintf("VIPs %v", v)
				})
				if v := c.lbVIPs()["tenant-a/"+a.name]; v[a.ip+":80"] {
					t.Errorf("alice's loadBalancerIP became a VIP: %v", v)
				}
			}
			// The status is the load balancer implementation's to write.
			created.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a.ip}}
			if _, err := alice.kc.CoreV1().Services(alice.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
				t.Errorf("alice wrote her Service's status.loadBalancer: err %v, want Forbidden", err)
			}
		})
	}
	v := c.lbVIPs()
	for svc, vips := range v {
		if svc != "tenant-b/web" && (vips["192.0.2.20:80"] || vips["10.16.0.9:80"]) {
			t.Errorf("%s holds a contested VIP: %v", svc, vips)
		}
	}
	if !v["tenant-b/web"]["192.0.2.20:80"] {
		t.Errorf("bob's Service lost 192.0.2.20:80: %v", v)
	}
}

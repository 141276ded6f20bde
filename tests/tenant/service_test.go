package tenant_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func service(name, clusterIP string, proto corev1.Protocol, port int32, externalIPs ...string) *corev1.Service {
	return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: clusterIP, ExternalIPs: externalIPs, Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "p", Protocol: proto, Port: port}}}}
}

// CVE-2020-8554 as a tenant would try it: a Service whose externalIPs is
// the cluster DNS's ClusterIP (every pod's lookups would go to the
// tenant's pods, or be rejected for everyone with no endpoints). Without
// the admission policy of the manifests (tests/packaging checks that one),
// the controller refuses the address with an event and programs no VIP
// for it, while the same Service's valid external address is programmed.
func TestTenantCannotTakeTheClusterDNSWithExternalIPs(t *testing.T) {
	c := newCluster(t)
	alice := c.newTenant("alice", "tenant-a", nil)
	ctx := context.Background()
	dns := service("kube-dns", "10.96.0.10", corev1.ProtocolUDP, 53)
	if _, err := c.admin.CoreV1().Services("kube-system").Create(ctx, dns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	grab := service("grab", "", corev1.ProtocolUDP, 53, "10.96.0.10", "192.0.2.10")
	if _, err := alice.kc.CoreV1().Services(alice.ns).Create(ctx, grab, metav1.CreateOptions{}); err != nil {
		t.Fatalf("alice could not create her Service at all: %v", err)
	}
	ev := c.waitEvent(alice, "Service", "grab", "ExternalAddressRefused")
	if !strings.Contains(ev.Message, "10.96.0.10") {
		t.Errorf("event %q does not name the refused address", ev.Message)
	}
	c.waitFor(60*time.Second, "alice's valid external address 192.0.2.10:53 programmed", func() (bool, string) {
		v := c.lbVIPs()
		return v["tenant-a/grab"]["192.0.2.10:53"], fmt.Sprintf("VIPs: %v", v)
	})
	v := c.lbVIPs()
	if v["tenant-a/grab"]["10.96.0.10:53"] {
		t.Errorf("alice's Service holds the DNS address as a VIP: %v", v["tenant-a/grab"])
	}
	if !v["kube-system/kube-dns"]["10.96.0.10:53"] {
		t.Errorf("kube-dns lost its VIP: %v", v)
	}
}

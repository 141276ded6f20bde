package node_test

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestDualStackServices: a dual-stack cluster (kube-apiserver and
// kube-controller-manager with an IPv4 and an IPv6 Service range, the
// endpointslice controller writing one slice per family). A
// RequireDualStack Service gets a ClusterIP of each family and an OVN VIP
// for each with that family's backends; pods on both nodes reach both
// backends through each VIP; a PreferDualStack Service gets both; a
// SingleStack IPv6 Service only its IPv6 VIP; UDP ("DNS") answers over
// IPv6; the node itself reaches the IPv6 ClusterIP through ovn0.
func TestDualStackServices(t *testing.T) {
	c := startServiceClusterWith(t, clusterSpec{nodes: 2, dualStack: true})
	const ns = "svc6"
	c.ensureNamespace(t, ns, nil)
	backends := []*clusterPod{
		c.addPod(t, 0, ns, "web-0", map[string]string{"app": "web"}, nil),
		c.addPod(t, 1, ns, "web-1", map[string]string{"app": "web"}, nil),
	}
	dns := c.addPod(t, 1, ns, "dns-0", map[string]string{"app": "dns"}, nil)
	clients := []*clusterPod{c.addPod(t, 0, ns, "client-a", nil, nil), c.addPod(t, 1, ns, "client-b", nil, nil)}
	var v4, v6 []string
	for _, b := range append(backends, dns) {
		if len(b.ips) != 2 {
			t.Fatalf("pod %s's addresses %v: want one per family", b.name, b.ips)
		}
		c.markReady(t, b)
	}
	for _, b := range backends {
		serveName(t, b.netns, 8080, false, b.name)
		v4, v6 = append(v4, b.ips[0]), append(v6, b.ips[1])
	}
	serveName(t, dns.netns, 5353, true, "dns-0")

	require := corev1.IPFamilyPolicyRequireDualStack
	prefer := corev1.IPFamilyPolicyPreferDualStack
	single := corev1.IPFamilyPolicySingleStack
	web := c.createFamilyService(t, ns, "web", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, &require, nil)
	pref := c.createFamilyService(t, ns, "web-prefer", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, &prefer, nil)
	only6 := c.createFamilyService(t, ns, "web-v6", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, &single, []corev1.IPFamily{corev1.IPv6Protocol})
	dns6 := c.createFamilyService(t, ns, "dns", map[string]string{"app": "dns"}, corev1.ProtocolUDP, 53, 5353, &single, []corev1.IPFamily{corev1.IPv6Protocol})
	for name, ips := range map[string][]string{"web": web, "web-prefer": pref} {
		if len(ips) != 2 || !netip.MustParseAddr(ips[0]).Is4() || !netip.MustParseAddr(ips[1]).Is6() {
			t.Fatalf("Service %s's ClusterIPs %v: want an IPv4 and an IPv6 one", name, ips)
		}
	}
	if len(only6) != 1 || !netip.MustParseAddr(only6[0]).Is6() {
		t.Fatalf("SingleStack IPv6 Service's ClusterIPs %v", only6)
	}
	c.waitBackends(t, ns, "web", corev1.ProtocolTCP, net.JoinHostPort(web[0], "80"), v4...)
	c.waitBackends(t, ns, "web", corev1.ProtocolTCP, net.JoinHostPort(web[1], "80"), v6...)
	c.waitBackends(t, ns, "web-prefer", corev1.ProtocolTCP, net.JoinHostPort(pref[1], "80"), v6...)
	c.waitBackends(t, ns, "web-v6", corev1.ProtocolTCP, net.JoinHostPort(only6[0], "80"), v6...)
	c.waitBackends(t, ns, "dns", corev1.ProtocolUDP, net.JoinHostPort(dns6[0], "53"), dns.ips[1])
	if got, ok := c.backendsInNB(ns, "web-v6", corev1.ProtocolTCP, net.JoinHostPort(web[0], "80")); ok {
		t.Errorf("the SingleStack IPv6 Service has the IPv4 VIP %s (backends %v)", web[0], got)
	}
	c.waitChassisCaughtUp(t)

	for _, vip := range []string{web[0], web[1], pref[1], only6[0]} {
		addr := net.JoinHostPort(vip, "80")
		for _, cl := range clients {
			seen := map[string]int{}
			for i := 0; i < 40; i++ {
				got, err := ask(cl.netns, addr, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d from %s (%s) to %s: %v\n%s", i, cl.name, cl.nodeName, addr, err, dualStackEgressState(c.cluster, cl.node.NS))
				}
				seen[got]++
			}
			for _, b := range backends {
				if seen[b.name] == 0 {
					t.Errorf("40 connections from %s to %s: backend %s got none (%v)", cl.name, addr, b.name, seen)
				}
			}
		}
	}
	dnsAddr := net.JoinHostPort(dns6[0], "53")
	for _, cl := range clients {
		if got, err := askUDP(cl.netns, dnsAddr, 3*time.Second); err != nil || got != "dns-0" {
			t.Errorf("UDP from %s to %s: %q %v", cl.name, dnsAddr, got, err)
		}
	}
	// externalIPs and LoadBalancer ingress addresses in both families are
	// VIPs with that family's backends;
	// an IPv6 externalIP inside the pod subnet is refused (only that one:
	// a tenant must not take over pod addresses in either family).
	ext := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-ext"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, IPFamilyPolicy: &require,
			ExternalIPs: []string{"192.0.2.80", "2001:db8::80", "fd00:10:16::99"},
			Ports:       []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	if _, err := c.cp.kc.CoreV1().Services(ns).Create(context.Background(), ext, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBackends(t, ns, "web-ext", corev1.ProtocolTCP, "192.0.2.80:80", v4...)
	c.waitBackends(t, ns, "web-ext", corev1.ProtocolTCP, "[2001:db8::80]:80", v6...)
	if got, ok := c.backendsInNB(ns, "web-ext", corev1.ProtocolTCP, "[fd00:10:16::99]:80"); ok {
		t.Errorf("the externalIP fd00:10:16::99 inside the pod subnet fd00:10:16::/64 is a VIP (backends %v)", got)
	}
	// A LoadBalancer Service's ingress addresses (as a load balancer
	// implementation writes them in its status) in both families.
	lb := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "web"}, IPFamilyPolicy: &require,
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}
	lb, err := c.cp.kc.CoreV1().Services(ns).Create(context.Background(), lb, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.81"}, {IP: "2001:db8::81"}}
	if _, err := c.cp.kc.CoreV1().Services(ns).UpdateStatus(context.Background(), lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitBackends(t, ns, "web-lb", corev1.ProtocolTCP, "192.0.2.81:80", v4...)
	c.waitBackends(t, ns, "web-lb", corev1.ProtocolTCP, "[2001:db8::81]:80", v6...)
	c.waitChassisCaughtUp(t)
	for _, addr := range []string{"192.0.2.80:80", "[2001:db8::80]:80", "192.0.2.81:80", "[2001:db8::81]:80"} {
		if got, err := ask(clients[0].netns, addr, 3*time.Second); err != nil || (got != "web-0" && got != "web-1") {
			t.Errorf("%s to external address %s: %q %v", clients[0].name, addr, got, err)
		}
	}
	// The node itself (host network, routed into OVN by ovn0's IPv6 route
	// to the Service range).
	addr := net.JoinHostPort(web[1], "80")
	if got, err := ask(c.nodes[0].NS, addr, 3*time.Second); err != nil || (got != "web-0" && got != "web-1") {
		t.Errorf("node-a to %s: %q %v\n%s", addr, got, err, dualStackEgressState(c.cluster, c.nodes[0].NS))
	}
}

// createFamilyService creates a ClusterIP Service with an IP family policy
// (and families, nil: the cluster's default) and returns its ClusterIPs.
func (c *svcCluster) createFamilyService(t testing.TB, ns, name string, selector map[string]string, proto corev1.Protocol, port, target int32,
	policy *corev1.IPFamilyPolicy, families []corev1.IPFamily) []string {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, IPFamilyPolicy: policy, IPFamilies: families,
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(target), Protocol: proto}}}}
	s, err := c.cp.kc.CoreV1().Services(ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cp.kc.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return s.Spec.ClusterIPs
}

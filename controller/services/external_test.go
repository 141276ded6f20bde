package services

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
)

// A hostile tenant edits Services in its own namespace. These tests give a
// tenant Service external addresses that belong to someone else and check
// what a user would: a Warning event on the Service naming the address,
// the rule and the fix, and the VIP absent from the NB load balancer while
// the Service's valid VIPs are programmed.

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func tenantService(ns, name string, created time.Time, clusterIP string, proto corev1.Protocol, port int32, mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: clusterIP, ClusterIPs: []string{clusterIP},
			Ports: []corev1.ServicePort{{Name: "p", Port: port, Protocol: proto}}}}
	if mut != nil {
		mut(s)
	}
	return s
}

func kubeDNS() *corev1.Service {
	return tenantService("kube-system", "kube-dns", t0, "10.96.0.10", corev1.ProtocolUDP, 53, nil)
}

func clusterNode() *corev1.Node {
	n := chassisNode("n1", "ch1")
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.10.11"}, {Type: corev1.NodeExternalIP, Address: "203.0.113.11"}}
	return n
}

// startGuarded runs the reconciler as controller/kube wires it: Subnets,
// the Service CIDR and the join CIDR known.
func startGuarded(t *testing.T, serviceCIDRs []netip.Prefix, typed ...runtime.Object) *ctltest.Env {
	t.Helper()
	e := ctltest.New(t, typed,
		ctltest.Subnet("ovn-default", map[string]any{"cidrBlock": "10.16.0.0/16", "default": true}),
		ctltest.Subnet("join", map[string]any{"cidrBlock": "100.64.0.0/16"}),
		ctltest.Subnet("team-b", map[string]any{"cidrBlock": "10.20.0.0/16,fd00:20::/64", "namespaces": []any{"team-b"}}))
	r, err := New(Config{Log: e.Log, Recorder: e.Recorder, Informers: e.Informers, NB: e.NB, DInformers: e.DInformers, ServiceCIDRs: serviceCIDRs})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	return e
}

var svcCIDR = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}

// refusedEvent waits for the ExternalAddressRefused event of the address
// and checks that it names the Service, the rule and a fix.
func refusedEvent(t *testing.T, e *ctltest.Env, svcKey, addr, rule string) string {
	t.Helper()
	for {
		ev := e.AwaitEvent("Warning " + ReasonAddrRefused)
		if !strings.Contains(ev, "Service "+svcKey+":") || !strings.Contains(ev, " "+addr) {
			continue
		}
		if !strings.Contains(ev, "rule "+rule) || !strings.Contains(ev, "fix: ") {
			t.Fatalf("event %q: want rule %s and a fix", ev, rule)
		}
		return ev
	}
}

func TestExternalIPOfClusterDNSIsRefusedAndTheValidOneProgrammed(t *testing.T) {
	tenant := tenantService("tenant", "dns", t0.Add(time.Hour), "10.96.5.5", corev1.ProtocolUDP, 53, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"10.96.0.10", "198.51.100.7"}
	})
	e := startGuarded(t, svcCIDR, clusterNode(), kubeDNS(), tenant)
	ev := refusedEvent(t, e, "tenant/dns", "10.96.0.10", RuleServiceCIDR)
	if !strings.Contains(ev, "10.96.0.0/12") {
		t.Fatalf("event %q does not name the Service CIDR", ev)
	}
	udp := Name("tenant", "dns", corev1.ProtocolUDP)
	e.AwaitNB("the tenant's valid externalIP", func() bool { _, ok := lbVIPs(e, udp)["198.51.100.7:53"]; return ok })
	vips := lbVIPs(e, udp)
	if _, ok := vips["10.96.0.10:53"]; ok {
		t.Fatalf("the tenant's load balancer serves the cluster DNS address: %v", vips)
	}
	if _, ok := vips["10.96.5.5:53"]; !ok {
		t.Fatalf("the tenant's own ClusterIP is not programmed: %v", vips)
	}
	e.AwaitNB("kube-dns", func() bool {
		_, ok := lbVIPs(e, Name("kube-system", "kube-dns", corev1.ProtocolUDP))["10.96.0.10:53"]
		return ok
	})
}

// Without the Service CIDR configured (a wrong --service-cluster-ip-range),
// another Service's ClusterIP is still refused.
func TestExternalIPEqualToAnotherServicesClusterIPIsRefused(t *testing.T) {
	tenant := tenantService("tenant", "dns", t0.Add(time.Hour), "10.96.5.5", corev1.ProtocolUDP, 53, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"10.96.0.10"}
	})
	e := startGuarded(t, nil, clusterNode(), kubeDNS(), tenant)
	ev := refusedEvent(t, e, "tenant/dns", "10.96.0.10", RuleClusterIP)
	if !strings.Contains(ev, "kube-system/kube-dns") {
		t.Fatalf("event %q does not name the Service whose ClusterIP it is", ev)
	}
	udp := Name("tenant", "dns", corev1.ProtocolUDP)
	e.AwaitNB("the tenant's ClusterIP", func() bool { _, ok := lbVIPs(e, udp)["10.96.5.5:53"]; return ok })
	if _, ok := lbVIPs(e, udp)["10.96.0.10:53"]; ok {
		t.Fatalf("the tenant's load balancer serves kube-dns's ClusterIP: %v", lbVIPs(e, udp))
	}
}

func TestExternalAddressesOfPodsNodesAndSpecialRangesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name, addr, rule, names string
		lb                      bool // a LoadBalancer ingress IP instead of an externalIP
	}{
		{name: "another pod's IP", addr: "10.16.0.7", rule: RulePodSubnet, names: "Subnet ovn-default"},
		{name: "another tenant's Subnet", addr: "10.20.3.4", rule: RulePodSubnet, names: "Subnet team-b"},
		{name: "a pod's IPv6 address", addr: "fd00:20::9", rule: RulePodSubnet, names: "Subnet team-b"},
		{name: "a node's join address", addr: "100.64.0.2", rule: RuleJoinSubnet, names: "100.64.0.0/16"},
		{name: "a node's InternalIP", addr: "192.168.10.11", rule: RuleNodeAddress, names: "Node n1"},
		{name: "a node's ExternalIP", addr: "203.0.113.11", rule: RuleNodeAddress, names: "Node n1"},
		{name: "the metadata service", addr: "169.254.169.254", rule: RuleSpecialAddress, names: "link-local"},
		{name: "loopback", addr: "127.0.0.1", rule: RuleSpecialAddress, names: "loopback"},
		{name: "a LoadBalancer ingress IP of a pod", addr: "10.16.0.8", rule: RulePodSubnet, names: "Subnet ovn-default", lb: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tenant := tenantService("tenant", "grab", t0.Add(time.Hour), "10.96.7.7", corev1.ProtocolTCP, 80, func(s *corev1.Service) {
				if tc.lb {
					s.Spec.Type = corev1.ServiceTypeLoadBalancer
					s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: tc.addr}, {IP: "198.51.100.9"}}
				} else {
					s.Spec.ExternalIPs = []string{tc.addr, "198.51.100.9"}
				}
			})
			e := startGuarded(t, svcCIDR, clusterNode(), tenant)
			ev := refusedEvent(t, e, "tenant/grab", tc.addr, tc.rule)
			if !strings.Contains(ev, tc.names) {
				t.Fatalf("event %q does not say %q", ev, tc.names)
			}
			tcp := Name("tenant", "grab", corev1.ProtocolTCP)
			e.AwaitNB("the valid external address", func() bool { _, ok := lbVIPs(e, tcp)["198.51.100.9:80"]; return ok })
			refused := netip.AddrPortFrom(netip.MustParseAddr(tc.addr), 80).String()
			if _, ok := lbVIPs(e, tcp)[refused]; ok {
				t.Fatalf("%s is programmed: %v", refused, lbVIPs(e, tcp))
			}
		})
	}
}

func TestSecondServiceClaimingAnExternalIPAndPortIsRefusedUntilTheFirstGoes(t *testing.T) {
	first := tenantService("team-a", "web", t0, "10.96.1.1", corev1.ProtocolTCP, 443, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"198.51.100.20"}
	})
	// Newer, and a second port: 8443 on the same address is free, 443 is not.
	second := tenantService("team-b", "web", t0.Add(time.Minute), "10.96.2.2", corev1.ProtocolTCP, 443, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"198.51.100.20"}
		s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: "alt", Port: 8443, Protocol: corev1.ProtocolTCP})
	})
	// Same address and port on UDP: another load balancer row, no conflict.
	udp := tenantService("team-c", "quic", t0.Add(2*time.Minute), "10.96.3.3", corev1.ProtocolUDP, 443, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"198.51.100.20"}
	})
	e := startGuarded(t, svcCIDR, clusterNode(), second, first, udp)
	ev := refusedEvent(t, e, "team-b/web", "198.51.100.20", RuleHeldByService)
	if !strings.Contains(ev, "team-a/web") || !strings.Contains(ev, "TCP/443") || strings.Contains(ev, "8443") {
		t.Fatalf("event %q: want it to name team-a/web and TCP/443 only", ev)
	}
	a, b := Name("team-a", "web", corev1.ProtocolTCP), Name("team-b", "web", corev1.ProtocolTCP)
	e.AwaitNB("the first Service's externalIP", func() bool { _, ok := lbVIPs(e, a)["198.51.100.20:443"]; return ok })
	e.AwaitNB("the second Service's free port", func() bool { _, ok := lbVIPs(e, b)["198.51.100.20:8443"]; return ok })
	if _, ok := lbVIPs(e, b)["198.51.100.20:443"]; ok {
		t.Fatalf("two load balancers serve 198.51.100.20:443: %v", lbVIPs(e, b))
	}
	e.AwaitNB("the UDP Service", func() bool {
		_, ok := lbVIPs(e, Name("team-c", "quic", corev1.ProtocolUDP))["198.51.100.20:443"]
		return ok
	})

	// The holder goes: the address is the second Service's on the next sync.
	if err := e.Kube.CoreV1().Services("team-a").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("the second Service takes over", func() bool { _, ok := lbVIPs(e, b)["198.51.100.20:443"]; return ok })
	if lbVIPs(e, a) != nil {
		t.Fatalf("the deleted Service's load balancer is still there: %v", lbVIPs(e, a))
	}
}

// A tenant whose old Service adds an address another Service already
// serves does not take it over: the holder keeps it.
func TestAnOlderServiceCannotTakeAnAddressAnotherAlreadyServes(t *testing.T) {
	old := tenantService("tenant", "old", t0, "10.96.1.1", corev1.ProtocolTCP, 443, nil)
	holder := tenantService("team-a", "web", t0.Add(time.Hour), "10.96.2.2", corev1.ProtocolTCP, 443, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"198.51.100.30"}
	})
	e := startGuarded(t, svcCIDR, clusterNode(), old, holder)
	h := Name("team-a", "web", corev1.ProtocolTCP)
	e.AwaitNB("the holder's externalIP", func() bool { _, ok := lbVIPs(e, h)["198.51.100.30:443"]; return ok })
	e.AwaitNB("the old Service's load balancer", func() bool { return lbVIPs(e, Name("tenant", "old", corev1.ProtocolTCP)) != nil })

	old = old.DeepCopy()
	old.Spec.ExternalIPs = []string{"198.51.100.30"}
	old.ResourceVersion = "2"
	if _, err := e.Kube.CoreV1().Services("tenant").Update(e.Ctx, old, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusedEvent(t, e, "tenant/old", "198.51.100.30", RuleHeldByService)
	if _, ok := lbVIPs(e, Name("tenant", "old", corev1.ProtocolTCP))["198.51.100.30:443"]; ok {
		t.Fatal("the older Service took the address")
	}
	if _, ok := lbVIPs(e, h)["198.51.100.30:443"]; !ok {
		t.Fatal("the holder lost its address")
	}
}

// A Subnet created after the Service covers its externalIP: the VIP goes
// (the pods about to get addresses there must not be shadowed).
func TestAnExternalIPIsWithdrawnWhenASubnetComesToCoverIt(t *testing.T) {
	tenant := tenantService("tenant", "early", t0, "10.96.7.7", corev1.ProtocolTCP, 80, func(s *corev1.Service) {
		s.Spec.ExternalIPs = []string{"10.30.0.5"}
	})
	e := startGuarded(t, svcCIDR, clusterNode(), tenant)
	tcp := Name("tenant", "early", corev1.ProtocolTCP)
	e.AwaitNB("the externalIP while no Subnet covers it", func() bool { _, ok := lbVIPs(e, tcp)["10.30.0.5:80"]; return ok })
	if _, err := e.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(e.Ctx, ctltest.Subnet("team-c", map[string]any{"cidrBlock": "10.30.0.0/16"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	refusedEvent(t, e, "tenant/early", "10.30.0.5", RulePodSubnet)
	e.AwaitNB("the externalIP withdrawn", func() bool { _, ok := lbVIPs(e, tcp)["10.30.0.5:80"]; return !ok })
	if _, ok := lbVIPs(e, tcp)["10.96.7.7:80"]; !ok {
		t.Fatalf("the ClusterIP went too: %v", lbVIPs(e, tcp))
	}
}

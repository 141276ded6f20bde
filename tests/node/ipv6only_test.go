package node_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
)

// TestIPv6OnlyCluster: a cluster with no IPv4 anywhere but loopback: the
// nodes' underlay, the Node InternalIPs, the tunnel, ovn-default, join and
// the Service range are IPv6. Each chassis announces an IPv6 Geneve
// endpoint; pods get one IPv6 address; a pod reaches the pod on the other
// node (Geneve over IPv6), its own node and the other node's address; a
// ClusterIP Service spreads over both pods from the real EndpointSlices;
// the node reaches the ClusterIP; a pod resolves names through a real DNS
// server (dnsmasq) behind an IPv6 Service, over UDP and TCP; a pod leaves
// masqueraded to its node's IPv6 address.
func TestIPv6OnlyCluster(t *testing.T) {
	c := startServiceClusterWith(t, clusterSpec{nodes: 2, ipv6Only: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The chassis' tunnel endpoints are their underlay IPv6 addresses.
	sb := dial(t, sbdb.FullDatabaseModel, c.cp.central.SB())
	t.Cleanup(sb.Close)
	var encaps []string
	if err := sb.WaitUntil(ctx, "two Geneve encaps with IPv6 endpoints in the SB", func() bool {
		var rows []sbdb.Encap
		_ = sb.List(ctx, &rows)
		encaps = encaps[:0]
		for _, e := range rows {
			encaps = append(encaps, e.Type+" "+e.IP)
		}
		slices.Sort(encaps)
		return slices.Equal(encaps, []string{"geneve fd00:192:168:100::1", "geneve fd00:192:168:100::2"})
	}, nil); err != nil {
		t.Fatalf("%v (encaps: %v)", err, encaps)
	}

	const ns = "v6"
	c.ensureNamespace(t, ns, nil)
	pa := c.addPod(t, 0, ns, "pa", map[string]string{"app": "web"}, nil)
	pb := c.addPod(t, 1, ns, "pb", map[string]string{"app": "web"}, nil)
	for _, p := range []*clusterPod{pa, pb} {
		if len(p.ips) != 1 || !strings.HasPrefix(p.ips[0], "fd00:10:16::") {
			t.Fatalf("pod %s's addresses %v: want one of fd00:10:16::/64", p.name, p.ips)
		}
		serveName(t, p.netns, 8080, false, p.name)
		c.markReady(t, p)
	}
	diag := func(ns string) string { return dualStackEgressState(c.cluster, ns) }

	// Pod to pod across nodes: Geneve over the IPv6 underlay.
	b := net.JoinHostPort(pb.ip, "8080")
	if got, err := askWithin(pa.netns, b, 20*time.Second); err != nil || got != "pb" {
		t.Fatalf("pa (node-a) to pb (node-b) at %s: %q %v\n%s", b, got, err, diag(pa.node.NS))
	}
	// The node to its pod (ovn0's IPv6 route), the pod to the other node.
	if got, err := askWithin(c.nodes[0].NS, net.JoinHostPort(pa.ip, "8080"), 10*time.Second); err != nil || got != "pa" {
		t.Errorf("node-a to its pod pa: %q %v\n%s", got, err, diag(c.nodes[0].NS))
	}
	if err := ping(pa.netns, "fd00:192:168:100::2", 3); err != nil {
		t.Errorf("pa to node-b's underlay address: %v\n%s", err, diag(pa.node.NS))
	}

	// A ClusterIP Service of the IPv6 range.
	vip := c.createService(t, ns, "web", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, false)
	if !netip.MustParseAddr(vip).Is6() || !strings.HasPrefix(vip, "fd00:10:96::") {
		t.Fatalf("ClusterIP %s: not of fd00:10:96::/112", vip)
	}
	addr := net.JoinHostPort(vip, "80")
	c.waitBackends(t, ns, "web", corev1.ProtocolTCP, addr, pa.ip, pb.ip)
	c.waitChassisCaughtUp(t)
	seen := map[string]int{}
	for i := 0; i < 40; i++ {
		got, err := ask(pa.netns, addr, 3*time.Second)
		if err != nil {
			t.Fatalf("connection %d from pa to %s: %v\n%s", i, addr, err, diag(pa.node.NS))
		}
		seen[got]++
	}
	if seen["pa"] == 0 || seen["pb"] == 0 {
		t.Errorf("40 connections to %s: %v, want both backends", addr, seen)
	}
	if got, err := ask(c.nodes[1].NS, addr, 3*time.Second); err != nil || (got != "pa" && got != "pb") {
		t.Errorf("node-b to %s: %q %v\n%s", addr, got, err, diag(c.nodes[1].NS))
	}

	// DNS over IPv6: a real DNS server (dnsmasq) in a pod behind a
	// Service with UDP and TCP port 53, as kube-dns is; pa resolves the
	// Service's name over each and connects to what it got.
	dnsPod := c.addPod(t, 1, ns, "dns", map[string]string{"app": "dns"}, nil)
	c.markReady(t, dnsPod)
	startDNS(t, dnsPod.netns, 5353, "web.v6.svc.cluster.local="+vip, "pb.v6.pod.cluster.local="+pb.ip)
	dnsSvc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "kube-dns"}, Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "dns"},
		Ports: []corev1.ServicePort{{Name: "dns", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolUDP},
			{Name: "dns-tcp", Port: 53, TargetPort: intstr.FromInt32(5353), Protocol: corev1.ProtocolTCP}}}}
	dnsSvc, err := c.cp.kc.CoreV1().Services(ns).Create(ctx, dnsSvc, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dnsAddr := net.JoinHostPort(dnsSvc.Spec.ClusterIP, "53")
	c.waitBackends(t, ns, "kube-dns", corev1.ProtocolUDP, dnsAddr, dnsPod.ip)
	c.waitBackends(t, ns, "kube-dns", corev1.ProtocolTCP, dnsAddr, dnsPod.ip)
	c.waitChassisCaughtUp(t)
	for _, network := range []string{"udp", "tcp"} {
		var got []string
		deadline := time.Now().Add(10 * time.Second)
		for {
			got, err = resolveIn(pa.netns, dnsAddr, network, "web.v6.svc.cluster.local.", 2*time.Second)
			if (err == nil && slices.Equal(got, []string{vip})) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || !slices.Equal(got, []string{vip}) {
			t.Fatalf("pa resolving web.v6.svc.cluster.local over %s through %s: %v %v, want [%s]\n%s", network, dnsAddr, got, err, vip, diag(pa.node.NS))
		}
		if got, err := ask(pa.netns, net.JoinHostPort(got[0], "80"), 3*time.Second); err != nil || (got != "pa" && got != "pb") {
			t.Errorf("pa to the resolved %s: %q %v", vip, got, err)
		}
	}
	if got, err := resolveIn(pa.netns, dnsAddr, "udp", "pb.v6.pod.cluster.local.", 3*time.Second); err != nil || !slices.Equal(got, []string{pb.ip}) {
		t.Errorf("pa resolving pb's name: %v %v, want [%s]", got, err, pb.ip)
	}

	// Egress: masqueraded to the node's IPv6 address.
	for i, p := range []*clusterPod{pa, pb} {
		out := &outside{ns: c.world.ns, addr: fmt.Sprintf("[fd00:%d::1]:7000", 207+i)}
		want := fmt.Sprintf("fd00:%d::2", 207+i)
		deadline := time.Now().Add(20 * time.Second)
		for {
			src, err := out.sourceSeen(p.netns, 2*time.Second)
			if err == nil && src == want {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s to the outside: saw %q (%v), want its node's %s\n%s", p.name, src, err, want, diag(p.node.NS))
			}
		}
	}
}

// askWithin is ask retried until it answers or the deadline passes (the
// first connection may come before the chassis' flows for a new pod).
func askWithin(ns, addr string, d time.Duration) (string, error) {
	deadline := time.Now().Add(d)
	for {
		got, err := ask(ns, addr, 2*time.Second)
		if err == nil || time.Now().After(deadline) {
			return got, err
		}
	}
}

package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// svcCluster is a cluster whose EndpointSlices come from a real
// kube-controller-manager, with an NB connection to wait on load balancers.
type svcCluster struct {
	*cluster
	nb *ovsdbconn.Conn
}

func startServiceCluster(t *testing.T, n int) *svcCluster {
	t.Helper()
	return startServiceClusterWith(t, clusterSpec{nodes: n})
}

func startServiceClusterWith(t *testing.T, spec clusterSpec) *svcCluster {
	t.Helper()
	c := startClusterWith(t, spec)
	c.cp.api.StartControllerManager(t)
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	t.Cleanup(nb.Close)
	return &svcCluster{cluster: c, nb: nb}
}

// markReady sets what kubelet would once the pod's container runs: phase
// Running, the pod IPs from the CNI result and condition Ready (the
// endpointslice controller reads exactly these).
func (c *svcCluster) markReady(t testing.TB, p *clusterPod) {
	t.Helper()
	now := metav1.Now()
	var ips []corev1.PodIP
	for _, ip := range p.ips {
		ips = append(ips, corev1.PodIP{IP: ip})
	}
	st := map[string]any{"status": corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.ip, PodIPs: ips,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}}}
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.cp.kc.CoreV1().Pods(p.namespace).Patch(context.Background(), p.name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("marking pod %s/%s ready: %v", p.namespace, p.name, err)
	}
}

// deletePodObject deletes only the API object (grace 0), as when a pod is
// evicted: its network namespace and responders stay until the test ends,
// so a connection the load balancer still sent there would be seen.
func (c *svcCluster) deletePodObject(t testing.TB, p *clusterPod) {
	t.Helper()
	zero := int64(0)
	if err := c.cp.kc.CoreV1().Pods(p.namespace).Delete(context.Background(), p.name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
}

// serveName answers every TCP connection on port with name, and every UDP
// datagram on port with name (when udp).
func serveName(t testing.TB, ns string, port int, udp bool, name string) {
	t.Helper()
	addr := fmt.Sprintf(":%d", port)
	if udp {
		netns.ServeUDP(t, ns, "udp", addr, func([]byte) []byte { return []byte(name) })
		return
	}
	netns.ServeTCP(t, ns, addr, func(c net.Conn) {
		_, _ = c.Write([]byte(name))
		c.Close()
	})
}

// ask connects from network namespace ns to addr and returns what the server said.
func ask(ns, addr string, timeout time.Duration) (string, error) {
	var c net.Conn
	if err := inNetns(ns, func() (err error) { c, err = net.DialTimeout("tcp", addr, timeout); return err }); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	b, err := io.ReadAll(c)
	return string(b), err
}

// askUDP sends one datagram from ns to addr and returns the reply.
func askUDP(ns, addr string, timeout time.Duration) (string, error) {
	var c net.Conn
	if err := inNetns(ns, func() (err error) { c, err = net.Dial("udp", addr); return err }); err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("query")); err != nil {
		return "", err
	}
	b := make([]byte, 512)
	n, err := c.Read(b)
	return string(b[:n]), err
}

// createService creates a ClusterIP Service and returns its ClusterIP.
func (c *svcCluster) createService(t testing.TB, ns, name string, selector map[string]string, proto corev1.Protocol, port, target int32, affinity bool) string {
	t.Helper()
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{Selector: selector, Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(target), Protocol: proto}}}}
	if affinity {
		s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	}
	s, err := c.cp.kc.CoreV1().Services(ns).Create(context.Background(), s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.cp.kc.CoreV1().Services(ns).Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return s.Spec.ClusterIP
}

// backendsInNB returns the backends of vip ("ip:port") in the Service's load
// balancer of proto as sorted IPs, and whether the VIP exists.
func (c *svcCluster) backendsInNB(ns, name string, proto corev1.Protocol, vip string) ([]string, bool) {
	var lbs []nbdb.LoadBalancer
	_ = c.nb.List(context.Background(), &lbs)
	for _, lb := range lbs {
		if lb.Name != services.Name(ns, name, proto) {
			continue
		}
		b, ok := lb.Vips[vip]
		if !ok {
			return nil, false
		}
		var ips []string
		for _, x := range strings.Split(b, ",") {
			if h, _, err := net.SplitHostPort(x); err == nil {
				ips = append(ips, h)
			}
		}
		sort.Strings(ips)
		return ips, true
	}
	return nil, false
}

// waitBackends waits until the NB load balancer of the Service has exactly these backend IPs for vip.
func (c *svcCluster) waitBackends(t testing.TB, ns, name string, proto corev1.Protocol, vip string, want ...string) {
	t.Helper()
	sort.Strings(want)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var got []string
	if err := c.nb.WaitUntil(ctx, fmt.Sprintf("load balancer %s with VIP %s and backends %v", services.Name(ns, name, proto), vip, want), func() bool {
		var ok bool
		got, ok = c.backendsInNB(ns, name, proto, vip)
		return ok && slices.Equal(got, want)
	}, nil); err != nil {
		t.Fatalf("%v (last: %v)", err, got)
	}
}

// TestServices: ClusterIP Services through OVN load balancers on two nodes,
// with EndpointSlices from the real endpointslice controller: spreading over
// three backends from both nodes, ClientIP affinity, the node itself, a pod
// reaching itself, a UDP "DNS" on the other node, a deleted backend dropped
// within a second, and an immediate reject once no backend is left.
func TestServices(t *testing.T) {
	c := startServiceCluster(t, 2)
	const ns = "svc"
	c.ensureNamespace(t, ns, nil)

	backends := []*clusterPod{
		c.addPod(t, 0, ns, "web-0", map[string]string{"app": "web", "id": "web-0"}, nil),
		c.addPod(t, 1, ns, "web-1", map[string]string{"app": "web", "id": "web-1"}, nil),
		c.addPod(t, 0, ns, "web-2", map[string]string{"app": "web", "id": "web-2"}, nil),
	}
	dns := c.addPod(t, 1, ns, "dns-0", map[string]string{"app": "dns"}, nil)
	clients := []*clusterPod{c.addPod(t, 0, ns, "client-a", nil, nil), c.addPod(t, 1, ns, "client-b", nil, nil)}
	var ips []string
	for _, b := range backends {
		serveName(t, b.netns, 8080, false, b.name)
		c.markReady(t, b)
		ips = append(ips, b.ip)
	}
	serveName(t, dns.netns, 5353, true, "dns-0")
	c.markReady(t, dns)

	webIP := c.createService(t, ns, "web", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, false)
	affIP := c.createService(t, ns, "web-aff", map[string]string{"app": "web"}, corev1.ProtocolTCP, 80, 8080, true)
	selfIP := c.createService(t, ns, "self", map[string]string{"id": "web-0"}, corev1.ProtocolTCP, 80, 8080, false)
	dnsIP := c.createService(t, ns, "dns", map[string]string{"app": "dns"}, corev1.ProtocolUDP, 53, 5353, false)
	web := net.JoinHostPort(webIP, "80")
	c.waitBackends(t, ns, "web", corev1.ProtocolTCP, web, ips...)
	c.waitBackends(t, ns, "web-aff", corev1.ProtocolTCP, net.JoinHostPort(affIP, "80"), ips...)
	c.waitBackends(t, ns, "self", corev1.ProtocolTCP, net.JoinHostPort(selfIP, "80"), backends[0].ip)
	c.waitBackends(t, ns, "dns", corev1.ProtocolUDP, net.JoinHostPort(dnsIP, "53"), dns.ip)
	// The backends are in the NB; every chassis has them in its flows
	// before the first connection (seen in CI: a client's first
	// connection refused, its node not there yet).
	c.waitChassisCaughtUp(t)

	t.Run("spreading", func(t *testing.T) {
		for _, cl := range clients {
			seen := map[string]int{}
			for i := 0; i < 200; i++ {
				got, err := ask(cl.netns, web, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d from %s (%s) to %s: %v", i, cl.name, cl.nodeName, web, err)
				}
				seen[got]++
			}
			for _, b := range backends {
				if seen[b.name] == 0 {
					t.Errorf("200 connections from %s on %s to %s: backend %s got none (%v)", cl.name, cl.nodeName, web, b.name, seen)
				}
			}
			t.Logf("from %s on %s: %v", cl.name, cl.nodeName, seen)
		}
	})

	t.Run("internal traffic policy local", func(t *testing.T) {
		local := corev1.ServiceInternalTrafficPolicyLocal
		svc, err := c.cp.kc.CoreV1().Services(ns).Create(context.Background(), &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-local"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"}, InternalTrafficPolicy: &local,
				Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addr := net.JoinHostPort(svc.Spec.ClusterIP, "80")
		want := map[string][]string{"client-a": {"web-0", "web-2"}, "client-b": {"web-1"}}
		for _, cl := range clients {
			// The template load balancer and its per-chassis variable
			// land after the Service: the first answer may take a moment.
			deadline := time.Now().Add(30 * time.Second)
			var got string
			for err = errors.New("none"); err != nil && time.Now().Before(deadline); {
				got, err = ask(cl.netns, addr, time.Second)
			}
			if err != nil {
				t.Fatalf("%s to %s (internalTrafficPolicy Local): %v\n%s", cl.name, addr, err, c.diag())
			}
			seen := map[string]int{}
			for i := 0; i < 40; i++ {
				got, err = ask(cl.netns, addr, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d from %s to %s: %v", i, cl.name, addr, err)
				}
				seen[got]++
			}
			for name := range seen {
				if !slices.Contains(want[cl.name], name) {
					t.Fatalf("internalTrafficPolicy Local: %s on %s reached %v, want only its node's %v", cl.name, cl.nodeName, seen, want[cl.name])
				}
			}
			if len(seen) != len(want[cl.name]) {
				t.Errorf("internalTrafficPolicy Local: 40 connections from %s reached %v, want each of %v", cl.name, seen, want[cl.name])
			}
		}
	})

	t.Run("affinity", func(t *testing.T) {
		aff := net.JoinHostPort(affIP, "80")
		for _, cl := range clients {
			seen := map[string]int{}
			for i := 0; i < 50; i++ {
				got, err := ask(cl.netns, aff, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d from %s to %s: %v", i, cl.name, aff, err)
				}
				seen[got]++
			}
			if len(seen) != 1 {
				t.Errorf("sessionAffinity ClientIP: 50 connections from %s to %s reached %v, want one backend", cl.name, aff, seen)
			}
		}
	})

	t.Run("node", func(t *testing.T) {
		for i, nd := range c.nodes {
			got, err := ask(nd.NS, web, 3*time.Second)
			if err != nil || !strings.HasPrefix(got, "web-") {
				t.Errorf("node %s to ClusterIP %s: %q, %v (route via ovn0: %s)", c.names[i], web, got, err, run(t, "ip", "-n", nd.NS, "route", "get", webIP))
			}
		}
	})

	t.Run("hairpin", func(t *testing.T) {
		self := net.JoinHostPort(selfIP, "80")
		for i := 0; i < 5; i++ {
			got, err := ask(backends[0].netns, self, 3*time.Second)
			if err != nil || got != "web-0" {
				t.Fatalf("web-0 to its own Service %s: %q, %v", self, got, err)
			}
		}
	})

	t.Run("dns", func(t *testing.T) {
		addr := net.JoinHostPort(dnsIP, "53")
		got, err := askUDP(clients[0].netns, addr, 3*time.Second)
		if err != nil || got != "dns-0" {
			t.Fatalf("UDP from %s (%s) to %s (backend on %s): %q, %v", clients[0].name, clients[0].nodeName, addr, dns.nodeName, got, err)
		}
	})

	t.Run("backend deleted", func(t *testing.T) {
		gone := backends[2]
		t0 := time.Now()
		c.deletePodObject(t, gone)
		// Connections from the moment of deletion: after 1 s none may
		// reach (or be lost to) the deleted backend; then 100 more.
		var late []string
		n := 0
		for time.Since(t0) < time.Second || n < 100 {
			got, err := ask(clients[0].netns, web, 500*time.Millisecond)
			if time.Since(t0) < time.Second {
				continue
			}
			n++
			if err != nil || got == gone.name {
				late = append(late, fmt.Sprintf("%s: %q %v", time.Since(t0).Round(time.Millisecond), got, err))
			}
		}
		if len(late) > 0 {
			t.Fatalf("more than 1 s after %s was deleted, %d of %d connections still went to it or failed: %v", gone.name, len(late), n, late)
		}
	})

	t.Run("scaled to zero rejects", func(t *testing.T) {
		c.deletePodObject(t, backends[0])
		c.deletePodObject(t, backends[1])
		c.waitBackends(t, ns, "web", corev1.ProtocolTCP, web)
		// "At once" is about the answer, not about how fast OVN spreads the
		// change: wait until every chassis has applied the NB as it is now.
		c.waitChassisCaughtUp(t)
		for _, cl := range clients {
			t0 := time.Now()
			_, err := ask(cl.netns, web, 5*time.Second)
			took := time.Since(t0)
			if !errors.Is(err, syscall.ECONNREFUSED) || took > time.Second {
				lbs, _ := exec.Command("ovn-nbctl", "--db="+c.cp.central.NB(), "lb-list").CombinedOutput()
				fl, _ := exec.Command("sh", "-c", "ovn-sbctl --db="+c.cp.central.SB()+" lflow-list | grep -E 'reject|"+webIP+"'").CombinedOutput()
				t.Errorf("from %s to %s without endpoints: %v after %s, want connection refused at once\n%s\n%s", cl.name, web, err, took.Round(time.Millisecond), lbs, fl)
			}
		}
	})
}

// waitChassisCaughtUp bumps NB_Global.nb_cfg and waits until every chassis
// has applied it (hv_cfg), as ovn-nbctl --wait=hv sync does.
func (c *svcCluster) waitChassisCaughtUp(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var g []nbdb.NBGlobal
	if err := c.nb.List(ctx, &g); err != nil || len(g) != 1 {
		t.Fatalf("NB_Global: %v (%d rows)", err, len(g))
	}
	ops, err := c.nb.Where(&g[0]).Mutate(&g[0], model.Mutation{Field: &g[0].NbCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1})
	if err != nil {
		t.Fatal(err)
	}
	res, err := ovsdbconn.Transact(ctx, c.nb, "bump nb_cfg", ops...)
	if err != nil || len(res) == 0 {
		t.Fatalf("bumping nb_cfg: %v", err)
	}
	want := g[0].NbCfg + 1
	if err := c.nb.WaitUntil(ctx, fmt.Sprintf("NB_Global.hv_cfg to reach %d (every chassis applied the NB)", want), func() bool {
		var cur []nbdb.NBGlobal
		_ = c.nb.List(ctx, &cur)
		return len(cur) == 1 && cur[0].HvCfg >= want
	}, nil); err != nil {
		t.Fatal(err)
	}
}

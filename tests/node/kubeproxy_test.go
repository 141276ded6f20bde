package node_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// startKubeProxy runs a real kube-proxy (iptables mode) in each node's
// network namespace, the coexistence the controller README recommends:
// kube-proxy serves NodePorts and externalIPs arriving at the node and its
// host-network clients, OVN's load balancers serve the pods.
func (c *svcCluster) startKubeProxy(t *testing.T, clusterCIDR string) {
	t.Helper()
	bin := kubeapi.KubeProxy(t)
	for i, nd := range c.nodes {
		log := filepath.Join(nd.Dir, "kube-proxy.log")
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", nd.NS, bin, "--kubeconfig="+c.cp.api.Kubeconfig, "--hostname-override="+c.names[i],
			"--proxy-mode=iptables", "--cluster-cidr="+clusterCIDR,
			// Leave the host's conntrack sizing and timeouts alone (they
			// are not per network namespace).
			"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
			"--healthz-bind-address=127.0.0.1:10256", "--metrics-bind-address=127.0.0.1:10249")
		cmd.Stdout, cmd.Stderr = f, f
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); f.Close() })
		// Ready once its health check answers 200 (rules synced).
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err = waitHealthzInNetns(ctx, nd.NS, "127.0.0.1:10256")
		cancel()
		if err != nil {
			raw, _ := os.ReadFile(log)
			t.Fatalf("kube-proxy on %s: %v\n%s", c.names[i], err, raw)
		}
	}
}

// waitHealthzInNetns waits for "GET /healthz" to answer 200 in a namespace,
// retrying on each refused connection until ctx ends.
func waitHealthzInNetns(ctx context.Context, ns, addr string) error {
	var last error
	for ctx.Err() == nil {
		conn, err := dialInNetns(ns, addr)
		if err == nil {
			_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = fmt.Fprintf(conn, "GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n")
			b := make([]byte, 64)
			n, _ := conn.Read(b)
			conn.Close()
			if strings.Contains(string(b[:n]), " 200 ") {
				return nil
			}
			last = fmt.Errorf("answered %q", strings.SplitN(string(b[:n]), "\r\n", 2)[0])
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond): // a retry interval: nothing to watch in another namespace's socket
		}
	}
	return fmt.Errorf("health check %s did not answer 200: %v", addr, last)
}

// serveNameAndSource answers every TCP connection with "name source-ip".
func serveNameAndSource(t testing.TB, ns string, port int, name string) {
	t.Helper()
	netns.ServeTCP(t, ns, fmt.Sprintf(":%d", port), func(c net.Conn) {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		_, _ = c.Write([]byte(name + " " + host))
		c.Close()
	})
}

// nodePortFamily is one address family a NodePort test runs in: the
// index of that family in pod and Service address lists, node i's address
// on its link to the outside and the outside's own address on that link.
type nodePortFamily struct {
	name    string
	index   int
	node    func(i int) string
	outside func(i int) string
}

var (
	nodePortIPv4 = nodePortFamily{"IPv4", 0, func(i int) string { return fmt.Sprintf("192.168.%d.2", 207+i) },
		func(i int) string { return fmt.Sprintf("192.168.%d.1", 207+i) }}
	nodePortIPv6 = nodePortFamily{"IPv6", 1, func(i int) string { return fmt.Sprintf("fd00:%d::2", 207+i) },
		func(i int) string { return fmt.Sprintf("fd00:%d::1", 207+i) }}
)

// NodePort from the outside through kube-proxy on the nodes, with OVN
// carrying the DNATed connection to the backend pod on either node:
// externalTrafficPolicy Cluster reaches backends on both nodes (masqueraded
// to the node), Local only the node's own backend, which sees the client's
// address. A pod reaches the same Service by its ClusterIP through OVN.
func TestNodePortFromOutsideWithKubeProxy(t *testing.T) {
	testNodePortFromOutside(t, clusterSpec{nodes: 2}, "10.16.0.0/16", nil, nodePortIPv4)
}

// The same in a dual-stack cluster, in each family: RequireDualStack
// NodePort Services, kube-proxy in dual-stack mode (its IPv6 rules in
// ip6tables), the outside connecting to each node's IPv6 address.
func TestDualStackNodePortFromOutsideWithKubeProxy(t *testing.T) {
	require := corev1.IPFamilyPolicyRequireDualStack
	testNodePortFromOutside(t, clusterSpec{nodes: 2, dualStack: true}, dualStackDefaultCIDR, &require, nodePortIPv4, nodePortIPv6)
}

func testNodePortFromOutside(t *testing.T, spec clusterSpec, podCIDR string, policy *corev1.IPFamilyPolicy, families ...nodePortFamily) {
	c := startServiceClusterWith(t, spec)
	c.startKubeProxy(t, podCIDR)
	const ns = "np"
	c.ensureNamespace(t, ns, nil)
	backends := []*clusterPod{
		c.addPod(t, 0, ns, "web-a", map[string]string{"app": "web"}, nil),
		c.addPod(t, 1, ns, "web-b", map[string]string{"app": "web"}, nil),
	}
	for _, b := range backends {
		serveNameAndSource(t, b.netns, 8080, b.name)
		c.markReady(t, b)
	}
	ctx := context.Background()
	mk := func(name string, etp corev1.ServiceExternalTrafficPolicy) *corev1.Service {
		s, err := c.cp.kc.CoreV1().Services(ns).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"}, ExternalTrafficPolicy: etp,
				IPFamilyPolicy: policy,
				Ports:          []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(s.Spec.ClusterIPs) != len(families) {
			t.Fatalf("Service %s's ClusterIPs %v: want one per family of %d", name, s.Spec.ClusterIPs, len(families))
		}
		for _, f := range families {
			c.waitBackends(t, ns, name, corev1.ProtocolTCP, net.JoinHostPort(s.Spec.ClusterIPs[f.index], "80"),
				backends[0].ips[f.index], backends[1].ips[f.index])
		}
		return s
	}
	cluster := mk("web", corev1.ServiceExternalTrafficPolicyCluster)
	local := mk("web-local", corev1.ServiceExternalTrafficPolicyLocal)
	// kube-proxy programs its rules after it sees the EndpointSlices.
	askUntil := func(addr string, ok func(string) bool) (string, error) {
		deadline := time.Now().Add(30 * time.Second)
		var got string
		var err error
		for time.Now().Before(deadline) {
			if got, err = ask(c.world.ns, addr, time.Second); err == nil && ok(got) {
				return got, nil
			}
		}
		return got, err
	}
	kubeProxyState := func(i int) string {
		out, _ := exec.Command("ip", "netns", "exec", c.nodes[i].NS, "ip6tables-save", "-t", "nat").CombinedOutput()
		return c.diag() + "\n$ ip6tables-save -t nat\n" + string(out)
	}

	for _, f := range families {
		nodeAddr := func(i int, s *corev1.Service) string {
			return net.JoinHostPort(f.node(i), fmt.Sprint(s.Spec.Ports[0].NodePort))
		}
		t.Run(f.name+": cluster policy reaches both nodes' backends", func(t *testing.T) {
			addr := nodeAddr(0, cluster)
			if got, err := askUntil(addr, func(s string) bool { return strings.HasPrefix(s, "web-") }); err != nil {
				t.Fatalf("outside to NodePort %s: %q, %v\n%s", addr, got, err, kubeProxyState(0))
			}
			seen := map[string]int{}
			for i := 0; i < 60; i++ {
				got, err := ask(c.world.ns, addr, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d to NodePort %s: %v", i, addr, err)
				}
				name, src, _ := strings.Cut(got, " ")
				seen[name]++
				if src == f.outside(0) {
					t.Fatalf("externalTrafficPolicy Cluster: %s saw the client's own address %s, want it masqueraded by the node", name, src)
				}
			}
			if seen["web-a"] == 0 || seen["web-b"] == 0 {
				t.Fatalf("60 connections to node-a's NodePort %s reached %v, want both nodes' backends", addr, seen)
			}
		})

		t.Run(f.name+": local policy keeps the client address and the node's own backend", func(t *testing.T) {
			addr := nodeAddr(1, local)
			if got, err := askUntil(addr, func(s string) bool { return strings.HasPrefix(s, "web-") }); err != nil {
				t.Fatalf("outside to NodePort %s: %q, %v\n%s", addr, got, err, kubeProxyState(1))
			}
			want := "web-b " + f.outside(1)
			for i := 0; i < 20; i++ {
				got, err := ask(c.world.ns, addr, 3*time.Second)
				if err != nil {
					t.Fatalf("connection %d to node-b's NodePort %s: %v", i, addr, err)
				}
				if got != want {
					t.Fatalf("externalTrafficPolicy Local on node-b: answer %q, want %q (node-b's backend, client address kept)", got, want)
				}
			}
		})
	}

	t.Run("a pod reaches the service by ClusterIP", func(t *testing.T) {
		cl := c.addPod(t, 0, ns, "client", nil, nil)
		for _, cip := range cluster.Spec.ClusterIPs {
			got, err := ask(cl.netns, net.JoinHostPort(cip, "80"), 3*time.Second)
			if err != nil || !strings.HasPrefix(got, "web-") {
				t.Fatalf("pod to ClusterIP %s with kube-proxy on the node: %q, %v", cip, got, err)
			}
		}
	})
}

package node_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The ports every truth-table pod answers on, and its named container port
// "web" (80 on most pods, 81 on the b pods: a named port resolves per pod).
var probePorts = []probePort{{corev1.ProtocolTCP, 80}, {corev1.ProtocolTCP, 81}, {corev1.ProtocolUDP, 53}}

type probePort struct {
	proto corev1.Protocol
	port  int32
}

func (p probePort) String() string {
	return fmt.Sprintf("%s/%d", strings.ToLower(string(p.proto)), p.port)
}

// tpod is a truth-table pod: where it runs and what a policy can see of it.
type tpod struct {
	*clusterPod
	labels map[string]string
	ports  []corev1.ContainerPort
}

func (p *tpod) key() string { return p.namespace + "/" + p.name }

// addPodWithPorts is the fixture's addPod for a pod whose container
// declares ports (named ports need them), with TCP and UDP responders in
// its network namespace.
func (c *cluster) addPodWithPorts(t testing.TB, i int, namespace, name string, lbls map[string]string, ports []corev1.ContainerPort) *tpod {
	t.Helper()
	p := c.addPodPorts(t, i, namespace, name, lbls, nil, ports)
	for _, pp := range probePorts {
		serveProbe(t, p.netns, pp)
	}
	return &tpod{clusterPod: p, labels: lbls, ports: ports}
}

// serveProbe answers TCP connections (accept, close) or UDP datagrams (echo).
func serveProbe(t testing.TB, ns string, pp probePort) {
	t.Helper()
	addr := fmt.Sprintf(":%d", pp.port)
	if pp.proto == corev1.ProtocolTCP {
		netns.ServeTCP(t, ns, addr, func(c net.Conn) { c.Close() })
		return
	}
	netns.ServeUDP(t, ns, "udp", addr, func(b []byte) []byte { return b })
}

// probe says whether a connection from network namespace ns to ip:port
// gets through (TCP handshake, or a UDP echo).
func probe(ns, ip string, pp probePort, timeout time.Duration) bool {
	addr := net.JoinHostPort(ip, fmt.Sprint(pp.port))
	var c net.Conn
	if err := inNetns(ns, func() (err error) {
		c, err = net.DialTimeout(strings.ToLower(string(pp.proto)), addr, timeout)
		return err
	}); err != nil {
		return false
	}
	defer c.Close()
	if pp.proto == corev1.ProtocolTCP {
		return true
	}
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("probe")); err != nil {
		return false
	}
	b := make([]byte, 16)
	n, err := c.Read(b)
	return err == nil && string(b[:n]) == "probe"
}

// npModel computes what Kubernetes says about a connection, independently of
// the controller's translation.
type npModel struct {
	policies map[string]*networkingv1.NetworkPolicy // "ns/name"
	nsLabels map[string]map[string]string
}

func sel(s *metav1.LabelSelector) labels.Selector {
	x, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		panic(err)
	}
	return x
}

// peerMatches: p, by its address of family fam (an index into its ips:
// 0 IPv4, 1 IPv6 in a dual-stack cluster), is a peer of the policy.
func (m *npModel) peerMatches(np *networkingv1.NetworkPolicy, peer networkingv1.NetworkPolicyPeer, p *tpod, fam int) bool {
	if b := peer.IPBlock; b != nil {
		ip := netip.MustParseAddr(p.ips[fam])
		if !netip.MustParsePrefix(b.CIDR).Contains(ip) {
			return false
		}
		for _, e := range b.Except {
			if netip.MustParsePrefix(e).Contains(ip) {
				return false
			}
		}
		return true
	}
	if peer.NamespaceSelector == nil {
		if p.namespace != np.Namespace {
			return false
		}
	} else if !sel(peer.NamespaceSelector).Matches(labels.Set(m.nsLabels[p.namespace])) {
		return false
	}
	return peer.PodSelector == nil || sel(peer.PodSelector).Matches(labels.Set(p.labels))
}

func portMatches(ports []networkingv1.NetworkPolicyPort, pp probePort, dst *tpod) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != pp.proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			for _, cp := range dst.ports {
				cpp := cp.Protocol
				if cpp == "" {
					cpp = corev1.ProtocolTCP
				}
				if cp.Name == p.Port.StrVal && cpp == pp.proto && cp.ContainerPort == pp.port {
					return true
				}
			}
		case p.EndPort != nil:
			if pp.port >= p.Port.IntVal && pp.port <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == pp.port:
			return true
		}
	}
	return false
}

func isolates(np *networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	if len(np.Spec.PolicyTypes) == 0 {
		return t == networkingv1.PolicyTypeIngress || len(np.Spec.Egress) > 0
	}
	for _, x := range np.Spec.PolicyTypes {
		if x == t {
			return true
		}
	}
	return false
}

func (m *npModel) allowed(from, to *tpod, pp probePort, fam int) bool {
	ingressIsolated, ingressOK := false, false
	egressIsolated, egressOK := false, false
	for _, np := range m.policies {
		if np.Namespace == to.namespace && sel(&np.Spec.PodSelector).Matches(labels.Set(to.labels)) && isolates(np, networkingv1.PolicyTypeIngress) {
			ingressIsolated = true
			for _, r := range np.Spec.Ingress {
				peerOK := len(r.From) == 0
				for _, peer := range r.From {
					peerOK = peerOK || m.peerMatches(np, peer, from, fam)
				}
				if peerOK && portMatches(r.Ports, pp, to) {
					ingressOK = true
				}
			}
		}
		if np.Namespace == from.namespace && sel(&np.Spec.PodSelector).Matches(labels.Set(from.labels)) && isolates(np, networkingv1.PolicyTypeEgress) {
			egressIsolated = true
			for _, r := range np.Spec.Egress {
				peerOK := len(r.To) == 0
				for _, peer := range r.To {
					peerOK = peerOK || m.peerMatches(np, peer, to, fam)
				}
				if peerOK && portMatches(r.Ports, pp, to) {
					egressOK = true
				}
			}
		}
	}
	return (!ingressIsolated || ingressOK) && (!egressIsolated || egressOK)
}

// truthTable is the cluster, its pods and the policies in force.
type truthTable struct {
	t    *testing.T
	c    *cluster
	pods []*tpod
	m    *npModel
	// families are the address families probed, as indexes into the
	// pods' ips: {0} in an IPv4 cluster, {0, 1} in a dual-stack one.
	families []int
	nb       interface {
		List(context.Context, any) error
	}
}

type cell struct{ want, got bool }

// check probes every ordered pair of distinct pods on every port, in
// parallel, until the result equals the model or the deadline passes; then
// it fails with one matrix per port.
func (tt *truthTable) check(step string) {
	tt.t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		res := tt.probeAll()
		bad := 0
		for _, c := range res {
			if c.want != c.got {
				bad++
			}
		}
		if bad == 0 {
			tt.t.Logf("step %q: %d probes as expected", step, len(res))
			return
		}
		if time.Now().After(deadline) {
			tt.t.Fatalf("step %q: %d of %d probes differ from the model after 45s\n%s\n%s\n%s", step, bad, len(res), tt.matrix(res), tt.podDump(), tt.aclDump())
		}
	}
}

func resKey(from, to *tpod, pp probePort, fam int) string {
	return fmt.Sprintf("%s>%s>%s>%d", from.key(), to.key(), pp, fam)
}

func (tt *truthTable) probeAll() map[string]cell {
	var mu sync.Mutex
	res := map[string]cell{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for _, from := range tt.pods {
		for _, to := range tt.pods {
			if from == to {
				continue // a pod's traffic to itself never leaves its namespace
			}
			for _, pp := range probePorts {
				for _, fam := range tt.families {
					wg.Add(1)
					go func() {
						defer wg.Done()
						sem <- struct{}{}
						defer func() { <-sem }()
						got := probe(from.netns, to.ips[fam], pp, time.Second)
						mu.Lock()
						res[resKey(from, to, pp, fam)] = cell{want: tt.m.allowed(from, to, pp, fam), got: got}
						mu.Unlock()
					}()
				}
			}
		}
	}
	wg.Wait()
	return res
}

// matrix: rows are sources, columns destinations; "." allowed and "x"
// blocked as expected, "+" allowed but should be blocked, "-" blocked but
// should be allowed.
func (tt *truthTable) matrix(res map[string]cell) string {
	var b strings.Builder
	for _, fam := range tt.families {
		for _, pp := range probePorts {
			tt.matrixOf(&b, res, pp, fam)
		}
	}
	b.WriteString(`"." allowed, "x" blocked, as expected; "+" allowed but should be blocked; "-" blocked but should be allowed` + "\n")
	return b.String()
}

func (tt *truthTable) matrixOf(b *strings.Builder, res map[string]cell, pp probePort, fam int) {
	// One matrix: the probes of one port over one family.
	fmt.Fprintf(b, "%s over IPv%d  (rows: from, columns: to)\n%-8s", pp, map[int]int{0: 4, 1: 6}[fam], "")
	for _, to := range tt.pods {
		fmt.Fprintf(b, " %-5s", to.key())
	}
	b.WriteString("\n")
	for _, from := range tt.pods {
		fmt.Fprintf(b, "%-8s", from.key())
		for _, to := range tt.pods {
			c, ok := res[resKey(from, to, pp, fam)]
			s := " "
			switch {
			case !ok:
			case c.want == c.got && c.got:
				s = "."
			case c.want == c.got:
				s = "x"
			case c.got:
				s = "+"
			default:
				s = "-"
			}
			fmt.Fprintf(b, " %-5s", s)
		}
		b.WriteString("\n")
	}
}

// podDump: where each pod runs, its address and its neighbour table.
func (tt *truthTable) podDump() string {
	var b strings.Builder
	for _, p := range tt.pods {
		out, _ := exec.Command("ip", "-n", p.netns, "neigh", "show").CombinedOutput()
		fmt.Fprintf(&b, "%s on %s ips %v; neighbours: %s\n", p.key(), p.nodeName, p.ips, strings.ReplaceAll(strings.TrimSpace(string(out)), "\n", "; "))
	}
	return b.String()
}

func (tt *truthTable) aclDump() string {
	var acls []nbdb.ACL
	_ = tt.nb.List(context.Background(), &acls)
	var lines []string
	for _, a := range acls {
		lines = append(lines, fmt.Sprintf("%s %d %s %s", a.Direction, a.Priority, a.Action, a.Match))
	}
	sort.Strings(lines)
	return "NB ACLs:\n" + strings.Join(lines, "\n")
}

func (tt *truthTable) apply(np *networkingv1.NetworkPolicy) {
	tt.t.Helper()
	ctx := context.Background()
	api := tt.c.cp.kc.NetworkingV1().NetworkPolicies(np.Namespace)
	cur, err := api.Get(ctx, np.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, np, metav1.CreateOptions{})
	case err == nil:
		np.ResourceVersion = cur.ResourceVersion
		_, err = api.Update(ctx, np, metav1.UpdateOptions{})
	}
	if err != nil {
		tt.t.Fatalf("applying policy %s/%s: %v", np.Namespace, np.Name, err)
	}
	tt.m.policies[np.Namespace+"/"+np.Name] = np
}

func (tt *truthTable) remove(ns, name string) {
	tt.t.Helper()
	if err := tt.c.cp.kc.NetworkingV1().NetworkPolicies(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		tt.t.Fatal(err)
	}
	delete(tt.m.policies, ns+"/"+name)
}

func (tt *truthTable) pod(key string) *tpod {
	for _, p := range tt.pods {
		if p.key() == key {
			return p
		}
	}
	tt.t.Fatalf("no pod %s", key)
	return nil
}

func webPort(n int32) []corev1.ContainerPort {
	return []corev1.ContainerPort{{Name: "web", ContainerPort: n, Protocol: corev1.ProtocolTCP}}
}

func netpolObj(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

func nsSel(v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"ns": v}}
}

func podSel(v string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"pod": v}}
}

func TestNetworkPolicyTruthTable(t *testing.T) {
	testTruthTable(t, clusterSpec{nodes: 2}, []int{0})
}

// TestDualStackNetworkPolicyTruthTable is the truth table of a dual-stack
// cluster, every probe made over both families: each policy is enforced
// in IPv6 as in IPv4 (its ipBlocks in each family), and an ipBlock of one
// family admits nothing of the other.
func TestDualStackNetworkPolicyTruthTable(t *testing.T) {
	testTruthTable(t, clusterSpec{nodes: 2, dualStack: true}, []int{0, 1})
}

func testTruthTable(t *testing.T, spec clusterSpec, families []int) {
	c := startClusterWith(t, spec)
	dual := len(families) == 2
	tt := &truthTable{t: t, c: c, families: families, m: &npModel{policies: map[string]*networkingv1.NetworkPolicy{}, nsLabels: map[string]map[string]string{}}}
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	tt.nb = nb
	i := 0
	for _, ns := range []string{"x", "y", "z"} {
		l := map[string]string{"ns": ns}
		c.ensureNamespace(t, ns, l)
		tt.m.nsLabels[ns] = l
		for _, name := range []string{"a", "b", "c"} {
			port := int32(80)
			if name == "b" {
				port = 81
			}
			tt.pods = append(tt.pods, c.addPodWithPorts(t, i%2, ns, name, map[string]string{"pod": name}, webPort(port)))
			i++
		}
	}
	tt.check("no policy")

	udp := corev1.ProtocolUDP
	tt.apply(netpolObj("x", "deny", networkingv1.NetworkPolicySpec{}))
	tt.check("default deny ingress in x")
	// kubelet probes come from the node through ovn0: they still pass.
	for _, k := range []string{"x/a", "x/b"} {
		p := tt.pod(k)
		for _, fam := range families {
			if !probe(p.node.NS, p.ips[fam], probePort{corev1.ProtocolTCP, 80}, 2*time.Second) {
				t.Fatalf("node %s does not reach its pod %s (%s) under default deny", p.nodeName, k, p.ips[fam])
			}
		}
	}

	tt.apply(netpolObj("x", "allow", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel("y")}}}}}))
	tt.check("x allows from namespace y")

	tt.apply(netpolObj("x", "allow", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel("z"), PodSelector: podSel("a")}}}}}))
	tt.check("x allows from pod a of namespace z (policy edited)")

	// Churn: a new pod joins x (selected, so denied), z/d arrives labelled
	// a (a peer now), z/c leaves. z/d is added before z/c goes: a new pod
	// on a just-freed address is unreachable from pods that still hold the
	// old MAC for it (no gratuitous ARP on CNI ADD yet), which is not
	// what this test is about.
	aclsBefore := aclUUIDs(t, nb)
	tt.pods = append(tt.pods, c.addPodWithPorts(t, 1, "x", "d", map[string]string{"pod": "d"}, webPort(80)))
	tt.pods = append(tt.pods, c.addPodWithPorts(t, 0, "z", "d", map[string]string{"pod": "a"}, webPort(80)))
	zc := tt.pod("z/c")
	c.deletePod(t, zc.clusterPod)
	var kept []*tpod
	for _, p := range tt.pods {
		if p != zc {
			kept = append(kept, p)
		}
	}
	tt.pods = kept
	tt.check("pods added and deleted")
	// Churn is port group and address set mutations: the ACL rows stay.
	if after := aclUUIDs(t, nb); after != aclsBefore {
		t.Fatalf("pod churn rewrote ACLs:\nbefore %s\nafter  %s", aclsBefore, after)
	}

	xa, xb := tt.pod("x/a"), tt.pod("x/b")
	blocks := []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
		CIDR: "10.16.0.0/16", Except: []string{xa.ip + "/32", xb.ip + "/32"}}}}
	if dual {
		// Only the IPv6 block first: nothing of IPv4 is admitted.
		tt.apply(netpolObj("y", "ipblock", networkingv1.NetworkPolicySpec{
			PodSelector: *podSel("a"),
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{
				CIDR: "fd00:10:16::/64", Except: []string{xa.ips[1] + "/128", xb.ips[1] + "/128"}}}}}}}))
		tt.check("y/a allows fd00:10:16::/64 except x/a and x/b (IPv6 only)")
		blocks = append(blocks, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{
			CIDR: "fd00:10:16::/64", Except: []string{xa.ips[1] + "/128", xb.ips[1] + "/128"}}})
	}
	tt.apply(netpolObj("y", "ipblock", networkingv1.NetworkPolicySpec{
		PodSelector: *podSel("a"),
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: blocks}}}))
	tt.check("y/a allows the pod CIDR of each family except x/a and x/b")

	tt.apply(netpolObj("z", "named", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromString("web"))}}}}}))
	tt.check("z allows its named port web (80 on a, 81 on b)")

	end := int32(81)
	tt.apply(netpolObj("z", "named", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel("x")}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromInt32(80)), EndPort: &end}}}}}))
	tt.check("z allows tcp 80-81 (endPort) from namespace x (policy edited)")
	tt.apply(netpolObj("z", "named", networkingv1.NetworkPolicySpec{
		Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptrTo(intstr.FromString("web"))}}}}}))
	tt.check("z back to its named port web")

	tt.apply(netpolObj("y", "egress", networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptrTo(intstr.FromInt32(53))}}}}}))
	tt.check("y denies egress but DNS (udp/53)")
	// Replies to the node's probes are not egress: they still pass.
	for _, fam := range families {
		if p := tt.pod("y/b"); !probe(p.node.NS, p.ips[fam], probePort{corev1.ProtocolTCP, 80}, 2*time.Second) {
			t.Fatalf("node %s does not reach its pod y/b (%s) under egress deny", p.nodeName, p.ips[fam])
		}
	}

	// Logging, Kube-OVN's way: the policy's drop ACLs log under its name.
	lg := tt.m.policies["y/egress"].DeepCopy()
	lg.Annotations = map[string]string{"ovn.kubernetes.io/enable_log": "true"}
	tt.apply(lg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := nb.WaitUntil(ctx, "a logged drop ACL named y/egress", func() bool {
		var acls []nbdb.ACL
		_ = nb.List(ctx, &acls)
		for _, a := range acls {
			if a.Action == nbdb.ACLActionDrop && a.Log && a.Name != nil && *a.Name == "y/egress" && a.Severity != nil {
				return true
			}
		}
		return false
	}, nil); err != nil {
		t.Fatalf("%v\n%s", err, tt.aclDump())
	}
	tt.check("logging changes no verdict")

	for _, k := range []string{"x/deny", "x/allow", "y/ipblock", "z/named", "y/egress"} {
		ns, name, _ := strings.Cut(k, "/")
		tt.remove(ns, name)
	}
	tt.check("all policies deleted")
	if err := nb.WaitUntil(ctx, "no port group, ACL or policy address set left", func() bool {
		var pgs []nbdb.PortGroup
		var acls []nbdb.ACL
		var sets []nbdb.AddressSet
		_ = nb.List(ctx, &pgs)
		_ = nb.List(ctx, &acls)
		_ = nb.List(ctx, &sets)
		for _, s := range sets {
			if strings.HasPrefix(s.Name, "np_") {
				return false
			}
		}
		return len(pgs) == 0 && len(acls) == 0
	}, nil); err != nil {
		t.Fatalf("%v\n%s", err, tt.aclDump())
	}
}

// aclUUIDs lists the NB's ACL rows by UUID.
func aclUUIDs(t *testing.T, nb interface {
	List(context.Context, any) error
}) string {
	var acls []nbdb.ACL
	if err := nb.List(context.Background(), &acls); err != nil {
		t.Fatal(err)
	}
	var us []string
	for _, a := range acls {
		us = append(us, a.UUID)
	}
	sort.Strings(us)
	return strings.Join(us, " ")
}

func ptrTo[T any](v T) *T { return &v }

// TestNetworkPolicyRowsFollowPoliciesAcrossAControllerRestart: a policy
// deleted while no controller runs loses its rows at the next start, and
// one that survives keeps its ACL rows as they were (a restart reprograms
// nothing).
func TestNetworkPolicyRowsFollowPoliciesAcrossAControllerRestart(t *testing.T) {
	cp := startControlPlane(t)
	nb := dial(t, nbdb.FullDatabaseModel, cp.central.NB())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api := cp.kc.NetworkingV1().NetworkPolicies("default")
	for _, n := range []string{"keep", "gone"} {
		if _, err := api.Create(ctx, netpolObj("default", n, networkingv1.NetworkPolicySpec{
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: nsSel("x")}}}}}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	policyRows := func(key string) (pgs, sets int) {
		var pg []nbdb.PortGroup
		var as []nbdb.AddressSet
		_ = nb.List(ctx, &pg)
		_ = nb.List(ctx, &as)
		for _, p := range pg {
			if p.ExternalIDs["np"] == key {
				pgs++
			}
		}
		for _, a := range as {
			if a.ExternalIDs["np"] == key {
				sets++
			}
		}
		return pgs, sets
	}
	if err := nb.WaitUntil(ctx, "port groups and address sets of default/keep and default/gone", func() bool {
		a, b := policyRows("default/keep")
		c, d := policyRows("default/gone")
		return a == 1 && b == 1 && c == 1 && d == 1
	}, nil); err != nil {
		t.Fatal(err)
	}
	before := aclUUIDs(t, nb)

	pid := controllerPID(cp)
	if pid == 0 {
		t.Fatal("controller process not found")
	}
	// A pidfd turns readable when the process has exited: the old
	// controller cannot see the delete below.
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(pfd), Events: unix.POLLIN}}, 30000); err != nil || n != 1 {
		t.Fatalf("controller %d did not exit within 30s after SIGKILL (%v)", pid, err)
	}
	if err := api.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrl := exec.Command(testenv.Binary(t, "ovnhost-controller"), "--kubeconfig="+cp.api.Kubeconfig, "--ovn-nb-addr="+cp.central.NB(),
		"--health-addr=", "--leader-elect=false")
	logf, _ := os.Create(filepath.Join(t.TempDir(), "controller2.log"))
	ctrl.Stdout, ctrl.Stderr = logf, logf
	if err := ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctrl.Process.Kill(); _ = ctrl.Wait(); logf.Close() })
	if err := nb.WaitUntil(ctx, "the rows of default/gone removed by the restarted controller", func() bool {
		a, b := policyRows("default/gone")
		return a == 0 && b == 0
	}, nil); err != nil {
		log, _ := os.ReadFile(logf.Name())
		t.Fatalf("%v\n%s", err, log)
	}
	if a, b := policyRows("default/keep"); a != 1 || b != 1 {
		t.Fatalf("default/keep has %d port groups and %d address sets after the restart, want 1 and 1", a, b)
	}
	// default/keep's ACLs are a subset of before (gone's went) and none is new.
	after := strings.Fields(aclUUIDs(t, nb))
	for _, u := range after {
		if !strings.Contains(before, u) {
			t.Fatalf("the restart rewrote ACLs: %s not among %s", u, before)
		}
	}
	if len(after) == 0 {
		t.Fatal("no ACL left for default/keep")
	}
}

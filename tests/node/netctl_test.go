package node_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/promcheck"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// netctlIn runs bin/netctl inside a node's network namespace (where both
// nodes' APIs and the API server are reachable), as an operator would on
// any machine of the cluster, with the harness's admin kubeconfig.
func (c *cluster) netctlIn(t *testing.T, n *node, args ...string) (string, string, int) {
	t.Helper()
	full := append([]string{"netns", "exec", n.NS, testenv.Binary(t, "netctl"), "--kubeconfig=" + c.cp.api.Kubeconfig}, args...)
	cmd := exec.Command("ip", full...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("netctl %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

type finding struct {
	Severity, Scope, Check, Found, Fix string
}

func (c *cluster) diagnose(t *testing.T, from *node, args ...string) ([]finding, int, string) {
	t.Helper()
	out, errb, code := c.netctlIn(t, from, append(append([]string{"diagnose"}, args...), "-o", "json", "--pod-grace=0s")...)
	var d struct{ Findings []finding }
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatalf("diagnose %v: exit %d, not JSON (%v):\n%s\n%s", args, code, err, out, errb)
	}
	return d.Findings, code, out
}

func has(fs []finding, sev, scope, check, found string) bool {
	for _, f := range fs {
		if f.Severity == sev && f.Scope == scope && f.Check == check && strings.Contains(f.Found, found) {
			return true
		}
	}
	return false
}

// waitNodeAPI waits until every node published its API on its Node.
func (c *cluster) waitNodeAPI(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, name := range c.names {
		w, err := c.cp.kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
		if err != nil {
			t.Fatal(err)
		}
		n, _ := c.cp.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		for n == nil || n.Annotations["ovnhost.io/node-api-cert-sha256"] == "" || n.Annotations[annotations.Chassis] == "" {
			ev, ok := <-w.ResultChan()
			if !ok {
				t.Fatalf("node %s did not publish its node API and chassis within 30s: %v", name, n.Annotations)
			}
			n, _ = ev.Object.(*corev1.Node)
		}
		w.Stop()
	}
}

// TestNetctlAgainstTheCluster drives netctl against two real node daemons,
// the real controller and API server: pod, ip and subnet listings, the
// pass-throughs, trace (delivered, port security, NetworkPolicy), tcpdump,
// the node API's authentication, and diagnose finding an exhausted Subnet,
// a duplicate chassis and a node whose daemon is down.
func TestNetctlAgainstTheCluster(t *testing.T) {
	testenv.RequireCommands(t, "ovn-trace")
	c := startCluster(t, 2)
	c.waitNodeAPI(t)
	a, b := c.nodes[0], c.nodes[1]
	c.ensureNamespace(t, "nt", map[string]string{"ns": "nt"})
	pa := c.addPod(t, 0, "nt", "pa", map[string]string{"app": "a"}, nil)
	pb := c.addPod(t, 1, "nt", "pb", map[string]string{"app": "b"}, nil)
	if err := ping(pa.netns, pb.ip, 3); err != nil {
		t.Fatal(err)
	}

	t.Run("diagnose-healthy", func(t *testing.T) {
		fs, code, out := c.diagnose(t, a, "all")
		for _, n := range c.names {
			if !has(fs, "pass", "node/"+n, "node-ready", "ready") || !has(fs, "pass", "node/"+n, "chassis", "in SB") {
				t.Errorf("node %s not reported ready with its chassis:\n%s", n, out)
			}
		}
		for _, f := range fs {
			if f.Severity == "fail" {
				t.Errorf("unexpected failure on a healthy cluster: %+v", f)
			}
		}
		if t.Failed() {
			t.Logf("node-a:\n%s\nnode-b:\n%s", a.LogTail(), b.LogTail())
		}
		// The harness runs the controller with --leader-elect=false: no Lease.
		if code != 1 || !has(fs, "warn", "cluster", "controller-leader", "no leader Lease") {
			t.Errorf("exit %d (want 1 for the missing Lease warning):\n%s", code, out)
		}
	})

	t.Run("pod-ip-subnet", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "pod", "nt/pa", "-o", "json")
		var p struct {
			Node, Chassis, LogicalSwitchPort, IP, BoundChassis, NodeError string
			OVSPort                                                       struct {
				Interface    string
				OVNInstalled bool
			}
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil || code != 0 {
			t.Fatalf("pod -o json: exit %d %v\n%s%s", code, err, out, errb)
		}
		if p.Node != "node-a" || p.LogicalSwitchPort != "pa.nt" || p.IP != pa.ip || !p.OVSPort.OVNInstalled || p.OVSPort.Interface == "" ||
			p.Chassis == "" || p.BoundChassis != p.Chassis {
			t.Errorf("pod nt/pa: %+v", p)
		}
		out, _, code = c.netctlIn(t, a, "ip", "list", "-n", "nt")
		if code != 0 || !strings.Contains(out, pa.ip) || !strings.Contains(out, pb.ip) || !strings.Contains(out, "ovn-default") {
			t.Errorf("ip list -n nt: exit %d\n%s", code, out)
		}
		out, _, code = c.netctlIn(t, a, "subnet", "list")
		if code != 0 || !strings.Contains(out, "ovn-default") || !strings.Contains(out, "10.16.0.0/16") {
			t.Errorf("subnet list: exit %d\n%s", code, out)
		}
		out, _, code = c.netctlIn(t, a, "subnet", "show", "ovn-default")
		if code != 0 || !strings.Contains(out, "Ready") || !strings.Contains(out, "Gateway:       10.16.0.1") {
			t.Errorf("subnet show ovn-default: exit %d\n%s", code, out)
		}
	})

	t.Run("passthroughs", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "vsctl", "node-b", "show")
		if code != 0 || !strings.Contains(out, "Bridge br-int") || !strings.Contains(out, "Bridge br-phy") {
			t.Errorf("vsctl node-b show: exit %d\n%s%s", code, out, errb)
		}
		out, _, code = c.netctlIn(t, a, "vsctl", "node-a", "find", "Interface", "external_ids:iface-id=pa.nt")
		if code != 0 || !strings.Contains(out, `ovn-installed=true`) {
			t.Errorf("vsctl find Interface: exit %d\n%s", code, out)
		}
		out, _, code = c.netctlIn(t, a, "sbctl", "show")
		if code != 0 || strings.Count(out, "Chassis ") != 2 || !strings.Contains(out, `Port_Binding "pb.nt"`) {
			t.Errorf("sbctl show: exit %d\n%s", code, out)
		}
		out, _, code = c.netctlIn(t, a, "appctl", "node-b", "ovs-vswitchd", "dpif/show")
		if code != 0 || !strings.Contains(out, "netdev@ovs-netdev") {
			t.Errorf("appctl dpif/show: exit %d\n%s", code, out)
		}
		_, errb, code = c.netctlIn(t, a, "appctl", "node-b", "ovs-vswitchd", "exit")
		if code != 2 || !strings.Contains(errb, "not a read-only command") {
			t.Errorf("appctl exit must be refused: exit %d %s", code, errb)
		}
		_, errb, code = c.netctlIn(t, a, "vsctl", "node-a", "list", "NoSuchTable")
		if code != 2 || !strings.Contains(errb, `no table "NoSuchTable"`) {
			t.Errorf("vsctl list NoSuchTable: exit %d %s", code, errb)
		}
		// nbctl: these nodes were given OVN_SB_ADDR only; the error says so.
		_, errb, code = c.netctlIn(t, a, "nbctl", "show")
		if code == 0 || !strings.Contains(errb, "northbound") {
			t.Errorf("nbctl on SB-only nodes: exit %d %s", code, errb)
		}
	})

	t.Run("node-api-auth", func(t *testing.T) { c.checkNodeAPIAuth(t) })
	t.Run("netctl-with-a-token-kubeconfig", func(t *testing.T) { c.checkNetctlWithToken(t, a) })

	t.Run("trace", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "trace", "nt/pa", "nt/pb", "icmp")
		if code != 0 || !strings.Contains(out, `LOGICAL:  delivered to pb.nt`) {
			t.Errorf("trace pa -> pb icmp: exit %d\n%s%s", code, out, errb)
		}
		out, errb, code = c.netctlIn(t, a, "trace", "nt/pa", "nt/pb", "icmp", "--src-mac", "0a:00:00:00:ee:01")
		if code != 1 || !strings.Contains(out, "DROPPED at ls_in_apply_port_sec") {
			t.Errorf("trace with a spoofed MAC must name port security: exit %d\n%s%s", code, out, errb)
		}
		// A NetworkPolicy isolating pb for ingress: the trace names its ACL.
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "nt", Name: "deny-b"},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "b"}},
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
		if _, err := c.cp.kc.NetworkingV1().NetworkPolicies("nt").Create(context.Background(), np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, errb, code = c.netctlIn(t, a, "trace", "nt/pa", "nt/pb", "tcp", "80")
			if code == 1 && strings.Contains(out, "NetworkPolicy: nt/deny-b") || time.Now().After(deadline) {
				break
			}
		}
		if code != 1 || !strings.Contains(out, "DROPPED at ls_out_acl") || !strings.Contains(out, "NetworkPolicy: nt/deny-b") {
			t.Errorf("trace to a pod isolated by nt/deny-b: exit %d\n%s%s", code, out, errb)
		}
		_ = c.cp.kc.NetworkingV1().NetworkPolicies("nt").Delete(context.Background(), "deny-b", metav1.DeleteOptions{})
	})

	t.Run("tcpdump", func(t *testing.T) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = ping(pa.netns, pb.ip, 10)
		}()
		out, errb, code := c.netctlIn(t, a, "tcpdump", "nt/pb", "-w", "-", "-c", "4", "--duration", "10s")
		<-done
		if code != 0 || len(out) < 24 || binary.LittleEndian.Uint32([]byte(out[:4])) != 0xa1b2c3d4 {
			t.Fatalf("tcpdump -w -: exit %d, %d bytes, not pcap\n%s", code, len(out), errb)
		}
		if n := pcapICMP(out[24:], pa.ip, pb.ip); n == 0 {
			t.Errorf("the capture on pb's veth holds no ICMP between %s and %s", pa.ip, pb.ip)
		}
		if _, err := exec.LookPath("tcpdump"); err == nil {
			go func() { _ = ping(pa.netns, pb.ip, 10) }()
			out, errb, code = c.netctlIn(t, a, "tcpdump", "nt/pb", "-c", "6", "--duration", "10s", "icmp")
			if code != 0 || !strings.Contains(out, "ICMP echo request") {
				t.Errorf("tcpdump nt/pb icmp: exit %d\n%s%s", code, out, errb)
			}
		} else if testenv.Strict() {
			t.Error("tcpdump is not installed (make deps installs it)")
		}
	})

	t.Run("pinger-tunnel-down", func(t *testing.T) { c.checkPinger(t) })

	t.Run("diagnose-exhausted-subnet", func(t *testing.T) {
		ctx := context.Background()
		if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "tiny"},
			"spec": map[string]any{"cidrBlock": "10.77.0.0/29", "excludeIps": []any{"10.77.0.3..10.77.0.6"}, "namespaces": []any{"tinyns"}}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		c.ensureNamespace(t, "tinyns", nil)
		for _, n := range []string{"t1", "t2"} {
			if _, err := c.cp.kc.CoreV1().Pods("tinyns").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: n},
				Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var fs []finding
		var out string
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			fs, _, out = c.diagnose(t, a, "all")
			if has(fs, "fail", "subnet/tiny", "subnet-usage", "exhausted") && (has(fs, "fail", "pod/tinyns/t1", "pod-address", "no free address") || has(fs, "fail", "pod/tinyns/t2", "pod-address", "no free address")) {
				break
			}
		}
		if !has(fs, "fail", "subnet/tiny", "subnet-usage", "exhausted") {
			t.Errorf("diagnose does not report the exhausted Subnet tiny:\n%s", out)
		}
		if !has(fs, "fail", "pod/tinyns/t1", "pod-address", "no free address") && !has(fs, "fail", "pod/tinyns/t2", "pod-address", "no free address") {
			t.Errorf("diagnose does not name the pod left without an address and why:\n%s", out)
		}
		if len(fs) == 0 || fs[0].Severity != "fail" {
			t.Errorf("not worst first: %+v", fs)
		}
		text, _, code := c.netctlIn(t, a, "diagnose", "all", "--pod-grace=0s")
		if code != 2 || !strings.Contains(text, "widen cidrBlock") {
			t.Errorf("diagnose all (table): exit %d (want 2) or no fix:\n%s", code, text)
		}
		for _, n := range []string{"t1", "t2"} {
			_ = c.cp.kc.CoreV1().Pods("tinyns").Delete(ctx, n, metav1.DeleteOptions{})
		}
		_ = c.cp.dc.Resource(subnetsGVR).Delete(ctx, "tiny", metav1.DeleteOptions{})
	})

	t.Run("diagnose-duplicate-chassis", func(t *testing.T) {
		// node-b is "cloned" from node-a: same OVS system-id.
		if code := b.Stop(); code != 0 {
			t.Fatalf("node-b stopped with %d", code)
		}
		id, err := os.ReadFile(a.Path("ovs-db", "system-id.conf"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(b.Path("ovs-db", "system-id.conf"), id, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := b.StartNoWait("--userspace-tunnel", "--node-name=node-b"); err != nil {
			t.Fatal(err)
		}
		want := strings.TrimSpace(string(id))
		var fs []finding
		var out string
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			fs, _, out = c.diagnose(t, a, "all")
			if has(fs, "fail", "cluster", "duplicate-chassis", want) {
				break
			}
		}
		if !has(fs, "fail", "cluster", "duplicate-chassis", "nodes node-a, node-b share chassis "+want) {
			t.Errorf("diagnose does not report node-a and node-b sharing chassis %s:\n%s\n%s", want, out, b.LogTail())
		}
	})

	t.Run("diagnose-daemon-down", func(t *testing.T) {
		b.Stop()
		fs, code, out := c.diagnose(t, a, "all")
		if code != 2 || !has(fs, "fail", "node/node-b", "node-daemon", "connection refused") {
			t.Errorf("diagnose with node-b's daemon stopped: exit %d\n%s", code, out)
		}
		fs, code, out = c.diagnose(t, a, "node", "node-b")
		if code != 2 || !has(fs, "fail", "node/node-b", "node-daemon", "not running there") {
			t.Errorf("diagnose node node-b: exit %d\n%s", code, out)
		}
	})
}

// pcapICMP counts ICMP packets between the two addresses in pcap records.
func pcapICMP(recs, ip1, ip2 string) int {
	n := 0
	raw := []byte(recs)
	for len(raw) >= 16 {
		caplen := int(binary.LittleEndian.Uint32(raw[8:]))
		if len(raw) < 16+caplen {
			break
		}
		p := raw[16 : 16+caplen]
		raw = raw[16+caplen:]
		if len(p) < 34 || p[12] != 0x08 || p[13] != 0x00 || p[23] != 1 {
			continue
		}
		src, dst := fmt.Sprintf("%d.%d.%d.%d", p[26], p[27], p[28], p[29]), fmt.Sprintf("%d.%d.%d.%d", p[30], p[31], p[32], p[33])
		if (src == ip1 && dst == ip2) || (src == ip2 && dst == ip1) {
			n++
		}
	}
	return n
}

// checkNodeAPIAuth asks node-a's API directly: no credentials (401), a
// ServiceAccount token without RBAC (403, naming what is missing), then
// with a ClusterRole granting ovnhost.io nodes/diagnostics and /metrics.
func (c *cluster) checkNodeAPIAuth(t *testing.T) {
	ctx := context.Background()
	n, err := c.cp.kc.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	addr := n.Annotations[nodeapi.AnnotationNodeAPIAddr]
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: nodeapi.PinnedTLS(n.Annotations[nodeapi.AnnotationNodeAPICert]),
		DialContext: func(_ context.Context, _, a string) (net.Conn, error) { return dialInNetns(c.nodes[0].NS, a) }}}
	get := func(path, token string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, "https://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusTooManyRequests {
			// The API's per-source rate (20/s): the polls below are a
			// tight loop; come back when the server says.
			if resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "too many requests from") {
				t.Errorf("429 without Retry-After or reason: %v %s", resp.Header, body)
			}
			<-time.After(time.Second)
		}
		return resp.StatusCode, string(body)
	}
	if code, body := get(nodeapi.PathStatus, ""); code != http.StatusUnauthorized || !strings.Contains(body, "no credentials") {
		t.Errorf("no credentials: %d %s", code, body)
	}
	if code, _ := get(nodeapi.PathStatus, "not-a-token"); code != http.StatusUnauthorized {
		t.Errorf("bad token: %d", code)
	}
	if _, err := c.cp.kc.CoreV1().ServiceAccounts("nt").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.cp.kc.CoreV1().ServiceAccounts("nt").CreateToken(ctx, "probe", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok := tr.Status.Token // the API server's audience: good there
	// Such a token never counts at a node: whoever is root there could
	// replay it at the API server.
	if code, body := get(nodeapi.PathStatus, tok); code != http.StatusUnauthorized || !strings.Contains(body, "this node accepts only tokens bound to ovnhost.io/node-api:node-a") {
		t.Errorf("a token for the API server at node-a: %d %s", code, body)
	}
	boundTo := func(node string) string {
		secs := int64(600)
		tr, err := c.cp.kc.CoreV1().ServiceAccounts("nt").CreateToken(ctx, "probe", &authnv1.TokenRequest{
			Spec: authnv1.TokenRequestSpec{Audiences: []string{nodeapi.NodeAudience(node)}, ExpirationSeconds: &secs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	if code, body := get(nodeapi.PathStatus, boundTo("node-b")); code != http.StatusUnauthorized {
		t.Errorf("a token bound to node-b at node-a: %d %s", code, body)
	}
	metricsTok := tok
	tok = boundTo("node-a")
	if code, body := get(nodeapi.PathStatus, tok); code != http.StatusForbidden || !strings.Contains(body, `system:serviceaccount:nt:probe\" may not get nodes/diagnostics.ovnhost.io \"node-a\"`) {
		t.Errorf("token bound to node-a without RBAC: %d %s", code, body)
	}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "netctl-probe"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{nodeapi.APIGroup}, Resources: []string{"nodes/diagnostics"}, Verbs: []string{"get"}},
		{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	if _, err := c.cp.kc.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cp.kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "netctl-probe"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "netctl-probe"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "probe", Namespace: "nt"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Decisions are cached for 10s; wait for the grant to be seen.
	deadline := time.Now().Add(20 * time.Second)
	code, body := get(nodeapi.PathStatus, tok)
	for code != http.StatusOK && time.Now().Before(deadline) {
		code, body = get(nodeapi.PathStatus, tok)
	}
	if code != http.StatusOK || !strings.Contains(body, `"ready":true`) {
		t.Errorf("granted token on /v1/status: %d %s", code, body)
	}
	// /metrics takes the API server's audience, as Prometheus sends.
	code, body = get("/metrics", metricsTok)
	for code != http.StatusOK && time.Now().Before(deadline) {
		code, body = get("/metrics", metricsTok)
	}
	if code != http.StatusOK || !strings.Contains(body, "ovnhost_child_up") {
		t.Errorf("granted token on /metrics: %d %.200s", code, body)
	}
	// Every family a live node serves is one the source scan finds, so the
	// dashboard check (tests/monitoring) sees all of them; and the OVS/OVN
	// internals are there.
	defined, err := promcheck.DefinedNames(testenv.RepoRoot())
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(body, "\n") {
		name, _, _ := strings.Cut(strings.TrimPrefix(l, "# TYPE "), " ")
		if strings.HasPrefix(l, "# TYPE ovnhost_") && !defined[name] {
			t.Errorf("the node serves %s, which tests/harness/promcheck does not find in the sources", name)
		}
	}
	for _, want := range []string{`ovnhost_ovs_memory_items{daemon="ovs-vswitchd",item="rules"}`, `ovnhost_ovs_coverage_total{daemon="ovn-controller"`,
		`ovnhost_ovsdb_file_bytes{db="conf.db"}`, `ovnhost_cni_request_duration_seconds_count{command="ADD"`} {
		if !strings.Contains(body, want) {
			t.Errorf("node metrics lack %s", want)
		}
	}
	// Capture is not part of that grant: it has its own verb.
	code, body = get(nodeapi.PathCapture+"?namespace=nt&pod=pa", tok)
	for code == http.StatusTooManyRequests && time.Now().Before(deadline) {
		code, body = get(nodeapi.PathCapture+"?namespace=nt&pod=pa", tok)
	}
	if code != http.StatusForbidden || !strings.Contains(body, `may not capture nodes/capture.ovnhost.io`) {
		t.Errorf("capture without the capture verb on nodes/capture: %d %s", code, body)
	}
}

type pingerRound struct {
	Node    string
	Targets []struct {
		Class, Target, Addr string
		Sent, Lost          int
	}
}

// checkPinger runs the pinger in two pods (one per node) as the
// ovnhost-pinger DaemonSet would, reads its matrix through netctl diagnose
// (node API, then the node's local pinger pod), and takes node-b's tunnel
// link down: node-a's pinger reports the loss to node-b's pod.
func (c *cluster) checkPinger(t *testing.T) {
	c.ensureNamespace(t, "ovnhost", nil)
	apiAddr := strings.TrimPrefix(c.cp.api.URL, "https://")
	ds := c.pingerDaemonSet(t)
	// A tenant's lookalike on node-a: labelled app=ovnhost-pinger, in its
	// own namespace, serving a forged /matrix. The node must not relay it.
	c.ensureNamespace(t, "a-tenant", nil)
	fake := c.addPod(t, 0, "a-tenant", "ovnhost-pinger-fake", map[string]string{"app": "ovnhost-pinger"}, nil)
	var forgedAsked atomic.Int32
	netns.ServeTCP(t, fake.netns, ":8080", func(conn net.Conn) {
		forgedAsked.Add(1)
		_, _ = io.WriteString(conn, "HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{\"node\":\"node-a\",\"targets\":[{\"class\":\"pod\",\"target\":\"node-b\",\"sent\":9,\"lost\":0}]}")
		conn.Close()
	})
	for i := range c.nodes {
		p := c.addPingerPod(t, i, ds)
		proxyAPIInto(t, p.netns, apiAddr)
		cmd := exec.Command("ip", "netns", "exec", p.netns, testenv.Binary(t, "netctl"), "--kubeconfig="+c.cp.api.Kubeconfig, "pinger",
			"--node="+c.names[i], "--pods-namespace=ovnhost", "--interval=300ms", "--count=2", "--timeout=300ms", "--external=192.168.207.1")
		var logb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &logb, &logb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				t.Logf("pinger on %s:\n%s", c.names[i], logb.String())
			}
		})
	}
	// round returns node-a's latest round as diagnose shows it.
	round := func() (pingerRound, string) {
		out, _, _ := c.netctlIn(t, c.nodes[0], "diagnose", "node", "node-a", "-o", "json")
		var d struct{ Pinger map[string]pingerRound }
		_ = json.Unmarshal([]byte(out), &d)
		return d.Pinger["node-a"], out
	}
	podLoss := func(r pingerRound) (sent, lost int) {
		for _, x := range r.Targets {
			if x.Class == "pod" && x.Target == "node-b" {
				return x.Sent, x.Lost
			}
		}
		return 0, 0
	}
	deadline := time.Now().Add(30 * time.Second)
	r, out := round()
	for sent, lost := podLoss(r); sent == 0 || lost > 0; sent, lost = podLoss(r) {
		if time.Now().After(deadline) {
			t.Fatalf("node-a's pinger never reached node-b's pinger pod without loss:\n%s", out)
		}
		r, out = round()
	}
	classes := map[string]bool{}
	for _, x := range r.Targets {
		if x.Lost == 0 {
			classes[x.Class] = true
		}
	}
	for _, cl := range []string{"pod", "node", "external"} {
		if !classes[cl] {
			t.Errorf("no loss-free %s target in node-a's round:\n%s", cl, out)
		}
	}
	// The tunnel link of node-b goes down.
	run(t, "ip", "-n", c.nodes[1].NS, "link", "set", "ul0", "down")
	defer run(t, "ip", "-n", c.nodes[1].NS, "link", "set", "ul0", "up")
	deadline = time.Now().Add(30 * time.Second)
	for sent, lost := podLoss(r); sent == 0 || lost < sent; sent, lost = podLoss(r) {
		if time.Now().After(deadline) {
			t.Fatalf("node-a's pinger reports no loss to node-b with node-b's ul0 down:\n%s", out)
		}
		r, out = round()
	}
	fs, code, out := c.diagnose(t, c.nodes[0], "node", "node-a")
	if code != 2 || !has(fs, "fail", "node/node-a", "pinger-pod", "probes to node-b") {
		t.Errorf("diagnose node node-a does not report the pinger's loss: exit %d\n%s", code, out)
	}
	text, _, _ := c.netctlIn(t, c.nodes[0], "diagnose", "node", "node-a")
	if !strings.Contains(text, "PINGER (latest round per node)") {
		t.Errorf("diagnose prints no pinger matrix:\n%s", text)
	}
	if n := forgedAsked.Load(); n != 0 {
		t.Errorf("node-a asked the tenant's lookalike pinger pod %d times", n)
	}
}

// pingerDaemonSet makes the ovnhost-pinger DaemonSet and ServiceAccount
// of packaging/kubernetes/base/pinger.yaml (no DaemonSet controller runs
// here: the test makes its pods, addPingerPod).
func (c *cluster) pingerDaemonSet(t *testing.T) *appsv1.DaemonSet {
	t.Helper()
	ctx := context.Background()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "ovnhost", Name: nodeapi.PingerServiceAccount}}
	if _, err := c.cp.kc.CoreV1().ServiceAccounts("ovnhost").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	lbl := map[string]string{"app": "ovnhost-pinger"}
	ds, err := c.cp.kc.AppsV1().DaemonSets("ovnhost").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ovnhost", Name: nodeapi.PingerDaemonSet},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: lbl}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: lbl},
			Spec: corev1.PodSpec{ServiceAccountName: nodeapi.PingerServiceAccount,
				Containers: []corev1.Container{{Name: "pinger", Image: "none", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 8080}}}}}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// addPingerPod makes node i's pod of ds as the DaemonSet controller and
// kubelet would: owned by ds, under its ServiceAccount, wired by CNI ADD,
// Running with its status.podIP.
func (c *cluster) addPingerPod(t *testing.T, i int, ds *appsv1.DaemonSet) *clusterPod {
	t.Helper()
	ctx := context.Background()
	yes := true
	name := "ovnhost-pinger-" + c.names[i]
	p := &clusterPod{node: c.nodes[i], nodeName: c.names[i], namespace: "ovnhost", name: name}
	spec := *ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = p.nodeName
	pod, err := c.cp.kc.CoreV1().Pods("ovnhost").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: ds.Spec.Template.Labels, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: &yes}}},
		Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.netns = newNetns(t, "ohk")
	out, err := cniIn(p.node, "ADD", p.netns, "ovnhost", name)
	if err != nil {
		t.Fatalf("CNI ADD ovnhost/%s on %s: %v\n%s\n%s", name, p.nodeName, err, out, p.node.LogTail())
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("CNI ADD ovnhost/%s result %s: %v", name, out, err)
	}
	p.ip = strings.Split(res.IPs[0].Address, "/")[0]
	t.Cleanup(func() { _, _ = cniIn(p.node, "DEL", p.netns, "ovnhost", name) })
	// As kubelet: the status subresource, patched (the controller has
	// annotated the pod meanwhile).
	status := fmt.Sprintf(`{"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}]}}`, p.ip, p.ip)
	if _, err := c.cp.kc.CoreV1().Pods("ovnhost").Patch(ctx, pod.Name, types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	return p
}

// checkNetctlWithToken is an operator whose kubeconfig holds a bearer token
// (the ServiceAccount nt/operator bound to the ClusterRole ovnhost-netctl
// of the manifest): nodes refuse that token (checkNodeAPIAuth), so netctl
// working at all shows it sent a token of ovnhost/ovnhost-netctl bound to
// the node instead. Without the manifest's ServiceAccount it fails naming
// the account and the fix.
func (c *cluster) checkNetctlWithToken(t *testing.T, from *node) {
	ctx := context.Background()
	if _, err := c.cp.kc.CoreV1().ServiceAccounts("nt").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "operator"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.cp.kc.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "operator-netctl"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "ovnhost-netctl"},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "operator", Namespace: "nt"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.applyManifest(t, "packaging/kubernetes/base/rbac-netctl.yaml")
	tr, err := c.cp.kc.CoreV1().ServiceAccounts("nt").CreateToken(ctx, "operator", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["c"] = &clientcmdapi.Cluster{Server: c.cp.api.URL, CertificateAuthorityData: c.cp.api.Config.CAData}
	kc.AuthInfos["operator"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	kc.Contexts["c"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "operator"}
	kc.CurrentContext = "c"
	path := filepath.Join(t.TempDir(), "operator.kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	// The ClusterRoleBinding is seen by the API server's authorizer
	// within moments; the first call may still be refused.
	var out, errb string
	var code int
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, errb, code = c.netctlIn(t, from, "--kubeconfig="+path, "appctl", "node-a", "ovs-vswitchd", "dpif/show")
		if code == 0 || time.Now().After(deadline) {
			break
		}
		<-time.After(500 * time.Millisecond)
	}
	if code != 0 || !strings.Contains(out, "br-int") {
		t.Fatalf("netctl appctl node-a with a token kubeconfig: exit %d\n%s%s", code, out, errb)
	}
	// Without the account: refused before any node is asked, naming it.
	_, errb, code = c.netctlIn(t, from, "--kubeconfig="+path, "--node-api-account=ovnhost/missing", "appctl", "node-a", "ovs-vswitchd", "dpif/show")
	if code == 0 || !strings.Contains(errb, "ServiceAccount ovnhost/missing") || !strings.Contains(errb, "never with your own credentials") {
		t.Errorf("netctl with a missing account: exit %d\n%s", code, errb)
	}
}

// applyManifest creates the objects of a manifest of this tree (RBAC kinds
// and ServiceAccounts) as kubectl create would, and their namespaces.
func (c *cluster) applyManifest(t *testing.T, file string) {
	t.Helper()
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), file))
	if err != nil {
		t.Fatal(err)
	}
	gvrs := map[string]schema.GroupVersionResource{
		"ClusterRole":        rbacv1.SchemeGroupVersion.WithResource("clusterroles"),
		"ClusterRoleBinding": rbacv1.SchemeGroupVersion.WithResource("clusterrolebindings"),
		"Role":               rbacv1.SchemeGroupVersion.WithResource("roles"),
		"RoleBinding":        rbacv1.SchemeGroupVersion.WithResource("rolebindings"),
		"ServiceAccount":     corev1.SchemeGroupVersion.WithResource("serviceaccounts"),
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var u unstructured.Unstructured
		if err := sigsyaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		gvr, ok := gvrs[u.GetKind()]
		if !ok {
			t.Fatalf("%s: kind %s is not one applyManifest knows", file, u.GetKind())
		}
		var ri dynamic.ResourceInterface = c.cp.dc.Resource(gvr)
		if ns := u.GetNamespace(); ns != "" {
			_, err := c.cp.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
			if err != nil && !apierrors.IsAlreadyExists(err) {
				t.Fatal(err)
			}
			ri = c.cp.dc.Resource(gvr).Namespace(ns)
		}
		if _, err := ri.Create(ctx, &u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("%s: %s %s: %v", file, u.GetKind(), u.GetName(), err)
		}
	}
}

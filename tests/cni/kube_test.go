package cni_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// kubeNode is a node plus a real kube-apiserver, the real controller (in
// process, the library the Deployment runs) and the CNI server in
// Kubernetes mode through a kubeconfig file.
type kubeNode struct {
	*node
	api *kubeapi.Server
	cs  kubernetes.Interface
}

func startKubeNode(t testing.TB, annWait time.Duration) *kubeNode {
	t.Helper()
	return startKubeNodeWith(t, annWait, nil)
}

// startKubeNodeWith lets the test adjust the controller's configuration.
func startKubeNodeWith(t testing.TB, annWait time.Duration, tweak func(*kube.Config)) *kubeNode {
	t.Helper()
	n := startNode(t, nodeOpts{noServer: true})
	api := kubeapi.Start(t)
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging/kubernetes/base/crd-subnets.yaml"))
	cs := kubernetes.NewForConfigOrDie(api.Config)
	ctx, cancel := context.WithCancel(context.Background())
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: n.central.NB()})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	kcfg := kube.Config{Rest: api.Config, NBEndpoints: n.central.NB(), Logger: log, Registry: prometheus.NewRegistry()}
	if tweak != nil {
		tweak(&kcfg)
	}
	c, err := kube.New(kcfg, nb)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		nb.Close()
	})
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n.cfg.Kubeconfig = api.Kubeconfig
	n.startServer(server.WithTimeouts(annWait, 30*time.Second))
	// The CNI server's watches end before the API server stops, which
	// otherwise waits for them.
	t.Cleanup(n.stopServer)
	return &kubeNode{node: n, api: api, cs: cs}
}

func (k *kubeNode) createPod(t *testing.T, name string, ann map[string]string) {
	t.Helper()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}
	if _, err := k.cs.CoreV1().Pods("default").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (k *kubeNode) addPod(t *testing.T, name string, ann map[string]string) *pod {
	t.Helper()
	k.createPod(t, name, ann)
	return k.add(t, name, "")
}

func TestKubePodsPingTCPAndHost(t *testing.T) {
	k := startKubeNode(t, 60*time.Second)
	a := k.addPod(t, "kube-a", nil)
	b := k.addPod(t, "kube-b", nil)
	// The pod got the address the controller annotated.
	got, err := k.cs.CoreV1().Pods("default").Get(context.Background(), "kube-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations["ovn.kubernetes.io/ip_address"] != a.ip {
		t.Fatalf("pod has %s, annotation says %s", a.ip, got.Annotations["ovn.kubernetes.io/ip_address"])
	}
	if err := ping(t, a.netns, b.ip); err != nil {
		t.Fatal(err)
	}
	ln := listen(t, b.netns, net.JoinHostPort(b.ip, "8080"))
	transfer(t, a.netns, ln, net.JoinHostPort(b.ip, "8080"), 4<<20)
	// The host reaches the pod through ovn0 (kubelet probes).
	waitOVN0(t)
	ln2 := listen(t, a.netns, net.JoinHostPort(a.ip, "8081"))
	transfer(t, "", ln2, net.JoinHostPort(a.ip, "8081"), 256<<10)
	// DEL works after the Pod object is gone from the API.
	if err := k.cs.CoreV1().Pods("default").Delete(context.Background(), "kube-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*pod{a, b} {
		for i := 0; i < 2; i++ {
			if out := k.del(t, p); out.Code != 0 {
				t.Fatalf("DEL %s #%d: %s", p.name, i+1, out.Err.Msg)
			}
		}
	}
	k.assertClean(t)
}

func TestKubeStaticIPAndRateChange(t *testing.T) {
	k := startKubeNode(t, 60*time.Second)
	srv := k.addPod(t, "limited", map[string]string{"ovn.kubernetes.io/ip_address": "10.16.0.150", "ovn.kubernetes.io/ingress_rate": "10"})
	if srv.ip != "10.16.0.150" {
		t.Fatalf("static IP pod got %s", srv.ip)
	}
	cl := k.addPod(t, "sender", nil)
	addr := net.JoinHostPort(srv.ip, "9000")
	ln := listen(t, srv.netns, addr)
	mbps := transfer(t, cl.netns, ln, addr, 4<<20)
	t.Logf("ingress_rate=10: %.1f Mbit/s", mbps)
	if mbps < 5 || mbps > 14 {
		t.Fatalf("ingress_rate=10: measured %.1f Mbit/s", mbps)
	}
	at10 := mbps
	// Change the annotation on the running pod: the QoS row follows.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"ovn.kubernetes.io/ingress_rate": "30", "ovn.kubernetes.io/egress_rate": "10"}}})
	if _, err := k.cs.CoreV1().Pods("default").Patch(context.Background(), "limited", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	k.waitQoSRate(t, "limited.default", 30)
	mbps = transfer(t, cl.netns, ln, addr, 8<<20)
	t.Logf("ingress_rate=30: %.1f Mbit/s", mbps)
	// The raised limit took effect: clearly above what the old one allowed
	// (the userspace datapath drops when the shaper's queue outgrows its
	// socket buffer, so TCP reaches well under 30 on a loaded machine: CI saw
	// 14), and still capped.
	if mbps < 1.3*at10 || mbps < 12 || mbps > 40 {
		t.Fatalf("ingress_rate 10 -> 30: measured %.1f Mbit/s after the change (%.1f before), want above 12 and 1.3x the old figure, at most 40", mbps, at10)
	}
	// egress_rate=10 added at the same time limits what the pod sends.
	back := net.JoinHostPort(cl.ip, "9002")
	lnb := listen(t, cl.netns, back)
	mbps = transfer(t, srv.netns, lnb, back, 4<<20)
	t.Logf("egress_rate=10 set on the running pod: %.1f Mbit/s", mbps)
	if mbps < 5 || mbps > 14 {
		t.Fatalf("egress_rate=10: measured %.1f Mbit/s", mbps)
	}
	for _, p := range []*pod{srv, cl} {
		if out := k.del(t, p); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
	k.assertClean(t)
}

// waitQoSRate waits inside ovsdb-server until the pod's QoS has max-rate mbps.
func (k *kubeNode) waitQoSRate(t *testing.T, ifaceID string, mbps int) {
	t.Helper()
	ms := 20000
	rate := strconv.Itoa(mbps * 1_000_000)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k.transact(ctx, ovsdb.Operation{Op: ovsdb.OperationWait, Table: "QoS", Timeout: &ms,
		Where:   []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, ovsdb.OvsMap{GoMap: map[any]any{"iface-id": ifaceID}})},
		Columns: []string{"other_config"}, Until: "==",
		Rows: []ovsdb.Row{{"other_config": ovsdb.OvsMap{GoMap: map[any]any{"max-rate": rate}}}}})
}

func TestKubeBadAnnotationsFailThatPod(t *testing.T) {
	k := startKubeNode(t, 5*time.Second)
	// A rate that is not a number: the controller allocates, the CNI refuses precisely.
	k.createPod(t, "badrate", map[string]string{"ovn.kubernetes.io/ingress_rate": "fast"})
	ns := podnettest.NewNetNS(t, "ovht-badrate")
	out := runPlugin(t, k.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-badrate", Netns: ns, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=badrate", Conf: k.netconf(t, "", nil)})
	if out.Code == 0 || !strings.Contains(out.Err.Msg, `ovn.kubernetes.io/ingress_rate="fast"`) {
		t.Fatalf("bad ingress_rate: exit %d: %q", out.Code, out.Err.Msg)
	}
	// An address outside every subnet: the controller refuses it; ADD
	// times out naming the missing annotation and the controller's event.
	k.createPod(t, "outside", map[string]string{"ovn.kubernetes.io/ip_address": "192.168.200.5"})
	ns2 := podnettest.NewNetNS(t, "ovht-outside")
	out = runPlugin(t, k.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-outside", Netns: ns2, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=outside", Conf: k.netconf(t, "", nil)})
	if out.Code == 0 || !strings.Contains(out.Err.Msg, "missing ovn.kubernetes.io/allocated") || !strings.Contains(out.Err.Msg, "192.168.200.5") {
		t.Fatalf("refused static IP: exit %d: %q", out.Code, out.Err.Msg)
	}
	t.Logf("ADD error: %s", out.Err.Msg)
	// Neither failure left anything behind; the good path still works.
	k.assertClean(t)
	p := k.addPod(t, "fine", nil)
	if out := k.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	// Metrics: errors counted by reason.
	mfs, err := k.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "ovnhost_cni_errors_total" {
			continue
		}
		for _, m := range mf.Metric {
			for _, l := range m.Label {
				if l.GetName() == "reason" {
					reasons[l.GetValue()] += m.Counter.GetValue()
				}
			}
		}
	}
	if reasons["invalid_annotation"] != 1 || reasons["annotation_timeout"] != 1 {
		t.Fatalf("error metrics by reason: %v", reasons)
	}
	// Latency histogram per command and result.
	counts := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "ovnhost_cni_request_duration_seconds" {
			continue
		}
		for _, m := range mf.Metric {
			key := ""
			for _, l := range m.Label {
				key += l.GetName() + "=" + l.GetValue() + ","
			}
			counts[key] = m.Histogram.GetSampleCount()
		}
	}
	if counts["command=ADD,result=error,"] != 2 || counts["command=ADD,result=success,"] != 1 || counts["command=DEL,result=success,"] != 1 {
		t.Fatalf("latency histogram sample counts: %v", counts)
	}
}

// The API server is unreachable when the daemon starts: the CNI server still
// starts (OVS and wired pods must not depend on Kubernetes) and ADD answers
// "try again later" saying what it waits for.
func TestKubeAPIUnreachable(t *testing.T) {
	n := startNode(t, nodeOpts{noServer: true})
	kc := filepath.Join(n.dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	n.cfg.Kubeconfig = kc
	n.startServer(server.WithTimeouts(2*time.Second, 30*time.Second), server.WithoutNodePort())
	t.Cleanup(n.stopServer)
	ns := podnettest.NewNetNS(t, "ovht-noapi")
	out := runPlugin(t, n.installedPlugin(), cniCall{Command: "ADD", ContainerID: "cid-noapi", Netns: ns, IfName: "eth0",
		Args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=noapi", Conf: n.netconf(t, "", nil)})
	if out.Code == 0 || out.Err.Code != 11 || !strings.Contains(out.Err.Msg, "Kubernetes API server has not answered") {
		t.Fatalf("ADD without an API server: exit %d code %d %q", out.Code, out.Err.Code, out.Err.Msg)
	}
	n.assertClean(t)
}

// A dual-stack Subnet: pods get one address of each family, IPv6 without
// DAD delay, and reach each other over both.
func TestKubeDualStackSubnet(t *testing.T) {
	k := startKubeNode(t, 60*time.Second)
	dc := dynamic.NewForConfigOrDie(k.api.Config)
	sub := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "dual"},
		"spec": map[string]any{"protocol": "Dual", "cidrBlock": "10.17.0.0/16,fd00:17::/64", "gateway": "10.17.0.1,fd00:17::1"},
	}}
	if _, err := dc.Resource(schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}).Create(context.Background(), sub, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ann := map[string]string{"ovn.kubernetes.io/logical_switch": "dual"}
	a := k.addPod(t, "dual-a", ann)
	b := k.addPod(t, "dual-b", ann)
	var r addResult
	if err := json.Unmarshal(b.raw, &r); err != nil || len(r.IPs) != 2 {
		t.Fatalf("dual-stack result %s: %v", b.raw, err)
	}
	v6 := strings.Split(r.IPs[1].Address, "/")[0]
	if !strings.HasPrefix(v6, "fd00:17::") || !strings.HasPrefix(b.ip, "10.17.") {
		t.Fatalf("addresses %s and %s", b.ip, v6)
	}
	if err := ping(t, a.netns, b.ip); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, a.netns, v6); err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(v6, "8086")
	ln := listen(t, b.netns, addr)
	transfer(t, a.netns, ln, addr, 1<<20)
	for _, p := range []*pod{a, b} {
		if out := k.del(t, p); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
	k.assertClean(t)
}

// The controller's node annotations change (here: a new join address): ovn0
// follows, and the host still reaches pods.
func TestKubeNodeAddressChange(t *testing.T) {
	k := startKubeNode(t, 60*time.Second)
	p := k.addPod(t, "probe", nil)
	waitOVN0(t)
	addrs := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		t.Fatal(err)
	}
	patch := []byte(`{"metadata":{"annotations":{"ovn.kubernetes.io/ip_address":"100.64.0.50"}}}`)
	if _, err := k.cs.CoreV1().Nodes().Patch(context.Background(), "node1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(30 * time.Second)
	for found := false; !found; {
		select {
		case u := <-addrs:
			found = u.NewAddr && u.LinkAddress.IP.String() == "100.64.0.50"
		case <-deadline:
			n, _ := k.cs.CoreV1().Nodes().Get(context.Background(), "node1", metav1.GetOptions{})
			t.Fatalf("ovn0 did not get 100.64.0.50; node annotations %v", n.Annotations)
		}
	}
	waitOVN0(t)
	ln := listen(t, p.netns, net.JoinHostPort(p.ip, "8090"))
	transfer(t, "", ln, net.JoinHostPort(p.ip, "8090"), 256<<10)
	if out := k.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
}

// Issue 23, item 6: an invalid rate annotation on a running pod removes the
// limit it replaced (it used to leave the old QoS in place, also across a
// restart), and the pod's deletion leaves no QoS or Queue row.
func TestKubeInvalidRateRemovesQoS(t *testing.T) {
	k := startKubeNode(t, 60*time.Second)
	p := k.addPod(t, "shaped", map[string]string{"ovn.kubernetes.io/ingress_rate": "10", "ovn.kubernetes.io/egress_rate": "5"})
	k.waitQoSRate(t, "shaped.default", 10)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{"ovn.kubernetes.io/ingress_rate": "fast"}}})
	if _, err := k.cs.CoreV1().Pods("default").Patch(context.Background(), "shaped", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// ovsdb-server's own wait: the pod's port points to no QoS any more
	// (the same transaction deletes its QoS and Queue rows: checked
	// below); the valid egress_rate stays.
	ms := 20000
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	byPod := []ovsdb.Condition{ovsdb.NewCondition("external_ids", ovsdb.ConditionIncludes, ovsdb.OvsMap{GoMap: map[any]any{"iface-id": "shaped.default"}})}
	k.transact(ctx,
		ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Port", Timeout: &ms, Where: byPod, Columns: []string{"qos"}, Until: "==",
			Rows: []ovsdb.Row{{"qos": ovsdb.OvsSet{GoSet: []any{}}}}},
		ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Interface", Timeout: &ms, Where: byPod, Columns: []string{"ingress_policing_rate"}, Until: "==",
			Rows: []ovsdb.Row{{"ingress_policing_rate": 5000}}})
	if q, qs := k.selectRows(t, "QoS"), k.selectRows(t, "Queue"); len(q) != 0 || len(qs) != 0 {
		t.Fatalf("%d QoS and %d Queue rows left after the ingress limit was removed", len(q), len(qs))
	}
	if out := k.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
	k.assertClean(t) // no QoS or Queue row either
}

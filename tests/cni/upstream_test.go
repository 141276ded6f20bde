package cni_test

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Migration step 1 (docs/migrate-from-kube-ovn.md): the node side is
// ovnhost, the controller is still upstream kube-ovn-controller. No
// ovnhost-controller runs here; the test plays kube-ovn-controller v1.15's
// side of the contract as its source writes it (pkg/controller/subnet.go,
// node.go, pod.go): the NB rows with its names and external_ids vendor
// kube-ovn, Subnets with its stored defaults and a Validated condition,
// the node's join-port annotations and the pod's annotations, all under
// its field manager (client-go's default: kube-ovn-controller), with a
// default CIDR other than Kube-OVN's 10.16.0.0/16. The node wires the pod
// with exactly those values, routes 10.244.0.0/16 (not 10.16.0.0/16)
// through ovn0 and reaches the pod. (The chassis annotation upstream needs
// is written by the whole daemon: TestClusterOfTwoNodesWiresPodsAcrossNodes.)
func TestUpstreamKubeOVNControllerFeedsTheNode(t *testing.T) {
	n := startNode(t, nodeOpts{noServer: true})
	api := kubeapi.Start(t)
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging/kubernetes/base/crd-subnets.yaml"))
	cs := kubernetes.NewForConfigOrDie(api.Config)
	dc := dynamic.NewForConfigOrDie(api.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const upstream = "kube-ovn-controller"

	nbctl := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ovn-nbctl", append([]string{"--db=" + n.central.NB()}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ovn-nbctl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// The default VPC as kube-ovn-controller creates it.
	nbctl("lr-add", "ovn-cluster", "--", "set", "logical_router", "ovn-cluster", "external_ids:vendor=kube-ovn")
	for _, sw := range []struct{ name, cidr, gw, mac string }{
		{"ovn-default", "10.244.0.0/16", "10.244.0.1", "0a:58:0a:f4:00:01"},
		{"join", "100.64.0.0/16", "100.64.0.1", "0a:58:64:40:00:01"},
	} {
		nbctl("ls-add", sw.name, "--", "set", "logical_switch", sw.name, "external_ids:vendor=kube-ovn",
			"other_config:subnet="+sw.cidr, "other_config:exclude_ips="+sw.gw)
		lrp := "ovn-cluster-" + sw.name
		nbctl("lrp-add", "ovn-cluster", lrp, sw.mac, sw.gw+"/16")
		lsp := sw.name + "-ovn-cluster"
		nbctl("lsp-add", sw.name, lsp, "--", "lsp-set-type", lsp, "router", "--", "lsp-set-addresses", lsp, "router",
			"--", "lsp-set-options", lsp, "router-port="+lrp)
	}
	nbctl("lsp-add", "join", "node-node1", "--", "lsp-set-addresses", "node-node1", "0a:58:64:40:00:02 100.64.0.2",
		"--", "set", "logical_switch_port", "node-node1", "external_ids:vendor=kube-ovn")
	nbctl("lsp-add", "ovn-default", "web.default", "--", "lsp-set-addresses", "web.default", "0a:58:0a:f4:00:05 10.244.0.5",
		"--", "lsp-set-port-security", "web.default", "0a:58:0a:f4:00:05 10.244.0.5",
		"--", "set", "logical_switch_port", "web.default", "external_ids:vendor=kube-ovn", "external_ids:pod=default/web", "external_ids:ls=ovn-default")

	// Subnets as kube-ovn-controller stores them, validated by it.
	subnets := dc.Resource(subnetGVR)
	for _, s := range []struct {
		name string
		spec map[string]any
	}{
		{"ovn-default", map[string]any{"default": true, "vpc": "ovn-cluster", "provider": "ovn", "protocol": "IPv4", "cidrBlock": "10.244.0.0/16",
			"gateway": "10.244.0.1", "excludeIps": []any{"10.244.0.1"}, "gatewayType": "distributed", "natOutgoing": true, "enableLb": true,
			"enableDHCP": false, "enableEcmp": false, "private": false, "disableGatewayCheck": false}},
		{"join", map[string]any{"default": false, "vpc": "ovn-cluster", "provider": "ovn", "protocol": "IPv4", "cidrBlock": "100.64.0.0/16",
			"gateway": "100.64.0.1", "excludeIps": []any{"100.64.0.1"}, "gatewayType": "distributed", "natOutgoing": false, "enableLb": true}},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
			"metadata": map[string]any{"name": s.name, "finalizers": []any{"kubeovn.io/kube-ovn-controller"}}, "spec": s.spec}}
		if _, err := subnets.Create(ctx, u, metav1.CreateOptions{FieldManager: upstream}); err != nil {
			t.Fatal(err)
		}
		now := time.Now().UTC().Format(time.RFC3339)
		st, _ := json.Marshal(map[string]any{"status": map[string]any{"conditions": []any{
			map[string]any{"type": "Validated", "status": "True", "reason": "ValidateLogicalSwitchSuccess", "lastUpdateTime": now, "lastTransitionTime": now},
			map[string]any{"type": "Ready", "status": "True", "reason": "ResourceReady", "lastUpdateTime": now, "lastTransitionTime": now}}}})
		if _, err := subnets.Patch(ctx, s.name, types.MergePatchType, st, metav1.PatchOptions{FieldManager: upstream}, "status"); err != nil {
			t.Fatal(err)
		}
	}

	// The node and its join port, as kube-ovn-controller annotates it.
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nodeAnn, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/cidr": "100.64.0.0/16", "ovn.kubernetes.io/gateway": "100.64.0.1",
		"ovn.kubernetes.io/ip_address": "100.64.0.2", "ovn.kubernetes.io/logical_switch": "join",
		"ovn.kubernetes.io/mac_address": "0a:58:64:40:00:02", "ovn.kubernetes.io/port_name": "node-node1"}}})
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "node1", types.MergePatchType, nodeAnn, metav1.PatchOptions{FieldManager: upstream}); err != nil {
		t.Fatal(err)
	}

	n.cfg.Kubeconfig = api.Kubeconfig
	n.startServer(server.WithTimeouts(30*time.Second, 30*time.Second))
	t.Cleanup(n.stopServer)

	// The pod, created by a user and then annotated by kube-ovn-controller.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.PodSpec{NodeName: "node1", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podAnn, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		"ovn.kubernetes.io/allocated": "true", "ovn.kubernetes.io/cidr": "10.244.0.0/16", "ovn.kubernetes.io/gateway": "10.244.0.1",
		"ovn.kubernetes.io/ip_address": "10.244.0.5", "ovn.kubernetes.io/logical_router": "ovn-cluster",
		"ovn.kubernetes.io/logical_switch": "ovn-default", "ovn.kubernetes.io/mac_address": "0a:58:0a:f4:00:05",
		"ovn.kubernetes.io/pod_nic_type": "veth-pair", "ovn.kubernetes.io/routed": "true"}}})
	if _, err := cs.CoreV1().Pods("default").Patch(ctx, "web", types.MergePatchType, podAnn, metav1.PatchOptions{FieldManager: upstream}); err != nil {
		t.Fatal(err)
	}
	p := n.add(t, "web", "")
	if p.ip != "10.244.0.5" {
		t.Fatalf("pod wired with %s, want kube-ovn-controller's 10.244.0.5\n%s", p.ip, p.raw)
	}
	if rows := n.selectRows(t, "Interface", ovsdb.Condition{Column: "external_ids", Function: ovsdb.ConditionIncludes,
		Value: ovsdb.OvsMap{GoMap: map[any]any{"iface-id": "web.default"}}}); len(rows) != 1 {
		t.Fatalf("OVS interfaces with iface-id web.default (kube-ovn-controller's port name): %d, want 1", len(rows))
	}
	waitOVN0Route(t, "10.244.0.0/16")
	if ovn0Routes()["10.16.0.0/16"] {
		t.Fatalf("ovn0 routes Kube-OVN's built-in 10.16.0.0/16 although no Subnet has it: %v", ovn0Routes())
	}
	if out, err := exec.Command("ping", "-c", "3", "-i", "0.2", "-W", "2", p.ip).CombinedOutput(); err != nil {
		t.Fatalf("node to the pod through ovn0: %v\n%s", err, out)
	}
	if out := n.del(t, p); out.Code != 0 {
		t.Fatalf("DEL: %s", out.Err.Msg)
	}
}

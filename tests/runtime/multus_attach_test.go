package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// TestMultusOVNAttachment is issue 27 end to end: Multus v4 (thin plugin,
// its configuration as the entrypoint generates it), containerd and
// kubelet; a Kube-OVN NetworkAttachmentDefinition ("type": "kube-ovn",
// "provider": "<nad>.<ns>.ovn", unchanged but for the node's socket path)
// and a Subnet of that provider. Multus runs kube-ovn (ovnhost's link)
// for net1; each pod gets eth0 on the default network and net1 with the
// controller's attachment address, Multus's network-status records it, the
// pods reach each other over net1, and deleting them leaves no veth and no
// OVS port on the node.
func TestMultusOVNAttachment(t *testing.T) {
	e := newEnv(t)
	multus := criruntime.Multus(t)
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	cp := criruntime.StartControlPlaneWith(t, e.Dir, criruntime.ControlPlaneOptions{
		CRDs: []string{"tests/runtime/testdata/crd-network-attachment-definitions.yaml"}})
	e.StartKubeNode(cp)
	data, err := os.ReadFile(multus)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Path("cni-bin", "multus"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	ours, err := os.ReadFile(e.WaitConflist())
	if err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(e.Path("cni-bin", "kube-ovn")); err != nil || target != "ovnhost-cni" {
		t.Fatalf("ovnhost installed no kube-ovn link in the CNI bin dir: %q %v", target, err)
	}
	if err := os.WriteFile(e.Path("cni-conf", "00-multus.conf"), e.multusConf(ours, cp.API.Kubeconfig), 0o644); err != nil {
		t.Fatal(err)
	}

	const provider, cidr = "attnet.default.ovn", "10.80.0.0/24"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dc := dynamic.NewForConfigOrDie(cp.API.Config)
	subnets := schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}
	if _, err := dc.Resource(subnets).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "attnet"},
		"spec": map[string]any{"cidrBlock": cidr, "provider": provider}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":"attnet","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":%q,"socket":%q}`,
		provider, e.Path("cni.sock"))
	if _, err := dc.Resource(nadGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": "attnet", "namespace": "default"}, "spec": map[string]any{"config": conf}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.StartContainerd()
	e.waitCNINetwork("multus-cni-network")
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	e.StartKubelet(cp)

	for _, name := range []string{"apod-a", "apod-b"} {
		p := criruntime.KubePod(name, map[string]string{"k8s.v1.cni.cncf.io/networks": "attnet"}, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type apod struct {
		*criruntime.Pod
		net1 netip.Addr
	}
	var pods []apod
	attCIDR := netip.MustParsePrefix(cidr)
	for _, name := range []string{"apod-a", "apod-b"} {
		kp := e.WaitPodRunning(cp, name, 3*time.Minute)
		p := e.PodOf(kp)
		var status []struct {
			Name      string   `json:"name"`
			Interface string   `json:"interface"`
			IPs       []string `json:"ips"`
			Default   bool     `json:"default"`
		}
		raw := kp.Annotations["k8s.v1.cni.cncf.io/network-status"]
		if err := json.Unmarshal([]byte(raw), &status); err != nil || len(status) != 2 {
			t.Fatalf("pod %s: network-status %q: %v", name, raw, err)
		}
		if !status[0].Default || status[0].Interface != "eth0" || status[1].Name != "default/attnet" || status[1].Interface != "net1" || len(status[1].IPs) != 1 {
			t.Fatalf("pod %s: network-status %+v, want eth0 (default) and default/attnet on net1", name, status)
		}
		n1, err := netip.ParseAddr(status[1].IPs[0])
		if err != nil || !attCIDR.Contains(n1) || kp.Annotations[provider+".kubernetes.io/ip_address"] != n1.String() {
			t.Fatalf("pod %s: net1 %q, the controller's %s %q (in %s)", name, status[1].IPs[0], provider+".kubernetes.io/ip_address",
				kp.Annotations[provider+".kubernetes.io/ip_address"], cidr)
		}
		out, err := e.Exec(p, "ip", "-o", "addr", "show", "net1")
		if err != nil || !strings.Contains(out, n1.String()+"/24") {
			t.Fatalf("pod %s: net1 does not carry %s: %v\n%s", name, n1, err, out)
		}
		// busybox's ip lists every route whatever the selector.
		routes, err := e.Exec(p, "ip", "route")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(routes, "\n") {
			if strings.HasPrefix(l, "default") && !strings.Contains(l, "dev eth0") {
				t.Fatalf("pod %s: default route %q: the default route stays on eth0, net1 has none\n%s", name, l, routes)
			}
		}
		if !strings.Contains(routes, cidr+" dev net1") {
			t.Fatalf("pod %s: no on-link route to %s on net1:\n%s", name, cidr, routes)
		}
		pods = append(pods, apod{p, n1})
	}
	a, b := pods[0], pods[1]
	t.Logf("pods: %s eth0 %s net1 %s, %s eth0 %s net1 %s", a.Name, a.IP, a.net1, b.Name, b.IP, b.net1)
	e.Ping(a.Pod, b.Pod) // eth0
	if out, err := e.Exec(a.Pod, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", "net1", b.net1.String()); err != nil {
		t.Fatalf("ping over net1 %s -> %s: %v\n%s", a.Name, b.net1, err, out)
	}

	e.DeletePods(cp, "apod-a", "apod-b")
	e.WaitNoReadySandboxes(60 * time.Second)
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after deletion: veths %v and OVS ports %v left on the node", l, p)
	}
}

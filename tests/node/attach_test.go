package node_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

const (
	attProvider = "attnet.default.ovn"
	attCIDR     = "10.80.0.0/24"
)

// tail is the last n lines of a log file.
func tail(path string, n int) string {
	raw, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(raw), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// cniAttach runs the plugin the node installed as Multus runs a delegate of
// a NetworkAttachmentDefinition of Kube-OVN's type: the binary "kube-ovn"
// from the CNI bin dir, the NAD's config on stdin (Kube-OVN's
// server_socket and the provider; socket: this node's CNI socket, as the
// test's nodes do not listen on the default path), CNI_IFNAME netN and
// Multus's CNI_ARGS, for the container whose eth0 the runtime added.
func cniAttach(n *node, command, podNS, kns, pod, ifName, provider string) ([]byte, error) {
	conf := fmt.Sprintf(`{"cniVersion":"0.3.1","name":"attnet","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":%q,"socket":%q,"timeoutSeconds":60}`,
		provider, n.Path("cni.sock"))
	cmd := exec.Command("ip", "netns", "exec", n.NS, n.Path("cni-bin", "kube-ovn"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + podNS, "CNI_NETNS=/var/run/netns/" + podNS, "CNI_IFNAME=" + ifName,
		"CNI_PATH=" + n.Path("cni-bin"),
		"CNI_ARGS=IgnoreUnknown=true;K8S_POD_NAMESPACE=" + kns + ";K8S_POD_NAME=" + pod + ";K8S_POD_INFRA_CONTAINER_ID=" + podNS}
	cmd.Stdin = strings.NewReader(conf)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return append(out.Bytes(), errb.Bytes()...), err
	}
	return out.Bytes(), nil
}

// Issue 27, the node side: a Kube-OVN attachment network (a Subnet of
// provider <nad>.<ns>.ovn behind a NetworkAttachmentDefinition of type
// kube-ovn) gives pods on two nodes a second interface, net1, wired by the
// node from the controller's <provider>.kubernetes.io annotations: the
// plugin's result and the pod's net1 carry the controller's address, net1
// has no default route, the OVS interface is bound to
// <pod>.<ns>.<provider>, and the pods reach each other on net1 across the
// nodes. The attachment Subnet is private: a pod with eth0 only (the
// default network) cannot reach a pod's net1 address, while it reaches
// that pod's eth0. DEL of net1 removes only net1.
func TestAttachmentNetworkGivesPodsASecondInterface(t *testing.T) {
	c := startClusterWith(t, clusterSpec{nodes: 2, crds: []string{"tests/runtime/testdata/crd-network-attachment-definitions.yaml"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if _, err := c.cp.dc.Resource(subnetsGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "attnet"},
		"spec": map[string]any{"cidrBlock": attCIDR, "provider": attProvider, "private": true}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	nadConf := fmt.Sprintf(`{"cniVersion":"0.3.1","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":%q}`, attProvider)
	if _, err := c.cp.dc.Resource(nadGVR).Namespace("default").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition", "metadata": map[string]any{"name": "attnet"},
		"spec": map[string]any{"config": nadConf}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	type attached struct {
		pod   *clusterPod
		net1  string // net1's address from the plugin's result
		ovsIf string // net1's OVS interface
	}
	var att []*attached
	for i, name := range []string{"att-a", "att-b"} {
		p := c.addPod(t, i, "default", name, nil, map[string]string{"k8s.v1.cni.cncf.io/networks": "attnet"})
		out, err := cniAttach(p.node, "ADD", p.netns, "default", name, "net1", attProvider)
		if err != nil {
			t.Fatalf("CNI ADD net1 of %s: %v\n%s\n%s\n%s", name, err, out, p.node.LogTail(), tail(c.cp.ctrlLog, 30))
		}
		t.Cleanup(func() { _, _ = cniAttach(p.node, "DEL", p.netns, "default", name, "net1", attProvider) })
		var res struct {
			Interfaces []struct{ Name, Mac, Sandbox string } `json:"interfaces"`
			IPs        []struct{ Address, Gateway string }   `json:"ips"`
			Routes     []any                                 `json:"routes"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) != 1 || len(res.Routes) != 0 {
			t.Fatalf("net1 result of %s: %s (%v): want one address and no route", name, out, err)
		}
		a := &attached{pod: p, net1: strings.Split(res.IPs[0].Address, "/")[0]}
		// The controller's annotations are what the node wired.
		pod, err := c.cp.kc.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key := func(k string) string { return attProvider + ".kubernetes.io/" + k }
		if pod.Annotations[key("ip_address")] != a.net1 || res.IPs[0].Address != a.net1+"/24" || res.IPs[0].Gateway != "10.80.0.1" ||
			pod.Annotations[key("logical_switch")] != "attnet" || pod.Annotations[key("mac_address")] != res.Interfaces[1].Mac || res.Interfaces[1].Name != "net1" {
			t.Fatalf("%s: net1 result %s, annotations %v", name, out, pod.Annotations)
		}
		if got := run(t, "ip", "-n", p.netns, "-4", "-o", "addr", "show", "dev", "net1"); !strings.Contains(got, a.net1+"/24") {
			t.Fatalf("%s's net1: %s", name, got)
		}
		if got := strings.TrimSpace(run(t, "ip", "-n", p.netns, "-4", "route", "show", "default")); got != "default via 10.16.0.1 dev eth0" {
			t.Fatalf("%s's default routes: %q, want eth0's only", name, got)
		}
		db := "--db=unix:" + p.node.Path("ovs-run", "db.sock")
		a.ovsIf = strings.TrimSpace(run(t, "ovs-vsctl", db, "--bare", "--columns=name", "find", "Interface", "external_ids:iface-id="+name+".default."+attProvider))
		if a.ovsIf == "" || run(t, "ovs-vsctl", db, "get", "Interface", a.ovsIf, "external_ids:ovn-installed") != "\"true\"\n" {
			t.Fatalf("%s: no ovn-installed OVS interface bound to %s.default.%s (%q)", name, name, attProvider, a.ovsIf)
		}
		eth0If := strings.TrimSpace(run(t, "ovs-vsctl", db, "--bare", "--columns=name", "find", "Interface", "external_ids:iface-id="+name+".default"))
		if eth0If == "" || eth0If == a.ovsIf {
			t.Fatalf("%s: eth0's interface %q, net1's %q", name, eth0If, a.ovsIf)
		}
		att = append(att, a)
	}
	// net1 to net1 across the nodes, both ways.
	if err := ping(att[0].pod.netns, att[1].net1, 5); err != nil {
		t.Fatalf("att-a to att-b on the attachment network: %v\n%s", err, att[0].pod.node.LogTail())
	}
	if err := ping(att[1].pod.netns, att[0].net1, 5); err != nil {
		t.Fatalf("att-b to att-a on the attachment network: %v", err)
	}
	// The default network reaches the pod's eth0 but not its private net1.
	plain := c.addPod(t, 0, "default", "plain", nil, nil)
	if err := ping(plain.netns, att[1].pod.ip, 5); err != nil {
		t.Fatalf("plain to att-b's eth0: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "exec", plain.netns, "ping", "-c", "3", "-i", "0.2", "-W", "1", att[1].net1).CombinedOutput(); err == nil ||
		!strings.Contains(string(out), "100% packet loss") {
		t.Fatalf("a pod of the default network reached att-b's net1 on the private attachment network %s: %v\n%s", attCIDR, err, out)
	}

	// A malformed provider fails that interface at once, naming the fix.
	out, err := cniAttach(att[0].pod.node, "ADD", att[0].pod.netns, "default", "att-a", "net2", "attnet.ovn")
	if err == nil || !strings.Contains(string(out), `"code": 7`) || !strings.Contains(string(out), `provider \"attnet.ovn\", which is not an OVN attachment network's`) {
		t.Fatalf("ADD net2 with provider attnet.ovn: %v\n%s", err, out)
	}

	// DEL of net1 removes net1 only.
	a := att[0]
	if out, err := cniAttach(a.pod.node, "DEL", a.pod.netns, "default", "att-a", "net1", attProvider); err != nil {
		t.Fatalf("DEL net1 of att-a: %v\n%s", err, out)
	}
	db := "--db=unix:" + a.pod.node.Path("ovs-run", "db.sock")
	if got := strings.TrimSpace(run(t, "ovs-vsctl", db, "--bare", "--columns=name", "find", "Interface", "external_ids:iface-id=att-a.default."+attProvider)); got != "" {
		t.Fatalf("net1's OVS interface %q left after its DEL", got)
	}
	if out, err := exec.Command("ip", "-n", a.pod.netns, "link", "show", "net1").CombinedOutput(); err == nil {
		t.Fatalf("net1 still in att-a after its DEL: %s", out)
	}
	if err := ping(plain.netns, a.pod.ip, 3); err != nil {
		t.Fatalf("att-a's eth0 after DEL of its net1: %v", err)
	}
}

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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// The whole product on two nodes: a real kube-apiserver, the real
// ovnhost-controller, one OVN central, and two ovnhost node daemons in their
// own network namespaces joined by a veth underlay (--userspace-tunnel).
// The test plays kubelet: it creates Pods bound to each node and calls the
// plugin each node installed; the pods then ping each other across nodes.
func TestClusterOfTwoNodesWiresPodsAcrossNodes(t *testing.T) {
	cp := startControlPlane(t)
	api, central, kc := cp.api, cp.central, cp.kc
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	a, b := newNode(t), newNode(t)
	run(t, "ip", "link", "add", "ul0", "netns", a.NS, "type", "veth", "peer", "name", "ul0", "netns", b.NS)
	// The outside: each node's uplink (wan0) leads to it; it answers with
	// the source address it sees and routes back only to the nodes (and to
	// the routed subnet below, whose pods keep their own address).
	world := &outside{ns: newNetns(t, "ohx"), addr: "192.168.207.1:7000"}
	for i, n := range []*node{a, b} {
		peer := fmt.Sprintf("wan%c", 'a'+i)
		run(t, "ip", "link", "add", "wan0", "netns", n.NS, "type", "veth", "peer", "name", peer, "netns", world.ns)
		run(t, "ip", "-n", n.NS, "addr", "add", fmt.Sprintf("192.168.%d.2/24", 207+i), "dev", "wan0")
		run(t, "ip", "-n", n.NS, "link", "set", "wan0", "up")
		run(t, "ip", "-n", n.NS, "route", "add", "default", "via", fmt.Sprintf("192.168.%d.1", 207+i))
		run(t, "ip", "-n", world.ns, "addr", "add", fmt.Sprintf("192.168.%d.1/24", 207+i), "dev", peer)
		run(t, "ip", "-n", world.ns, "link", "set", peer, "up")
	}
	run(t, "ip", "-n", world.ns, "route", "add", "10.70.0.0/16", "via", "192.168.207.2")
	world.serve(t)
	apiAddr := strings.TrimPrefix(api.URL, "https://")
	for i, n := range []*node{a, b} {
		name := fmt.Sprintf("node-%c", 'a'+i)
		ip := fmt.Sprintf("192.168.100.%d", i+1)
		run(t, "ip", "-n", n.NS, "addr", "add", ip+"/24", "dev", "ul0")
		run(t, "ip", "-n", n.NS, "link", "set", "ul0", "up")
		_, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		proxyAPIInto(t, n.NS, apiAddr)
		n.Env = []string{"OVN_SB_ADDR=" + central.SB(), "IFACE=ul0", "KUBECONFIG=" + api.Kubeconfig}
	}
	a.Start("--userspace-tunnel", "--node-name=node-a")
	b.Start("--userspace-tunnel", "--node-name=node-b")

	type kubePod struct {
		node *node
		name string
		ns   string // network namespace
		ip   string
	}
	pods := []*kubePod{{node: a, name: "web-a"}, {node: b, name: "web-b"}}
	for i, p := range pods {
		_, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name},
			Spec: corev1.PodSpec{NodeName: fmt.Sprintf("node-%c", 'a'+i), Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		p.ns = newNetns(t, "ohk")
		out, err := cni(p.node, "ADD", p.ns, p.name)
		if err != nil {
			t.Fatalf("ADD %s on %s: %v\n%s\n%s", p.name, p.node.NS, err, out, p.node.LogTail())
		}
		var res struct {
			IPs []struct{ Address string } `json:"ips"`
		}
		if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
			t.Fatalf("ADD result %s: %v", out, err)
		}
		p.ip = strings.Split(res.IPs[0].Address, "/")[0]
	}
	// The controller's annotation and the plugin's result agree.
	w, err := kc.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", "web-b").String()})
	if err != nil {
		t.Fatal(err)
	}
	for ev := range w.ResultChan() {
		if ev.Type == watch.Added || ev.Type == watch.Modified {
			if got := ev.Object.(*corev1.Pod).Annotations["ovn.kubernetes.io/ip_address"]; got != pods[1].ip {
				t.Fatalf("annotation ip_address %q, plugin result %q", got, pods[1].ip)
			}
			break
		}
	}
	w.Stop()
	if err := ping(pods[0].ns, pods[1].ip, 5); err != nil {
		t.Fatalf("pod on node-a to pod on node-b: %v\n%s", err, a.LogTail())
	}
	out, err := exec.Command("ip", "netns", "exec", pods[1].ns, "ping", "-c", "3", "-i", "0.2", "-W", "2", pods[0].ip).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte(" 0% packet loss")) {
		t.Fatalf("pod on node-b to pod on node-a: %v\n%s", err, out)
	}
	// Each node announced its chassis on its Node (issue 13): the system-id
	// of its Chassis row, as upstream kube-ovn-cni does.
	for i, n := range []*node{a, b} {
		name := fmt.Sprintf("node-%c", 'a'+i)
		id, err := os.ReadFile(n.Path("ovs-db", "system-id.conf"))
		if err != nil {
			t.Fatal(err)
		}
		waitNodeAnnotation(t, ctx, kc, name, "ovn.kubernetes.io/chassis", strings.TrimSpace(string(id)))
		sb, err := exec.Command("ovn-sbctl", "--db="+central.SB(), "--bare", "--columns=name", "find", "Chassis", "name="+strings.TrimSpace(string(id))).CombinedOutput()
		if err != nil || strings.TrimSpace(string(sb)) != strings.TrimSpace(string(id)) {
			t.Fatalf("%s's chassis annotation names no Chassis row in SB: %v %q", name, err, sb)
		}
	}
	// kubelet's probes: each node reaches its own pod through ovn0.
	if err := ping(a.NS, pods[0].ip, 3); err != nil {
		t.Fatalf("node-a to its pod through ovn0: %v", err)
	}

	// Egress (ovn-default has natOutgoing): each pod leaves through its own
	// node, masqueraded to that node's uplink address.
	for i, p := range pods {
		want := fmt.Sprintf("192.168.%d.2", 207+i)
		if src, err := world.sourceSeen(p.ns, 5*time.Second); err != nil || src != want {
			t.Fatalf("%s to the outside: saw source %q (%v), want its node's %s\n%s\n%s", p.name, src, err, want, p.node.LogTail(), egressState(p.node))
		}
	}
	// A subnet without natOutgoing: its pods leave routed, with their own address.
	if _, err := cp.dc.Resource(subnetsGVR).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet", "metadata": map[string]any{"name": "routed"},
			"spec": map[string]any{"cidrBlock": "10.70.0.0/16", "natOutgoing": false}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routed := &kubePod{node: a, name: "routed-a"}
	if _, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: routed.name,
		Annotations: map[string]string{"ovn.kubernetes.io/logical_switch": "routed"}},
		Spec: corev1.PodSpec{NodeName: "node-a", Containers: []corev1.Container{{Name: "c", Image: "none"}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	routed.ns = newNetns(t, "ohk")
	if res, err := cni(a, "ADD", routed.ns, routed.name); err != nil {
		var diag strings.Builder
		for _, c := range [][]string{{"ovn-nbctl", "--db=" + central.NB(), "show"}, {"ovn-sbctl", "--db=" + central.SB(), "show"},
			{"tail", "-20", a.Path("log", "ovn-controller.log")}, {"sh", "-c", "tail -20 " + central.Dir + "/*northd*.log"}} {
			o, _ := exec.Command(c[0], c[1:]...).CombinedOutput()
			diag.WriteString("$ " + strings.Join(c, " ") + "\n" + string(o))
		}
		t.Fatalf("ADD %s: %v\n%s\n%s\n%s", routed.name, err, res, a.LogTail(), diag.String())
	}
	pods = append(pods, routed)
	if src, err := world.sourceSeen(routed.ns, 5*time.Second); err != nil || !strings.HasPrefix(src, "10.70.") {
		t.Fatalf("%s (natOutgoing false) to the outside: saw source %q (%v), want its own 10.70.x address\n%s", routed.name, src, err, egressState(a))
	}

	for _, p := range pods {
		if out, err := cni(p.node, "DEL", p.ns, p.name); err != nil {
			t.Fatalf("DEL %s: %v\n%s", p.name, err, out)
		}
	}
}

// cni runs the plugin the node installed, as kubelet would, inside the
// node's network namespace, for a pod of the default namespace.
func cni(n *node, command, podNS, pod string) ([]byte, error) {
	return cniIn(n, command, podNS, "default", pod)
}

// cniIn is cni for a pod of Kubernetes namespace kns.
func cniIn(n *node, command, podNS, kns, pod string) ([]byte, error) {
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"ovnhost","type":"ovnhost-cni","socket":%q,"timeoutSeconds":60}`, n.Path("cni.sock"))
	cmd := exec.Command("ip", "netns", "exec", n.NS, n.Path("cni-bin", "ovnhost-cni"))
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + podNS, "CNI_NETNS=/var/run/netns/" + podNS, "CNI_IFNAME=eth0",
		"CNI_PATH=" + n.Path("cni-bin"), "CNI_ARGS=K8S_POD_NAMESPACE=" + kns + ";K8S_POD_NAME=" + pod}
	cmd.Stdin = strings.NewReader(conf)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		return append(out.Bytes(), errb.Bytes()...), err
	}
	return out.Bytes(), nil
}

// proxyAPIInto makes the API server (on the test's loopback) answer on the
// same address inside the named namespace.
func proxyAPIInto(t testing.TB, ns, addr string) { netns.ProxyInto(t, ns, addr) }

// waitNodeAnnotation watches the Node until annotation key has value want.
func waitNodeAnnotation(t *testing.T, ctx context.Context, kc kubernetes.Interface, name, key, want string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w, err := kc.CoreV1().Nodes().Watch(wctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	last := ""
	for ev := range w.ResultChan() {
		if nd, ok := ev.Object.(*corev1.Node); ok {
			if last = nd.Annotations[key]; last == want {
				return
			}
		}
	}
	t.Fatalf("node %s: annotation %s is %q after 30 s, want %q", name, key, last, want)
}

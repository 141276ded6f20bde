package runtime_test

import (
	"context"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// TestKubeletRunsPods is seed 002 §5.1 with real parts: Pod objects with
// spec.nodeName set are run by a real kubelet (same version as the
// apiserver) through containerd's CRI and the ovnhost plugin, get their
// addresses from ovnhost-controller (ovn-default, 10.16.0.0/16), reach
// Running, talk to each other, and deleting them releases everything.
func TestKubeletRunsPods(t *testing.T) {
	tAll := time.Now()
	e := newEnv(t)
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	cp := criruntime.StartControlPlane(t, e.Dir)
	t0 := time.Now()
	e.StartKubeNode(cp)
	t.Logf("timing: ovnhost (Kubernetes mode) ready in %s", time.Since(t0).Round(time.Millisecond))
	e.StartContainerd()
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	t0 = time.Now()
	e.StartKubelet(cp)
	t.Logf("timing: kubelet registered and healthy in %s", time.Since(t0).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 = time.Now()
	for _, p := range []*corev1.Pod{
		criruntime.KubePod("pod-a", nil, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"),
		criruntime.KubePod("pod-b", nil, "sh", "-c", "echo hello-from-pod-b > /www/index.html && exec httpd -f -p 8080 -h /www"),
	} {
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ka, kb := e.WaitPodRunning(cp, "pod-a", 3*time.Minute), e.WaitPodRunning(cp, "pod-b", 3*time.Minute)
	t.Logf("timing: 2 pods created -> Running in %s", time.Since(t0).Round(time.Millisecond))

	// Addresses: from ovn-default, the ones the controller annotated, on eth0.
	cidr := netip.MustParsePrefix("10.16.0.0/16")
	var pods []*pod
	for _, kp := range []*corev1.Pod{ka, kb} {
		p := e.PodOf(kp)
		if !cidr.Contains(p.IP) {
			t.Fatalf("pod %s: status.podIP %s is not from ovn-default %s", kp.Name, p.IP, cidr)
		}
		if got := kp.Annotations[annotations.IPAddress]; got != p.IP.String() || kp.Annotations[annotations.LogicalSwitch] != "ovn-default" {
			t.Fatalf("pod %s: status.podIP %s, annotations ip_address %q logical_switch %q", kp.Name, p.IP, got, kp.Annotations[annotations.LogicalSwitch])
		}
		out, err := e.Exec(p, "ip", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(out, p.IP.String()+"/16") {
			t.Fatalf("pod %s: eth0 does not carry %s/16: %v\n%s", kp.Name, p.IP, err, out)
		}
		if !e.LSPExists(kp.Name + ".default") {
			t.Fatalf("logical switch port %s.default missing in the control plane's NB", kp.Name)
		}
		pods = append(pods, p)
	}
	a, b := pods[0], pods[1]
	t.Logf("pods: %s %s, %s %s", a.Name, a.IP, b.Name, b.IP)
	if links, ports := e.PodIfaces(); len(links) != 2 || len(ports) != 2 {
		t.Fatalf("want 2 pod veths and 2 OVS pod ports on the node, got links %v ports %v", links, ports)
	}
	// The node is Ready: kubelet sees the runtime's network (ovnhost's conflist) ready.
	n, err := cp.Kube.CoreV1().Nodes().Get(ctx, criruntime.KubeNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("node %s: Ready=%s (%s: %s)", n.Name, c.Status, c.Reason, c.Message)
		}
	}

	// Traffic between the pods.
	e.Ping(a, b)
	e.Ping(b, a)
	e.TCP(a, b, "hello-from-pod-b")

	// Deleting the pods: kubelet stops them and CNI DEL releases the
	// veths, OVS ports and, through the controller, the logical ports.
	t0 = time.Now()
	e.DeletePods(cp, "pod-a", "pod-b")
	e.WaitNoReadySandboxes(60 * time.Second)
	t.Logf("timing: 2 pods deleted -> API objects gone, sandboxes stopped in %s", time.Since(t0).Round(time.Millisecond))
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after deletion: veths %v and OVS ports %v left on the node", l, p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		for e.LSPExists(n) {
			if time.Now().After(deadline) {
				t.Fatalf("logical switch port %s left in NB after the pod was deleted", n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	e.TeardownAndCheck(t)
	if out, _ := exec.Command("ip", "-o", "link", "show").CombinedOutput(); strings.Contains(string(out), " ovh") {
		t.Fatalf("a pod veth leaked into the host namespace:\n%s", out)
	}
	t.Logf("timing: whole test %s", time.Since(tAll).Round(time.Millisecond))
}

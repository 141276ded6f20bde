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
)

// TestKubeletRunsPods is seed 002 §5.1 with real parts: Pod objects with
// spec.nodeName set are run by a real kubelet (same version as the
// apiserver) through containerd's CRI and the ovnhost plugin, get their
// addresses from ovnhost-controller (ovn-default, 10.16.0.0/16), reach
// Running, talk to each other, and deleting them releases everything.
func TestKubeletRunsPods(t *testing.T) {
	tAll := time.Now()
	e := newEnv(t)
	pauseTar, bbTar := buildImages(t, e.dir)
	cp := startControlPlane(t, e.dir)
	t0 := time.Now()
	e.startKubeNode(cp)
	t.Logf("timing: ovnhost (Kubernetes mode) ready in %s", time.Since(t0).Round(time.Millisecond))
	e.startContainerd()
	e.importImage(pauseTar)
	e.importImage(bbTar)
	t0 = time.Now()
	e.startKubelet(cp)
	t.Logf("timing: kubelet registered and healthy in %s", time.Since(t0).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	t0 = time.Now()
	for _, p := range []*corev1.Pod{
		kubePod("pod-a", nil, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"),
		kubePod("pod-b", nil, "sh", "-c", "echo hello-from-pod-b > /www/index.html && exec httpd -f -p 8080 -h /www"),
	} {
		if _, err := cp.kc.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ka, kb := e.waitPodRunning(cp, "pod-a", 3*time.Minute), e.waitPodRunning(cp, "pod-b", 3*time.Minute)
	t.Logf("timing: 2 pods created -> Running in %s", time.Since(t0).Round(time.Millisecond))

	// Addresses: from ovn-default, the ones the controller annotated, on eth0.
	cidr := netip.MustParsePrefix("10.16.0.0/16")
	var pods []*pod
	for _, kp := range []*corev1.Pod{ka, kb} {
		p := e.podOf(kp)
		if !cidr.Contains(p.ip) {
			t.Fatalf("pod %s: status.podIP %s is not from ovn-default %s", kp.Name, p.ip, cidr)
		}
		if got := kp.Annotations[annotations.IPAddress]; got != p.ip.String() || kp.Annotations[annotations.LogicalSwitch] != "ovn-default" {
			t.Fatalf("pod %s: status.podIP %s, annotations ip_address %q logical_switch %q", kp.Name, p.ip, got, kp.Annotations[annotations.LogicalSwitch])
		}
		out, err := e.exec(p, "ip", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(out, p.ip.String()+"/16") {
			t.Fatalf("pod %s: eth0 does not carry %s/16: %v\n%s", kp.Name, p.ip, err, out)
		}
		if !e.lspExists(kp.Name + ".default") {
			t.Fatalf("logical switch port %s.default missing in the control plane's NB", kp.Name)
		}
		pods = append(pods, p)
	}
	a, b := pods[0], pods[1]
	t.Logf("pods: %s %s, %s %s", a.name, a.ip, b.name, b.ip)
	if links, ports := e.podIfaces(); len(links) != 2 || len(ports) != 2 {
		t.Fatalf("want 2 pod veths and 2 OVS pod ports on the node, got links %v ports %v", links, ports)
	}
	// The node is Ready: kubelet sees the runtime's network (ovnhost's conflist) ready.
	n, err := cp.kc.CoreV1().Nodes().Get(ctx, kubeNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady && c.Status != corev1.ConditionTrue {
			t.Fatalf("node %s: Ready=%s (%s: %s)", n.Name, c.Status, c.Reason, c.Message)
		}
	}

	// Traffic between the pods.
	e.ping(a, b)
	e.ping(b, a)
	e.tcp(a, b, "hello-from-pod-b")

	// Deleting the pods: kubelet stops them and CNI DEL releases the
	// veths, OVS ports and, through the controller, the logical ports.
	t0 = time.Now()
	e.deletePods(cp, "pod-a", "pod-b")
	e.waitNoReadySandboxes(60 * time.Second)
	t.Logf("timing: 2 pods deleted -> API objects gone, sandboxes stopped in %s", time.Since(t0).Round(time.Millisecond))
	if l, p := e.podIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after deletion: veths %v and OVS ports %v left on the node", l, p)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		for e.lspExists(n) {
			if time.Now().After(deadline) {
				t.Fatalf("logical switch port %s left in NB after the pod was deleted", n)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	e.stopKubelet()
	e.stopContainerd()
	e.stopNode()
	e.teardown()
	if left := processesMentioning(e.dir); len(left) > 0 {
		t.Fatalf("processes left:\n%s", describe(left))
	}
	if left := e.cgroupDirs(); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
	if left := mountsUnder(e.dir); len(left) > 0 {
		t.Fatalf("mounts left: %v", left)
	}
	if out, _ := exec.Command("ip", "-o", "link", "show").CombinedOutput(); strings.Contains(string(out), " ovh") {
		t.Fatalf("a pod veth leaked into the host namespace:\n%s", out)
	}
	t.Logf("timing: whole test %s", time.Since(tAll).Round(time.Millisecond))
}

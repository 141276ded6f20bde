package runtime_test

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// TestKubeletRunsDualStackPods: in a dual-stack cluster (kube-apiserver,
// controller and node with both families' ranges) the real kubelet runs
// pods through containerd's CRI and ovnhost: each Pod's status.podIPs
// holds an address of each family (what containerd read from the CNI
// result), equal to the controller's ip_address annotation, eth0 carries
// both, and the pods reach each other over IPv6 (ping and TCP from busybox).
func TestKubeletRunsDualStackPods(t *testing.T) {
	e := newEnv(t)
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	cp := criruntime.StartControlPlaneWith(t, e.Dir, criruntime.DualStack)
	e.StartKubeNode(cp)
	e.StartContainerd()
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	e.StartKubelet(cp)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, p := range []*corev1.Pod{
		criruntime.KubePod("ds-a", nil, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done"),
		criruntime.KubePod("ds-b", nil, "sh", "-c", "echo hello-v6 > /www/index.html && exec httpd -f -p 8080 -h /www"),
	} {
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ka, kb := e.WaitPodRunning(cp, "ds-a", 3*time.Minute), e.WaitPodRunning(cp, "ds-b", 3*time.Minute)
	v4net, v6net := netip.MustParsePrefix("10.16.0.0/16"), netip.MustParsePrefix("fd00:10:16::/64")
	var v6 []string
	var pods []*criruntime.Pod
	for _, kp := range []*corev1.Pod{ka, kb} {
		if len(kp.Status.PodIPs) != 2 {
			t.Fatalf("pod %s: status.podIPs %v, want one address per family", kp.Name, kp.Status.PodIPs)
		}
		a4, err4 := netip.ParseAddr(kp.Status.PodIPs[0].IP)
		a6, err6 := netip.ParseAddr(kp.Status.PodIPs[1].IP)
		if err4 != nil || err6 != nil || !v4net.Contains(a4) || !v6net.Contains(a6) {
			t.Fatalf("pod %s: status.podIPs %v, want one of %s then one of %s", kp.Name, kp.Status.PodIPs, v4net, v6net)
		}
		if got, want := kp.Annotations[annotations.IPAddress], a4.String()+","+a6.String(); got != want {
			t.Fatalf("pod %s: ip_address annotation %q, status.podIPs %v", kp.Name, got, kp.Status.PodIPs)
		}
		p := e.PodOf(kp)
		out, err := e.Exec(p, "ip", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(out, a4.String()+"/16") || !strings.Contains(out, a6.String()+"/64") {
			t.Fatalf("pod %s: eth0 does not carry %s/16 and %s/64: %v\n%s", kp.Name, a4, a6, err, out)
		}
		v6 = append(v6, a6.String())
		pods = append(pods, p)
	}
	if out, err := e.Exec(pods[0], "ping", "-c", "3", "-i", "0.2", "-W", "2", v6[1]); err != nil {
		t.Fatalf("ping over IPv6 ds-a -> ds-b (%s): %v\n%s\n%s", v6[1], err, out, e.Tail("ovnhost.log", 20))
	}
	out, err := e.Exec(pods[0], "sh", "-c", "printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 "+v6[1]+" 8080")
	if err != nil || !strings.Contains(out, "hello-v6") {
		t.Fatalf("TCP over IPv6 ds-a -> [%s]:8080: %v\n%s", v6[1], err, out)
	}
	e.DeletePods(cp, "ds-a", "ds-b")
	e.WaitNoReadySandboxes(60 * time.Second)
	e.TeardownAndCheck(t)
}

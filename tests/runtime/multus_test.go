package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

const (
	// The secondary network: macvlan on the node's mv0, whose other end is
	// in the LAN namespace at lanSecondaryIP.
	lanSecondaryIP = "192.168.50.254"
)

var nadGVR = schema.GroupVersionResource{Group: "k8s.cni.cncf.io", Version: "v1", Resource: "network-attachment-definitions"}

// TestMultusMacvlanSecondary is seed 002 §5.7: Multus is the runtime's CNI
// configuration (00-multus.conf, sorting before 00-ovnhost.conflist, as
// multus-cni's thin entrypoint writes it: ovnhost's conflist as its
// delegate), ovnhost is every pod's default network (eth0), and a macvlan
// NetworkAttachmentDefinition (Debian's containernetworking-plugins macvlan +
// host-local) named in the pod annotation k8s.v1.cni.cncf.io/networks adds
// net1. Pods run under the real kubelet; both interfaces carry traffic
// (pod to pod on each, and to the LAN on net1). ovnhost and `netctl
// doctor` accept Multus's file as the delegating configuration it is;
// deleting the pods releases both networks.
func TestMultusMacvlanSecondary(t *testing.T) {
	e := newEnv(t)
	criruntime.RequireFile(t, "/usr/lib/cni/macvlan", "containernetworking-plugins")
	criruntime.RequireFile(t, "/usr/lib/cni/host-local", "containernetworking-plugins")
	multus := criruntime.Multus(t) // built against this repository's Kubernetes libraries
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	cp := criruntime.StartControlPlane(t, e.Dir)
	cp.API.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "tests", "runtime", "testdata", "crd-network-attachment-definitions.yaml"))
	e.StartKubeNode(cp)

	// The macvlan master: mv0 in the node, its peer in the LAN namespace.
	run(t, "ip", "link", "add", "mv0", "netns", e.NS, "type", "veth", "peer", "name", "lan1", "netns", e.LAN)
	run(t, "ip", "-n", e.NS, "link", "set", "mv0", "up")
	run(t, "ip", "-n", e.LAN, "addr", "add", lanSecondaryIP+"/24", "dev", "lan1")
	run(t, "ip", "-n", e.LAN, "link", "set", "lan1", "up")

	// Multus, macvlan and host-local in the CNI bin dir; Multus's
	// configuration as the thin entrypoint generates it.
	for src, name := range map[string]string{multus: "multus", "/usr/lib/cni/macvlan": "macvlan", "/usr/lib/cni/host-local": "host-local"} {
		data, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.Path("cni-bin", name), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ours, err := os.ReadFile(e.WaitConflist())
	if err != nil {
		t.Fatal(err)
	}
	multusConf := e.multusConf(ours, cp.API.Kubeconfig)
	if err := os.WriteFile(e.Path("cni-conf", "00-multus.conf"), multusConf, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("00-multus.conf: %s", multusConf)

	// The secondary network.
	dc := dynamic.NewForConfigOrDie(cp.API.Config)
	macvlan := fmt.Sprintf(`{"cniVersion":"0.4.0","name":"macvlan-lan","type":"macvlan","master":"mv0","mode":"bridge",
		"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"192.168.50.0/24","rangeStart":"192.168.50.10","rangeEnd":"192.168.50.50"}]]}}`,
		e.Path("host-local-macvlan"))
	nad := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "k8s.cni.cncf.io/v1", "kind": "NetworkAttachmentDefinition",
		"metadata": map[string]any{"name": "macvlan-lan", "namespace": "default"},
		"spec":     map[string]any{"config": macvlan},
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := dc.Resource(nadGVR).Namespace("default").Create(ctx, nad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	e.StartContainerd()
	e.waitCNINetwork("multus-cni-network")
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	e.StartKubelet(cp)

	// ovnhost saw Multus's file appear and does not call it a conflict.
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(e.Tail("ovnhost.log", 400), "Multus (00-multus.conf) is read first and delegates the default network to ovnhost") {
		if time.Now().After(deadline) {
			t.Fatalf("ovnhost did not report Multus delegating to it:\n%s", e.Tail("ovnhost.log", 30))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if strings.Contains(e.Tail("ovnhost.log", 400), "conflicting CNI configuration") {
		t.Fatalf("ovnhost reports Multus's configuration as a conflict:\n%s", e.Tail("ovnhost.log", 30))
	}
	// netctl doctor agrees.
	e.doctorCNIConfig("pass", "Multus (00-multus.conf) is read first and delegates the default network to ovnhost")

	// --- two pods, ovnhost's eth0 and macvlan's net1
	net := map[string]string{"k8s.v1.cni.cncf.io/networks": "macvlan-lan"}
	for _, name := range []string{"mpod-a", "mpod-b"} {
		p := criruntime.KubePod(name, net, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
		if name == "mpod-b" {
			p.Spec.Containers[0].Command = []string{"sh", "-c", "echo hello-from-mpod-b > /www/index.html && exec httpd -f -p 8080 -h /www"}
		}
		if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type mpod struct {
		*pod
		net1 netip.Addr
	}
	var pods []mpod
	ovnCIDR, lanCIDR := netip.MustParsePrefix("10.16.0.0/16"), netip.MustParsePrefix("192.168.50.0/24")
	for _, name := range []string{"mpod-a", "mpod-b"} {
		kp := e.WaitPodRunning(cp, name, 3*time.Minute)
		p := e.PodOf(kp)
		if !ovnCIDR.Contains(p.IP) || kp.Annotations[annotations.IPAddress] != p.IP.String() {
			t.Fatalf("pod %s: status.podIP %s, ovnhost annotation %q: the default network is not ovnhost's", name, p.IP, kp.Annotations[annotations.IPAddress])
		}
		// Multus's record of what it attached.
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
		if !status[0].Default || status[0].Interface != "eth0" || len(status[0].IPs) != 1 || status[0].IPs[0] != p.IP.String() {
			t.Fatalf("pod %s: network-status[0] %+v, want the default network on eth0 with %s", name, status[0], p.IP)
		}
		if status[1].Name != "default/macvlan-lan" || status[1].Interface != "net1" || len(status[1].IPs) != 1 {
			t.Fatalf("pod %s: network-status[1] %+v, want default/macvlan-lan on net1", name, status[1])
		}
		n1, err := netip.ParseAddr(status[1].IPs[0])
		if err != nil || !lanCIDR.Contains(n1) {
			t.Fatalf("pod %s: net1 address %q not in %s", name, status[1].IPs[0], lanCIDR)
		}
		// Both interfaces, with those addresses, inside the pod.
		for ifname, addr := range map[string]string{"eth0": p.IP.String() + "/16", "net1": n1.String() + "/24"} {
			out, err := e.Exec(p, "ip", "-o", "addr", "show", ifname)
			if err != nil || !strings.Contains(out, addr) {
				t.Fatalf("pod %s: %s does not carry %s: %v\n%s", name, ifname, addr, err, out)
			}
		}
		// busybox's ip has no -d: ask iproute2 from outside, in the pod's namespace.
		if !strings.HasPrefix(p.Netns, "/var/run/netns/") && !strings.HasPrefix(p.Netns, "/run/netns/") {
			t.Fatalf("pod %s: network namespace %s is not under /run/netns", name, p.Netns)
		}
		out := run(t, "ip", "-n", filepath.Base(p.Netns), "-d", "link", "show", "net1")
		if !strings.Contains(out, "macvlan mode bridge") {
			t.Fatalf("pod %s: net1 is not a macvlan in bridge mode:\n%s", name, out)
		}
		pods = append(pods, mpod{p, n1})
	}
	a, b := pods[0], pods[1]
	t.Logf("pods: %s eth0 %s net1 %s, %s eth0 %s net1 %s", a.Name, a.IP, a.net1, b.Name, b.IP, b.net1)

	// --- traffic on both networks
	e.Ping(a.pod, b.pod) // eth0: OVN
	e.TCP(a.pod, b.pod, "hello-from-mpod-b")
	for _, to := range []string{b.net1.String(), lanSecondaryIP} { // net1: macvlan, pod to pod and to the LAN
		if out, err := e.Exec(a.pod, "ping", "-c", "3", "-i", "0.2", "-W", "2", "-I", "net1", to); err != nil {
			t.Fatalf("ping over net1 %s -> %s: %v\n%s", a.Name, to, err, out)
		}
	}
	out, err := e.Exec(a.pod, "sh", "-c", fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, b.net1))
	if err != nil || !strings.Contains(out, "hello-from-mpod-b") {
		t.Fatalf("TCP over net1 %s -> %s:8080: %v\n%s", a.Name, b.net1, err, out)
	}
	// The LAN sees net1's own address (macvlan: no NAT, its own MAC).
	neigh := run(t, "ip", "-n", e.LAN, "neigh", "show", a.net1.String())
	if !strings.Contains(neigh, "lladdr") {
		t.Fatalf("the LAN has no neighbour entry for %s: %q", a.net1, neigh)
	}

	// --- deletion releases both networks
	e.DeletePods(cp, "mpod-a", "mpod-b")
	e.WaitNoReadySandboxes(60 * time.Second)
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after deletion: veths %v and OVS ports %v left on the node", l, p)
	}
	leases, _ := filepath.Glob(filepath.Join(e.Path("host-local-macvlan"), "macvlan-lan", "192.168.50.*"))
	if len(leases) != 0 {
		t.Fatalf("macvlan host-local reservations left: %v", leases)
	}
}

// multusConf is the 00-multus.conf multus-cni's thin entrypoint writes for
// a node whose first conflist is ovnhost's: the same cniVersion and
// capabilities, ovnhost's conflist as the first delegate, the kubeconfig
// Multus reads pods and NetworkAttachmentDefinitions with; the paths that
// default to /opt/cni/bin, /etc/cni/multus/net.d and /var/lib/cni/multus
// point into the test's directory.
func (e *env) multusConf(ours []byte, kubeconfig string) []byte {
	e.t.Helper()
	var master map[string]any
	if err := json.Unmarshal(ours, &master); err != nil {
		e.t.Fatal(err)
	}
	caps := map[string]bool{}
	plugins, _ := master["plugins"].([]any)
	for _, p := range plugins {
		c, _ := p.(map[string]any)["capabilities"].(map[string]any)
		for k, v := range c {
			caps[k], _ = v.(bool)
		}
	}
	conf := map[string]any{
		"cniVersion":  master["cniVersion"],
		"name":        "multus-cni-network",
		"type":        "multus",
		"kubeconfig":  kubeconfig,
		"binDir":      e.Path("cni-bin"),
		"confDir":     e.Path("cni-conf"),
		"cniDir":      e.Path("multus-cache"),
		"logToStderr": true,
		"logLevel":    "verbose",
		"delegates":   []any{master},
	}
	if len(caps) > 0 {
		conf["capabilities"] = caps
	}
	b, _ := json.Marshal(conf)
	return b
}

// doctorCNIConfig runs `netctl doctor` with the node's CNI dirs and checks
// its cni-config verdict.
func (e *env) doctorCNIConfig(status, found string) {
	e.t.Helper()
	cmd := exec.Command("ip", "netns", "exec", e.NS, testenv.Binary(e.t, "netctl"), "doctor", "--output", "json", "--timeout", "2s",
		"--cni-conf-dir="+e.Path("cni-conf"), "--cni-bin-dir="+e.Path("cni-bin"), "--cni-socket="+e.Path("cni.sock"),
		"--ovs-run-dir="+e.Path("ovs-run"), "--ovn-run-dir="+e.Path("ovn-run"))
	out, _ := cmd.Output() // exits 1 or 2 for the other checks' warnings on this machine
	var rep struct {
		Checks []struct{ Name, Status, Found, Fix string } `json:"checks"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		e.t.Fatalf("netctl doctor --output json: %v\n%s", err, out)
	}
	for _, c := range rep.Checks {
		if c.Name == "cni-config" {
			if c.Status != status || !strings.Contains(c.Found, found) {
				e.t.Fatalf("netctl doctor cni-config: %s %q (fix %q), want %s with %q", c.Status, c.Found, c.Fix, status, found)
			}
			return
		}
	}
	e.t.Fatalf("netctl doctor has no cni-config check:\n%s", out)
}

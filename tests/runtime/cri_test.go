package runtime_test

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

func TestContainerdCRI(t *testing.T) {
	tAll := time.Now()
	e := newEnv(t)
	if v, err := exec.Command(lookPath(t, "containerd"), "--version").Output(); err == nil {
		t.Logf("%s", strings.TrimSpace(string(v)))
	}

	t0 := time.Now()
	pauseTar, bbTar := criruntime.BuildImages(t, e.Dir)
	t.Logf("timing: images built in %s", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	e.StartNode()
	t.Logf("timing: ovnhost ready in %s", time.Since(t0).Round(time.Millisecond))
	conf, _ := filepath.Glob(e.Path("cni-conf", "*.conflist"))
	raw, _ := os.ReadFile(conf[0])
	t.Logf("conflist %s: %s", filepath.Base(conf[0]), strings.Join(strings.Fields(string(raw)), " "))

	t0 = time.Now()
	e.StartContainerd()
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	t.Logf("timing: containerd ready + images imported in %s", time.Since(t0).Round(time.Millisecond))
	imgs := e.CRI("images", "-q")
	if n := len(strings.Fields(imgs)); n != 2 {
		t.Fatalf("crictl images: want the 2 imported images, got %d:\n%s", n, e.CRI("images"))
	}

	// --- two pods, addresses from ovnhost
	t0 = time.Now()
	a := e.RunPod("pod-a", "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
	b := e.RunPod("pod-b", "sh", "-c", "echo hello-from-pod-b > /www/index.html && exec httpd -f -p 8080 -h /www")
	t.Logf("pods: %s %s in %s, %s %s in %s", a.Name, a.IP, a.Netns, b.Name, b.IP, b.Netns)
	cidr := netip.MustParsePrefix("10.16.0.0/16")
	for _, p := range []*pod{a, b} {
		if !cidr.Contains(p.IP) {
			t.Fatalf("pod %s got %s, not from ovnhost's %s", p.Name, p.IP, cidr)
		}
		out, err := e.Exec(p, "ip", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(out, p.IP.String()+"/") {
			t.Fatalf("pod %s: eth0 does not carry %s: %v\n%s", p.Name, p.IP, err, out)
		}
	}
	if a.IP == b.IP {
		t.Fatalf("both pods got %s", a.IP)
	}
	links, ports := e.PodIfaces()
	if len(links) != 2 || len(ports) != 2 {
		t.Fatalf("want 2 pod veths and 2 OVS pod ports in the node netns, got links %v ports %v", links, ports)
	}
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		if !e.LSPExists(n) {
			t.Fatalf("logical switch port %s missing in NB", n)
		}
	}
	if hostLinks := run(t, "ip", "-o", "link", "show"); strings.Contains(hostLinks, " ovh") {
		t.Fatalf("a pod veth leaked into the host namespace:\n%s", hostLinks)
	}

	// --- traffic
	t0 = time.Now()
	e.Ping(a, b)
	e.Ping(b, a)
	e.TCP(a, b, "hello-from-pod-b")
	t.Logf("timing: ping both ways + TCP in %s", time.Since(t0).Round(time.Millisecond))

	// --- containerd restart: the pods keep running and working
	pidA, pidB := e.PidOf(a.Ctr), e.PidOf(b.Ctr)
	t0 = time.Now()
	e.StopContainerd()
	for _, pid := range []int{pidA, pidB} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			t.Fatalf("container process %d died with containerd", pid)
		}
	}
	e.StartContainerd()
	t.Logf("timing: containerd restarted in %s", time.Since(t0).Round(time.Millisecond))
	for _, p := range []*pod{a, b} {
		if sb := e.InspectSandbox(p.ID); sb.State != "SANDBOX_READY" || sb.IP != p.IP.String() {
			t.Fatalf("after the restart pod %s is %s with IP %q, want SANDBOX_READY %s", p.Name, sb.State, sb.IP, p.IP)
		}
	}
	if got := e.PidOf(a.Ctr); got != pidA {
		t.Fatalf("pod-a container pid %d after the restart, was %d", got, pidA)
	}
	e.Ping(a, b)
	e.TCP(a, b, "hello-from-pod-b")
	if l, p := e.PodIfaces(); len(l) != 2 || len(p) != 2 {
		t.Fatalf("after the restart: links %v ports %v, want the same 2", l, p)
	}

	// --- stopp + rmp release everything
	t0 = time.Now()
	for _, p := range []*pod{a, b} {
		e.CRI("stopp", p.ID)
		e.CRI("rmp", p.ID)
	}
	t.Logf("timing: stopp+rmp of 2 pods in %s", time.Since(t0).Round(time.Millisecond))
	if out := e.CRI("pods", "-q"); out != "" {
		t.Fatalf("pods left after rmp: %s", out)
	}
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after rmp: veths %v and OVS ports %v left in the node namespace", l, p)
	}
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		if e.LSPExists(n) {
			t.Fatalf("logical switch port %s left in NB after rmp", n)
		}
	}
	for _, p := range []*pod{a, b} {
		if fileExists(p.Netns) {
			t.Fatalf("pod %s: network namespace %s left after rmp", p.Name, p.Netns)
		}
	}
	for _, pid := range []int{pidA, pidB} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Fatalf("container process %d still alive after rmp", pid)
		}
	}

	// --- leave nothing behind (the cleanup does the same on failure)
	e.TeardownAndCheck(t)
	t.Logf("timing: whole test %s", time.Since(tAll).Round(time.Millisecond))
}

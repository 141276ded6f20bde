package runtime_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pod is a CRI sandbox with one busybox container.
type pod struct {
	name, id, ctr string
	cfg           string // the sandbox config file crictl read
	ip            netip.Addr
	netns         string // the netns path containerd created
	hostIf        string // host end of its veth (in the node namespace)
}

func (e *env) writeJSON(name string, v any) string {
	e.t.Helper()
	p := e.path("cri", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	raw, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runPod does `crictl runp` + `create` + `start`: a sandbox (pause image,
// networked by containerd's CRI through the ovnhost plugin) and one busybox
// container running command.
func (e *env) runPod(name string, command ...string) *pod {
	e.t.Helper()
	return e.runPodWith(name, nil, command...)
}

// runPodWith is runPod with extra fields of the sandbox config (e.g.
// port_mappings).
func (e *env) runPodWith(name string, extra map[string]any, command ...string) *pod {
	e.t.Helper()
	p := &pod{name: name}
	logDir := e.path("cri", "logs", name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	sbCfg := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": name + "-uid", "attempt": 0},
		"hostname":      name,
		"log_directory": logDir,
		"linux":         map[string]any{"cgroup_parent": e.cgParent},
	}
	for k, v := range extra {
		sbCfg[k] = v
	}
	p.cfg = e.writeJSON(name+"-pod.json", sbCfg)
	ctrCfg := e.writeJSON(name+"-ctr.json", map[string]any{
		"metadata": map[string]any{"name": "busybox"},
		"image":    map[string]any{"image": busyboxRef},
		"command":  command,
		"log_path": "busybox.log",
		"linux":    map[string]any{},
	})
	t0 := time.Now()
	p.id = e.cri("runp", p.cfg)
	tRunp := time.Since(t0)
	p.ctr = e.cri("create", p.id, ctrCfg, p.cfg)
	e.cri("start", p.ctr)
	e.t.Logf("timing: pod %s: runp (sandbox + CNI ADD) %s, +create+start %s", name,
		tRunp.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	var sb struct {
		Status struct {
			State   string `json:"state"`
			Network struct {
				IP string `json:"ip"`
			} `json:"network"`
		} `json:"status"`
		Info struct {
			RuntimeSpec struct {
				Linux struct {
					Namespaces []struct{ Type, Path string } `json:"namespaces"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(e.cri("inspectp", "-o", "json", p.id)), &sb); err != nil {
		e.t.Fatal(err)
	}
	if sb.Status.State != "SANDBOX_READY" {
		e.t.Fatalf("pod %s: state %s", name, sb.Status.State)
	}
	ip, err := netip.ParseAddr(sb.Status.Network.IP)
	if err != nil {
		e.t.Fatalf("pod %s: no IP from CNI: %q", name, sb.Status.Network.IP)
	}
	p.ip = ip
	for _, n := range sb.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			p.netns = n.Path
		}
	}
	if p.netns == "" {
		e.t.Fatalf("pod %s: no network namespace path in the sandbox spec", name)
	}
	e.netnsPaths = append(e.netnsPaths, p.netns)
	e.waitRunning(p)
	return p
}

// waitRunning waits until the pod's container is CONTAINER_RUNNING.
func (e *env) waitRunning(p *pod) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var c struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		_ = json.Unmarshal([]byte(e.cri("inspect", "-o", "json", p.ctr)), &c)
		if c.Status.State == "CONTAINER_RUNNING" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("pod %s: container %s is %s\n%s", p.name, p.ctr, c.Status.State, e.cri("logs", p.ctr))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// exec runs a command in the pod's busybox container (CRI ExecSync).
func (e *env) exec(p *pod, cmd ...string) (string, error) {
	args := append([]string{"exec", "-s", "--timeout", "30", p.ctr}, cmd...)
	out, err := e.crictlCmd(args...).CombinedOutput()
	return string(out), err
}

// ping and tcp check pod-to-pod traffic from inside the containers:
// busybox ping, and a busybox nc client talking HTTP to busybox httpd.
func (e *env) ping(from, to *pod) {
	e.t.Helper()
	if out, err := e.exec(from, "ping", "-c", "3", "-i", "0.2", "-W", "2", to.ip.String()); err != nil {
		e.t.Fatalf("ping %s (%s) -> %s (%s): %v\n%s\n%s", from.name, from.ip, to.name, to.ip, err, out, e.tail("ovnhost.log", 20))
	}
}

func (e *env) tcp(from, to *pod, want string) {
	e.t.Helper()
	script := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, to.ip)
	out, err := e.exec(from, "sh", "-c", script)
	if err != nil || !strings.Contains(out, "200 OK") || !strings.Contains(out, want) {
		e.t.Fatalf("TCP %s -> %s:8080 (busybox nc -> httpd): err=%v\n%s", from.name, to.ip, err, out)
	}
}

// nodeLinks lists the interface names in the node's network namespace.
func (e *env) nodeLinks() []string {
	out := run(e.t, "ip", "-n", e.ns, "-o", "link", "show")
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	return names
}

func (e *env) ovsPorts() []string {
	out := run(e.t, lookPath(e.t, "ovs-vsctl"), "--db=unix:"+e.path("ovs-run", "db.sock"), "--timeout=10", "list-ports", "br-int")
	return strings.Fields(out)
}

// podIfaces returns the pod veths (host ends) in the node namespace and the
// pod ports on br-int: the CNI server names both "ovh" + a hash
// (podnet.HostIfName).
func (e *env) podIfaces() (links, ports []string) {
	for _, l := range e.nodeLinks() {
		if strings.HasPrefix(l, "ovh") {
			links = append(links, l)
		}
	}
	for _, p := range e.ovsPorts() {
		if strings.HasPrefix(p, "ovh") {
			ports = append(ports, p)
		}
	}
	return links, ports
}

func (e *env) lspExists(name string) bool {
	out := run(e.t, lookPath(e.t, "ovn-nbctl"), "--db="+e.nbDB(), "--timeout=10",
		"--bare", "--columns=name", "find", "Logical_Switch_Port", "name="+name)
	return strings.TrimSpace(out) != ""
}

// nbDB is the northbound database the node's pods are in: the control
// plane's in Kubernetes mode, else the node's own (all-in-one).
func (e *env) nbDB() string {
	if e.central != "" {
		return e.central
	}
	return "unix:" + e.path("ovn-run", "ovnnb_db.sock")
}

func pidOf(e *env, ctr string) int {
	var c struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(e.cri("inspect", "-o", "json", ctr)), &c); err != nil || c.Info.Pid == 0 {
		e.t.Fatalf("container %s: no pid (%v)", ctr, err)
	}
	return c.Info.Pid
}

// TestContainerdCRI: containerd's CRI plugin drives the ovnhost CNI plugin
// for two pods; they talk to each other, survive a containerd restart, and
// stopp/rmp release everything.
func TestContainerdCRI(t *testing.T) {
	tAll := time.Now()
	e := newEnv(t)
	if v, err := exec.Command(lookPath(t, "containerd"), "--version").Output(); err == nil {
		t.Logf("%s", strings.TrimSpace(string(v)))
	}

	t0 := time.Now()
	pauseTar, bbTar := buildImages(t, e.dir)
	t.Logf("timing: images built in %s", time.Since(t0).Round(time.Millisecond))

	t0 = time.Now()
	e.startNode()
	t.Logf("timing: ovnhost ready in %s", time.Since(t0).Round(time.Millisecond))
	conf, _ := filepath.Glob(e.path("cni-conf", "*.conflist"))
	raw, _ := os.ReadFile(conf[0])
	t.Logf("conflist %s: %s", filepath.Base(conf[0]), strings.Join(strings.Fields(string(raw)), " "))

	t0 = time.Now()
	e.startContainerd()
	e.importImage(pauseTar)
	e.importImage(bbTar)
	t.Logf("timing: containerd ready + images imported in %s", time.Since(t0).Round(time.Millisecond))
	imgs := e.cri("images", "-q")
	if n := len(strings.Fields(imgs)); n != 2 {
		t.Fatalf("crictl images: want the 2 imported images, got %d:\n%s", n, e.cri("images"))
	}

	// --- two pods, addresses from ovnhost
	t0 = time.Now()
	a := e.runPod("pod-a", "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
	b := e.runPod("pod-b", "sh", "-c", "echo hello-from-pod-b > /www/index.html && exec httpd -f -p 8080 -h /www")
	t.Logf("pods: %s %s in %s, %s %s in %s", a.name, a.ip, a.netns, b.name, b.ip, b.netns)
	cidr := netip.MustParsePrefix("10.16.0.0/16")
	for _, p := range []*pod{a, b} {
		if !cidr.Contains(p.ip) {
			t.Fatalf("pod %s got %s, not from ovnhost's %s", p.name, p.ip, cidr)
		}
		out, err := e.exec(p, "ip", "-o", "addr", "show", "eth0")
		if err != nil || !strings.Contains(out, p.ip.String()+"/") {
			t.Fatalf("pod %s: eth0 does not carry %s: %v\n%s", p.name, p.ip, err, out)
		}
	}
	if a.ip == b.ip {
		t.Fatalf("both pods got %s", a.ip)
	}
	links, ports := e.podIfaces()
	if len(links) != 2 || len(ports) != 2 {
		t.Fatalf("want 2 pod veths and 2 OVS pod ports in the node netns, got links %v ports %v", links, ports)
	}
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		if !e.lspExists(n) {
			t.Fatalf("logical switch port %s missing in NB", n)
		}
	}
	if hostLinks := run(t, "ip", "-o", "link", "show"); strings.Contains(hostLinks, " ovh") {
		t.Fatalf("a pod veth leaked into the host namespace:\n%s", hostLinks)
	}

	// --- traffic
	t0 = time.Now()
	e.ping(a, b)
	e.ping(b, a)
	e.tcp(a, b, "hello-from-pod-b")
	t.Logf("timing: ping both ways + TCP in %s", time.Since(t0).Round(time.Millisecond))

	// --- containerd restart: the pods keep running and working
	pidA, pidB := pidOf(e, a.ctr), pidOf(e, b.ctr)
	t0 = time.Now()
	e.stopContainerd()
	for _, pid := range []int{pidA, pidB} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			t.Fatalf("container process %d died with containerd", pid)
		}
	}
	e.startContainerd()
	t.Logf("timing: containerd restarted in %s", time.Since(t0).Round(time.Millisecond))
	for _, p := range []*pod{a, b} {
		var sb struct {
			Status struct {
				State   string              `json:"state"`
				Network struct{ IP string } `json:"network"`
			} `json:"status"`
		}
		_ = json.Unmarshal([]byte(e.cri("inspectp", "-o", "json", p.id)), &sb)
		if sb.Status.State != "SANDBOX_READY" || sb.Status.Network.IP != p.ip.String() {
			t.Fatalf("after the restart pod %s is %s with IP %q, want SANDBOX_READY %s", p.name, sb.Status.State, sb.Status.Network.IP, p.ip)
		}
	}
	if got := pidOf(e, a.ctr); got != pidA {
		t.Fatalf("pod-a container pid %d after the restart, was %d", got, pidA)
	}
	e.ping(a, b)
	e.tcp(a, b, "hello-from-pod-b")
	if l, p := e.podIfaces(); len(l) != 2 || len(p) != 2 {
		t.Fatalf("after the restart: links %v ports %v, want the same 2", l, p)
	}

	// --- stopp + rmp release everything
	t0 = time.Now()
	for _, p := range []*pod{a, b} {
		e.cri("stopp", p.id)
		e.cri("rmp", p.id)
	}
	t.Logf("timing: stopp+rmp of 2 pods in %s", time.Since(t0).Round(time.Millisecond))
	if out := e.cri("pods", "-q"); out != "" {
		t.Fatalf("pods left after rmp: %s", out)
	}
	if l, p := e.podIfaces(); len(l) != 0 || len(p) != 0 {
		t.Fatalf("after rmp: veths %v and OVS ports %v left in the node namespace", l, p)
	}
	for _, n := range []string{"pod-a.default", "pod-b.default"} {
		if e.lspExists(n) {
			t.Fatalf("logical switch port %s left in NB after rmp", n)
		}
	}
	for _, p := range []*pod{a, b} {
		if fileExists(p.netns) {
			t.Fatalf("pod %s: network namespace %s left after rmp", p.name, p.netns)
		}
	}
	for _, pid := range []int{pidA, pidB} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			t.Fatalf("container process %d still alive after rmp", pid)
		}
	}

	// --- leave nothing behind (the cleanup does the same on failure)
	e.stopContainerd()
	e.stopNode()
	e.teardown()
	if left := processesMentioning(e.dir); len(left) > 0 {
		t.Fatalf("processes left:\n%s", describe(left))
	}
	if left := e.cgroupProcs(); len(left) > 0 {
		t.Fatalf("processes left in %s:\n%s", e.cgParent, describe(left))
	}
	if left := e.cgroupDirs(); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
	if left := mountsUnder(e.dir); len(left) > 0 {
		t.Fatalf("mounts left: %v", left)
	}
	t.Logf("timing: whole test %s", time.Since(tAll).Round(time.Millisecond))
}

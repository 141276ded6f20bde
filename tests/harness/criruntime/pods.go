package criruntime

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
)

// Pod is a CRI sandbox with one busybox container.
type Pod struct {
	Name, ID, Ctr string
	Cfg           string // the sandbox config file crictl read
	IP            netip.Addr
	Netns         string // the netns path containerd created
	HostIf        string // host end of its veth (in the node namespace)
}

// WriteJSON writes v as cri/<name> under the test's directory.
func (e *Env) WriteJSON(name string, v any) string {
	e.t.Helper()
	p := e.Path("cri", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	raw, _ := json.MarshalIndent(v, "", "  ")
	if err := os.WriteFile(p, raw, 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// RunPod does `crictl runp` + `create` + `start`: a sandbox (pause image,
// networked by containerd's CRI through the ovnhost plugin) and one busybox
// container running command.
func (e *Env) RunPod(name string, command ...string) *Pod {
	e.t.Helper()
	return e.RunPodWith(name, nil, command...)
}

// RunPodWith is runPod with extra fields of the sandbox config (e.g.
// port_mappings).
func (e *Env) RunPodWith(name string, extra map[string]any, command ...string) *Pod {
	e.t.Helper()
	p := &Pod{Name: name}
	logDir := e.Path("cri", "logs", name)
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	sbCfg := map[string]any{
		"metadata":      map[string]any{"name": name, "namespace": "default", "uid": name + "-uid", "attempt": 0},
		"hostname":      name,
		"log_directory": logDir,
		"linux":         map[string]any{"cgroup_parent": e.CgroupParent},
	}
	for k, v := range extra {
		sbCfg[k] = v
	}
	p.Cfg = e.WriteJSON(name+"-pod.json", sbCfg)
	ctrCfg := e.WriteJSON(name+"-ctr.json", map[string]any{
		"metadata": map[string]any{"name": "busybox"},
		"image":    map[string]any{"image": BusyboxRef},
		"command":  command,
		"log_path": "busybox.log",
		"linux":    map[string]any{},
	})
	t0 := time.Now()
	p.ID = e.CRI("runp", p.Cfg)
	tRunp := time.Since(t0)
	p.Ctr = e.CRI("create", p.ID, ctrCfg, p.Cfg)
	e.CRI("start", p.Ctr)
	e.t.Logf("timing: pod %s: runp (sandbox + CNI ADD) %s, +create+start %s", name,
		tRunp.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))

	sb := e.InspectSandbox(p.ID)
	if sb.State != "SANDBOX_READY" {
		e.t.Fatalf("pod %s: state %s", name, sb.State)
	}
	ip, err := netip.ParseAddr(sb.IP)
	if err != nil {
		e.t.Fatalf("pod %s: no IP from CNI: %q", name, sb.IP)
	}
	p.IP, p.Netns = ip, sb.Netns
	if p.Netns == "" {
		e.t.Fatalf("pod %s: no network namespace path in the sandbox spec", name)
	}
	e.NetnsPaths = append(e.NetnsPaths, p.Netns)
	e.WaitRunning(p)
	return p
}

// WaitRunning waits until the pod's container is CONTAINER_RUNNING.
func (e *Env) WaitRunning(p *Pod) {
	e.t.Helper()
	var state string
	if err := proc.Poll("container "+p.Ctr+" of pod "+p.Name+" running", 20*time.Second, 100*time.Millisecond, nil, func() (bool, error) {
		var c struct {
			Status struct {
				State string `json:"state"`
			} `json:"status"`
		}
		_ = json.Unmarshal([]byte(e.CRI("inspect", "-o", "json", p.Ctr)), &c)
		state = c.Status.State
		return state == "CONTAINER_RUNNING", nil
	}); err != nil {
		e.t.Fatalf("pod %s: container %s is %s: %v\n%s", p.Name, p.Ctr, state, err, e.CRI("logs", p.Ctr))
	}
}

// Exec runs a command in the pod's busybox container (CRI ExecSync).
func (e *Env) Exec(p *Pod, cmd ...string) (string, error) {
	args := append([]string{"exec", "-s", "--timeout", "30", p.Ctr}, cmd...)
	out, err := e.CrictlCmd(args...).CombinedOutput()
	return string(out), err
}

// Ping and tcp check pod-to-pod traffic from inside the containers:
// busybox ping, and a busybox nc client talking HTTP to busybox httpd.
func (e *Env) Ping(from, to *Pod) {
	e.t.Helper()
	if out, err := e.Exec(from, "ping", "-c", "3", "-i", "0.2", "-W", "2", to.IP.String()); err != nil {
		e.t.Fatalf("ping %s (%s) -> %s (%s): %v\n%s\n%s", from.Name, from.IP, to.Name, to.IP, err, out, e.Tail("ovnhost.log", 20))
	}
}

// TCP fetches / from to's httpd on port 8080 from inside from.
func (e *Env) TCP(from, to *Pod, want string) {
	e.t.Helper()
	script := fmt.Sprintf(`printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 %s 8080`, to.IP)
	out, err := e.Exec(from, "sh", "-c", script)
	if err != nil || !strings.Contains(out, "200 OK") || !strings.Contains(out, want) {
		e.t.Fatalf("TCP %s -> %s:8080 (busybox nc -> httpd): err=%v\n%s", from.Name, to.IP, err, out)
	}
}

// NodeLinks lists the interface names in the node's network namespace.
func (e *Env) NodeLinks() []string {
	out := netns.Run(e.t, "ip", "-n", e.NS, "-o", "link", "show")
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			names = append(names, strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0])
		}
	}
	return names
}

// OVSPorts lists the ports of the node's br-int.
func (e *Env) OVSPorts() []string {
	out := netns.Run(e.t, LookPath(e.t, "ovs-vsctl"), "--db=unix:"+e.Path("ovs-run", "db.sock"), "--timeout=10", "list-ports", "br-int")
	return strings.Fields(out)
}

// PodIfaces returns the pod veths (host ends) in the node namespace and the
// pod ports on br-int: the CNI server names both "ovh" + a hash
// (podnet.HostIfName).
func (e *Env) PodIfaces() (links, ports []string) {
	for _, l := range e.NodeLinks() {
		if strings.HasPrefix(l, "ovh") {
			links = append(links, l)
		}
	}
	for _, p := range e.OVSPorts() {
		if strings.HasPrefix(p, "ovh") {
			ports = append(ports, p)
		}
	}
	return links, ports
}

// LSPExists reports whether the logical switch port exists in NB.
func (e *Env) LSPExists(name string) bool {
	out := netns.Run(e.t, LookPath(e.t, "ovn-nbctl"), "--db="+e.NBDB(), "--timeout=10",
		"--bare", "--columns=name", "find", "Logical_Switch_Port", "name="+name)
	return strings.TrimSpace(out) != ""
}

// NBDB is the northbound database the node's pods are in: the control
// plane's in Kubernetes mode, else the node's own (all-in-one).
func (e *Env) NBDB() string {
	if e.CentralNB != "" {
		return e.CentralNB
	}
	return "unix:" + e.Path("ovn-run", "ovnnb_db.sock")
}

// PidOf is the process id of a container.
func (e *Env) PidOf(ctr string) int {
	var c struct {
		Info struct {
			Pid int `json:"pid"`
		} `json:"info"`
	}
	if err := json.Unmarshal([]byte(e.CRI("inspect", "-o", "json", ctr)), &c); err != nil || c.Info.Pid == 0 {
		e.t.Fatalf("container %s: no pid (%v)", ctr, err)
	}
	return c.Info.Pid
}

// TestContainerdCRI: containerd's CRI plugin drives the ovnhost CNI plugin
// for two pods; they talk to each other, survive a containerd restart, and
// stopp/rmp release everything.

// Package kernel tests ovnhost on the kernel datapath: this machine's
// kernel has no openvswitch module, so each test boots Debian's kernel in
// a qemu VM (tests/harness/qemuvm) whose root is this machine's, and runs
// the real bin/ovnhost, Debian's OVS/OVN daemons and the installed
// ovnhost-cni plugin inside it. Everything is driven through the VM's
// control channel; nothing of a VM outlives its test.
package kernel

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Under software emulation on a loaded machine each readiness gate can
// take tens of seconds; the product's default (60 s per gate) is for real
// hosts.
const (
	startTimeout = "--start-timeout=240s"
	readyWithin  = 6 * time.Minute
)

// bins are the guest paths of the built programs (the guest sees the
// host's tree read-only).
type bins struct{ ovnhost, cni, netctl, probe string }

func programs(t testing.TB) bins {
	t.Helper()
	return bins{
		ovnhost: qemuvm.GuestPath(testenv.Binary(t, "ovnhost")),
		cni:     qemuvm.GuestPath(testenv.Binary(t, "ovnhost-cni")),
		netctl:  qemuvm.GuestPath(testenv.Binary(t, "netctl")),
		probe:   qemuvm.GuestPath(qemuvm.GoBinary(t, "./tests/kernel/vmprobe")),
	}
}

// guestNode is ovnhost running in a VM.
type guestNode struct {
	vm      *qemuvm.VM
	bin     bins
	proc    *qemuvm.Proc
	env     []string
	args    []string
	runs    int
	logFile string
}

// startNode runs `ovnhost run` in the VM and waits for its ready line.
func startNode(t testing.TB, vm *qemuvm.VM, b bins, env []string, args ...string) *guestNode {
	t.Helper()
	n := &guestNode{vm: vm, bin: b, env: append([]string{"NODE_NAME=" + vm.Name}, env...),
		args: append([]string{"run", startTimeout, "--stop-timeout=60s"}, args...)}
	n.start(t)
	return n
}

func (n *guestNode) start(t testing.TB) {
	t.Helper()
	// One log file per run, so waiting for a line never matches an
	// earlier run's.
	n.runs++
	n.logFile = fmt.Sprintf("/var/log/ovnhost/ovnhost-%d.log", n.runs)
	n.proc = n.vm.Spawn(t, n.logFile, n.env, append([]string{n.bin.ovnhost}, n.args...)...)
	if err := n.proc.WaitLog("msg=ready took=", readyWithin); err != nil {
		t.Fatalf("ovnhost in VM %s did not become ready: %v", n.vm.Name, err)
	}
}

// log returns the current run's log.
func (n *guestNode) log(t testing.TB) string {
	t.Helper()
	return n.vm.Run(t, "cat", n.logFile)
}

// stop sends SIGTERM and returns the exit status.
func (n *guestNode) stop(t testing.TB) int {
	t.Helper()
	if err := n.proc.Signal(syscall.SIGTERM, false); err != nil {
		t.Fatal(err)
	}
	r, err := n.proc.Wait(3 * time.Minute)
	if err != nil {
		t.Fatalf("ovnhost did not exit after SIGTERM: %v\n%s", err, tailLines(n.log(t), 40))
	}
	return r.Exit
}

// preflight runs `ovnhost preflight` and returns its output and exit code.
func preflight(t testing.TB, vm *qemuvm.VM, b bins, env []string, args ...string) (string, int) {
	t.Helper()
	r, err := vm.Exec(qemuvm.Cmd{Argv: append([]string{b.ovnhost, "preflight"}, args...),
		Env: append([]string{"NODE_NAME=" + vm.Name}, env...), Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return r.Stdout + r.Stderr, r.Exit
}

// check is one line of the preflight table.
type check struct{ status, found, fix string }

func checkOf(t testing.TB, out, name string) check {
	t.Helper()
	lines := strings.Split(out, "\n")
	re := regexp.MustCompile(`^(PASS|WARN|FAIL)\s+` + regexp.QuoteMeta(name) + `\s+(.*)$`)
	for i, l := range lines {
		if m := re.FindStringSubmatch(l); m != nil {
			c := check{status: m[1], found: m[2]}
			if i+1 < len(lines) {
				if f, ok := strings.CutPrefix(strings.TrimSpace(lines[i+1]), "fix: "); ok {
					c.fix = f
				}
			}
			return c
		}
	}
	t.Fatalf("preflight printed no %s check:\n%s", name, out)
	return check{}
}

// moduleLoaded reports whether a module is in /proc/modules.
func moduleLoaded(t testing.TB, vm *qemuvm.VM, name string) bool {
	t.Helper()
	return regexp.MustCompile(`(?m)^` + name + ` `).MatchString(vm.Run(t, "cat", "/proc/modules"))
}

// pod is a network namespace wired by the installed CNI plugin.
type pod struct {
	name string
	ip   netip.Addr // its IPv4 address, or its IPv6 one if it has none
	ip6  netip.Addr // its IPv6 address, if it has one
}

// cniConf turns the installed conflist into the network configuration
// one plugin invocation gets on stdin (what libcni does).
func cniConf(t testing.TB, vm *qemuvm.VM) []byte {
	t.Helper()
	raw := vm.Run(t, "cat", "/etc/cni/net.d/00-ovnhost.conflist")
	var list struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal([]byte(raw), &list); err != nil || len(list.Plugins) == 0 {
		t.Fatalf("installed conflist: %v\n%s", err, raw)
	}
	conf := list.Plugins[0]
	conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
	b, _ := json.Marshal(conf)
	return b
}

// addPod creates a namespace and runs the installed plugin's ADD for it,
// as kubelet would, and returns the pod with its address.
func addPod(t testing.TB, vm *qemuvm.VM, conf []byte, name string) pod {
	t.Helper()
	vm.Run(t, "ip", "netns", "add", name)
	r, err := vm.Exec(qemuvm.Cmd{Argv: []string{"/opt/cni/bin/ovnhost-cni"}, Stdin: conf, Timeout: 3 * time.Minute,
		Env: []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + name, "CNI_NETNS=/var/run/netns/" + name, "CNI_IFNAME=eth0",
			"CNI_PATH=/opt/cni/bin", "CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Err(); err != nil {
		t.Fatalf("CNI ADD %s in VM %s: %v", name, vm.Name, err)
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal([]byte(r.Stdout), &res); err != nil || len(res.IPs) == 0 {
		t.Fatalf("CNI ADD %s: result without an address: %v\n%s", name, err, r.Stdout)
	}
	p := pod{name: name}
	for _, a := range res.IPs {
		pfx, err := netip.ParsePrefix(a.Address)
		if err != nil {
			t.Fatalf("CNI ADD %s: address %q: %v", name, a.Address, err)
		}
		if ip := pfx.Addr(); ip.Is4() && !p.ip.IsValid() {
			p.ip = ip
		} else if ip.Is6() && !p.ip6.IsValid() {
			p.ip6 = ip
		}
	}
	if !p.ip.IsValid() {
		p.ip = p.ip6
	}
	return p
}

// delPod runs the plugin's DEL and removes the namespace.
func delPod(t testing.TB, vm *qemuvm.VM, conf []byte, p pod) {
	t.Helper()
	vm.MustExec(t, qemuvm.Cmd{Argv: []string{"/opt/cni/bin/ovnhost-cni"}, Stdin: conf, Timeout: 3 * time.Minute,
		Env: []string{"CNI_COMMAND=DEL", "CNI_CONTAINERID=" + p.name, "CNI_NETNS=/var/run/netns/" + p.name, "CNI_IFNAME=eth0",
			"CNI_PATH=/opt/cni/bin", "CNI_ARGS=K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + p.name}})
	vm.Run(t, "ip", "netns", "del", p.name)
}

// inPod runs argv in the pod's namespace.
func inPod(p pod, argv ...string) []string {
	return append([]string{"ip", "netns", "exec", p.name}, argv...)
}

// probeServer starts vmprobe serve in a pod and waits until it listens.
func probeServer(t testing.TB, vm *qemuvm.VM, b bins, p pod, port int) *qemuvm.Proc {
	t.Helper()
	logf := fmt.Sprintf("/var/log/vmprobe-%s-%d.log", p.name, port)
	s := vm.Spawn(t, logf, nil, inPod(p, b.probe, "serve", "-addr", fmt.Sprintf(":%d", port))...)
	if err := s.WaitLog("serving", time.Minute); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Signal(syscall.SIGKILL, true) })
	return s
}

// probeJSON runs a vmprobe command in a pod and decodes its JSON line.
func probeJSON(t testing.TB, vm *qemuvm.VM, b bins, p pod, timeout time.Duration, v any, args ...string) {
	t.Helper()
	out := vm.MustExec(t, qemuvm.Cmd{Argv: inPod(p, append([]string{b.probe}, args...)...), Timeout: timeout})
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), v); err != nil {
		t.Fatalf("vmprobe %v: %v\n%s", args, err, out)
	}
}

type tcpResult struct {
	Rounds  int     `json:"rounds"`
	Bytes   int     `json:"bytes"`
	Seconds float64 `json:"seconds"`
}

type streamResult struct {
	Sent     int     `json:"sent"`
	Answered int     `json:"answered"`
	Lost     int     `json:"lost"`
	MaxGapMS float64 `json:"max_gap_ms"`
	GapStart string  `json:"gap_start"`
	Seconds  float64 `json:"seconds"`
}

type newFlowResult struct {
	Attempts  int     `json:"attempts"`
	FirstMS   float64 `json:"first_ms"`
	KilledPid int     `json:"killed_pid"`
}

// datapathFlows counts the kernel datapath's flows (ovs-dpctl talks to
// the kernel directly, without ovs-vswitchd).
func datapathFlows(t testing.TB, vm *qemuvm.VM) int {
	t.Helper()
	out := vm.Run(t, "ovs-dpctl", "dump-flows", "system@ovs-system")
	n := 0
	for _, l := range strings.Split(out, "\n") {
		if strings.TrimSpace(l) != "" {
			n++
		}
	}
	return n
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// vsctl runs ovs-vsctl against the node's conf.db.
func vsctl(t testing.TB, vm *qemuvm.VM, args ...string) string {
	t.Helper()
	return vm.Run(t, append([]string{"ovs-vsctl", "--db=unix:/run/openvswitch/db.sock", "--timeout=60"}, args...)...)
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }

package kernel

import (
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestNoModuleTree is a host where modules cannot be loaded, as on Talos
// or in a container without /lib/modules: the guest sees no module tree,
// so neither modprobe nor the kernel's own request_module finds anything.
// Steps in order: DISABLE_MODULES_MANAGEMENT=true refuses with the fix
// and a missing module is reported with the fix; with openvswitch present
// but geneve absent the geneve probe says so, and once geneve is there it
// passes (it failed with "protocol not supported" while xfrm_user was not
// loaded); all-in-one runs, and while the host NAT cannot be set up (no
// nf_tables here) ovn0 is retried on a timer and never reported as
// recreated.
func TestNoModuleTree(t *testing.T) {
	b := programs(t)
	k := qemuvm.DebianKernel(t, qemuvm.Bookworm)
	vm := qemuvm.Boot(t, qemuvm.Config{Name: "node2", Kernel: k, Memory: 1536, NoModuleTree: true,
		Modules: []string{"veth"}, NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
	for _, m := range []string{"openvswitch", "geneve", "xfrm_user", "nfnetlink"} {
		if moduleLoaded(t, vm, m) {
			t.Fatalf("%s is loaded at boot; the test needs it absent", m)
		}
	}

	if !t.Run("DISABLE_MODULES_MANAGEMENT refuses with the fix", func(t *testing.T) {
		env := []string{"DISABLE_MODULES_MANAGEMENT=true"}
		out, code := preflight(t, vm, b, env, "--datapath=kernel")
		if code != 3 {
			t.Fatalf("preflight --datapath=kernel with DISABLE_MODULES_MANAGEMENT=true exited %d, want 3\n%s", code, out)
		}
		c := checkOf(t, out, "datapath")
		if c.status != "FAIL" || !strings.Contains(c.found, "module loading is disabled (DISABLE_MODULES_MANAGEMENT=true)") ||
			!strings.Contains(c.fix, "load the openvswitch module on the host (Talos: machine.kernel.modules") {
			t.Errorf("datapath check = %+v; want FAIL naming DISABLE_MODULES_MANAGEMENT, fix: load the module on the host", c)
		}
		out, code = preflight(t, vm, b, env)
		if c := checkOf(t, out, "datapath"); code != 0 || c.status != "WARN" || !strings.Contains(c.found, "falling back to the userspace (netdev) datapath") {
			t.Errorf("preflight (datapath auto) exit %d, datapath check %+v; want 0 and a WARN falling back to userspace", code, c)
		}
		r, err := vm.Exec(qemuvm.Cmd{Argv: []string{b.ovnhost, "run", "--datapath=kernel", startTimeout},
			Env: append([]string{"NODE_NAME=" + vm.Name}, env...), Timeout: 3 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if r.Exit != 3 || !strings.Contains(r.Stdout+r.Stderr, "DISABLE_MODULES_MANAGEMENT=true") {
			t.Errorf("ovnhost run exited %d, want 3 naming DISABLE_MODULES_MANAGEMENT:\n%s%s", r.Exit, r.Stdout, r.Stderr)
		}
		if out := vm.Run(t, "sh", "-c", "ls /run/openvswitch 2>/dev/null; ip -o link show ovs-system 2>/dev/null || true"); strings.TrimSpace(out) != "" {
			t.Errorf("a refused start left state behind:\n%s", out)
		}
	}) {
		return
	}

	if !t.Run("missing module reported with the fix", func(t *testing.T) {
		out, code := preflight(t, vm, b, nil, "--datapath=kernel")
		c := checkOf(t, out, "datapath")
		if code != 3 || c.status != "FAIL" || !strings.Contains(c.found, "loading module openvswitch failed") ||
			!strings.Contains(c.fix, "install and load the openvswitch module") {
			t.Errorf("preflight exit %d, datapath check %+v; want 3, FAIL after a failed modprobe, fix: install and load the module", code, c)
		}
	}) {
		return
	}

	if !t.Run("geneve probed right", func(t *testing.T) {
		insmod(t, vm, k, "openvswitch")
		out, _ := preflight(t, vm, b, nil)
		if c := checkOf(t, out, "datapath"); c.status != "PASS" {
			t.Fatalf("datapath check %+v after insmod openvswitch", c)
		}
		c := checkOf(t, out, "tunnel-support")
		if c.status != "FAIL" || !strings.Contains(c.found, "the kernel cannot create geneve tunnel devices") {
			t.Errorf("without geneve.ko the tunnel-support check is %+v; want FAIL: the kernel cannot create geneve tunnel devices", c)
		}
		insmod(t, vm, k, "geneve")
		out, _ = preflight(t, vm, b, nil)
		if c := checkOf(t, out, "tunnel-support"); c.status != "PASS" || c.found != "kernel supports geneve tunnel devices" {
			t.Errorf("with geneve.ko loaded the tunnel-support check is %+v; want PASS: kernel supports geneve tunnel devices", c)
		}
		if moduleLoaded(t, vm, "xfrm_user") {
			t.Error("xfrm_user got loaded: the probe no longer runs where its netlink family is absent")
		}
	}) {
		return
	}

	t.Run("ovn0 is not reported recreated when nothing recreated it", func(t *testing.T) {
		// This kernel has no netfilter either: the host firewall guard
		// cannot be installed, which keeps a node not ready unless it is
		// turned off, as here.
		n := startNode(t, vm, b, nil, "--host-guard=off")
		log := n.log(t)
		if !strings.Contains(log, "datapath=system") || strings.Contains(log, "could not probe kernel geneve support") {
			t.Errorf("want datapath=system and no geneve probe warning:\n%s", tailLines(log, 30))
		}
		if !strings.Contains(log, "the host firewall guard is off") {
			t.Errorf("--host-guard=off is not said in the log:\n%s", tailLines(log, 30))
		}
		// No nf_tables and no legacy nat table can be loaded here, so the
		// host NAT step of the node port fails: the set-up must be retried
		// on its timer, and the link events of its own attempts must not
		// count as a recreated ovn0.
		const failed = "node port ovn0 not configured"
		if err := n.proc.WaitLogCount(failed, 2, 3*time.Minute); err != nil {
			t.Fatalf("the node port set-up did not fail and retry as expected here: %v", err)
		}
		log = n.log(t)
		if strings.Contains(log, "was recreated") {
			t.Errorf("ovn0 was reported recreated although ovs-vswitchd never restarted:\n%s", grepLines(log, "ovn0"))
		}
		if !strings.Contains(log, "retry_in=") {
			t.Errorf("the failed node port set-up does not say when it is retried:\n%s", grepLines(log, "ovn0"))
		}
		// (Its stop then exits 1: host-nat cannot remove rules from a nat
		// table the kernel does not have. Not what this test is about.)
	})
}

// insmod loads a module and its dependencies from the kernel's unpacked
// tree (the guest sees the cache at the same path) without modprobe.
func insmod(t testing.TB, vm *qemuvm.VM, k *qemuvm.Kernel, name string) {
	t.Helper()
	order, err := k.ModuleOrder(name)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, ko := range order {
		sb.WriteString("insmod " + ko + " 2>&1 | grep -v 'File exists' || true\n")
	}
	sb.WriteString("grep -q '^" + name + " ' /proc/modules")
	vm.Sh(t, sb.String())
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

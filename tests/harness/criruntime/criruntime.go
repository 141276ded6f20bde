// Package criruntime is the harness of the real-runtime tests (tests/runtime): Debian's containerd (1.6, CRI
// plugin) with runc drives the ovnhost CNI plugin that a real `ovnhost run`
// (all-in-one, standalone IPAM) installed, and crictl (built from the Go
// module proxy, cached like tests/harness/kubeapi's builds) drives containerd.
//
// Isolation:
//   - ovnhost runs in a private network namespace through `ip netns exec`
//     (as in tests/node): br-int, ovn0 and the host ends of the pod veths
//     live there, never on the host.
//   - containerd runs in the same network namespace but in the HOST mount
//     namespace (`nsenter --net=`, not `ip netns exec`): the pod network
//     namespaces it bind-mounts under /var/run/netns (a shared mount, so they
//     propagate into ovnhost's slave mount namespace, where the CNI server
//     opens them) and the overlay rootfs mounts must be visible to ovnhost
//     and to our cleanup. Everything containerd keeps (root, state, sockets,
//     config) is under the test's temp dir, not /run/containerd or
//     /var/lib/containerd; its CNI bin/conf dirs are ovnhost's
//     --cni-bin-dir/--cni-conf-dir.
//   - Pods get cgroup parent /ovnhost-rt-<pid> (cgroupfs driver, cgroup v1):
//     whatever a failed test leaves there is killed and the cgroups removed.
//   - Images come from no registry: a pause image (testdata/pause, a static Go
//     program) and a busybox image (Debian's busybox-static) are built as OCI
//     archives with packaging/ociimage and imported with `ctr images import`.
package criruntime

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/nodedaemon"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Version pins of what the harness builds.
const (
	CrictlModule  = "sigs.k8s.io/cri-tools/cmd/crictl"
	CrictlVersion = "v1.37.0"
	PauseRef      = "localhost/ovnhost-test/pause:1"
	BusyboxRef    = "localhost/ovnhost-test/busybox:1"
	// cniVersion is the highest CNI version containerd 1.6's libcni (v1.1.2) accepts.
	CNIVersion = "1.0.0"
)

// ---------------------------------------------------------------- commands

// LookPath finds a program (tests/testenv.LookPath), failing t if absent.
func LookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// RequireFile fails (strict) or skips when a file a Debian package ships is absent.
func RequireFile(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("prerequisite missing: %s (Debian package %s)", path, pkg)
		if testenv.Strict() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// RequireStatic checks that path is a statically linked ELF executable
// (Debian's busybox package installs a dynamic /bin/busybox; busybox-static a
// static one, which an image without libc needs).
func RequireStatic(t testing.TB, path, pkg string) {
	t.Helper()
	RequireFile(t, path, pkg)
	f, err := elf.Open(path)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			msg := fmt.Sprintf("prerequisite missing: %s is dynamically linked (install Debian package %s)", path, pkg)
			if testenv.Strict() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
}

// ---------------------------------------------------------------- environment

var seq atomic.Int32

// Env is one test's world: a network namespace with ovnhost and containerd.
type Env struct {
	t            testing.TB
	Dir          string // everything of this test
	NS           string // network namespace name
	LAN          string // Kubernetes mode: the namespace at the other end of ul0
	CgroupParent string // cgroup parent of the pods
	Crictl       string
	Ctr          string

	Node       *nodedaemon.Node // nil until StartNode
	containerd *proc.Process

	// Kubernetes mode (StartKubeNode): extra environment and flags of
	// `ovnhost run`; without them the node runs all-in-one.
	NodeEnv   []string
	NodeArgs  []string
	Kubelet   *Kubelet
	CentralNB string // the control plane's NB endpoint

	hadRunContainerd bool            // /run/containerd existed before the test
	NetnsPaths       []string        // pod network namespaces containerd created
	shimSockets      map[string]bool // /run/containerd/s before the test
}

// Path is a path under the test's directory.
func (e *Env) Path(p ...string) string { return filepath.Join(append([]string{e.Dir}, p...)...) }

// New checks the prerequisites (failing under OVNHOST_TEST_STRICT=1,
// skipping otherwise) and lays out the directories; nothing runs yet.
func New(t testing.TB) *Env {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: runs containerd, runc and OVS/OVN daemons")
	}
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovsdb-tool",
		"ovs-vsctl", "ovn-nbctl", "ip", "nsenter")
	for _, c := range []string{"containerd", "containerd-shim-runc-v2", "ctr", "runc"} {
		if _, err := testenv.LookPath(c); err != nil {
			msg := "prerequisite missing: program " + c + " (Debian packages containerd, runc)"
			if testenv.Strict() {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	RequireFile(t, "/usr/lib/cni/loopback", "containernetworking-plugins")
	RequireFile(t, "/usr/lib/cni/portmap", "containernetworking-plugins")
	testenv.RequireCommands(t, "iptables-save")
	RequireStatic(t, "/bin/busybox", "busybox-static")
	testenv.Binary(t, "ovnhost")
	testenv.Binary(t, "ovnhost-cni")

	e := &Env{t: t, CgroupParent: fmt.Sprintf("/ovnhost-rt-%d-%d", os.Getpid(), seq.Add(1))}
	e.Crictl = Crictl(t)
	e.Ctr = LookPath(t, "ctr")
	_, err := os.Stat("/run/containerd")
	e.hadRunContainerd = err == nil
	e.shimSockets = shimSockets()
	dir, err := os.MkdirTemp("", "ovnhost-runtime-")
	if err != nil {
		t.Fatal(err)
	}
	e.Dir = dir
	// Registered first, so it runs last: after containerd, ovnhost and the netns.
	t.Cleanup(func() {
		e.Teardown()
		if os.Getenv("OVNHOST_RUNTIME_KEEP") == "" {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("removing %s: %v", dir, err)
			}
		}
	})
	e.NS = fmt.Sprintf("ohrt%d-%d", os.Getpid()%10000, seq.Add(1))
	netns.Add(t, e.NS)
	return e
}

// ---------------------------------------------------------------- ovnhost

// StartNode runs `ovnhost run` all-in-one in the namespace (tests/harness/
// nodedaemon) and waits for READY=1 and the installed conflist.
func (e *Env) StartNode() {
	t := e.t
	t.Helper()
	bin := testenv.Binary(t, "ovnhost")
	n := nodedaemon.New(t, nodedaemon.Options{NS: e.NS, Dir: e.Dir, Name: "runtime-node", ReadyTimeout: 90 * time.Second})
	n.Args = append(n.Args, e.NodeArgs...)
	n.Env = e.NodeEnv
	// portmap (hostPorts) is in the bin dir before ovnhost starts, as on a
	// node with Debian's containernetworking-plugins: the conflist ovnhost
	// installs chains it after ovnhost-cni.
	pm, err := os.ReadFile("/usr/lib/cni/portmap")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.Path("cni-bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Path("cni-bin", "portmap"), pm, 0o755); err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	hasCNIVersion := bytes.Contains(help, []byte("-cni-version"))
	if hasCNIVersion {
		n.Args = append(n.Args, "--cni-version="+CNIVersion)
	}
	e.Node = n
	if err := n.StartNoWait(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.StopNode)
	n.WaitReady(90 * time.Second)
	conf := e.WaitConflist()
	if !hasCNIVersion {
		// TODO(issue 12): remove once `ovnhost run --cni-version` exists
		// everywhere; containerd 1.6's libcni v1.1.2 rejects cniVersion
		// "1.1.0" ("unsupported CNI result version").
		raw, err := os.ReadFile(conf)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		m["cniVersion"] = CNIVersion
		raw, _ = json.MarshalIndent(m, "", "  ")
		if err := os.WriteFile(conf, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("ovnhost has no --cni-version: rewrote %s to cniVersion %s", conf, CNIVersion)
	}
	// containerd 1.6's CRI sets up the pod's lo with the loopback plugin
	// from the same bin_dir.
	lo, err := os.ReadFile("/usr/lib/cni/loopback")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.Path("cni-bin", "loopback"), lo, 0o755); err != nil {
		t.Fatal(err)
	}
}

// WaitConflist returns the conflist ovnhost installed in its conf dir,
// once it and the plugin binary are there (inotify on both directories).
func (e *Env) WaitConflist() string {
	e.t.Helper()
	var m []string
	err := proc.WaitCond("ovnhost's conflist in "+e.Path("cni-conf")+" and its plugin in "+e.Path("cni-bin"), 20*time.Second,
		[]string{e.Path("cni-conf"), e.Path("cni-bin")}, func() bool {
			m, _ = filepath.Glob(e.Path("cni-conf", "*.conflist"))
			return len(m) == 1 && fileExists(e.Path("cni-bin", "ovnhost-cni"))
		})
	if err != nil {
		e.t.Fatalf("%v (%v)\n%s", err, m, e.Tail("ovnhost.log", 40))
	}
	return m[0]
}

// StopNode stops ovnhost (SIGTERM, SIGKILL after 60s); idempotent.
func (e *Env) StopNode() {
	if e.Node != nil {
		e.Node.Terminate(60 * time.Second)
	}
}

// ---------------------------------------------------------------- containerd

// WriteContainerdConfig writes containerd's config.toml (everything under
// the test's directory, CNI dirs shared with ovnhost) and crictl's config.
func (e *Env) WriteContainerdConfig() string {
	p := e.Path("containerd", "config.toml")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	cfg := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = %[3]q

[ttrpc]
  address = %[4]q

[debug]
  address = %[5]q
  level = "info"

[plugins."io.containerd.internal.v1.opt"]
  path = %[6]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[7]q
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true
  systemd_cgroup = false
  # This machine's root has no CAP_SYS_RESOURCE (a sandboxed VM): runc
  # cannot lower oom_score_adj to the sandbox's -998 ("nsexec: failed to
  # update /proc/self/oom_score_adj: Permission denied"). Clamp to
  # containerd's own value instead.
  restrict_oom_score_adj = true
  max_container_log_line_size = 16384

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"

      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = %[11]q%[10]s

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
`, e.Path("containerd", "root"), e.Path("containerd", "state"), e.Sock(), e.Path("containerd", "ttrpc.sock"),
		e.Path("containerd", "debug.sock"), e.Path("containerd", "opt"), PauseRef, e.Path("cni-bin"), e.Path("cni-conf"), runcBinary(), e.Path("containerd", "runc"))
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	crictlCfg := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\ndebug: false\npull-image-on-create: false\n", e.Sock(), e.Sock())
	if err := os.WriteFile(e.Path("containerd", "crictl.yaml"), []byte(crictlCfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// runcBinary is the runc options' BinaryName line: $OVNHOST_RUNTIME_RUNC
// (e.g. a wrapper adding --debug) replaces Debian's runc.
func runcBinary() string {
	if p := os.Getenv("OVNHOST_RUNTIME_RUNC"); p != "" {
		return fmt.Sprintf("\n        BinaryName = %q", p)
	}
	return ""
}

// Sock is containerd's gRPC socket.
func (e *Env) Sock() string { return e.Path("containerd", "containerd.sock") }

// StartContainerd runs containerd in the test's network namespace (host
// mount namespace) and waits until its CRI reports RuntimeReady and
// NetworkReady.
func (e *Env) StartContainerd() {
	t := e.t
	t.Helper()
	cfg := e.Path("containerd", "config.toml")
	if !fileExists(cfg) {
		cfg = e.WriteContainerdConfig()
	}
	e.containerd = proc.MustStart(t, proc.Spec{Name: "containerd", Path: LookPath(t, "containerd"), Args: []string{"--config", cfg},
		Env: []string{"PATH=" + os.Getenv("PATH")}, NetNS: e.NS, HostMounts: true, Log: e.Path("containerd.log")})
	var out []byte
	err := proc.Poll("containerd CRI RuntimeReady and NetworkReady", 30*time.Second, 200*time.Millisecond, e.containerd.Exited(), func() (bool, error) {
		var err error
		out, err = e.CrictlCmd("info").CombinedOutput()
		if err != nil {
			return false, err
		}
		var info struct {
			Status struct {
				Conditions []struct {
					Type   string `json:"type"`
					Status bool   `json:"status"`
					Reason string `json:"reason"`
				} `json:"conditions"`
			} `json:"status"`
		}
		if err := json.Unmarshal(out, &info); err != nil {
			return false, err
		}
		ready := 0
		for _, c := range info.Status.Conditions {
			if c.Status {
				ready++
			}
		}
		return ready == 2 && len(info.Status.Conditions) == 2, nil
	})
	if err != nil {
		t.Fatalf("containerd: %v\n%s\n%s", err, out, e.Tail("containerd.log", 40))
	}
}

// StopContainerd sends SIGTERM and waits (SIGKILL after 30s); the shims
// and pods stay.
func (e *Env) StopContainerd() { e.containerd.Terminate(30 * time.Second) }

// ImportImage imports an OCI archive into containerd's k8s.io namespace.
func (e *Env) ImportImage(archive string) {
	e.t.Helper()
	netns.Run(e.t, e.Ctr, "--address", e.Sock(), "-n", "k8s.io", "images", "import", archive)
}

// CrictlCmd is a crictl command against the test's containerd.
func (e *Env) CrictlCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(e.Crictl, append([]string{"--config", e.Path("containerd", "crictl.yaml")}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return cmd
}

// CRI runs crictl and returns its trimmed stdout, failing t on error.
func (e *Env) CRI(args ...string) string {
	e.t.Helper()
	var stderr bytes.Buffer
	cmd := e.CrictlCmd(args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("crictl %s: %v\n%s%s\n%s\n%s", strings.Join(args, " "), err, out, stderr.String(),
			e.Tail("containerd.log", 30), e.Tail("ovnhost.log", 20))
	}
	return strings.TrimSpace(string(out))
}

// ---------------------------------------------------------------- teardown

// Teardown removes everything the runtime left, whatever state the test
// ended in: pods (through CRI while containerd runs), containerd, shims,
// processes in the pods' cgroups, the cgroups, mounts under the test dir,
// and /run/containerd when the test created it. Idempotent.
func (e *Env) Teardown() {
	e.RemoveSandboxes()
	e.StopContainerd()
	e.KillCgroups()
	proc.KillMentioning(e.Dir)
	_ = proc.Poll("the end of the processes under "+e.Dir, 5*time.Second, 100*time.Millisecond, nil, func() (bool, error) {
		return len(proc.Mentioning(e.Dir)) == 0, nil
	})
	e.UnmountUnder()
	// Pod network namespaces are bind mounts under /var/run/netns: normally
	// removed by rmp, left behind only when containerd died first.
	for _, p := range e.NetnsPaths {
		if fileExists(p) {
			_ = syscall.Unmount(p, syscall.MNT_DETACH)
			_ = os.Remove(p)
		}
	}
	// containerd 1.6 puts the shims' sockets in /run/containerd/s whatever
	// its state dir (a shim killed rather than shut down leaves its socket):
	// remove the ones this test created, then the directories if this test
	// created them and they are empty.
	for s := range shimSockets() {
		if !e.shimSockets[s] {
			_ = os.Remove(filepath.Join("/run/containerd/s", s))
		}
	}
	if !e.hadRunContainerd {
		_ = os.Remove("/run/containerd/s")
		_ = os.Remove("/run/containerd")
		if fileExists("/run/containerd") {
			e.t.Logf("teardown: /run/containerd is not empty, left alone")
		}
	}
}

// RemoveSandboxes removes every sandbox through CRI while containerd runs
// (the CNI DEL succeeds only while ovnhost runs too: the kube tests call it
// before ovnhost stops). Sandboxes it cannot remove keep their network
// namespace mount; those are recorded for the teardown, and so are their
// libcni cache entries (/var/lib/cni/results/<network>-<id>-<ifname>).
func (e *Env) RemoveSandboxes() {
	if !e.containerd.Running() {
		return
	}
	out, err := e.CrictlCmd("pods", "-q").Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	for _, id := range ids {
		raw, err := e.CrictlCmd("inspectp", "-o", "json", id).Output()
		if err != nil {
			continue
		}
		if sb, err := parseSandbox(raw); err == nil && sb.Netns != "" {
			e.NetnsPaths = append(e.NetnsPaths, sb.Netns)
		}
	}
	_ = e.CrictlCmd("rmp", "-fa").Run()
	for _, id := range ids {
		left, _ := filepath.Glob("/var/lib/cni/results/*-" + id + "-*")
		for _, f := range left {
			_ = os.Remove(f)
		}
	}
}

// Sandbox is what `crictl inspectp` tells of a pod sandbox.
type Sandbox struct {
	State string // SANDBOX_READY, SANDBOX_NOTREADY
	IP    string // from the CNI ADD
	Netns string // the network namespace containerd created
}

func parseSandbox(raw []byte) (Sandbox, error) {
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
	if err := json.Unmarshal(raw, &sb); err != nil {
		return Sandbox{}, err
	}
	out := Sandbox{State: sb.Status.State, IP: sb.Status.Network.IP}
	for _, n := range sb.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			out.Netns = n.Path
		}
	}
	return out, nil
}

// InspectSandbox is `crictl inspectp` of sandbox id, failing t on error.
func (e *Env) InspectSandbox(id string) Sandbox {
	e.t.Helper()
	sb, err := parseSandbox([]byte(e.CRI("inspectp", "-o", "json", id)))
	if err != nil {
		e.t.Fatalf("crictl inspectp %s: %v", id, err)
	}
	return sb
}

// TeardownAndCheck stops kubelet, containerd and ovnhost, removes what
// they left (Teardown) and fails t if anything is still there: a process
// naming the test's directory, a process or cgroup under the pods' cgroup
// parent, a mount under the test's directory.
func (e *Env) TeardownAndCheck(t testing.TB) {
	t.Helper()
	e.StopKubelet()
	e.StopContainerd()
	e.StopNode()
	e.Teardown()
	if left := proc.Mentioning(e.Dir); len(left) > 0 {
		t.Fatalf("processes left:\n%s", Describe(left))
	}
	if left := e.CgroupProcs(); len(left) > 0 {
		t.Fatalf("processes left in %s:\n%s", e.CgroupParent, Describe(left))
	}
	if left := e.CgroupDirs(); len(left) > 0 {
		t.Fatalf("cgroups left: %v", left)
	}
	if left := MountsUnder(e.Dir); len(left) > 0 {
		t.Fatalf("mounts left: %v", left)
	}
}

func shimSockets() map[string]bool {
	m := map[string]bool{}
	entries, _ := os.ReadDir("/run/containerd/s")
	for _, d := range entries {
		if d.Type()&os.ModeSocket != 0 {
			m[d.Name()] = true
		}
	}
	return m
}

// CgroupDirs lists the pods' cgroup parent directories in every v1 hierarchy.
func (e *Env) CgroupDirs() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*" + e.CgroupParent)
	if fileExists("/sys/fs/cgroup" + e.CgroupParent) { // cgroup v2
		m = append(m, "/sys/fs/cgroup"+e.CgroupParent)
	}
	return m
}

// CgroupProcs lists the processes in the pods' cgroups.
func (e *Env) CgroupProcs() []int {
	var pids []int
	seen := map[int]bool{}
	for _, d := range e.CgroupDirs() {
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err != nil || de.IsDir() || de.Name() != "cgroup.procs" {
				return nil
			}
			raw, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(raw)) {
				if n, err := strconv.Atoi(f); err == nil && !seen[n] {
					seen[n] = true
					pids = append(pids, n)
				}
			}
			return nil
		})
	}
	return pids
}

// KillCgroups kills the processes in the pods' cgroups and removes them.
func (e *Env) KillCgroups() {
	for _, p := range e.CgroupProcs() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	_ = proc.Poll("the end of the processes in "+e.CgroupParent, 5*time.Second, 100*time.Millisecond, nil, func() (bool, error) {
		return len(e.CgroupProcs()) == 0, nil
	})
	for _, d := range e.CgroupDirs() {
		var dirs []string
		_ = filepath.WalkDir(d, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- { // children first
			_ = syscall.Rmdir(dirs[i])
		}
	}
}

// MountsUnder lists mount points at or below dir (host mount namespace).
func MountsUnder(dir string) []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) > 4 {
			mp := unescapeMount(fs[4])
			if mp == dir || strings.HasPrefix(mp, dir+"/") {
				out = append(out, mp)
			}
		}
	}
	return out
}

func unescapeMount(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// UnmountUnder detaches every mount under the test's directory.
func (e *Env) UnmountUnder() {
	for i := 0; i < 5; i++ {
		m := MountsUnder(e.Dir)
		if len(m) == 0 {
			return
		}
		for j := len(m) - 1; j >= 0; j-- { // deepest (latest) first
			_ = syscall.Unmount(m[j], syscall.MNT_DETACH)
		}
	}
}

// Describe is "pid command line" of each process, one a line.
func Describe(pids []int) string { return strings.Join(proc.Describe(pids), "\n") + "\n" }

// Tail is the last n lines of a log under the test's directory.
func (e *Env) Tail(name string, n int) string {
	raw, _ := os.ReadFile(e.Path(name))
	return "--- " + name + " (tail) ---\n" + lastLines(string(raw), n)
}

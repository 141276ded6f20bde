package runtime_test

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/packaging/ociimage"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The harness of the real-runtime tests: Debian's containerd (1.6, CRI
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

// Version pins of what the harness builds.
const (
	crictlModule  = "sigs.k8s.io/cri-tools/cmd/crictl"
	crictlVersion = "v1.37.0"
	pauseRef      = "localhost/ovnhost-test/pause:1"
	busyboxRef    = "localhost/ovnhost-test/busybox:1"
	// cniVersion is the highest CNI version containerd 1.6's libcni (v1.1.2) accepts.
	cniVersion = "1.0.0"
)

// ---------------------------------------------------------------- commands

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := testenv.LookPath(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return p
}

// requireFile fails (strict) or skips when a file a Debian package ships is absent.
func requireFile(t testing.TB, path, pkg string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		msg := fmt.Sprintf("prerequisite missing: %s (Debian package %s)", path, pkg)
		if testenv.Strict() {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// requireStatic checks that path is a statically linked ELF executable
// (Debian's busybox package installs a dynamic /bin/busybox; busybox-static a
// static one, which an image without libc needs).
func requireStatic(t testing.TB, path, pkg string) {
	t.Helper()
	requireFile(t, path, pkg)
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

// ---------------------------------------------------------------- crictl build

// cacheRoot is tests/harness/kubeapi's: $OVNHOST_KUBE_CACHE, else
// ~/.cache/ovnhost, else /var/cache/ovnhost.
func cacheRoot() string {
	if d := os.Getenv("OVNHOST_KUBE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ovnhost")
	}
	return "/var/cache/ovnhost"
}

func goTool() (string, error) {
	if p := filepath.Join(goruntime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	return exec.LookPath("go")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// goTools are the programs the harness builds from the Go module proxy
// with `go install <pkg>@<version>` (outside any module), each cached in
// its own directory of cacheRoot() keyed by version, Go version and
// platform, and built at most once per test binary.
var (
	goToolsMu sync.Mutex
	goTools   = map[string]*goToolBuild{}
)

type goToolBuild struct {
	once sync.Once
	path string
	err  error
}

// crictl returns the cached crictl binary, building it on first use with
// `go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0`.
func crictl(t testing.TB) string {
	t.Helper()
	return goInstalled(t, "crictl", "", crictlModule, crictlVersion)
}

// goInstalled returns the path of program name (package pkg of module at
// version; module "" = `go install pkg@version`; pins, "module version"
// requirements added to the build module), building it on first use; it
// fails (strict) or skips t if it cannot.
func goInstalled(t testing.TB, name, module, pkg, version string, pins ...string) string {
	t.Helper()
	goToolsMu.Lock()
	b := goTools[name]
	if b == nil {
		b = &goToolBuild{}
		goTools[name] = b
	}
	goToolsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildGoTool(t, name, module, pkg, version, pins) })
	if b.err != nil {
		if testenv.Strict() {
			t.Fatalf("building %s: %v", name, b.err)
		}
		t.Skipf("cannot build %s: %v", name, b.err)
	}
	return b.path
}

func buildGoTool(t testing.TB, name, module, pkg, version string, pins []string) (string, error) {
	gobin, err := goTool()
	if err != nil {
		return "", fmt.Errorf("go toolchain not found: %w", err)
	}
	dir := filepath.Join(cacheRoot(), fmt.Sprintf("%s-%s-%s-%s-%s", name, version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	bin, stamp, want := filepath.Join(dir, name), filepath.Join(dir, ".stamp"), pkg+"@"+version+" recipe=1"
	if module != "" {
		want = pkg + "@" + version + " recipe=module-2 " + strings.Join(pins, ",")
	}
	ok := func() bool {
		b, err := os.ReadFile(stamp)
		return err == nil && string(b) == want && fileExists(bin)
	}
	if ok() {
		return bin, nil
	}
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if ok() {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, ".build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	t0 := time.Now()
	var cmd *exec.Cmd
	if module == "" {
		cmd = exec.Command(gobin, "install", "-trimpath", "-ldflags=-s -w", pkg+"@"+version)
		cmd.Dir = tmp // outside any module: `go install pkg@version` mode
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-modcacherw", "CGO_ENABLED=0")
	} else {
		// A throwaway module requiring module@version, built with
		// -mod=mod: no @v/list query, which `go install pkg@version` makes
		// for its deprecation check (and which the proxy refuses for some
		// gopkg.in modules: "403 Forbidden").
		// Extra requirements raise shared dependencies to the versions
		// the harness's other builds use (kube-apiserver's, built the same
		// way: CGO off, no -trimpath), so their compiled packages are reused.
		gomod := fmt.Sprintf("module ovnhost.local/%s\n\ngo 1.24\n\nrequire %s %s\n", name, module, version)
		for _, p := range pins {
			gomod += "require " + p + "\n"
		}
		if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(gomod), 0o644); err != nil {
			return "", err
		}
		cmd = exec.Command(gobin, "build", "-ldflags=-s -w", "-o", filepath.Join(tmp, filepath.Base(pkg)), pkg)
		cmd.Dir = tmp
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-modcacherw -mod=mod", "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, lastLines(string(out), 20))
	}
	if err := os.Rename(filepath.Join(tmp, filepath.Base(pkg)), bin); err != nil {
		return "", err
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return "", err
	}
	t.Logf("timing: %s %s built in %s (cold; cached in %s)", name, version, time.Since(t0).Round(100*time.Millisecond), dir)
	return bin, nil
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// ---------------------------------------------------------------- images

// buildImages writes the pause and busybox images as OCI archives into dir.
func buildImages(t testing.TB, dir string) (pause, busybox string) {
	t.Helper()
	gobin, err := goTool()
	if err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "images")
	if err := os.MkdirAll(filepath.Join(work, "bb", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// pause: a static Go program, alone in its image.
	pauseBin := filepath.Join(work, "pause")
	cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", pauseBin, ".")
	cmd.Dir = filepath.Join(testenv.RepoRoot(), "tests", "runtime", "testdata", "pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building pause: %v\n%s", err, out)
	}
	data, err := os.ReadFile(pauseBin)
	if err != nil {
		t.Fatal(err)
	}
	pause = filepath.Join(work, "pause.oci.tar")
	writeImage(t, work, pause, pauseRef, []ociimage.Entry{{Data: data, Mode: 0o755, Path: "/pause"}}, ociimage.Config{Entrypoint: []string{"/pause"}})

	// busybox: Debian's static busybox and the applets the tests call.
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(work, "bb")
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "ping", "nc", "httpd", "wget", "sleep", "ip", "cat", "echo", "mkdir", "printf", "hostname", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "www", "proc", "sys", "dev", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busybox = filepath.Join(work, "busybox.oci.tar")
	writeImage(t, work, busybox, busyboxRef, []ociimage.Entry{{Dir: root, Path: "/"}},
		ociimage.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}})
	return pause, busybox
}

func writeImage(t testing.TB, work, path, ref string, entries []ociimage.Entry, cfg ociimage.Config) {
	t.Helper()
	layer, err := ociimage.Layer(work, entries)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Image(layer, cfg, goruntime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteOCIArchive(path, img, ref); err != nil {
		t.Fatal(err)
	}
}

// ---------------------------------------------------------------- environment

var seq atomic.Int32

// env is one test's world: a network namespace with ovnhost and containerd.
type env struct {
	t        testing.TB
	dir      string // everything of this test
	ns       string // network namespace name
	lan      string // Kubernetes mode: the namespace at the other end of ul0
	cgParent string // cgroup parent of the pods
	crictl   string
	ctr      string

	node       *exec.Cmd
	nodeExited chan struct{}
	ctrd       *exec.Cmd
	ctrdExited chan struct{}

	// Kubernetes mode (kube_test.go): extra environment and flags of
	// `ovnhost run`; without them the node runs all-in-one.
	nodeEnv  []string
	nodeArgs []string
	kubelet  *kubelet
	central  string // the control plane's NB endpoint

	hadRunContainerd bool            // /run/containerd existed before the test
	netnsPaths       []string        // pod network namespaces containerd created
	shimSockets      map[string]bool // /run/containerd/s before the test
}

func (e *env) path(p ...string) string { return filepath.Join(append([]string{e.dir}, p...)...) }

// newEnv checks the prerequisites and lays out the directories; nothing runs yet.
func newEnv(t testing.TB) *env {
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
	requireFile(t, "/usr/lib/cni/loopback", "containernetworking-plugins")
	requireFile(t, "/usr/lib/cni/portmap", "containernetworking-plugins")
	testenv.RequireCommands(t, "iptables-save")
	requireStatic(t, "/bin/busybox", "busybox-static")
	testenv.Binary(t, "ovnhost")
	testenv.Binary(t, "ovnhost-cni")

	e := &env{t: t, cgParent: fmt.Sprintf("/ovnhost-rt-%d-%d", os.Getpid(), seq.Add(1))}
	e.crictl = crictl(t)
	e.ctr = lookPath(t, "ctr")
	_, err := os.Stat("/run/containerd")
	e.hadRunContainerd = err == nil
	e.shimSockets = shimSockets()
	dir, err := os.MkdirTemp("", "ovnhost-runtime-")
	if err != nil {
		t.Fatal(err)
	}
	e.dir = dir
	// Registered first, so it runs last: after containerd, ovnhost and the netns.
	t.Cleanup(func() {
		e.teardown()
		if os.Getenv("OVNHOST_RUNTIME_KEEP") == "" {
			if err := os.RemoveAll(dir); err != nil {
				t.Errorf("removing %s: %v", dir, err)
			}
		}
	})
	e.ns = fmt.Sprintf("ohrt%d-%d", os.Getpid()%10000, seq.Add(1))
	run(t, "ip", "netns", "add", e.ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", e.ns).Run() })
	run(t, "ip", "-n", e.ns, "link", "set", "lo", "up")
	return e
}

// ---------------------------------------------------------------- ovnhost

// startNode runs `ovnhost run` all-in-one in the namespace and waits for
// READY=1 and the installed conflist.
func (e *env) startNode() {
	t := e.t
	t.Helper()
	bin := testenv.Binary(t, "ovnhost")
	sock := e.path("notify.sock")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		once := sync.Once{}
		for {
			n, err := nc.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l == "READY=1" {
					once.Do(func() { close(ready) })
				}
			}
		}
	}()
	t.Cleanup(func() { nc.Close() })
	args := []string{"netns", "exec", e.ns, bin, "run",
		"--ovs-db-dir=" + e.path("ovs-db"), "--ovs-run-dir=" + e.path("ovs-run"), "--ovs-log-dir=" + e.path("log"),
		"--ovn-db-dir=" + e.path("ovn-db"), "--ovn-run-dir=" + e.path("ovn-run"), "--ovn-log-dir=" + e.path("log"),
		"--health-addr=127.0.0.1:10665", "--node-name=runtime-node", "--stop-timeout=5s", "--start-timeout=30s",
		"--cni-socket=" + e.path("cni.sock"), "--cni-bin-dir=" + e.path("cni-bin"), "--cni-conf-dir=" + e.path("cni-conf"),
	}
	args = append(args, e.nodeArgs...)
	// portmap (hostPorts) is in the bin dir before ovnhost starts, as on a
	// node with Debian's containernetworking-plugins: the conflist ovnhost
	// installs chains it after ovnhost-cni.
	pm, err := os.ReadFile("/usr/lib/cni/portmap")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.path("cni-bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("cni-bin", "portmap"), pm, 0o755); err != nil {
		t.Fatal(err)
	}
	help, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	hasCNIVersion := bytes.Contains(help, []byte("-cni-version"))
	if hasCNIVersion {
		args = append(args, "--cni-version="+cniVersion)
	}
	log, err := os.OpenFile(e.path("ovnhost.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "NOTIFY_SOCKET=" + sock}, e.nodeEnv...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e.node, e.nodeExited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(e.nodeExited) }()
	t.Cleanup(e.stopNode)
	select {
	case <-ready:
	case <-e.nodeExited:
		t.Fatalf("ovnhost exited before READY=1\n%s", e.tail("ovnhost.log", 40))
	case <-time.After(90 * time.Second):
		t.Fatalf("ovnhost not ready within 90s\n%s", e.tail("ovnhost.log", 40))
	}
	conf := e.waitConflist()
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
		m["cniVersion"] = cniVersion
		raw, _ = json.MarshalIndent(m, "", "  ")
		if err := os.WriteFile(conf, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("ovnhost has no --cni-version: rewrote %s to cniVersion %s", conf, cniVersion)
	}
	// containerd 1.6's CRI sets up the pod's lo with the loopback plugin
	// from the same bin_dir.
	lo, err := os.ReadFile("/usr/lib/cni/loopback")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("cni-bin", "loopback"), lo, 0o755); err != nil {
		t.Fatal(err)
	}
}

// waitConflist returns the conflist ovnhost installed in its conf dir.
func (e *env) waitConflist() string {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, _ := filepath.Glob(e.path("cni-conf", "*.conflist"))
		if len(m) == 1 && fileExists(e.path("cni-bin", "ovnhost-cni")) {
			return m[0]
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no conflist in %s within 20s (%v)\n%s", e.path("cni-conf"), m, e.tail("ovnhost.log", 40))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (e *env) stopNode() {
	if e.node == nil {
		return
	}
	select {
	case <-e.nodeExited:
		return
	default:
	}
	_ = e.node.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.nodeExited:
	case <-time.After(60 * time.Second):
		_ = e.node.Process.Kill()
		<-e.nodeExited
	}
}

// ---------------------------------------------------------------- containerd

func (e *env) writeContainerdConfig() string {
	p := e.path("containerd", "config.toml")
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
`, e.path("containerd", "root"), e.path("containerd", "state"), e.sock(), e.path("containerd", "ttrpc.sock"),
		e.path("containerd", "debug.sock"), e.path("containerd", "opt"), pauseRef, e.path("cni-bin"), e.path("cni-conf"), runcBinary(), e.path("containerd", "runc"))
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	crictlCfg := fmt.Sprintf("runtime-endpoint: unix://%s\nimage-endpoint: unix://%s\ntimeout: 30\ndebug: false\npull-image-on-create: false\n", e.sock(), e.sock())
	if err := os.WriteFile(e.path("containerd", "crictl.yaml"), []byte(crictlCfg), 0o644); err != nil {
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

func (e *env) sock() string { return e.path("containerd", "containerd.sock") }

// startContainerd runs containerd in the test's network namespace (host
// mount namespace) and waits until its CRI reports RuntimeReady and
// NetworkReady.
func (e *env) startContainerd() {
	t := e.t
	t.Helper()
	cfg := e.path("containerd", "config.toml")
	if !fileExists(cfg) {
		cfg = e.writeContainerdConfig()
	}
	log, err := os.OpenFile(e.path("containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lookPath(t, "nsenter"), "--net=/run/netns/"+e.ns, lookPath(t, "containerd"), "--config", cfg)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(exited) }()
	e.ctrd, e.ctrdExited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, err := e.crictlCmd("info").CombinedOutput()
		if err == nil {
			var info struct {
				Status struct {
					Conditions []struct {
						Type   string `json:"type"`
						Status bool   `json:"status"`
						Reason string `json:"reason"`
					} `json:"conditions"`
				} `json:"status"`
			}
			if json.Unmarshal(out, &info) == nil {
				ready := 0
				for _, c := range info.Status.Conditions {
					if c.Status {
						ready++
					}
				}
				if ready == 2 && len(info.Status.Conditions) == 2 {
					return
				}
			}
		}
		select {
		case <-exited:
			t.Fatalf("containerd exited\n%s", e.tail("containerd.log", 40))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd CRI not ready within 30s: %v\n%s\n%s", err, out, e.tail("containerd.log", 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopContainerd sends SIGTERM and waits; the shims and pods stay.
func (e *env) stopContainerd() {
	if e.ctrd == nil {
		return
	}
	select {
	case <-e.ctrdExited:
		return
	default:
	}
	_ = e.ctrd.Process.Signal(syscall.SIGTERM)
	select {
	case <-e.ctrdExited:
	case <-time.After(30 * time.Second):
		_ = e.ctrd.Process.Kill()
		<-e.ctrdExited
	}
}

func (e *env) importImage(archive string) {
	e.t.Helper()
	run(e.t, e.ctr, "--address", e.sock(), "-n", "k8s.io", "images", "import", archive)
}

func (e *env) crictlCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(e.crictl, append([]string{"--config", e.path("containerd", "crictl.yaml")}, args...)...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	return cmd
}

// cri runs crictl and returns its trimmed stdout, failing t on error.
func (e *env) cri(args ...string) string {
	e.t.Helper()
	var stderr bytes.Buffer
	cmd := e.crictlCmd(args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		e.t.Fatalf("crictl %s: %v\n%s%s\n%s\n%s", strings.Join(args, " "), err, out, stderr.String(),
			e.tail("containerd.log", 30), e.tail("ovnhost.log", 20))
	}
	return strings.TrimSpace(string(out))
}

// ---------------------------------------------------------------- teardown

// teardown removes everything the runtime left, whatever state the test
// ended in: pods (through CRI while containerd runs), containerd, shims,
// processes in the pods' cgroups, the cgroups, mounts under the test dir,
// and /run/containerd when the test created it. Idempotent.
func (e *env) teardown() {
	e.removeSandboxes()
	e.stopContainerd()
	e.killCgroups()
	for _, p := range processesMentioning(e.dir) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	waitGone(processesMentioning, e.dir)
	e.unmountUnder()
	// Pod network namespaces are bind mounts under /var/run/netns: normally
	// removed by rmp, left behind only when containerd died first.
	for _, p := range e.netnsPaths {
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

// removeSandboxes removes every sandbox through CRI while containerd runs
// (the CNI DEL succeeds only while ovnhost runs too: the kube tests call it
// before ovnhost stops). Sandboxes it cannot remove keep their network
// namespace mount; those are recorded for the teardown, and so are their
// libcni cache entries (/var/lib/cni/results/<network>-<id>-<ifname>).
func (e *env) removeSandboxes() {
	if e.ctrd == nil {
		return
	}
	select {
	case <-e.ctrdExited:
		return
	default:
	}
	out, err := e.crictlCmd("pods", "-q").Output()
	if err != nil {
		return
	}
	ids := strings.Fields(string(out))
	for _, id := range ids {
		raw, err := e.crictlCmd("inspectp", "-o", "json", id).Output()
		if err != nil {
			continue
		}
		var sb struct {
			Info struct {
				RuntimeSpec struct {
					Linux struct {
						Namespaces []struct{ Type, Path string } `json:"namespaces"`
					} `json:"linux"`
				} `json:"runtimeSpec"`
			} `json:"info"`
		}
		if json.Unmarshal(raw, &sb) == nil {
			for _, n := range sb.Info.RuntimeSpec.Linux.Namespaces {
				if n.Type == "network" && n.Path != "" {
					e.netnsPaths = append(e.netnsPaths, n.Path)
				}
			}
		}
	}
	_ = e.crictlCmd("rmp", "-fa").Run()
	for _, id := range ids {
		left, _ := filepath.Glob("/var/lib/cni/results/*-" + id + "-*")
		for _, f := range left {
			_ = os.Remove(f)
		}
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

func waitGone(f func(string) []int, arg string) {
	for i := 0; i < 50 && len(f(arg)) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
}

// cgroupDirs lists the pods' cgroup parent directories in every v1 hierarchy.
func (e *env) cgroupDirs() []string {
	m, _ := filepath.Glob("/sys/fs/cgroup/*" + e.cgParent)
	if fileExists("/sys/fs/cgroup" + e.cgParent) { // cgroup v2
		m = append(m, "/sys/fs/cgroup"+e.cgParent)
	}
	return m
}

func (e *env) cgroupProcs() []int {
	var pids []int
	seen := map[int]bool{}
	for _, d := range e.cgroupDirs() {
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

func (e *env) killCgroups() {
	for _, p := range e.cgroupProcs() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	for i := 0; i < 50 && len(e.cgroupProcs()) > 0; i++ {
		time.Sleep(100 * time.Millisecond)
	}
	for _, d := range e.cgroupDirs() {
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

// mountsUnder lists mount points at or below dir (host mount namespace).
func mountsUnder(dir string) []string {
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

func (e *env) unmountUnder() {
	for i := 0; i < 5; i++ {
		m := mountsUnder(e.dir)
		if len(m) == 0 {
			return
		}
		for j := len(m) - 1; j >= 0; j-- { // deepest (latest) first
			_ = syscall.Unmount(m[j], syscall.MNT_DETACH)
		}
	}
}

// processesMentioning lists live processes whose command line mentions s
// (containerd, its shims: `-address <dir>/containerd/containerd.sock`).
func processesMentioning(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !bytes.Contains(raw, []byte(s)) {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if i := bytes.LastIndexByte(stat, ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			continue
		}
		out = append(out, pid)
	}
	return out
}

func describe(pids []int) string {
	var b strings.Builder
	for _, p := range pids {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		fmt.Fprintf(&b, "%d %s\n", p, bytes.ReplaceAll(raw, []byte{0}, []byte{' '}))
	}
	return b.String()
}

func (e *env) tail(name string, n int) string {
	raw, _ := os.ReadFile(e.path(name))
	return "--- " + name + " (tail) ---\n" + lastLines(string(raw), n)
}

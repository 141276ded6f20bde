package runtime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Kubernetes mode of the runtime harness: a real kube-apiserver with the
// Subnet CRD, an OVN central and the real ovnhost-controller (the control
// plane), and on the node (the test's network namespace) ovnhost in
// Kubernetes mode, containerd, and a real kubelet built from
// k8s.io/kubernetes at the apiserver's version (tests/harness/kubeapi).
//
// The node's network namespace gets an underlay link ul0 (kubeNodeIP/24) to
// a "LAN" namespace (kubeLANIP), the node's default route; the API server
// (on the host's loopback) is proxied into the namespace's loopback at the
// same address, so the kubeconfig works unchanged for kubelet and ovnhost.
//
// kubelet on this machine (cgroup v1, a Firecracker VM, root without
// CAP_SYS_RESOURCE) runs with:
//   - failCgroupV1: false. Since 1.35 kubelet refuses cgroup v1 unless told.
//   - cgroupDriver cgroupfs (as containerd's runc options), cgroupRoot the
//     harness's /ovnhost-rt-<pid>-<n>: the QoS and pod cgroups live there,
//     removed by the teardown like the CRI tests' pods.
//   - failSwapOn: false (none here, but nothing to check either).
//   - its own network namespace (the node's) and a private mount namespace
//     (slave of the host's, so it sees containerd's netns mounts) in which the
//     kernel tunables it insists on (vm.overcommit_memory=1, kernel.panic=10,
//     kernel.panic_on_oops=1, ...) are bind-mounted files holding those values:
//     kubelet otherwise writes them host-wide, and panic_on_oops=1 would turn
//     any oops on this shared VM into a reboot. Only the ones that differ
//     from the host's are covered.
//   - everything it writes (root dir, certificates, pod logs, volume plugin
//     dir) under the test's directory, and an empty /var/lib and /var/log of
//     its own in that mount namespace (its device manager's socket
//     /var/lib/kubelet/device-plugins and its /var/log/containers symlinks
//     are compiled-in paths); its iptables canary chains go to the node's
//     namespace.
//   - image GC off (the images are imported, not pullable), eviction
//     thresholds near zero (a busy shared disk must not evict test pods).

const (
	kubeNodeName = "runtime-node"
	kubeNodeIP   = "192.168.100.1"
	kubeLANIP    = "192.168.100.254"
)

// controlPlane is what the node's ovnhost and kubelet talk to.
type controlPlane struct {
	api     *kubeapi.Server
	central *ovncentral.Central
	kc      kubernetes.Interface
	ctrlLog string
}

func startControlPlane(t testing.TB, dir string) *controlPlane {
	t.Helper()
	api := kubeapi.Start(t)
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-subnets.yaml"))
	central := ovncentral.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := central.WaitNorthd(ctx); err != nil {
		t.Fatal(err)
	}
	cp := &controlPlane{api: api, central: central, kc: kubernetes.NewForConfigOrDie(api.Config), ctrlLog: filepath.Join(dir, "controller.log")}
	ctrl := exec.Command(testenv.Binary(t, "ovnhost-controller"), "--kubeconfig="+api.Kubeconfig, "--ovn-nb-addr="+central.NB(),
		"--health-addr=", "--leader-elect=false")
	log, err := os.Create(cp.ctrlLog)
	if err != nil {
		t.Fatal(err)
	}
	ctrl.Stdout, ctrl.Stderr = log, log
	ctrl.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := ctrl.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = ctrl.Wait(); log.Close(); close(exited) }()
	t.Cleanup(func() {
		_ = ctrl.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			_ = ctrl.Process.Kill()
			<-exited
		}
	})
	return cp
}

// startKubeNode wires the node namespace to the LAN, proxies the API server
// into it, and starts ovnhost in Kubernetes mode (node name kubeNodeName,
// OVN southbound of the control plane, tunnel endpoint on ul0).
func (e *env) startKubeNode(cp *controlPlane) {
	t := e.t
	t.Helper()
	e.lan = e.ns + "l"
	run(t, "ip", "netns", "add", e.lan)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", e.lan).Run() })
	run(t, "ip", "-n", e.lan, "link", "set", "lo", "up")
	run(t, "ip", "link", "add", "ul0", "netns", e.ns, "type", "veth", "peer", "name", "lan0", "netns", e.lan)
	run(t, "ip", "-n", e.ns, "addr", "add", kubeNodeIP+"/24", "dev", "ul0")
	run(t, "ip", "-n", e.ns, "link", "set", "ul0", "up")
	run(t, "ip", "-n", e.ns, "route", "add", "default", "via", kubeLANIP)
	run(t, "ip", "-n", e.lan, "addr", "add", kubeLANIP+"/24", "dev", "lan0")
	run(t, "ip", "-n", e.lan, "link", "set", "lan0", "up")
	proxyInto(t, e.ns, strings.TrimPrefix(cp.api.URL, "https://"))
	e.nodeEnv = []string{"KUBECONFIG=" + cp.api.Kubeconfig, "OVN_SB_ADDR=" + cp.central.SB(), "IFACE=ul0"}
	e.nodeArgs = []string{"--node-name=" + kubeNodeName}
	e.central = cp.central.NB()
	e.startNode()
}

// proxyInto listens on addr inside network namespace ns and forwards every
// connection to addr in the test's own namespace.
func proxyInto(t testing.TB, ns, addr string) {
	t.Helper()
	var l net.Listener
	err := inNetns(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err })
	if err != nil {
		t.Fatalf("proxy of %s into %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go func() { _, _ = io.Copy(up, c) }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
}

// inNetns runs f on this goroutine's thread switched into network
// namespace name, and switches the thread back before unlocking it. The
// thread must not die locked: children forked from it earlier would get
// their Pdeathsig (the process harnesses use it) when it exits.
func inNetns(name string, f func() error) error {
	goruntime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		goruntime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		goruntime.UnlockOSThread()
		return err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		goruntime.UnlockOSThread()
		return err
	}
	defer func() {
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			goruntime.UnlockOSThread()
		} // else the thread stays locked and in ns: better than a wrong namespace elsewhere
	}()
	return f()
}

// ---------------------------------------------------------------- kubelet

type kubelet struct {
	cmd     *exec.Cmd
	exited  chan struct{}
	log     string
	healthz string
}

// kubeletTunables are the sysctls kubelet's container manager sets (and
// the values it wants) unless protectKernelDefaults makes it fail instead.
var kubeletTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// startKubelet writes kubelet's configuration and runs it in the node's
// network namespace against containerd, then waits until it answers
// /healthz and has registered the Node.
func (e *env) startKubelet(cp *controlPlane) {
	t := e.t
	t.Helper()
	bin := kubeapi.Kubelet(t)
	dir := e.path("kubelet")
	for _, d := range []string{"root", "pki", "pod-logs", "volume-plugins", "tunables"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	e.makeCgroupRoot()
	port, hport := freePortIn(t, e.ns), freePortIn(t, e.ns)
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
failSwapOn: false
cgroupDriver: cgroupfs
cgroupRoot: %[1]q
cgroupsPerQOS: true
enforceNodeAllocatable: ["pods"]
containerRuntimeEndpoint: %[2]q
address: 127.0.0.1
port: %[3]d
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %[4]d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
podLogsDir: %[5]q
volumePluginDir: %[6]q
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: "1Mi"
  nodefs.available: "1%%"
  nodefs.inodesFree: "1%%"
  imagefs.available: "1%%"
resolvConf: ""
oomScoreAdj: 0
serializeImagePulls: false
registerNode: true
maxPods: 250
kubeAPIQPS: 500
kubeAPIBurst: 1000
`, e.cgParent, "unix://"+e.sock(), port, hport, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel tunables kubelet would change on the host, as files
	// bind-mounted in its private mount namespace.
	var binds []string
	for key, want := range kubeletTunables {
		cur, err := os.ReadFile("/proc/sys/" + key)
		if err != nil || strings.TrimSpace(string(cur)) == want {
			continue
		}
		f := filepath.Join(dir, "tunables", strings.ReplaceAll(key, "/", "."))
		if err := os.WriteFile(f, []byte(want+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		binds = append(binds, fmt.Sprintf("mount --bind %s /proc/sys/%s", f, key))
	}
	// kubelet's device manager puts its socket in the compiled-in
	// /var/lib/kubelet/device-plugins whatever its root dir: it gets an
	// empty /var/lib of its own (nothing else of kubelet reads /var/lib).
	varLib := filepath.Join(dir, "var-lib")
	if err := os.MkdirAll(varLib, 0o755); err != nil {
		t.Fatal(err)
	}
	// Likewise its symlinks to container logs go to the compiled-in
	// /var/log/containers: an empty /var/log of its own too (the logs
	// themselves are in podLogsDir, which containerd writes).
	varLog := filepath.Join(dir, "var-log")
	if err := os.MkdirAll(varLog, 0o755); err != nil {
		t.Fatal(err)
	}
	binds = append(binds, fmt.Sprintf("mount --bind %s /var/lib", varLib), fmt.Sprintf("mount --bind %s /var/log", varLog))
	script := strings.Join(append(binds, `exec "$@"`), " && ")
	args := []string{"--net=/run/netns/" + e.ns, "--", lookPath(t, "unshare"), "--mount", "--propagation", "slave", "--",
		"/bin/sh", "-c", script, "kubelet", bin,
		"--config=" + cfgPath, "--kubeconfig=" + cp.api.Kubeconfig,
		"--root-dir=" + filepath.Join(dir, "root"), "--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + kubeNodeName, "--node-ip=" + kubeNodeIP, "--v=2"}
	logPath := e.path("kubelet.log")
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(lookPath(t, "nsenter"), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	k := &kubelet{cmd: cmd, exited: make(chan struct{}), log: logPath, healthz: fmt.Sprintf("127.0.0.1:%d", hport)}
	go func() { _ = cmd.Wait(); log.Close(); close(k.exited) }()
	e.kubelet = k
	// Runs before ovnhost and containerd stop (registered after them):
	// whatever pods a failed test left are torn down with their CNI DEL.
	t.Cleanup(func() { e.stopKubelet(); e.removeSandboxes() })

	// Registered: the Node exists and says which kubelet it runs.
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for {
		n, err := cp.kc.CoreV1().Nodes().Get(ctx, kubeNodeName, metav1.GetOptions{})
		if err == nil && n.Status.NodeInfo.KubeletVersion != "" {
			t.Logf("kubelet %s registered node %s (container runtime %s, kernel %s)", n.Status.NodeInfo.KubeletVersion, n.Name,
				n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KernelVersion)
			break
		}
		select {
		case <-k.exited:
			t.Fatalf("kubelet exited before registering node %s:\n%s", kubeNodeName, e.tail("kubelet.log", 40))
		case <-ctx.Done():
			t.Fatalf("kubelet did not register node %s within 120s (last: %v):\n%s", kubeNodeName, err, e.tail("kubelet.log", 40))
		case <-time.After(200 * time.Millisecond):
		}
	}
	// Healthy: its own /healthz (in the node's namespace; the connection is
	// dialed there, the request written by hand).
	deadline := time.Now().Add(60 * time.Second)
	for {
		var reply string
		err := inNetns(e.ns, func() error {
			c, err := net.DialTimeout("tcp", k.healthz, 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			if _, err := io.WriteString(c, "GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n"); err != nil {
				return err
			}
			b, err := io.ReadAll(c)
			reply = string(b)
			return err
		})
		if err == nil && strings.HasPrefix(reply, "HTTP/1.0 200") && strings.HasSuffix(reply, "ok") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kubelet healthz on %s not ok within 60s (%v, %q):\n%s", k.healthz, err, reply, e.tail("kubelet.log", 40))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// stopKubelet stops kubelet (the pods keep running; containerd owns them).
func (e *env) stopKubelet() {
	k := e.kubelet
	if k == nil {
		return
	}
	select {
	case <-k.exited:
		return
	default:
	}
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-k.exited:
	case <-time.After(30 * time.Second):
		_ = k.cmd.Process.Kill()
		<-k.exited
	}
}

// makeCgroupRoot creates the cgroup parent in every v1 hierarchy: kubelet
// refuses a cgroupRoot missing from any ("cgroup [...] has some missing
// paths"). A new cpuset cgroup starts with no CPUs and no memory nodes:
// they are copied from the parent, as clone_children would.
func (e *env) makeCgroupRoot() {
	e.t.Helper()
	if fileExists("/sys/fs/cgroup/cgroup.controllers") { // a cgroup v2 host: one hierarchy
		if err := os.MkdirAll("/sys/fs/cgroup"+e.cgParent, 0o755); err != nil {
			e.t.Fatalf("cgroup root: %v", err)
		}
		return
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if filepath.Base(h) == "unified" { // the v2 hierarchy of a hybrid host: unused by kubelet on v1
			continue
		}
		d := h + e.cgParent
		if err := os.MkdirAll(d, 0o755); err != nil {
			e.t.Fatalf("cgroup root %s: %v", d, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				v, err := os.ReadFile(filepath.Join(h, f))
				if err == nil {
					err = os.WriteFile(filepath.Join(d, f), v, 0o644)
				}
				if err != nil {
					e.t.Fatalf("cgroup root %s: %s: %v", d, f, err)
				}
			}
		}
	}
}

func freePortIn(t testing.TB, ns string) int {
	t.Helper()
	var port int
	if err := inNetns(ns, func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	}); err != nil {
		t.Fatal(err)
	}
	return port
}

// ---------------------------------------------------------------- pods

// kubePod is the Pod object for a busybox pod on the node.
func kubePod(name string, annotations map[string]string, command ...string) *corev1.Pod {
	grace, no := int64(1), false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      kubeNodeName,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name: "busybox", Image: busyboxRef, ImagePullPolicy: corev1.PullNever, Command: command,
			}},
		},
	}
}

// waitPodRunning waits until the pod is Running with a pod IP.
func (e *env) waitPodRunning(cp *controlPlane, name string, d time.Duration) *corev1.Pod {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last, got *corev1.Pod
	err := watchPods(ctx, cp.kc, metav1.ListOptions{FieldSelector: "metadata.name=" + name}, func(p *corev1.Pod) bool {
		last = p
		if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" {
			got = p
			return true
		}
		return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
	})
	switch {
	case got != nil:
		return got
	case last != nil && (last.Status.Phase == corev1.PodFailed || last.Status.Phase == corev1.PodSucceeded):
		e.t.Fatalf("pod %s ended %s: %s\n%s", name, last.Status.Phase, last.Status.Message, e.podEvents(cp, name))
	}
	phase := "unknown"
	if last != nil {
		phase = string(last.Status.Phase)
	}
	e.t.Fatalf("pod %s not Running within %s (phase %s: %v)\n%s\n%s\n%s", name, d, phase, err, e.podEvents(cp, name),
		e.tail("kubelet.log", 30), e.tail("ovnhost.log", 20))
	return nil
}

// watchPods calls f with every state of the default namespace's pods
// matching opts (first as listed, then as watched) until f returns true
// (nil) or ctx ends (its error). A watch the API server closes (it may, at
// any time) is resumed from the last resource version seen.
func watchPods(ctx context.Context, kc kubernetes.Interface, opts metav1.ListOptions, f func(*corev1.Pod) bool) error {
	for {
		list, err := kc.CoreV1().Pods("default").List(ctx, opts)
		if err != nil {
			return err
		}
		for i := range list.Items {
			if f(&list.Items[i]) {
				return nil
			}
		}
		wo := opts
		wo.ResourceVersion = list.ResourceVersion
		w, err := kc.CoreV1().Pods("default").Watch(ctx, wo)
		if err != nil {
			return err
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				break // e.g. resource version too old: list again
			}
			if p, ok := ev.Object.(*corev1.Pod); ok && f(p) {
				w.Stop()
				return nil
			}
		}
		w.Stop()
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// podEvents lists the events of a pod (what `kubectl describe` shows).
func (e *env) podEvents(cp *controlPlane, name string) string {
	evs, err := cp.kc.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return "events: " + err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "--- events of pod %s ---\n", name)
	for _, ev := range evs.Items {
		fmt.Fprintf(&b, "%s %s: %s\n", ev.Type, ev.Reason, ev.Message)
	}
	return b.String()
}

// podOf finds the CRI sandbox and busybox container kubelet made for a pod.
func (e *env) podOf(p *corev1.Pod) *pod {
	e.t.Helper()
	sel := "io.kubernetes.pod.uid=" + string(p.UID)
	id := e.cri("pods", "-q", "--label", sel)
	ctr := e.cri("ps", "-q", "--label", sel, "--name", "busybox")
	if id == "" || ctr == "" || strings.Contains(id, "\n") || strings.Contains(ctr, "\n") {
		e.t.Fatalf("pod %s: want one sandbox and one busybox container, got %q and %q", p.Name, id, ctr)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		e.t.Fatalf("pod %s: status.podIP %q: %v", p.Name, p.Status.PodIP, err)
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
	if err := json.Unmarshal([]byte(e.cri("inspectp", "-o", "json", id)), &sb); err != nil {
		e.t.Fatal(err)
	}
	out := &pod{name: p.Name, id: id, ctr: ctr, ip: ip}
	for _, n := range sb.Info.RuntimeSpec.Linux.Namespaces {
		if n.Type == "network" {
			out.netns = n.Path
		}
	}
	if out.netns == "" {
		e.t.Fatalf("pod %s: no network namespace path in the sandbox spec", p.Name)
	}
	e.netnsPaths = append(e.netnsPaths, out.netns)
	return out
}

// deletePods deletes pods and waits until kubelet has removed their
// sandboxes (CNI DEL done) and the API objects are gone.
func (e *env) deletePods(cp *controlPlane, names ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, n := range names {
		if err := cp.kc.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
	for _, n := range names {
		for {
			_, err := cp.kc.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if ctx.Err() != nil {
				e.t.Fatalf("pod %s not gone within 120s\n%s", n, e.tail("kubelet.log", 30))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// waitNoReadySandboxes waits until kubelet has stopped every sandbox (the
// CNI DEL is part of StopPodSandbox); kubelet removes stopped sandboxes
// later, in its minutely garbage collection.
func (e *env) waitNoReadySandboxes(d time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		out := e.cri("pods", "-q", "--state", "ready")
		if out == "" {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("sandboxes still ready %s after the pods were deleted:\n%s\n%s", d, e.cri("pods"), e.tail("kubelet.log", 30))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

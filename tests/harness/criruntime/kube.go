package criruntime

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
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

// The node in Kubernetes mode: its name, its address on ul0, and the
// LAN's end of ul0 (its default route).
const (
	KubeNodeName = "runtime-node"
	KubeNodeIP   = "192.168.100.1"
	KubeLANIP    = "192.168.100.254"
)

// ControlPlane is what the node's ovnhost and kubelet talk to.
type ControlPlane struct {
	API           *kubeapi.Server
	Central       *ovncentral.Central
	Kube          kubernetes.Interface
	ControllerLog string
	// ServiceCIDRs is the cluster's Service range ("": kube-apiserver's
	// default of the harness), given to the node as SVC_CIDR.
	ServiceCIDRs string
}

// ControlPlaneOptions are the cluster's ranges ("": the IPv4 defaults).
type ControlPlaneOptions struct {
	DefaultCIDR, JoinCIDR, ServiceCIDRs string
	// CRDs are more CRD manifests (paths from the repository root),
	// installed before the controller starts (it looks for the
	// NetworkAttachmentDefinition CRD at start).
	CRDs []string
}

// DualStack are the ranges of a dual-stack cluster.
var DualStack = ControlPlaneOptions{DefaultCIDR: "10.16.0.0/16,fd00:10:16::/64", JoinCIDR: "100.64.0.0/16,fd00:100:64::/112",
	ServiceCIDRs: "10.96.0.0/12,fd00:10:96::/112"}

// StartControlPlane starts a kube-apiserver with the Subnet CRD, an OVN
// central and ovnhost-controller (its log in dir), stopped at cleanup.
func StartControlPlane(t testing.TB, dir string) *ControlPlane {
	t.Helper()
	return StartControlPlaneWith(t, dir, ControlPlaneOptions{})
}

// StartControlPlaneWith is StartControlPlane with the cluster's ranges.
func StartControlPlaneWith(t testing.TB, dir string, o ControlPlaneOptions) *ControlPlane {
	t.Helper()
	api := kubeapi.StartWith(t, kubeapi.Options{ServiceCIDRs: o.ServiceCIDRs})
	api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-subnets.yaml"))
	for _, c := range o.CRDs {
		api.InstallCRD(t, filepath.Join(testenv.RepoRoot(), c))
	}
	central := ovncentral.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := central.WaitNorthd(ctx); err != nil {
		t.Fatal(err)
	}
	cp := &ControlPlane{API: api, Central: central, Kube: kubernetes.NewForConfigOrDie(api.Config), ControllerLog: filepath.Join(dir, "controller.log"),
		ServiceCIDRs: o.ServiceCIDRs}
	args := []string{"--kubeconfig=" + api.Kubeconfig, "--ovn-nb-addr=" + central.NB(), "--health-addr=", "--leader-elect=false"}
	for flag, v := range map[string]string{"--default-cidr=": o.DefaultCIDR, "--node-switch-cidr=": o.JoinCIDR, "--service-cluster-ip-range=": o.ServiceCIDRs} {
		if v != "" {
			args = append(args, flag+v)
		}
	}
	ctrl := proc.MustStart(t, proc.Spec{Name: "ovnhost-controller", Path: testenv.Binary(t, "ovnhost-controller"),
		Args: args,
		Env:  os.Environ(), Log: cp.ControllerLog, Pdeathsig: true})
	t.Cleanup(func() { ctrl.Terminate(20 * time.Second) })
	return cp
}

// StartKubeNode wires the node namespace to the LAN, proxies the API server
// into it, and starts ovnhost in Kubernetes mode (node name kubeNodeName,
// OVN southbound of the control plane, tunnel endpoint on ul0).
func (e *Env) StartKubeNode(cp *ControlPlane) {
	t := e.t
	t.Helper()
	e.LAN = e.NS + "l"
	netns.Add(t, e.LAN)
	netns.Run(t, "ip", "link", "add", "ul0", "netns", e.NS, "type", "veth", "peer", "name", "lan0", "netns", e.LAN)
	netns.Run(t, "ip", "-n", e.NS, "addr", "add", KubeNodeIP+"/24", "dev", "ul0")
	netns.Run(t, "ip", "-n", e.NS, "link", "set", "ul0", "up")
	netns.Run(t, "ip", "-n", e.NS, "route", "add", "default", "via", KubeLANIP)
	netns.Run(t, "ip", "-n", e.LAN, "addr", "add", KubeLANIP+"/24", "dev", "lan0")
	netns.Run(t, "ip", "-n", e.LAN, "link", "set", "lan0", "up")
	netns.ProxyInto(t, e.NS, strings.TrimPrefix(cp.API.URL, "https://"))
	e.NodeEnv = []string{"KUBECONFIG=" + cp.API.Kubeconfig, "OVN_SB_ADDR=" + cp.Central.SB(), "IFACE=ul0"}
	if cp.ServiceCIDRs != "" {
		e.NodeEnv = append(e.NodeEnv, "SVC_CIDR="+cp.ServiceCIDRs)
	}
	e.NodeArgs = []string{"--node-name=" + KubeNodeName}
	e.CentralNB = cp.Central.NB()
	e.StartNode()
}

// ---------------------------------------------------------------- kubelet

// Kubelet is the node's kubelet.
type Kubelet struct {
	proc    *proc.Process
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

// StartKubelet writes kubelet's configuration and runs it in the node's
// network namespace against containerd, then waits until it answers
// /healthz and has registered the Node.
func (e *Env) StartKubelet(cp *ControlPlane) {
	t := e.t
	t.Helper()
	bin := kubeapi.Kubelet(t)
	dir := e.Path("kubelet")
	e.makeKubeletDirs(dir)
	e.MakeCgroupRoot()
	port, hport := netns.FreePort(t, e.NS), netns.FreePort(t, e.NS)
	cfgPath := e.writeKubeletConfig(dir, port, hport)
	script := e.kubeletMountScript(dir)
	args := e.kubeletArgs(cp, bin, dir, cfgPath, script)
	k := e.startKubeletProcess(args, hport)
	e.waitNodeRegistered(cp, k)
	e.waitKubeletHealthy(k)
}

// makeKubeletDirs creates the directories kubelet writes under dir.
func (e *Env) makeKubeletDirs(dir string) {
	e.t.Helper()
	for _, d := range []string{"root", "pki", "pod-logs", "volume-plugins", "tunables"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			e.t.Fatal(err)
		}
	}
}

// kubeletConfigTemplate is the KubeletConfiguration; its verbs are the
// cgroup root, the CRI endpoint, the port, the healthz port, the pod logs
// directory and the volume plugin directory.
const kubeletConfigTemplate = `apiVersion: kubelet.config.k8s.io/v1beta1
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
`

// writeKubeletConfig writes kubelet's configuration file in dir and
// returns its path.
func (e *Env) writeKubeletConfig(dir string, port, hport int) string {
	e.t.Helper()
	cfg := fmt.Sprintf(kubeletConfigTemplate, e.CgroupParent, "unix://"+e.Sock(), port, hport, filepath.Join(dir, "pod-logs"), filepath.Join(dir, "volume-plugins"))
	cfgPath := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return cfgPath
}

// kubeletMountScript is the shell command line that sets up kubelet's
// private mount namespace (the tunables' and /var/lib's and /var/log's bind
// mounts), then execs kubelet.
func (e *Env) kubeletMountScript(dir string) string {
	e.t.Helper()
	binds := e.bindKubeletTunables(dir)
	binds = append(binds, e.bindKubeletVarDirs(dir)...)
	return strings.Join(append(binds, `exec "$@"`), " && ")
}

// bindKubeletTunables writes the kernel tunables kubelet would change on
// the host as files in dir and returns the mounts that cover them.
func (e *Env) bindKubeletTunables(dir string) []string {
	e.t.Helper()
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
			e.t.Fatal(err)
		}
		binds = append(binds, fmt.Sprintf("mount --bind %s /proc/sys/%s", f, key))
	}
	return binds
}

// bindKubeletVarDirs creates kubelet's own empty /var/lib and /var/log in
// dir and returns the mounts that put them in place.
func (e *Env) bindKubeletVarDirs(dir string) []string {
	e.t.Helper()
	// kubelet's device manager puts its socket in the compiled-in
	// /var/lib/kubelet/device-plugins whatever its root dir: it gets an
	// empty /var/lib of its own (nothing else of kubelet reads /var/lib).
	varLib := filepath.Join(dir, "var-lib")
	if err := os.MkdirAll(varLib, 0o755); err != nil {
		e.t.Fatal(err)
	}
	// Likewise its symlinks to container logs go to the compiled-in
	// /var/log/containers: an empty /var/log of its own too (the logs
	// themselves are in podLogsDir, which containerd writes).
	varLog := filepath.Join(dir, "var-log")
	if err := os.MkdirAll(varLog, 0o755); err != nil {
		e.t.Fatal(err)
	}
	return []string{fmt.Sprintf("mount --bind %s /var/lib", varLib), fmt.Sprintf("mount --bind %s /var/log", varLog)}
}

// kubeletArgs is nsenter's command line: into the node's network
// namespace, unshare a slave mount namespace, run script there, which
// execs kubelet (bin) with its flags.
func (e *Env) kubeletArgs(cp *ControlPlane, bin, dir, cfgPath, script string) []string {
	t := e.t
	t.Helper()
	return []string{"--net=/run/netns/" + e.NS, "--", LookPath(t, "unshare"), "--mount", "--propagation", "slave", "--",
		"/bin/sh", "-c", script, "kubelet", bin,
		"--config=" + cfgPath, "--kubeconfig=" + cp.API.Kubeconfig,
		"--root-dir=" + filepath.Join(dir, "root"), "--cert-dir=" + filepath.Join(dir, "pki"),
		"--hostname-override=" + KubeNodeName, "--node-ip=" + KubeNodeIP, "--v=2"}
}

// startKubeletProcess starts kubelet through nsenter with args, its log in
// kubelet.log, and registers its teardown.
func (e *Env) startKubeletProcess(args []string, hport int) *Kubelet {
	t := e.t
	t.Helper()
	k := &Kubelet{healthz: fmt.Sprintf("127.0.0.1:%d", hport)}
	k.proc = proc.MustStart(t, proc.Spec{Name: "kubelet", Path: LookPath(t, "nsenter"), Args: args,
		Env: []string{"PATH=" + os.Getenv("PATH")}, Log: e.Path("kubelet.log"), Pdeathsig: true})
	e.Kubelet = k
	// Runs before ovnhost and containerd stop (registered after them):
	// whatever pods a failed test left are torn down with their CNI DEL.
	t.Cleanup(func() { e.StopKubelet(); e.RemoveSandboxes() })
	return k
}

// waitNodeRegistered waits until the Node exists and says which kubelet it
// runs.
func (e *Env) waitNodeRegistered(cp *ControlPlane, k *Kubelet) {
	t := e.t
	t.Helper()
	// Registered: the Node exists and says which kubelet it runs.
	err := proc.Poll("node "+KubeNodeName+" registered by kubelet", 120*time.Second, 200*time.Millisecond, k.proc.Exited(), func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n, err := cp.Kube.CoreV1().Nodes().Get(ctx, KubeNodeName, metav1.GetOptions{})
		if err != nil || n.Status.NodeInfo.KubeletVersion == "" {
			return false, err
		}
		t.Logf("kubelet %s registered node %s (container runtime %s, kernel %s)", n.Status.NodeInfo.KubeletVersion, n.Name,
			n.Status.NodeInfo.ContainerRuntimeVersion, n.Status.NodeInfo.KernelVersion)
		return true, nil
	})
	if err != nil {
		t.Fatalf("kubelet: %v:\n%s", err, e.Tail("kubelet.log", 40))
	}
}

// waitKubeletHealthy waits until kubelet answers ok on its own /healthz.
func (e *Env) waitKubeletHealthy(k *Kubelet) {
	t := e.t
	t.Helper()
	// Healthy: its own /healthz (in the node's namespace; the connection is
	// dialed there, the request written by hand).
	var reply string
	err := proc.Poll("kubelet healthz ok on "+k.healthz, 60*time.Second, 200*time.Millisecond, k.proc.Exited(), func() (bool, error) {
		err := netns.Do(e.NS, func() error {
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
		return err == nil && strings.HasPrefix(reply, "HTTP/1.0 200") && strings.HasSuffix(reply, "ok"), err
	})
	if err != nil {
		t.Fatalf("%v (%q):\n%s", err, reply, e.Tail("kubelet.log", 40))
	}
}

// StopKubelet stops kubelet (the pods keep running; containerd owns them).
func (e *Env) StopKubelet() {
	if e.Kubelet != nil {
		e.Kubelet.proc.Terminate(30 * time.Second)
	}
}

// MakeCgroupRoot creates the cgroup parent in every v1 hierarchy: kubelet
// refuses a cgroupRoot missing from any ("cgroup [...] has some missing
// paths"). A new cpuset cgroup starts with no CPUs and no memory nodes:
// they are copied from the parent, as clone_children would.
func (e *Env) MakeCgroupRoot() {
	e.t.Helper()
	if fileExists("/sys/fs/cgroup/cgroup.controllers") { // a cgroup v2 host: one hierarchy
		if err := os.MkdirAll("/sys/fs/cgroup"+e.CgroupParent, 0o755); err != nil {
			e.t.Fatalf("cgroup root: %v", err)
		}
		return
	}
	hier, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hier {
		if filepath.Base(h) == "unified" { // the v2 hierarchy of a hybrid host: unused by kubelet on v1
			continue
		}
		d := h + e.CgroupParent
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

// ---------------------------------------------------------------- pods

// KubePod is the Pod object for a busybox pod on the node.
func KubePod(name string, annotations map[string]string, command ...string) *corev1.Pod {
	grace, no := int64(1), false
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: annotations},
		Spec: corev1.PodSpec{
			NodeName:                      KubeNodeName,
			TerminationGracePeriodSeconds: &grace,
			AutomountServiceAccountToken:  &no,
			EnableServiceLinks:            &no,
			Containers: []corev1.Container{{
				Name: "busybox", Image: BusyboxRef, ImagePullPolicy: corev1.PullNever, Command: command,
			}},
		},
	}
}

// WaitPodRunning waits until the pod is Running with a pod IP.
func (e *Env) WaitPodRunning(cp *ControlPlane, name string, d time.Duration) *corev1.Pod {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var last, got *corev1.Pod
	err := WatchPods(ctx, cp.Kube, metav1.ListOptions{FieldSelector: "metadata.name=" + name}, func(p *corev1.Pod) bool {
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
		e.t.Fatalf("pod %s ended %s: %s\n%s", name, last.Status.Phase, last.Status.Message, e.PodEvents(cp, name))
	}
	phase := "unknown"
	if last != nil {
		phase = string(last.Status.Phase)
	}
	e.t.Fatalf("pod %s not Running within %s (phase %s: %v)\n%s\n%s\n%s", name, d, phase, err, e.PodEvents(cp, name),
		e.Tail("kubelet.log", 30), e.Tail("ovnhost.log", 20))
	return nil
}

// WatchPods calls f with every state of the default namespace's pods
// matching opts (first as listed, then as watched) until f returns true
// (nil) or ctx ends (its error). A watch the API server closes (it may, at
// any time) is resumed from the last resource version seen.
func WatchPods(ctx context.Context, kc kubernetes.Interface, opts metav1.ListOptions, f func(*corev1.Pod) bool) error {
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

// PodEvents lists the events of a pod (what `kubectl describe` shows).
func (e *Env) PodEvents(cp *ControlPlane, name string) string {
	evs, err := cp.Kube.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
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

// PodOf finds the CRI sandbox and busybox container kubelet made for a pod.
func (e *Env) PodOf(p *corev1.Pod) *Pod {
	e.t.Helper()
	sel := "io.kubernetes.pod.uid=" + string(p.UID)
	id := e.CRI("pods", "-q", "--label", sel)
	ctr := e.CRI("ps", "-q", "--label", sel, "--name", "busybox")
	if id == "" || ctr == "" || strings.Contains(id, "\n") || strings.Contains(ctr, "\n") {
		e.t.Fatalf("pod %s: want one sandbox and one busybox container, got %q and %q", p.Name, id, ctr)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		e.t.Fatalf("pod %s: status.podIP %q: %v", p.Name, p.Status.PodIP, err)
	}
	out := &Pod{Name: p.Name, ID: id, Ctr: ctr, IP: ip, Netns: e.InspectSandbox(id).Netns}
	if out.Netns == "" {
		e.t.Fatalf("pod %s: no network namespace path in the sandbox spec", p.Name)
	}
	e.NetnsPaths = append(e.NetnsPaths, out.Netns)
	return out
}

// DeletePods deletes pods and waits until kubelet has removed their
// sandboxes (CNI DEL done) and the API objects are gone.
func (e *Env) DeletePods(cp *ControlPlane, names ...string) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for _, n := range names {
		if err := cp.Kube.CoreV1().Pods("default").Delete(ctx, n, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			e.t.Fatal(err)
		}
	}
	for _, n := range names {
		dl, _ := ctx.Deadline()
		if err := proc.Poll("deletion of pod "+n, time.Until(dl), 100*time.Millisecond, nil, func() (bool, error) {
			_, err := cp.Kube.CoreV1().Pods("default").Get(ctx, n, metav1.GetOptions{})
			return apierrors.IsNotFound(err), err
		}); err != nil {
			e.t.Fatalf("%v\n%s", err, e.Tail("kubelet.log", 30))
		}
	}
}

// WaitNoReadySandboxes waits until kubelet has stopped every sandbox (the
// CNI DEL is part of StopPodSandbox); kubelet removes stopped sandboxes
// later, in its minutely garbage collection.
func (e *Env) WaitNoReadySandboxes(d time.Duration) {
	e.t.Helper()
	if err := proc.Poll("sandbox stopped by kubelet", d, 200*time.Millisecond, nil, func() (bool, error) {
		return e.CRI("pods", "-q", "--state", "ready") == "", nil
	}); err != nil {
		e.t.Fatalf("%v: still ready after the pods were deleted:\n%s\n%s", err, e.CRI("pods"), e.Tail("kubelet.log", 30))
	}
}

package controller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	libovsdbclient "github.com/ovn-kubernetes/libovsdb/client"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/notify"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// env is one real cluster control plane: apiserver+etcd, OVN central, and
// watchers that tests wait on (pods informer, subnets informer, NB cache).
type env struct {
	t       testing.TB
	srv     *kubeapi.Server
	central *ovncentral.Central
	kc      kubernetes.Interface
	dc      dynamic.Interface
	nb      *ovnnb.Client // the test's own NB connection, for assertions

	pods    cache.SharedIndexInformer
	evs     cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	subnets cache.SharedIndexInformer
	changes notify.Notifier
}

func newEnv(t testing.TB) *env {
	t.Helper()
	testenv.RequireCommands(t, "ovsdb-server", "ovn-northd")
	return newEnvWith(t, ovncentral.Start(t))
}

// newEnvWith is newEnv around a given OVN central (e.g. ovncentral.StartSSL).
func newEnvWith(t testing.TB, central *ovncentral.Central) *env {
	t.Helper()
	srv := kubeapi.Start(t)
	srv.InstallCRD(t, crdPath())
	srv.InstallCRD(t, ipCRDPath())
	e := &env{t: t, srv: srv, central: central}
	e.kc = kubernetes.NewForConfigOrDie(srv.Config)
	e.dc = dynamic.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: central.NB(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PortGroups: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nb.Close)
	e.nb = nb
	nb.Raw().Cache().AddEventHandler(e.changes.OVSDB())
	f := informers.NewSharedInformerFactory(e.kc, 0)
	e.pods = f.Core().V1().Pods().Informer()
	h := e.changes.Informer()
	_, _ = e.pods.AddEventHandler(h)
	e.evs = f.Core().V1().Events().Informer()
	_, _ = e.evs.AddEventHandler(h)
	e.nodes = f.Core().V1().Nodes().Informer()
	_, _ = e.nodes.AddEventHandler(h)
	e.subnets = cache.NewSharedIndexInformer(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			return e.dc.Resource(kubeovnv1.SubnetGVR).List(ctx, o)
		},
		WatchFuncWithContext: e.dc.Resource(kubeovnv1.SubnetGVR).Watch,
	}, &unstructured.Unstructured{}, 0, cache.Indexers{})
	_, _ = e.subnets.AddEventHandler(h)
	f.Start(ctx.Done())
	go e.subnets.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), e.pods.HasSynced, e.evs.HasSynced, e.nodes.HasSynced, e.subnets.HasSynced) {
		t.Fatal("test informers did not sync")
	}
	return e
}

func (e *env) poke() { e.changes.Poke() }

// waitFor re-evaluates cond on every pod, node, event, subnet or NB change until it holds
// or the deadline passes; then it fails naming what was awaited and the last state.
func (e *env) waitFor(d time.Duration, what string, cond func() (bool, string)) {
	e.t.Helper()
	e.changes.WaitFor(e.t, d, what, cond)
}

// startController runs the controller in this process until the test ends.
func (e *env) startController(opts ...func(*kube.Options)) context.CancelFunc {
	e.t.Helper()
	o := kube.Options{Config: kube.Config{Rest: e.srv.Config, NBEndpoints: e.central.NB(),
		Logger: slog.New(slog.NewTextHandler(testWriter{e.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}}
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kube.Run(ctx, o) }()
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			e.t.Errorf("controller: %v", err)
		}
	}
	var once sync.Once
	e.t.Cleanup(func() { once.Do(stop) })
	return func() { once.Do(stop) }
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// controllerBinary builds ovnhost-controller once per test binary.
var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func controllerBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("OVNHOST_CONTROLLER_BIN"); p != "" {
		return p // another build (A/B benchmark against a baseline commit)
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "ovnhost-ctl-bin")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "ovnhost-controller")
		out, err := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", binPath, "github.com/ovnhost/ovnhost/controller/cmd/ovnhost-controller").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build ovnhost-controller: %v: %s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// ctrlProc is a controller running as its own process (so it can be SIGKILLed).
type ctrlProc struct{ *proc.Process }

// waitLine waits for a log line containing s (already printed or to come).
func (p ctrlProc) waitLine(t testing.TB, s string, d time.Duration) string {
	t.Helper()
	l, err := p.WaitLine(s, d)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func (e *env) startControllerProcess(extra ...string) ctrlProc {
	e.t.Helper()
	bin := controllerBinary(e.t)
	args := append([]string{"--kubeconfig", e.srv.Kubeconfig, "--ovn-nb-addr", e.central.NB(), "--health-addr", "",
		"--leader-elect=true", "--lease-namespace", "kube-system", "--identity", "test-controller"}, extra...)
	if x := os.Getenv("OVNHOST_CONTROLLER_ARGS"); x != "" { // e.g. "--health-addr=127.0.0.1:10660 --profiling" when profiling a benchmark
		args = append(args, strings.Fields(x)...)
	}
	p, err := proc.Start(proc.Spec{Name: "controller", Path: bin, Args: args, Env: os.Environ(), Pdeathsig: true, Lines: true,
		OnLine: func(line string) {
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "level=WARN") || strings.Contains(line, "connected to OVN") {
				e.t.Log("controller: " + line)
			}
		}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(p.Kill)
	return ctrlProc{p}
}

func (p ctrlProc) kill() { p.Kill() }

// waitReady waits for the "controller ready" log line.
func (p ctrlProc) waitReady(t testing.TB, d time.Duration) string {
	t.Helper()
	return p.waitLine(t, "controller ready", d)
}

// --- readers of what a user would look at ---

func (e *env) podList(ns string) []*corev1.Pod {
	var out []*corev1.Pod
	for _, o := range e.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if ns == "" || p.Namespace == ns {
			out = append(out, p)
		}
	}
	return out
}

func annotated(p *corev1.Pod) bool {
	return p.Annotations[annotations.Allocated] == "true" && p.Annotations[annotations.IPAddress] != "" && p.Annotations[annotations.Routed] == "true"
}

func (e *env) lsp(name string) (*nbdb.LogicalSwitchPort, bool) {
	l := &nbdb.LogicalSwitchPort{Name: name}
	if err := e.nb.Raw().Get(context.Background(), l); err != nil {
		return nil, false
	}
	return l, true
}

func (e *env) lsps() []nbdb.LogicalSwitchPort {
	var ls []nbdb.LogicalSwitchPort
	_ = e.nb.Raw().List(context.Background(), &ls)
	return ls
}

// podPortMatches: the pod's LSP exists on its switch with MAC+IP equal to the annotations.
func (e *env) podPortMatches(p *corev1.Pod) (bool, string) {
	l, ok := e.lsp(p.Name + "." + p.Namespace)
	if !ok {
		return false, "no logical switch port " + p.Name + "." + p.Namespace
	}
	want := p.Annotations[annotations.MACAddress] + " " + strings.ReplaceAll(p.Annotations[annotations.IPAddress], ",", " ")
	if len(l.Addresses) != 1 || l.Addresses[0] != want || len(l.PortSecurity) != 1 || l.PortSecurity[0] != want {
		return false, fmt.Sprintf("port %s addresses %v port_security %v, want %q", l.Name, l.Addresses, l.PortSecurity, want)
	}
	if l.ExternalIDs["vendor"] != "ovnhost" || l.ExternalIDs["ls"] != p.Annotations[annotations.LogicalSwitch] {
		return false, fmt.Sprintf("port %s external_ids %v", l.Name, l.ExternalIDs)
	}
	return true, ""
}

func (e *env) subnet(name string) *kubeovnv1.Subnet {
	o, ok, _ := e.subnets.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	s, _ := kubeovnv1.FromUnstructured(o.(*unstructured.Unstructured))
	return s
}

func cond(s *kubeovnv1.Subnet, typ string) *kubeovnv1.Condition {
	if s == nil {
		return nil
	}
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == typ {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

func (e *env) waitSubnetReady(name string) {
	e.t.Helper()
	e.waitFor(60*time.Second, "Subnet "+name+" Ready=True", func() (bool, string) {
		s := e.subnet(name)
		c := cond(s, "Ready")
		if c != nil && c.Status == "True" {
			return true, ""
		}
		return false, fmt.Sprintf("%+v", s)
	})
}

func (e *env) createNode(name, internalIP string) {
	e.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	n, err := e.kc.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	// The controller may annotate the node meanwhile: retry on a conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: internalIP}}
		_, err := e.kc.CoreV1().Nodes().UpdateStatus(context.Background(), n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			n, _ = e.kc.CoreV1().Nodes().Get(context.Background(), name, metav1.GetOptions{})
		}
		return err
	})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) createNamespace(name string, ann map[string]string) {
	e.t.Helper()
	_, err := e.kc.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: ann}}, metav1.CreateOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
}

func podSpec(ns, name, node string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: ann},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}}}
}

func (e *env) createPod(ns, name, node string, ann map[string]string) {
	e.t.Helper()
	if _, err := e.kc.CoreV1().Pods(ns).Create(context.Background(), podSpec(ns, name, node, ann), metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// createPods creates n pods with `workers` concurrent clients; name(i), node(i), ann(i).
func (e *env) createPods(ns string, n, workers int, name func(int) string, node func(int) string, ann func(int) map[string]string) error {
	return concurrently(n, workers, func(i int) error {
		var a map[string]string
		if ann != nil {
			a = ann(i)
		}
		_, err := e.kc.CoreV1().Pods(ns).Create(context.Background(), podSpec(ns, name(i), node(i), a), metav1.CreateOptions{})
		return err
	})
}

// concurrently runs f(i) for every i < n on `workers` goroutines and
// returns the first error.
func concurrently(n, workers int, f func(i int) error) error {
	ch := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := f(i); err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := 0; i < n; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	close(errs)
	return <-errs
}

// events returns the reasons and messages of events about a pod.
func (e *env) events(ns, pod string) []string {
	var out []string
	for _, o := range e.evs.GetStore().List() {
		ev := o.(*corev1.Event)
		if ev.InvolvedObject.Namespace == ns && ev.InvolvedObject.Name == pod {
			out = append(out, ev.Reason+": "+ev.Message)
		}
	}
	return out
}

func inCIDR(ipStr, cidr string) bool {
	ip, err := netip.ParseAddr(ipStr)
	if err != nil {
		return false
	}
	return netip.MustParsePrefix(cidr).Contains(ip)
}

// sbPortBindings lists the southbound Port_Binding logical ports (read with libovsdb).
func (e *env) sbPortBindings(t testing.TB) map[string]bool {
	t.Helper()
	dbm, err := sbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cl, err := libovsdbclient.NewOVSDBClient(dbm, libovsdbclient.WithEndpoint(e.central.SB()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Monitor(ctx, cl.NewMonitor(libovsdbclient.WithTable(&sbdb.PortBinding{}))); err != nil {
		t.Fatal(err)
	}
	var pbs []sbdb.PortBinding
	if err := cl.List(ctx, &pbs); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, pb := range pbs {
		out[pb.LogicalPort] = true
	}
	return out
}

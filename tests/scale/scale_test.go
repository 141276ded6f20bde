//go:build scale

package scale_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	libovsdbclient "github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/controller/netpol"
	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/harness/svgplot"
	"github.com/ovnhost/ovnhost/tests/scale"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

var (
	stepsFlag   = flag.String("scale.steps", "50:5000:1000:500,100:10000:2000:1000,250:20000:5000:2000,500:30000:5000:2000", "steps as nodes:pods:services:policies (cumulative totals), comma-separated; pods are rounded up to whole namespaces of 200")
	outFlag     = flag.String("scale.out", "", "directory for scale.csv, scale.json, the SVGs and profiles (default <repo>/_out/scale)")
	profileFlag = flag.Int("scale.profile", 0, "seconds of controller CPU profile to take at the start of each step's pod burst (0: none); heap profiles are always taken")
)

const (
	podsPerNS  = 200
	labels     = 10 // pod i carries app=a<i%10>
	endpoints  = 10 // backends per Service
	workers    = 32
	simNodePfx = "sim-"
)

type step struct{ Nodes, Pods, Services, Policies int }

func parseSteps(s string) ([]step, error) {
	var out []step
	for _, f := range strings.Split(s, ",") {
		var st step
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%d:%d:%d:%d", &st.Nodes, &st.Pods, &st.Services, &st.Policies); err != nil {
			return nil, fmt.Errorf("step %q: want nodes:pods:services:policies: %v", f, err)
		}
		st.Pods = (st.Pods + podsPerNS - 1) / podsPerNS * podsPerNS
		if len(out) > 0 {
			p := out[len(out)-1]
			if st.Nodes < p.Nodes || st.Pods < p.Pods || st.Services < p.Services || st.Policies < p.Policies {
				return nil, fmt.Errorf("step %q: totals only grow", f)
			}
		}
		out = append(out, st)
	}
	return out, nil
}

// row is one step's figures (CSV and JSON).
type row struct {
	Step                                       int
	Nodes, Pods, Services, Policies            int
	NodeBurst                                  int
	NodeConvergeMs                             float64
	PodBurst                                   int
	PodConvergeMs, PodsPerSec, CreatesPerSec   float64
	SvcBurst                                   int
	SvcConvergeMs, SvcPerSec                   float64
	NPBurst                                    int
	NPConvergeMs, NPPerSec                     float64
	NorthdCatchUpMs                            float64
	NorthdChangeAvgMs, NorthdChangeMaxMs       float64
	NorthdChangeSamples                        int
	CtrlRSSMiB, CtrlHWMMiB, CtrlCPUSec         float64
	NorthdCPUSec, NorthdRSSMiB                 float64
	NBRSSMiB, SBRSSMiB                         float64
	NBMiB, SBMiB                               float64
	RestartReadyMs, IPAMRebuildMs, CacheSyncMs float64
	RestartRSSMiB                              float64
	StepSec                                    float64
}

// seen records when a condition first held for each key, and wakes waiters.
type seen struct {
	mu   sync.Mutex
	at   map[string]time.Time
	wake chan struct{}
}

func newSeen() *seen { return &seen{at: map[string]time.Time{}, wake: make(chan struct{}, 1)} }

func (s *seen) mark(key string) {
	s.mu.Lock()
	if _, ok := s.at[key]; !ok {
		s.at[key] = time.Now()
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *seen) has(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.at[key]
	return ok
}

// waitAll waits until every key is in every set and returns the latest
// time any of them was first seen; it fails naming what is missing. Keys
// found done are not looked at again, so a burst costs the waiter O(keys)
// plus one look per wake-up, not O(keys) per event.
func waitAll(b *testing.B, what string, d time.Duration, keys []string, sets ...*seen) time.Time {
	b.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(time.Second) // a safety net: every mark also wakes
	defer tick.Stop()
	done := func(k string) bool {
		for _, s := range sets {
			if !s.has(k) {
				return false
			}
		}
		return true
	}
	next := 0
	for {
		for next < len(keys) && done(keys[next]) {
			next++
		}
		if next == len(keys) {
			break
		}
		if time.Now().After(deadline) {
			var missing []string
			for _, k := range keys[next:] {
				if !done(k) {
					missing = append(missing, k)
				}
			}
			b.Fatalf("%s: %d of %d not converged after %s (first: %v)", what, len(missing), len(keys), d, missing[:min(5, len(missing))])
		}
		select {
		case <-sets[0].wake:
		case <-sets[len(sets)-1].wake:
		case <-tick.C:
		}
	}
	var last time.Time
	for _, k := range keys {
		for _, s := range sets {
			s.mu.Lock()
			t := s.at[k]
			s.mu.Unlock()
			if t.After(last) {
				last = t
			}
		}
	}
	return last
}

// sim is the simulated cluster.
type sim struct {
	b       *testing.B
	srv     *kubeapi.Server
	central *ovncentral.Central
	kc      kubernetes.Interface
	nb, sb  libovsdbclient.Client
	pods    cache.SharedIndexInformer
	ctrl    *proc.Process
	health  string
	out     string

	podAnn, podLSP, nodeAnn, nodeLSP, lbFull, pgFull *seen
	pgMu                                             sync.Mutex
	pgWant                                           map[string]int // port group -> ports expected
}

func ns(i int) string { return fmt.Sprintf("scale-%03d", i) }

func BenchmarkScale(b *testing.B) {
	steps, err := parseSteps(*stepsFlag)
	if err != nil {
		b.Fatal(err)
	}
	testenv.RequireCommands(b, "ovsdb-server", "ovn-northd", "ovn-appctl")
	out := *outFlag
	if out == "" {
		out = filepath.Join(testenv.RepoRoot(), "_out", "scale")
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		b.Fatal(err)
	}
	s := &sim{b: b, out: out, podAnn: newSeen(), podLSP: newSeen(), nodeAnn: newSeen(), nodeLSP: newSeen(),
		lbFull: newSeen(), pgFull: newSeen(), pgWant: map[string]int{}}
	s.central = ovncentral.Start(b)
	s.srv = kubeapi.Start(b)
	repo := testenv.RepoRoot()
	s.srv.InstallCRD(b, filepath.Join(repo, "packaging", "kubernetes", "base", "crd-subnets.yaml"))
	s.srv.InstallCRD(b, filepath.Join(repo, "packaging", "kubernetes", "base", "crd-ips.yaml"))
	s.kc = kubernetes.NewForConfigOrDie(s.srv.Config)
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	s.watch(ctx)
	s.startController()
	if _, err := s.ctrl.WaitLine("controller ready", 120*time.Second); err != nil {
		b.Fatal(err)
	}
	if _, err := s.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	var rows []row
	prev := step{}
	for i, st := range steps {
		r := s.runStep(ctx, i+1, prev, st)
		rows = append(rows, r)
		prev = st
		s.report(r)
		s.write(rows) // after every step: a run cut short keeps what it measured
	}
	b.StopTimer()
}

func (s *sim) watch(ctx context.Context) {
	b := s.b
	f := informers.NewSharedInformerFactory(s.kc, 0)
	s.pods = f.Core().V1().Pods().Informer()
	_, _ = s.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { s.onPod(o) },
		UpdateFunc: func(_, o any) { s.onPod(o) },
	})
	nodes := f.Core().V1().Nodes().Informer()
	onNode := func(o any) {
		n, ok := o.(*corev1.Node)
		if ok && n.Annotations[annotations.IPAddress] != "" && n.Annotations[annotations.PortName] != "" {
			s.nodeAnn.mark(n.Name)
		}
	}
	_, _ = nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onNode, UpdateFunc: func(_, o any) { onNode(o) }})
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.pods.HasSynced, nodes.HasSynced) {
		b.Fatal("informers did not sync")
	}
	s.nb = s.connect(ctx, s.central.NB(), mustNB(b), &nbdb.LogicalSwitchPort{}, &nbdb.LoadBalancer{}, &nbdb.PortGroup{})
	s.nb.Cache().AddEventHandler(&handler{f: s.onNB})
	s.sb = s.connect(ctx, s.central.SB(), mustSB(b), &sbdb.Chassis{}, &sbdb.Encap{})
}

func mustNB(b *testing.B) model.ClientDBModel {
	m, err := nbdb.FullDatabaseModel()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func mustSB(b *testing.B) model.ClientDBModel {
	m, err := sbdb.FullDatabaseModel()
	if err != nil {
		b.Fatal(err)
	}
	return m
}

func (s *sim) connect(ctx context.Context, ep string, dbm model.ClientDBModel, tables ...model.Model) libovsdbclient.Client {
	cl, err := libovsdbclient.NewOVSDBClient(dbm, libovsdbclient.WithEndpoint(ep))
	if err != nil {
		s.b.Fatal(err)
	}
	if err := cl.Connect(ctx); err != nil {
		s.b.Fatal(err)
	}
	s.b.Cleanup(cl.Close)
	var opts []libovsdbclient.MonitorOption
	for _, t := range tables {
		opts = append(opts, libovsdbclient.WithTable(t))
	}
	if _, err := cl.Monitor(ctx, cl.NewMonitor(opts...)); err != nil {
		s.b.Fatal(err)
	}
	return cl
}

type handler struct{ f func(model.Model) }

func (h *handler) OnAdd(_ string, m model.Model)       { h.f(m) }
func (h *handler) OnUpdate(_ string, _, m model.Model) { h.f(m) }
func (h *handler) OnDelete(string, model.Model)        {}

func (s *sim) onPod(o any) {
	p, ok := o.(*corev1.Pod)
	if ok && p.Annotations[annotations.Allocated] == "true" && p.Annotations[annotations.IPAddress] != "" && p.Annotations[annotations.Routed] == "true" {
		s.podAnn.mark(p.Namespace + "/" + p.Name)
	}
}

func (s *sim) onNB(m model.Model) {
	switch r := m.(type) {
	case *nbdb.LogicalSwitchPort:
		if strings.HasPrefix(r.Name, "node-") {
			s.nodeLSP.mark(strings.TrimPrefix(r.Name, "node-"))
		} else if i := strings.LastIndexByte(r.Name, '.'); i > 0 && len(r.Addresses) == 1 {
			s.podLSP.mark(r.Name[i+1:] + "/" + r.Name[:i])
		}
	case *nbdb.LoadBalancer:
		for _, be := range r.Vips {
			if len(strings.Split(be, ",")) == endpoints {
				s.lbFull.mark(r.Name)
			}
		}
	case *nbdb.PortGroup:
		s.pgMu.Lock()
		want, ok := s.pgWant[r.Name]
		s.pgMu.Unlock()
		if ok && len(r.Ports) == want && len(r.ACLs) >= 3 {
			s.pgFull.mark(r.Name)
		}
	}
}

func (s *sim) startController() {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.b.Fatal(err)
	}
	s.health = l.Addr().String()
	l.Close()
	bin := testenv.Binary(s.b, "ovnhost-controller")
	p, err := proc.Start(proc.Spec{Name: "controller", Path: bin, Args: []string{"--kubeconfig", s.srv.Kubeconfig,
		"--ovn-nb-addr", s.central.NB(), "--health-addr", s.health, "--metrics-auth", "none", "--profiling",
		"--leader-elect=false"}, Env: os.Environ(), Pdeathsig: true, Lines: true,
		OnLine: func(line string) {
			if strings.Contains(line, "level=ERROR") || strings.Contains(line, "controller ready") {
				s.b.Log("controller: " + line)
			}
		}})
	if err != nil {
		s.b.Fatal(err)
	}
	s.b.Cleanup(p.Kill)
	s.ctrl = p
}

func (s *sim) runStep(ctx context.Context, n int, prev, st step) row {
	b := s.b
	t0 := time.Now()
	r := row{Step: n, Nodes: st.Nodes, Pods: st.Pods, Services: st.Services, Policies: st.Policies}
	cpu0 := cpuSec(s.ctrl.PID())
	ncpu0 := cpuSec(s.central.PID("northd"))

	// Nodes: Node objects as an ovnhost node leaves them, and their SB chassis.
	r.NodeBurst = st.Nodes - prev.Nodes
	if r.NodeBurst > 0 {
		var keys []string
		tn := time.Now()
		s.parallel(prev.Nodes, st.Nodes, func(i int) error { return s.createNode(ctx, i) })
		s.addChassis(ctx, prev.Nodes, st.Nodes)
		for i := prev.Nodes; i < st.Nodes; i++ {
			keys = append(keys, nodeName(i))
		}
		last := waitAll(b, "nodes annotated with a join port", 5*time.Minute, keys, s.nodeAnn, s.nodeLSP)
		r.NodeConvergeMs = ms(last.Sub(tn))
	}

	// Pods: a burst through the apiserver, bound to the simulated nodes.
	r.PodBurst = st.Pods - prev.Pods
	if r.PodBurst > 0 {
		for k := prev.Pods / podsPerNS; k < st.Pods/podsPerNS; k++ {
			if _, err := s.kc.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns(k)}}, metav1.CreateOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		var keys []string
		for i := prev.Pods; i < st.Pods; i++ {
			keys = append(keys, ns(i/podsPerNS)+"/"+podName(i))
		}
		var prof sync.WaitGroup
		if *profileFlag > 0 {
			prof.Add(1)
			go func() {
				defer prof.Done()
				s.profile(fmt.Sprintf("profile?seconds=%d", *profileFlag), fmt.Sprintf("cpu-step%d-pods.pprof", n))
			}()
		}
		tp := time.Now()
		s.parallel(prev.Pods, st.Pods, func(i int) error {
			_, err := s.kc.CoreV1().Pods(ns(i/podsPerNS)).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: podName(i), Labels: map[string]string{"app": fmt.Sprintf("a%d", i%labels)}},
				Spec: corev1.PodSpec{NodeName: nodeName(i % st.Nodes), Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause",
					Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}}}}, metav1.CreateOptions{})
			return err
		})
		created := time.Since(tp)
		last := waitAll(b, "pods annotated with a logical switch port", time.Duration(r.PodBurst/20+120)*time.Second, keys, s.podAnn, s.podLSP)
		el := last.Sub(tp)
		r.PodConvergeMs = ms(el)
		r.PodsPerSec = float64(r.PodBurst) / el.Seconds()
		r.CreatesPerSec = float64(r.PodBurst) / created.Seconds()
		prof.Wait()
	}

	// Services with EndpointSlices of ten pod addresses each.
	r.SvcBurst = st.Services - prev.Services
	if r.SvcBurst > 0 {
		nns := st.Pods / podsPerNS
		ips := s.podIPs(nns)
		var keys []string
		for j := prev.Services; j < st.Services; j++ {
			keys = append(keys, services.Name(ns(j%nns), svcName(j), corev1.ProtocolTCP))
		}
		ts := time.Now()
		s.parallel(prev.Services, st.Services, func(j int) error {
			namespace, name := ns(j%nns), svcName(j)
			if _, err := s.kc.CoreV1().Services(namespace).Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
				return err
			}
			es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
				AddressType: discoveryv1.AddressTypeIPv4,
				Ports:       []discoveryv1.EndpointPort{{Name: ptr(""), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(8080))}}}
			pool := ips[namespace]
			for e := 0; e < endpoints; e++ {
				es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{pool[(j/nns*endpoints+e)%len(pool)]},
					Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}})
			}
			_, err := s.kc.DiscoveryV1().EndpointSlices(namespace).Create(ctx, es, metav1.CreateOptions{})
			return err
		})
		last := waitAll(b, "Services with a load balancer of ten backends", time.Duration(r.SvcBurst/10+120)*time.Second, keys, s.lbFull)
		el := last.Sub(ts)
		r.SvcConvergeMs, r.SvcPerSec = ms(el), float64(r.SvcBurst)/el.Seconds()
	}

	// NetworkPolicies: policy q selects app=a<q%10> in its namespace and
	// admits app=a<(q+1)%10> on TCP 8080.
	r.NPBurst = st.Policies - prev.Policies
	if r.NPBurst > 0 {
		nns := st.Pods / podsPerNS
		var keys []string
		s.pgMu.Lock()
		for q := prev.Policies; q < st.Policies; q++ {
			pg := netpol.PortGroupName(ns(q%nns), npName(q))
			s.pgWant[pg] = podsPerNS / labels
			keys = append(keys, pg)
		}
		s.pgMu.Unlock()
		tq := time.Now()
		s.parallel(prev.Policies, st.Policies, func(q int) error {
			port := intstr.FromInt32(8080)
			_, err := s.kc.NetworkingV1().NetworkPolicies(ns(q%nns)).Create(ctx, &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: npName(q)},
				Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", q%labels)}},
					PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
					Ingress: []networkingv1.NetworkPolicyIngressRule{{
						From:  []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": fmt.Sprintf("a%d", (q+1)%labels)}}}},
						Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr(corev1.ProtocolTCP), Port: &port}}}}}}, metav1.CreateOptions{})
			return err
		})
		last := waitAll(b, "NetworkPolicies with their port group filled and ACLs", time.Duration(r.NPBurst/10+120)*time.Second, keys, s.pgFull)
		el := last.Sub(tq)
		r.NPConvergeMs, r.NPPerSec = ms(el), float64(r.NPBurst)/el.Seconds()
	}

	// northd: catching up with the step, then its compute time per change
	// (one pod each: a port in the NB).
	tc := time.Now()
	if err := s.central.WaitNorthd(ctxTimeout(ctx, 10*time.Minute)); err != nil {
		b.Fatal(err)
	}
	r.NorthdCatchUpMs = ms(time.Since(tc))
	s.appctl("northd", "stopwatch/reset")
	const probes = 5
	for k := 0; k < probes; k++ {
		name := fmt.Sprintf("probe-%d-%d", n, k)
		if _, err := s.kc.CoreV1().Pods("probe").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.PodSpec{NodeName: nodeName(k % st.Nodes), Containers: []corev1.Container{{Name: "c", Image: "registry.invalid/pause"}}}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		waitAll(b, "probe pod "+name, 2*time.Minute, []string{"probe/" + name}, s.podAnn, s.podLSP)
		if err := s.central.WaitNorthd(ctxTimeout(ctx, 5*time.Minute)); err != nil {
			b.Fatal(err)
		}
	}
	r.NorthdChangeSamples, r.NorthdChangeAvgMs, r.NorthdChangeMaxMs = stopwatch(s.appctl("northd", "stopwatch/show", "ovnnb_db_run"))
	r.CtrlCPUSec = cpuSec(s.ctrl.PID()) - cpu0
	r.NorthdCPUSec = cpuSec(s.central.PID("northd")) - ncpu0
	r.CtrlRSSMiB, r.CtrlHWMMiB = rss(s.ctrl.PID())
	r.NorthdRSSMiB, _ = rss(s.central.PID("northd"))
	r.NBRSSMiB, _ = rss(s.central.PID("nb"))
	r.SBRSSMiB, _ = rss(s.central.PID("sb"))
	s.profile("heap", fmt.Sprintf("heap-step%d.pprof", n))
	for _, db := range []string{"nb", "sb"} {
		s.appctl(db, "ovsdb-server/compact")
	}
	r.NBMiB, r.SBMiB = fileMiB(s.central.DBFile("nb")), fileMiB(s.central.DBFile("sb"))

	// Restart: SIGKILL, then exec to ready (informers, IPAM rebuild, GC).
	s.ctrl.Kill()
	tr := time.Now()
	s.startController()
	line, err := s.ctrl.WaitLine("controller ready", 5*time.Minute)
	if err != nil {
		b.Fatal(err)
	}
	r.RestartReadyMs = ms(time.Since(tr))
	f := readyFields(line)
	r.IPAMRebuildMs, r.CacheSyncMs = ms(f["ipam_rebuild"]), ms(f["caches_synced"])
	r.RestartRSSMiB, _ = rss(s.ctrl.PID())
	r.StepSec = time.Since(t0).Seconds()
	b.Logf("step %d: %+v", n, r)
	return r
}

func nodeName(i int) string { return fmt.Sprintf("%s%04d", simNodePfx, i) }
func podName(i int) string  { return fmt.Sprintf("p%05d", i) }
func svcName(j int) string  { return fmt.Sprintf("s%05d", j) }
func npName(q int) string   { return fmt.Sprintf("np%05d", q) }
func ptr[T any](v T) *T     { return &v }
func ms(d time.Duration) float64 {
	return benchresult.Ms(d)
}

func chassisID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i) }
func nodeIP(i int) string    { return fmt.Sprintf("172.16.%d.%d", i/250, i%250+1) }

// createNode writes a Node as the kubelet and an ovnhost node daemon leave
// it: InternalIP, the chassis (system-id) and node features annotations.
func (s *sim) createNode(ctx context.Context, i int) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName(i), Labels: map[string]string{"kubernetes.io/hostname": nodeName(i)},
		Annotations: map[string]string{annotations.Chassis: chassisID(i), annotations.NodeFeatures: annotations.FeatureGatewayIPv6}}}
	n, err := s.kc.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"addresses": []map[string]string{{"type": "InternalIP", "address": nodeIP(i)}}}})
	_, err = s.kc.CoreV1().Nodes().Patch(ctx, n.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}, "status")
	return err
}

// addChassis inserts the SB Chassis and Encap rows ovn-controller would
// register for nodes [from, to).
func (s *sim) addChassis(ctx context.Context, from, to int) {
	var ops []ovsdb.Operation
	for i := from; i < to; i++ {
		enc := &sbdb.Encap{UUID: fmt.Sprintf("enc%d", i), Type: sbdb.EncapTypeGeneve, IP: nodeIP(i), ChassisName: chassisID(i), Options: map[string]string{"csum": "true"}}
		ch := &sbdb.Chassis{UUID: fmt.Sprintf("ch%d", i), Name: chassisID(i), Hostname: nodeName(i), Encaps: []string{enc.UUID},
			OtherConfig: map[string]string{"ovn-bridge-mappings": "", "datapath-type": "system", "is-interconn": "false"}}
		for _, m := range []model.Model{enc, ch} {
			op, err := s.sb.Create(m)
			if err != nil {
				s.b.Fatal(err)
			}
			ops = append(ops, op...)
		}
	}
	res, err := s.sb.Transact(ctx, ops...)
	if err == nil {
		_, err = ovsdb.CheckOperationResults(res, ops)
	}
	if err != nil {
		s.b.Fatalf("SB chassis rows: %v", err)
	}
}

// parallel runs f(i) for i in [from, to) on `workers` goroutines, failing
// on the first error.
func (s *sim) parallel(from, to int, f func(int) error) {
	ch := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range ch {
				if err := f(i); err != nil {
					select {
					case errs <- fmt.Errorf("item %d: %w", i, err):
					default:
					}
				}
			}
		}()
	}
	for i := from; i < to; i++ {
		ch <- i
	}
	close(ch)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		s.b.Fatal(err)
	}
}

// podIPs lists the addresses of the annotated pods of the first nns
// namespaces, by namespace.
func (s *sim) podIPs(nns int) map[string][]string {
	out := map[string][]string{}
	for _, o := range s.pods.GetStore().List() {
		p := o.(*corev1.Pod)
		if ip := p.Annotations[annotations.IPAddress]; ip != "" && strings.HasPrefix(p.Namespace, "scale-") {
			out[p.Namespace] = append(out[p.Namespace], ip)
		}
	}
	for k := 0; k < nns; k++ {
		if len(out[ns(k)]) < endpoints {
			s.b.Fatalf("namespace %s has %d annotated pods, want at least %d", ns(k), len(out[ns(k)]), endpoints)
		}
	}
	return out
}

func (s *sim) appctl(daemon string, args ...string) string {
	out, err := exec.Command("ovn-appctl", append([]string{"-t", s.central.Ctl(daemon)}, args...)...).CombinedOutput()
	if err != nil {
		s.b.Fatalf("ovn-appctl -t %s %v: %v: %s", daemon, args, err, out)
	}
	return string(out)
}

// profile saves /debug/pprof/<what> of the running controller under out.
func (s *sim) profile(what, file string) {
	resp, err := http.Get("http://" + s.health + "/debug/pprof/" + what)
	if err != nil {
		s.b.Logf("profile %s: %v", what, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		s.b.Logf("profile %s: %s", what, resp.Status)
		return
	}
	f, err := os.Create(filepath.Join(s.out, file))
	if err != nil {
		s.b.Fatal(err)
	}
	defer f.Close()
	_, _ = io.Copy(f, resp.Body)
}

// stopwatch parses `stopwatch/show NAME`: samples, short-term average and maximum (ms).
func stopwatch(out string) (samples int, avg, max float64) {
	for _, l := range strings.Split(out, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(strings.Fields(strings.TrimSpace(v) + " 0")[0], 64)
		switch k {
		case "Total samples":
			samples = int(f)
		case "Short term average":
			avg = f
		case "Maximum":
			max = f
		}
	}
	return
}

func ctxTimeout(ctx context.Context, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(ctx, d)
	_ = cancel // released when the deadline passes
	return c
}

// cpuSec is the user+system CPU time of a process (/proc/PID/stat).
func cpuSec(pid int) float64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	k, _ := strconv.ParseFloat(f[12], 64)
	return (u + k) / 100 // USER_HZ
}

func rss(pid int) (rss, hwm float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseFloat(f[1], 64)
			if f[0] == "VmRSS:" {
				rss = kb / 1024
			} else {
				hwm = kb / 1024
			}
		}
	}
	return
}

func fileMiB(path string) float64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return float64(st.Size()) / (1 << 20)
}

func readyFields(line string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, f := range strings.Fields(line) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		if d, err := time.ParseDuration(strings.Trim(v, `"`)); err == nil {
			out[k] = d
		}
	}
	return out
}

// report prints the step's BENCHRESULT lines.
func (s *sim) report(r row) {
	b := s.b
	at := fmt.Sprintf("step %d (%d nodes, %d pods, %d Services, %d policies)", r.Step, r.Nodes, r.Pods, r.Services, r.Policies)
	fig := func(name string, v float64, unit string) *benchresult.Builder {
		return benchresult.Figure(b, at+": "+name, v, unit)
	}
	if r.PodBurst > 0 {
		fig(fmt.Sprintf("burst of %d pods to annotated + logical switch port", r.PodBurst), r.PodsPerSec, "pods/s").
			Against("the API server's own create rate for the same pods", r.CreatesPerSec).
			Target(benchresult.RatioAtLeast(0.9, "at least 0.9 of the API server's create rate (BRIEF 5)")).Report()
	}
	if r.NodeBurst > 0 {
		fig(fmt.Sprintf("burst of %d nodes to annotated + join port", r.NodeBurst), r.NodeConvergeMs, "ms").Report()
	}
	if r.SvcBurst > 0 {
		fig(fmt.Sprintf("burst of %d Services x %d endpoints to every load balancer filled", r.SvcBurst, endpoints), r.SvcConvergeMs, "ms").
			Note("%.0f Services/s", r.SvcPerSec).Report()
	}
	if r.NPBurst > 0 {
		fig(fmt.Sprintf("burst of %d NetworkPolicies to port group filled with ACLs", r.NPBurst), r.NPConvergeMs, "ms").
			Note("%.0f policies/s", r.NPPerSec).Report()
	}
	fig("controller RSS", r.CtrlRSSMiB, "MiB").
		Target(benchresult.Below(1024, "controller under 1 GiB at 500 nodes, 50k pods, 5k Services, 2k policies (BRIEF 5)")).
		Note("peak %.0f MiB; %.1f CPU s in the step", r.CtrlHWMMiB, r.CtrlCPUSec).Report()
	fig("ovn-northd compute time per NB change (ovnnb_db_run, one pod added)", r.NorthdChangeAvgMs, "ms").
		Note("max %.0f ms over %d runs; catch-up after the step %.0f ms; northd %.1f CPU s in the step, RSS %.0f MiB", r.NorthdChangeMaxMs, r.NorthdChangeSamples, r.NorthdCatchUpMs, r.NorthdCPUSec, r.NorthdRSSMiB).Report()
	fig("NB database file after compaction", r.NBMiB, "MiB").Note("ovsdb-server RSS %.0f MiB", r.NBRSSMiB).Report()
	fig("SB database file after compaction", r.SBMiB, "MiB").Note("ovsdb-server RSS %.0f MiB", r.SBRSSMiB).Report()
	fig("controller restart, exec to ready", r.RestartReadyMs, "ms").
		Quoted("Kube-OVN about 29 s to rebuild IPAM at restart (10k pods)", "Kube-OVN's own report, quoted in ../shared/BRIEF.md section 5").
		Note("IPAM rebuild %.0f ms, informer sync %.0f ms", r.IPAMRebuildMs, r.CacheSyncMs).Report()
}

// write saves the rows as CSV and JSON with the growth fits, and the SVG curves.
func (s *sim) write(rows []row) {
	b := s.b
	var csv strings.Builder
	hdr := []string{"step", "nodes", "pods", "services", "policies", "node_converge_ms", "pod_burst", "pod_converge_ms", "pods_per_s", "creates_per_s",
		"svc_converge_ms", "svc_per_s", "np_converge_ms", "np_per_s", "northd_catchup_ms", "northd_change_avg_ms", "northd_change_max_ms",
		"ctrl_rss_mib", "ctrl_hwm_mib", "ctrl_cpu_s", "northd_cpu_s", "northd_rss_mib", "nb_rss_mib", "sb_rss_mib", "nb_mib", "sb_mib",
		"restart_ready_ms", "ipam_rebuild_ms", "cache_sync_ms", "restart_rss_mib", "step_s"}
	csv.WriteString(strings.Join(hdr, ",") + "\n")
	for _, r := range rows {
		v := []float64{float64(r.Step), float64(r.Nodes), float64(r.Pods), float64(r.Services), float64(r.Policies), r.NodeConvergeMs, float64(r.PodBurst),
			r.PodConvergeMs, r.PodsPerSec, r.CreatesPerSec, r.SvcConvergeMs, r.SvcPerSec, r.NPConvergeMs, r.NPPerSec, r.NorthdCatchUpMs,
			r.NorthdChangeAvgMs, r.NorthdChangeMaxMs, r.CtrlRSSMiB, r.CtrlHWMMiB, r.CtrlCPUSec, r.NorthdCPUSec, r.NorthdRSSMiB, r.NBRSSMiB,
			r.SBRSSMiB, r.NBMiB, r.SBMiB, r.RestartReadyMs, r.IPAMRebuildMs, r.CacheSyncMs, r.RestartRSSMiB, r.StepSec}
		var f []string
		for _, x := range v {
			f = append(f, strconv.FormatFloat(x, 'f', -1, 64))
		}
		csv.WriteString(strings.Join(f, ",") + "\n")
	}
	if err := os.WriteFile(filepath.Join(s.out, "scale.csv"), []byte(csv.String()), 0o644); err != nil {
		b.Fatal(err)
	}

	// Growth: per-object cost of each burst (ms per object) against the
	// total in the cluster (exponent 0: linear work; above 0.25: worse),
	// and sizes against total pods (exponent 1: linear).
	pods := func(r row) float64 { return float64(r.Pods) }
	series := func(x func(row) float64, y func(row) float64) []scale.Point {
		var p []scale.Point
		for _, r := range rows {
			if yv := y(r); yv > 0 {
				p = append(p, scale.Point{X: x(r), Y: yv})
			}
		}
		return p
	}
	type fit struct {
		Curve    string    `json:"curve"`
		Against  string    `json:"against"`
		Exponent float64   `json:"exponent"`
		Order    string    `json:"order"`
		Bend     float64   `json:"bend_from,omitempty"`
		Local    []float64 `json:"local_exponents"`
	}
	var fits []fit
	add := func(curve, against string, pts []scale.Point, costPerObject bool) {
		k := scale.Exponent(pts)
		f := fit{Curve: curve, Against: against, Exponent: round2(k), Local: nil}
		for _, l := range scale.LocalExponents(pts) {
			f.Local = append(f.Local, round2(l))
		}
		if costPerObject {
			// The work of a burst is cost x burst size: linear work when the
			// per-object cost stays flat (k near 0).
			f.Order = scale.Order(k+1, 0.25)
			if x, ok := scale.Bend(pts, 0.25); ok {
				f.Bend = x
			}
		} else {
			f.Order = scale.Order(k, 0.25)
			if x, ok := scale.Bend(pts, 1.25); ok {
				f.Bend = x
			}
		}
		fits = append(fits, f)
	}
	perPod := series(pods, func(r row) float64 { return nz(r.PodConvergeMs / float64(r.PodBurst)) })
	add("controller ms per pod in the burst", "total pods", perPod, true)
	add("controller ms per Service in the burst", "total Services", series(func(r row) float64 { return float64(r.Services) }, func(r row) float64 { return nz(r.SvcConvergeMs / float64(r.SvcBurst)) }), true)
	add("controller ms per policy in the burst", "total policies", series(func(r row) float64 { return float64(r.Policies) }, func(r row) float64 { return nz(r.NPConvergeMs / float64(r.NPBurst)) }), true)
	add("controller ms per node in the burst", "total nodes", series(func(r row) float64 { return float64(r.Nodes) }, func(r row) float64 { return nz(r.NodeConvergeMs / float64(r.NodeBurst)) }), true)
	add("controller CPU s per object created in the step", "total pods", series(pods, func(r row) float64 {
		return r.CtrlCPUSec / float64(max(1, r.PodBurst+r.SvcBurst+r.NPBurst+r.NodeBurst))
	}), true)
	add("controller RSS", "total pods", series(pods, func(r row) float64 { return r.CtrlRSSMiB }), false)
	add("controller restart, exec to ready", "total pods", series(pods, func(r row) float64 { return r.RestartReadyMs }), false)
	add("IPAM rebuild", "total pods", series(pods, func(r row) float64 { return r.IPAMRebuildMs }), false)
	add("NB file", "total pods", series(pods, func(r row) float64 { return r.NBMiB }), false)
	add("SB file", "total pods", series(pods, func(r row) float64 { return r.SBMiB }), false)
	add("ovn-northd per change (OVN's code)", "total pods", series(pods, func(r row) float64 { return r.NorthdChangeAvgMs }), false)
	js, _ := json.MarshalIndent(map[string]any{"steps": rows, "growth": fits, "measured": time.Now().UTC().Format(time.RFC3339)}, "", "  ")
	if err := os.WriteFile(filepath.Join(s.out, "scale.json"), js, 0o644); err != nil {
		b.Fatal(err)
	}
	for _, f := range fits {
		b.Logf("growth: %s against %s: exponent %.2f, %s, local %v, bend from %v", f.Curve, f.Against, f.Exponent, f.Order, f.Local, f.Bend)
	}

	// Curves.
	xy := func(x func(row) float64, y func(row) float64) []svgplot.Point {
		var p []svgplot.Point
		for _, r := range rows {
			p = append(p, svgplot.Point{X: x(r), Y: y(r)})
		}
		return p
	}
	linear := func(pts []svgplot.Point) svgplot.Series { // through the origin and the first point
		var l []svgplot.Point
		if len(pts) > 0 && pts[0].X > 0 {
			k := pts[0].Y / pts[0].X
			for _, p := range pts {
				l = append(l, svgplot.Point{X: p.X, Y: k * p.X})
			}
		}
		return svgplot.Series{Name: "linear through the first point", Points: l, Dashed: true}
	}
	plots := map[string]svgplot.Plot{}
	title := func(t string) string { return t + " (" + time.Now().UTC().Format(time.DateOnly) + ")" }
	plots["throughput.svg"] = svgplot.Plot{Title: title("Burst throughput against total pods"), XLabel: "pods in the cluster", YLabel: "objects per second",
		Series: []svgplot.Series{
			{Name: "pods/s (annotated + port)", Points: xy(pods, func(r row) float64 { return r.PodsPerSec })},
			{Name: "API server creates/s", Points: xy(pods, func(r row) float64 { return r.CreatesPerSec })},
			{Name: "Services/s (LB filled)", Points: xy(pods, func(r row) float64 { return r.SvcPerSec })},
			{Name: "policies/s (PG + ACLs)", Points: xy(pods, func(r row) float64 { return r.NPPerSec })}}}
	rssPts := xy(pods, func(r row) float64 { return r.CtrlRSSMiB })
	plots["memory.svg"] = svgplot.Plot{Title: title("Resident memory after each step"), XLabel: "pods in the cluster", YLabel: "MiB",
		Series: []svgplot.Series{{Name: "ovnhost-controller", Points: rssPts}, linear(rssPts),
			{Name: "ovn-northd", Points: xy(pods, func(r row) float64 { return r.NorthdRSSMiB })},
			{Name: "NB ovsdb-server", Points: xy(pods, func(r row) float64 { return r.NBRSSMiB })},
			{Name: "SB ovsdb-server", Points: xy(pods, func(r row) float64 { return r.SBRSSMiB })}}}
	sbPts := xy(pods, func(r row) float64 { return r.SBMiB })
	plots["dbsize.svg"] = svgplot.Plot{Title: title("OVN database files after compaction"), XLabel: "pods in the cluster", YLabel: "MiB",
		Series: []svgplot.Series{{Name: "NB", Points: xy(pods, func(r row) float64 { return r.NBMiB })}, {Name: "SB", Points: sbPts}, linear(sbPts)}}
	rr := xy(pods, func(r row) float64 { return r.RestartReadyMs })
	plots["restart.svg"] = svgplot.Plot{Title: title("Controller restart (SIGKILL) to ready"), XLabel: "pods in the cluster", YLabel: "ms",
		Series: []svgplot.Series{{Name: "exec to ready", Points: rr}, linear(rr),
			{Name: "informer sync", Points: xy(pods, func(r row) float64 { return r.CacheSyncMs })},
			{Name: "IPAM rebuild", Points: xy(pods, func(r row) float64 { return r.IPAMRebuildMs })}}}
	plots["northd.svg"] = svgplot.Plot{Title: title("ovn-northd compute time per NB change (one pod added)"), XLabel: "pods in the cluster", YLabel: "ms",
		Series: []svgplot.Series{{Name: "ovnnb_db_run average", Points: xy(pods, func(r row) float64 { return r.NorthdChangeAvgMs })},
			{Name: "maximum", Points: xy(pods, func(r row) float64 { return r.NorthdChangeMaxMs })}}}
	plots["cpu.svg"] = svgplot.Plot{Title: title("Controller CPU per object created in the step"), XLabel: "pods in the cluster", YLabel: "CPU ms per object",
		Series: []svgplot.Series{{Name: "ovnhost-controller", Points: xy(pods, func(r row) float64 {
			return 1000 * r.CtrlCPUSec / float64(max(1, r.PodBurst+r.SvcBurst+r.NPBurst+r.NodeBurst))
		})}, {Name: "ovn-northd", Points: xy(pods, func(r row) float64 {
			return 1000 * r.NorthdCPUSec / float64(max(1, r.PodBurst+r.SvcBurst+r.NPBurst+r.NodeBurst))
		})}}}
	for name, p := range plots {
		if err := os.WriteFile(filepath.Join(s.out, name), p.SVG(), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func nz(f float64) float64 {
	if f != f || f < 0 {
		return 0
	}
	return f
}

func round2(f float64) float64 {
	if f != f {
		return 0
	}
	return float64(int64(f*100+0.5*sign(f))) / 100
}

func sign(f float64) float64 {
	if f < 0 {
		return -1
	}
	return 1
}

package controller_test

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
)

// tracker records, per pod, when it was first seen annotated and when its
// logical switch port appeared in the NB, from informer and libovsdb events.
// Pods are keyed by their port name "<pod>.<namespace>".
type tracker struct {
	mu    sync.Mutex
	want  int
	ann   map[string]time.Time
	port  map[string]time.Time
	done  chan struct{}
	fired bool
}

func newTracker(e *env, ns string, want int) *tracker {
	return newTrackerIn(e, func(n string) bool { return n == ns }, want)
}

// newTrackerIn tracks the pods of every namespace in(ns) holds for.
func newTrackerIn(e *env, in func(ns string) bool, want int) *tracker {
	tr := &tracker{want: want, ann: map[string]time.Time{}, port: map[string]time.Time{}, done: make(chan struct{})}
	onPod := func(o any) {
		p, ok := o.(*corev1.Pod)
		if ok && in(p.Namespace) && annotated(p) {
			tr.mark(tr.ann, p.Name+"."+p.Namespace)
		}
	}
	_, _ = e.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, n any) { onPod(n) }})
	e.nb.Raw().Cache().AddEventHandler(&model2{func(m model.Model) {
		// A namespace name has no dot: it is what follows the last one.
		l, ok := m.(*nbdb.LogicalSwitchPort)
		if !ok || len(l.Addresses) != 1 {
			return
		}
		if i := strings.LastIndexByte(l.Name, '.'); i > 0 && in(l.Name[i+1:]) {
			tr.mark(tr.port, l.Name)
		}
	}})
	return tr
}

type model2 struct{ f func(model.Model) }

func (m *model2) OnAdd(_ string, x model.Model)       { m.f(x) }
func (m *model2) OnUpdate(_ string, _, x model.Model) { m.f(x) }
func (m *model2) OnDelete(string, model.Model)        {}

func (tr *tracker) mark(m map[string]time.Time, name string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if _, ok := m[name]; !ok {
		m[name] = time.Now()
	}
	if !tr.fired && len(tr.ann) >= tr.want && len(tr.port) >= tr.want {
		tr.fired = true
		close(tr.done)
	}
}

// last is when the last pod had both its annotation and its port.
func (tr *tracker) last() time.Time {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var l time.Time
	for n, a := range tr.ann {
		t := a
		if p := tr.port[n]; p.After(t) {
			t = p
		}
		if t.After(l) {
			l = t
		}
	}
	return l
}

func (tr *tracker) wait(b testing.TB, d time.Duration) {
	b.Helper()
	select {
	case <-tr.done:
	case <-time.After(d):
		tr.mu.Lock()
		defer tr.mu.Unlock()
		b.Fatalf("timed out after %s: %d/%d pods annotated, %d/%d ports", d, len(tr.ann), tr.want, len(tr.port), tr.want)
	}
}

func rssMiB(pid int) (rss, hwm float64) {
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

var durRe = regexp.MustCompile(`(\w+)=([0-9.]+(?:ms|s|µs))`)

func ms(d time.Duration) float64 { return benchresult.Ms(d) }

func readyFields(line string) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, m := range durRe.FindAllStringSubmatch(line, -1) {
		if d, err := time.ParseDuration(m[2]); err == nil {
			out[m[1]] = d
		}
	}
	return out
}

// burst creates n pods in ns (32 concurrent clients) and returns pods/s from
// the first create to the last pod annotated with its port, and the creation rate.
func burst(b *testing.B, e *env, ns string, n int) (podsPerSec, createPerSec float64) {
	e.createNamespace(ns, nil)
	tr := newTracker(e, ns, n)
	t0 := time.Now()
	if err := e.createPods(ns, n, 32, func(i int) string { return fmt.Sprintf("p%05d", i) },
		func(i int) string { return []string{"node-a", "node-b"}[i%2] }, nil); err != nil {
		b.Fatal(err)
	}
	created := time.Since(t0)
	tr.wait(b, time.Duration(n/10+60)*time.Second)
	el := tr.last().Sub(t0)
	return float64(n) / el.Seconds(), float64(n) / created.Seconds()
}

// BenchmarkControllerPods1000 measures pods/s from creation to annotated
// with a logical switch port, for 1000 pods, against the controller binary.
// Target (BRIEF 5): 90% of the API server's own create rate in the same
// run (Kube-OVN's about 45 pods/s is a quoted figure: no ratio to it).
func BenchmarkControllerPods1000(b *testing.B) {
	e := newEnv(b)
	e.createNode("node-a", "192.168.10.11")
	e.createNode("node-b", "192.168.10.12")
	p := e.startControllerProcess()
	p.waitReady(b, 60*time.Second)
	b.ResetTimer()
	var rate, crate float64
	for i := 0; i < b.N; i++ {
		rate, crate = burst(b, e, fmt.Sprintf("bench-%d", i), 1000)
	}
	b.StopTimer()
	b.ReportMetric(rate, "pods/s")
	b.ReportMetric(crate, "creates/s")
	rss, _ := rssMiB(p.PID())
	b.ReportMetric(rss, "RSS-MiB")
	benchresult.Figure(b, "pod create to annotated + logical switch port, 1000 pods", rate, "pods/s").
		Against("the API server's own create rate for the same pods", crate).
		Target(benchresult.RatioAtLeast(0.9, "at least 0.9 of the API server's create rate (BRIEF 5)")).
		Note("Kube-OVN about 45 pods/s for 200 pods is quoted in BRIEF 5, not measured here").
		Report()
	benchresult.Figure(b, "controller RSS after 1000 pods", rss, "MiB").
		Quoted("Kube-OVN controller about 110 MB", "../shared/BRIEF.md section 5").
		Report()
}

// BenchmarkController10k: 10k pods annotated through the controller, its
// RSS at 10k pods, then a SIGKILL and the restart: time to rebuild IPAM from
// the annotations (target under 100 ms) and exec to ready (Kube-OVN's 29 s
// is quoted against this one, never divided by).
func BenchmarkController10k(b *testing.B) {
	e := newEnv(b)
	e.createNode("node-a", "192.168.10.11")
	e.createNode("node-b", "192.168.10.12")
	p := e.startControllerProcess()
	p.waitReady(b, 60*time.Second)
	rate, crate := burst(b, e, "scale", 10000)
	rss, hwm := rssMiB(p.PID())
	p.kill()
	b.ResetTimer()
	var f map[string]time.Duration
	var wall time.Duration
	var rss2 float64
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		p2 := e.startControllerProcess()
		line := p2.waitReady(b, 120*time.Second)
		wall = time.Since(t0)
		f = readyFields(line)
		b.Logf("restart with 10k pods: exec-to-ready %s; %s", wall.Round(time.Millisecond), line)
		rss2, _ = rssMiB(p2.PID())
		p2.kill()
	}
	b.StopTimer()
	b.ReportMetric(rate, "pods/s@10k")
	b.ReportMetric(rss, "RSS-MiB@10k")
	b.ReportMetric(hwm, "peakRSS-MiB@10k")
	b.ReportMetric(float64(f["ipam_rebuild"].Microseconds())/1000, "rebuild-ms")
	b.ReportMetric(float64(f["caches_synced"].Microseconds())/1000, "cachesync-ms")
	b.ReportMetric(float64(wall.Microseconds())/1000, "exec-to-ready-ms")
	b.ReportMetric(rss2, "RSS-MiB-after-restart")
	benchresult.Figure(b, "pod create to annotated + logical switch port, growing from 0 to 10k pods", rate, "pods/s").
		Against("the API server's own create rate for the same pods", crate).
		Target(benchresult.RatioAtLeast(0.9, "at least 0.9 of the API server's create rate (BRIEF 5)")).
		Report()
	benchresult.Figure(b, "controller RSS at 10k pods, after the burst", rss, "MiB").
		Target(benchresult.Below(200, "under 200 MiB at 10k pods (BRIEF 5)")).
		Note("peak %.0f MiB", hwm).Report()
	benchresult.Figure(b, "IPAM rebuild after restart, 10k pods (the controller's own phase timer)", ms(f["ipam_rebuild"]), "ms").
		Target(benchresult.Below(100, "under 100 ms (BRIEF 5)")).
		Note("informer caches synced after %.0f ms", ms(f["caches_synced"])).Report()
	benchresult.Figure(b, "restart with 10k pods, exec to ready (NB cache, informer sync, subnets, IPAM rebuild, port GC)", ms(wall), "ms").
		Quoted("Kube-OVN about 29 s to rebuild IPAM at restart", "Kube-OVN's own report, quoted in ../shared/BRIEF.md section 5").
		Report()
	benchresult.Figure(b, "controller RSS right after the restart with 10k pods", rss2, "MiB").
		Target(benchresult.Below(200, "under 200 MiB at 10k pods (BRIEF 5)")).Report()
}

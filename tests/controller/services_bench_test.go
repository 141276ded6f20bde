package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
)

// lbWatch records, from the test's own NB cache, each Service load
// balancer's backends of its first VIP and how many row updates it saw.
type lbWatch struct {
	mu      sync.Mutex
	full    map[string]bool   // LB name -> its VIP has the expected backend count
	backend map[string]string // LB name -> backends of its one VIP
	updates int
	changed chan struct{}
	want    int
}

func (w *lbWatch) see(m model.Model) {
	lb, ok := m.(*nbdb.LoadBalancer)
	if !ok || !strings.HasPrefix(lb.Name, "Service_bench/") {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.updates++
	for _, b := range lb.Vips {
		w.backend[lb.Name] = b
		w.full[lb.Name] = b != "" && len(strings.Split(b, ",")) == w.want
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *lbWatch) OnAdd(_ string, m model.Model)       { w.see(m) }
func (w *lbWatch) OnUpdate(_ string, _, m model.Model) { w.see(m) }
func (w *lbWatch) OnDelete(string, model.Model)        {}

func (w *lbWatch) countFull() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, f := range w.full {
		if f {
			n++
		}
	}
	return n
}

// BenchmarkServices1000: 1,000 Services x 10 endpoints against the
// controller binary. Reports the time from the last create (Services and
// EndpointSlices) until every VIP has its 10 backends in the NB, the latency
// of one endpoint change into the NB at that size (p50, p99 over 200
// changes), Load_Balancer row updates per change, and the controller's RSS.
// Targets on 2 cores: converge < 10 s, p99 < 100 ms, RSS < 300 MiB.
func BenchmarkServices1000(b *testing.B) {
	const nsvc, neps = 1000, 10
	e := newEnv(b)
	p := e.startControllerProcess("--enable-lb=true")
	p.waitReady(b, 60*time.Second)
	w := &lbWatch{full: map[string]bool{}, backend: map[string]string{}, changed: make(chan struct{}, 1), want: neps}
	e.nb.Raw().Cache().AddEventHandler(w)
	e.createNamespace("bench", nil)
	ctx := context.Background()
	slice := func(i, gen int) *discoveryv1.EndpointSlice {
		es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("s%04d", i),
			Labels: map[string]string{discoveryv1.LabelServiceName: fmt.Sprintf("s%04d", i)}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptrTo(""), Protocol: ptrTo(corev1.ProtocolTCP), Port: ptrTo(int32(8080))}}}
		for j := 0; j < neps; j++ {
			ip := fmt.Sprintf("10.16.%d.%d", (i*neps+j)/250, (i*neps+j)%250+1)
			if j == 0 && gen > 0 {
				ip = fmt.Sprintf("10.17.%d.%d", gen/250, gen%250+1) // the endpoint that changes
			}
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true)}})
		}
		return es
	}
	b.ResetTimer()
	for it := 0; it < b.N; it++ {
		t0 := time.Now()
		work := make(chan int)
		var wg sync.WaitGroup
		errs := make(chan error, 2*nsvc)
		for k := 0; k < 16; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range work {
					name := fmt.Sprintf("s%04d", i)
					if _, err := e.kc.CoreV1().Services("bench").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
						Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{}); err != nil {
						errs <- err
					}
					if _, err := e.kc.DiscoveryV1().EndpointSlices("bench").Create(ctx, slice(i, 0), metav1.CreateOptions{}); err != nil {
						errs <- err
					}
				}
			}()
		}
		for i := 0; i < nsvc; i++ {
			work <- i
		}
		close(work)
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		tCreated := time.Now()
		deadline := time.After(120 * time.Second)
		for w.countFull() < nsvc {
			select {
			case <-w.changed:
			case <-deadline:
				b.Fatalf("after 120 s only %d of %d Service VIPs have their %d backends in the NB", w.countFull(), nsvc, neps)
			}
		}
		converge := time.Since(tCreated)
		total := time.Since(t0)

		// One endpoint change at a time: slice update -> backend in NB.
		var lat []time.Duration
		w.mu.Lock()
		u0 := w.updates
		w.mu.Unlock()
		const changes = 200
		for gen := 1; gen <= changes; gen++ {
			i := (gen * 37) % nsvc
			lbName := services.Name("bench", fmt.Sprintf("s%04d", i), corev1.ProtocolTCP)
			want := fmt.Sprintf("10.17.%d.%d:8080", gen/250, gen%250+1)
			es := slice(i, gen)
			cur, err := e.kc.DiscoveryV1().EndpointSlices("bench").Get(ctx, es.Name, metav1.GetOptions{})
			if err != nil {
				b.Fatal(err)
			}
			es.ResourceVersion = cur.ResourceVersion
			ts := time.Now()
			if _, err := e.kc.DiscoveryV1().EndpointSlices("bench").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
				b.Fatal(err)
			}
			tmo := time.After(10 * time.Second)
			for {
				w.mu.Lock()
				got := w.backend[lbName]
				w.mu.Unlock()
				if strings.Contains(got, want) {
					break
				}
				select {
				case <-w.changed:
				case <-tmo:
					b.Fatalf("endpoint change %d: %s did not get backend %s within 10 s (has %s)", gen, lbName, want, got)
				}
			}
			lat = append(lat, time.Since(ts))
		}
		w.mu.Lock()
		perChange := float64(w.updates-u0) / changes
		w.mu.Unlock()
		sort.Slice(lat, func(a, c int) bool { return lat[a] < lat[c] })
		p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
		rss, hwm := rssMiB(p.PID())
		b.ReportMetric(converge.Seconds(), "converge-s")
		b.ReportMetric(total.Seconds(), "create+converge-s")
		b.ReportMetric(float64(p50.Microseconds())/1000, "change-p50-ms")
		b.ReportMetric(float64(p99.Microseconds())/1000, "change-p99-ms")
		b.ReportMetric(perChange, "lb-updates/change")
		b.ReportMetric(rss, "RSS-MiB")
		b.ReportMetric(hwm, "HWM-MiB")
		benchresult.Figure(b, "1000 Services x 10 endpoints: every VIP with its backends, after the last create", benchresult.Ms(converge), "ms").
			Target(benchresult.Below(10000, "1k Services converged under 10 s (BRIEF 5)")).
			Note("all 2,000 objects created in %.1f s", tCreated.Sub(t0).Seconds()).Report()
		benchresult.Figure(b, fmt.Sprintf("endpoint change into NB, p99 of %d", len(lat)), ms(p99), "ms").
			Target(benchresult.Below(100, "p99 under 100 ms (BRIEF 5)")).
			Note("p50 %.1f ms, max %.1f ms; %.2f Load_Balancer row updates per change", ms(p50), ms(slices.Max(lat)), perChange).Report()
		benchresult.Figure(b, "controller RSS after 1000 Services", rss, "MiB").
			Target(benchresult.Below(300, "under 300 MiB with 1k Services and 200 policies (BRIEF 5)")).
			Note("peak %.0f MiB", hwm).Report()
		b.Logf("1000 Services x 10 endpoints: created in %s, converged %s after the last create; endpoint change p50 %s p99 %s max %s; %.2f Load_Balancer row updates per change; controller RSS %.0f MiB (peak %.0f)",
			tCreated.Sub(t0).Round(time.Millisecond), converge.Round(time.Millisecond), p50, p99, slices.Max(lat), perChange, rss, hwm)
	}
}

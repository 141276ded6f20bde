package kube

import (
	"context"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
	"k8s.io/client-go/util/workqueue"
)

// Work queue and client-go request metrics, under the names Kubernetes'
// own components export (workqueue_*, rest_client_*), so that existing
// dashboards and alerts read them unchanged. Both hooks are process-wide in
// client-go: the first Run's registry gets them.
var registerKubeMetrics sync.Once

func registerClientMetrics(r prometheus.Registerer) {
	registerKubeMetrics.Do(func() {
		wq := newQueueMetrics(r)
		workqueue.SetProvider(wq)
		lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "rest_client_request_duration_seconds",
			Help:    "Kubernetes API request latency by verb and host.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"verb", "host"})
		res := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rest_client_requests_total",
			Help: "Kubernetes API requests by status code, method and host."}, []string{"code", "method", "host"})
		r.MustRegister(lat, res)
		clientmetrics.Register(clientmetrics.RegisterOpts{
			RequestLatency: latencyAdapter{lat},
			RequestResult:  resultAdapter{res},
		})
	})
}

type latencyAdapter struct{ h *prometheus.HistogramVec }

func (a latencyAdapter) Observe(_ context.Context, verb string, u url.URL, d time.Duration) {
	a.h.WithLabelValues(verb, u.Host).Observe(d.Seconds())
}

type resultAdapter struct{ c *prometheus.CounterVec }

func (a resultAdapter) Increment(_ context.Context, code, method, host string) {
	a.c.WithLabelValues(code, method, host).Inc()
}

// queueMetrics is a workqueue.MetricsProvider over client_golang vectors
// labelled by queue name (pods, nodes, subnets, services, ...).
type queueMetrics struct {
	depth, unfinished, longest *prometheus.GaugeVec
	adds, retries              *prometheus.CounterVec
	latency, work              *prometheus.HistogramVec
}

func newQueueMetrics(r prometheus.Registerer) *queueMetrics {
	buckets := prometheus.ExponentialBuckets(1e-6, 10, 10)
	m := &queueMetrics{
		depth:      prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_depth", Help: "Items waiting in the work queue."}, []string{"name"}),
		unfinished: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, []string{"name"}),
		longest:    prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "workqueue_longest_running_processor_seconds", Help: "Seconds the longest running worker of the queue has been at it."}, []string{"name"}),
		adds:       prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_adds_total", Help: "Items added to the work queue."}, []string{"name"}),
		retries:    prometheus.NewCounterVec(prometheus.CounterOpts{Name: "workqueue_retries_total", Help: "Items re-queued after a failure."}, []string{"name"}),
		latency:    prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_queue_duration_seconds", Help: "Seconds an item waits before a worker takes it.", Buckets: buckets}, []string{"name"}),
		work:       prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "workqueue_work_duration_seconds", Help: "Seconds a worker spends on an item.", Buckets: buckets}, []string{"name"}),
	}
	r.MustRegister(m.depth, m.unfinished, m.longest, m.adds, m.retries, m.latency, m.work)
	return m
}

func (m *queueMetrics) NewDepthMetric(name string) workqueue.GaugeMetric {
	return m.depth.WithLabelValues(name)
}
func (m *queueMetrics) NewAddsMetric(name string) workqueue.CounterMetric {
	return m.adds.WithLabelValues(name)
}
func (m *queueMetrics) NewLatencyMetric(name string) workqueue.HistogramMetric {
	return m.latency.WithLabelValues(name)
}
func (m *queueMetrics) NewWorkDurationMetric(name string) workqueue.HistogramMetric {
	return m.work.WithLabelValues(name)
}
func (m *queueMetrics) NewUnfinishedWorkSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.unfinished.WithLabelValues(name)
}
func (m *queueMetrics) NewLongestRunningProcessorSecondsMetric(name string) workqueue.SettableGaugeMetric {
	return m.longest.WithLabelValues(name)
}
func (m *queueMetrics) NewRetriesMetric(name string) workqueue.CounterMetric {
	return m.retries.WithLabelValues(name)
}

package server

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	latency *prometheus.HistogramVec
	errors  *prometheus.CounterVec
}

// newMetrics registers the CNI metrics on reg:
//
//	ovnhost_cni_request_duration_seconds{command,result}  histogram
//	ovnhost_cni_errors_total{command,reason}              counter
//
// Registering twice on the same registry (a restarted unit) reuses the
// existing collectors.
func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "ovnhost", Subsystem: "cni", Name: "request_duration_seconds",
			Help:    "Time from the plugin's request to the server's answer, per CNI command and result (success or error).",
			Buckets: []float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"command", "result"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "ovnhost", Subsystem: "cni", Name: "errors_total",
			Help: "Failed CNI requests by command and reason (bad_request, invalid_annotation, annotation_timeout, ipam, netns, plumbing, ovs, ovn_install_timeout, check, gc, status, pod_network, internal).",
		}, []string{"command", "reason"}),
	}
	if reg == nil {
		return m, nil
	}
	if err := reg.Register(m.latency); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.latency = are.ExistingCollector.(*prometheus.HistogramVec)
	}
	if err := reg.Register(m.errors); err != nil {
		var are prometheus.AlreadyRegisteredError
		if !errors.As(err, &are) {
			return nil, err
		}
		m.errors = are.ExistingCollector.(*prometheus.CounterVec)
	}
	return m, nil
}

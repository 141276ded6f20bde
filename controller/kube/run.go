package kube

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// registerMetrics registers the assembly's own metrics (the reconcilers
// register theirs) and returns the leader gauge.
func registerMetrics(r prometheus.Registerer, nb *ovnnb.Client) prometheus.Gauge {
	leader := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovnhost_controller_leader", Help: "1 while this replica leads."})
	cs := []prometheus.Collector{leader}
	if nb != nil {
		cs = append(cs, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "ovnhost_controller_nb_connected",
			Help: "1 while the OVN northbound connection is up."}, func() float64 {
			if nb.Connected() {
				return 1
			}
			return 0
		}))
	}
	for _, c := range cs {
		_ = r.Register(c)
	}
	return leader
}

// Options are what main passes to Run.
type Options struct {
	Config
	HealthAddr string // ":10660"; "" = no HTTP server
	Profiling  bool   // serve /debug/pprof on HealthAddr
	// MetricsAuth protects /metrics and pprof (metricsauth.go): "auto"
	// (default: "kubernetes" unless HealthAddr is a loopback address),
	// "kubernetes" (HTTPS, TokenReview, SubjectAccessReview) or "none".
	MetricsAuth string
	// MetricsCert, MetricsKey: the HTTPS key pair (re-read when changed);
	// both empty: a self-signed certificate made at start.
	MetricsCert, MetricsKey string
	NBTLS                   *tls.Config
	// NBUnhealthyAfter: /healthz fails once the NB connection has been down
	// (or never up) this long; 0 = DefaultNBUnhealthyAfter.
	NBUnhealthyAfter time.Duration
	// Leader election: off when LeaseName is "".
	LeaseNamespace, LeaseName, Identity       string
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
}

// DefaultNBUnhealthyAfter is how long a lost NB connection is tolerated by /healthz.
const DefaultNBUnhealthyAfter = 60 * time.Second

// nbHealth tells /healthz how long the NB connection has been down. It is
// evaluated on each probe (no timer): down since the first probe that saw
// it down, or since start while the first connection is being made.
type nbHealth struct {
	mu        sync.Mutex
	after     time.Duration
	nb        *ovnnb.Client // nil until connected once
	downSince time.Time     // zero while up
}

func (h *nbHealth) set(nb *ovnnb.Client) {
	h.mu.Lock()
	h.nb = nb
	h.mu.Unlock()
}

func (h *nbHealth) check() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nb != nil && h.nb.Connected() {
		h.downSince = time.Time{}
		return nil
	}
	if h.downSince.IsZero() {
		h.downSince = time.Now()
	}
	if d := time.Since(h.downSince); d >= h.after {
		what := "connection lost"
		if h.nb == nil {
			what = "not connected yet"
		}
		return fmt.Errorf("OVN northbound database: %s for %s (over --nb-unhealthy-after %s); check OVN_DB_IPS / --ovn-nb-addr, the NB servers and, with ssl:, the certificates in --ovn-tls-dir", what, d.Round(time.Second), h.after)
	}
	return nil
}

// Run connects to the NB, serves /healthz /readyz /metrics, and runs the
// controller while it holds the lease (or always, without leader election).
// It returns when ctx ends (nil) or leadership is lost (error: exit and restart).
func Run(ctx context.Context, o Options) error {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerClientMetrics(reg) // before any queue or client exists
	o.Registry = reg
	var ctlp atomic.Pointer[Controller]
	if o.NBUnhealthyAfter <= 0 {
		o.NBUnhealthyAfter = DefaultNBUnhealthyAfter
	}
	health := &nbHealth{after: o.NBUnhealthyAfter, downSince: time.Now()}
	if o.HealthAddr != "" {
		secure, err := metricsAuthFor(o.MetricsAuth, o.HealthAddr)
		if err != nil {
			return err
		}
		var kc kubernetes.Interface
		if secure {
			if kc, err = kubernetes.NewForConfig(o.Rest); err != nil {
				return err
			}
		}
		_, stop, err := serveHealth(o, reg, health, &ctlp, kc)
		if err != nil {
			return err
		}
		defer stop()
	}
	tNB := time.Now()
	// Port_Group and ACL always: NetworkPolicy, and Subnet isolation
	// (private, allowSubnets, acls) are ACLs too.
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: o.NBEndpoints, Logger: o.Logger, TLS: o.NBTLS, PortGroups: true})
	if err != nil {
		return err
	}
	o.Logger.Info("connected to OVN northbound", "endpoints", o.NBEndpoints, "took", time.Since(tNB).Round(time.Millisecond).String())
	defer nb.Close()
	health.set(nb)
	c, err := New(o.Config, nb)
	if err != nil {
		return err
	}
	if o.LeaseName == "" {
		ctlp.Store(c)
		c.leader.Set(1)
		return c.Run(ctx)
	}
	return lead(ctx, o, c, &ctlp)
}

// serveHealth serves /healthz, /readyz, /metrics (and pprof) on
// o.HealthAddr until the returned stop. With kc, the listener is HTTPS and
// /metrics and pprof need a token the API server accepts and authorizes
// (metricsauth.go); /healthz and /readyz stay open to the probes.
func serveHealth(o Options, reg *prometheus.Registry, health *nbHealth, ctlp *atomic.Pointer[Controller], kc kubernetes.Interface) (addr string, stop func(), err error) {
	ready := func() error {
		ctl := ctlp.Load()
		if ctl == nil {
			return errors.New("not started (standby replica or still connecting)")
		}
		if !ctl.ready.Load() {
			return errors.New("start-up not finished (syncing caches, rebuilding IPAM)")
		}
		if !ctl.net.NB.Connected() {
			return errors.New("OVN northbound database not connected")
		}
		return nil
	}
	ln, err := net.Listen("tcp", o.HealthAddr)
	if err != nil {
		return "", nil, fmt.Errorf("health/metrics address %s: %w (set --health-addr)", o.HealthAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		// Alive unless the NB has been unreachable for long: a restart
		// then starts over (fresh connection, certificates re-read).
		if err := health.check(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := ready(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	protect := func(h http.Handler) http.Handler { return h }
	if kc != nil {
		tlsCfg, err := metricsTLS(o.MetricsCert, o.MetricsKey)
		if err != nil {
			_ = ln.Close()
			return "", nil, err
		}
		ln = tls.NewListener(ln, tlsCfg)
		protect = newMetricsAuthorizer(kc).wrap
	} else if !loopbackAddr(o.HealthAddr) && o.Logger != nil {
		o.Logger.Warn("/metrics (and pprof) are served without authentication on a non-loopback address (--metrics-auth=none); anyone who reaches the port reads them", "addr", o.HealthAddr)
	}
	mux.Handle("/metrics", protect(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
	if o.Profiling {
		mux.Handle("/debug/pprof/", protect(http.HandlerFunc(pprof.Index)))
		mux.Handle("/debug/pprof/profile", protect(http.HandlerFunc(pprof.Profile)))
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return ln.Addr().String(), func() { _ = srv.Close() }, nil
}

// lead runs c while this replica holds the lease o names.
func lead(ctx context.Context, o Options, c *Controller, ctlp *atomic.Pointer[Controller]) error {
	if o.Identity == "" {
		h, _ := os.Hostname()
		o.Identity = h
	}
	kc, err := kubernetes.NewForConfig(o.Rest)
	if err != nil {
		return err
	}
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: o.LeaseNamespace, Name: o.LeaseName},
		Client:     kc.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: o.Identity},
	}
	if o.LeaseDuration == 0 {
		o.LeaseDuration, o.RenewDeadline, o.RetryPeriod = 15*time.Second, 10*time.Second, 2*time.Second
	}
	runErr := make(chan error, 1)
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: o.LeaseDuration, RenewDeadline: o.RenewDeadline, RetryPeriod: o.RetryPeriod,
		ReleaseOnCancel: true, Name: o.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				o.Logger.Info("leading", "lease", o.LeaseNamespace+"/"+o.LeaseName, "identity", o.Identity)
				c.leader.Set(1)
				ctlp.Store(c)
				runErr <- c.Run(lctx)
			},
			OnStoppedLeading: func() {
				c.leader.Set(0)
				if ctx.Err() == nil {
					lost = true
				}
			},
			OnNewLeader: func(id string) {
				if id != o.Identity {
					o.Logger.Info("standby: another replica leads", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	le.Run(ctx)
	select {
	case err := <-runErr:
		if err != nil {
			return err
		}
	default:
	}
	if lost {
		return errors.New("lost leadership; exiting so a fresh replica takes over")
	}
	return nil
}

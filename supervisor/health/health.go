// Package health is what the node daemon tells the outside world about its
// children: sd_notify (READY, STATUS, WATCHDOG, STOPPING), /healthz, /readyz
// and Prometheus metrics. It is plain state plus reporters; the supervisor
// feeds it transitions.
package health

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ovnhost/ovnhost/internal/version"
)

// Child is the reported state of one supervised daemon (or unit).
type Child struct {
	Name      string
	Pid       int
	Up        bool   // process running
	Ready     bool   // readiness gate passed since the last start
	Waiting   string // what its gate waits for, while not ready
	Restarts  int
	LastExit  string
	CrashLoop bool
	// Degraded: ready, but without part of what it serves (a unit that
	// runs without an underlay network whose NIC is missing), and why.
	Degraded string
}

// Notifier sends an sd_notify state; go-systemd's SdNotify by default.
type Notifier func(state string) error

// Reporter holds the state and publishes it.
type Reporter struct {
	mu        sync.Mutex
	children  map[string]*Child
	order     []string
	readySent bool
	stopping  bool
	status    string
	notify    Notifier

	up        *prometheus.GaugeVec
	ready     *prometheus.GaugeVec
	restarts  *prometheus.CounterVec
	toReady   *prometheus.GaugeVec
	gateWait  *prometheus.HistogramVec
	allReady  prometheus.Gauge
	registry  *prometheus.Registry
	startedAt time.Time
	// central reports the Raft state of a central member (nil on a node).
	central func() *CentralStatus
}

// New creates a Reporter with its own metrics registry (Go and process
// collectors included).
func New() *Reporter {
	r := &Reporter{
		children:  map[string]*Child{},
		startedAt: time.Now(),
		notify: func(state string) error {
			_, err := daemon.SdNotify(false, state)
			return err
		},
		registry: prometheus.NewRegistry(),
	}
	r.up = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovnhost_child_up", Help: "1 while the child process is running."}, []string{"child"})
	r.ready = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovnhost_child_ready", Help: "1 once the child passed its readiness gate since its last start."}, []string{"child"})
	r.restarts = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovnhost_child_restarts_total", Help: "Restarts of the child after it died or was re-gated."}, []string{"child"})
	r.toReady = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovnhost_child_time_to_ready_seconds", Help: "Time from the child's last start to passing its readiness gate."}, []string{"child"})
	r.gateWait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ovnhost_readiness_wait_seconds", Help: "Time spent waiting on each readiness gate.",
		Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"child"})
	r.allReady = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovnhost_ready", Help: "1 while every child is ready."})
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovnhost_build_info", Help: "The running build; netctl doctor compares the installed CNI plugin with it."}, []string{"version"})
	build.WithLabelValues(version.Version).Set(1)
	r.registry.MustRegister(build, r.up, r.ready, r.restarts, r.toReady, r.gateWait, r.allReady,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}), &rssCollector{r: r})
	return r
}

// SetNotifier replaces the sd_notify sender (tests).
func (r *Reporter) SetNotifier(n Notifier) { r.notify = n }

// Registry is where other subsystems (the CNI server) register metrics.
func (r *Reporter) Registry() *prometheus.Registry { return r.registry }

func (r *Reporter) child(name string) *Child {
	c, ok := r.children[name]
	if !ok {
		c = &Child{Name: name}
		r.children[name] = c
		r.order = append(r.order, name)
		r.up.WithLabelValues(name).Set(0)
		r.ready.WithLabelValues(name).Set(0)
		r.restarts.WithLabelValues(name)
	}
	return c
}

// Register declares a child before it starts, so /readyz lists it.
func (r *Reporter) Register(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.child(name)
}

// Waiting records what a child's gate is waiting for.
func (r *Reporter) Waiting(name, what string) {
	r.mu.Lock()
	c := r.child(name)
	c.Waiting = what
	c.Ready = false
	r.ready.WithLabelValues(name).Set(0)
	r.allReady.Set(0)
	r.mu.Unlock()
	r.sendStatus(fmt.Sprintf("waiting for %s: %s", name, what))
}

// Started records a new process of the child.
func (r *Reporter) Started(name string, pid int, restart bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.child(name)
	c.Pid, c.Up = pid, true
	r.up.WithLabelValues(name).Set(1)
	if restart {
		c.Restarts++
		r.restarts.WithLabelValues(name).Inc()
	}
}

// Ready records that the child passed its gate after waited (gate time) and
// took (time since its start).
func (r *Reporter) Ready(name string, waited, took time.Duration) {
	r.mu.Lock()
	c := r.child(name)
	c.Ready, c.Waiting, c.CrashLoop = true, "", false
	r.ready.WithLabelValues(name).Set(1)
	r.toReady.WithLabelValues(name).Set(took.Seconds())
	r.gateWait.WithLabelValues(name).Observe(waited.Seconds())
	all := r.allReadyLocked()
	first := all && !r.readySent
	if all {
		r.readySent = true
		r.allReady.Set(1)
	}
	r.mu.Unlock()
	switch {
	case first:
		r.send(fmt.Sprintf("READY=1\nSTATUS=ready: %s", r.summary()))
	case all:
		r.sendStatus("ready: " + r.summary())
	}
}

// Exited records that the child died; crashLoop marks repeated deaths.
func (r *Reporter) Exited(name, reason string, crashLoop bool) {
	r.mu.Lock()
	c := r.child(name)
	c.Up, c.Ready, c.Pid, c.LastExit, c.CrashLoop = false, false, 0, reason, crashLoop
	r.up.WithLabelValues(name).Set(0)
	r.ready.WithLabelValues(name).Set(0)
	r.allReady.Set(0)
	stopping := r.stopping
	r.mu.Unlock()
	if stopping {
		return
	}
	if crashLoop {
		r.sendStatus(fmt.Sprintf("%s is crash-looping: %s", name, reason))
	} else {
		r.sendStatus(fmt.Sprintf("%s died (%s); restarting", name, reason))
	}
}

// Unresponsive records that a ready child stopped answering its probe:
// not ready, with the reason, until Responsive or its restart.
func (r *Reporter) Unresponsive(name, reason string) {
	r.notReady(name, reason, fmt.Sprintf("%s is unresponsive; waiting for %s", name, reason))
}

// Lacking records that a ready child lacks what it needs beyond answering
// (reason: what it waits for, e.g. its SB connection): not ready, left
// running, until Responsive.
func (r *Reporter) Lacking(name, reason string) {
	r.notReady(name, reason, fmt.Sprintf("%s is not ready; waiting for %s", name, reason))
}

func (r *Reporter) notReady(name, reason, status string) {
	r.mu.Lock()
	c := r.child(name)
	c.Ready, c.Waiting = false, reason
	r.ready.WithLabelValues(name).Set(0)
	r.allReady.Set(0)
	stopping := r.stopping
	r.mu.Unlock()
	if !stopping {
		r.sendStatus(status)
	}
}

// Responsive records that the child answers its probe again (or reached
// its upstream again).
func (r *Reporter) Responsive(name string) {
	r.mu.Lock()
	c := r.child(name)
	if !c.Up {
		r.mu.Unlock()
		return
	}
	c.Ready, c.Waiting = true, ""
	r.ready.WithLabelValues(name).Set(1)
	all := r.allReadyLocked()
	if all {
		r.allReady.Set(1)
	}
	r.mu.Unlock()
	if all {
		r.sendStatus("ready: " + r.summary())
	}
}

// Recovered records that a unit (not a child process: no pid) which was
// Lacking has what it needs again: ready, as after its start.
func (r *Reporter) Recovered(name string) {
	r.mu.Lock()
	c := r.child(name)
	c.Ready, c.Waiting = true, ""
	r.ready.WithLabelValues(name).Set(1)
	all := r.allReadyLocked()
	if all {
		r.allReady.Set(1)
	}
	r.mu.Unlock()
	if all {
		r.sendStatus("ready: " + r.summary())
	}
}

// Degraded records that a unit is ready but lacks part of what it serves
// (reason; "" clears it): the node stays ready, as the rest works, and
// /readyz and STATUS name what is missing. While the unit is still
// awaited, /readyz adds the reason to what it waits for.
func (r *Reporter) Degraded(name, reason string) {
	r.mu.Lock()
	c := r.child(name)
	changed := c.Degraded != reason
	c.Degraded = reason
	all := r.allReadyLocked()
	stopping := r.stopping
	r.mu.Unlock()
	if changed && all && !stopping {
		msg := "ready: " + name + " recovered; " + r.summary()
		if _, s := r.Status(); strings.HasPrefix(s, "ready, degraded") {
			msg = s
		}
		r.sendStatus(msg)
	}
}

// Stopping announces the shutdown.
func (r *Reporter) Stopping() {
	r.mu.Lock()
	r.stopping = true
	r.allReady.Set(0)
	r.mu.Unlock()
	r.send("STOPPING=1\nSTATUS=stopping")
}

func (r *Reporter) allReadyLocked() bool {
	if len(r.order) == 0 || r.stopping {
		return false
	}
	for _, n := range r.order {
		if !r.children[n].Ready {
			return false
		}
	}
	return true
}

func (r *Reporter) summary() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var parts []string
	for _, n := range r.order {
		c := r.children[n]
		if c.Pid > 0 {
			parts = append(parts, fmt.Sprintf("%s pid %d", n, c.Pid))
		}
	}
	return strings.Join(parts, ", ")
}

// Status is a one-line readiness verdict for humans: "ready" or what is
// missing, naming the child and why.
func (r *Reporter) Status() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false, "stopping"
	}
	var missing []string
	for _, n := range r.order {
		c := r.children[n]
		switch {
		case c.Ready:
		case c.CrashLoop:
			missing = append(missing, fmt.Sprintf("%s is crash-looping (%d restarts): %s", n, c.Restarts, c.LastExit))
		case c.Waiting != "":
			m := fmt.Sprintf("%s: waiting for %s", n, c.Waiting)
			if c.Degraded != "" {
				// What keeps it from getting there (e.g. held by a version skew).
				m += " (" + c.Degraded + ")"
			}
			missing = append(missing, m)
		case c.LastExit != "":
			missing = append(missing, fmt.Sprintf("%s: %s", n, c.LastExit))
		default:
			missing = append(missing, n+": not started")
		}
	}
	if len(r.order) == 0 {
		return false, "starting"
	}
	if len(missing) == 0 {
		var degraded []string
		for _, n := range r.order {
			if d := r.children[n].Degraded; d != "" {
				degraded = append(degraded, n+": "+d)
			}
		}
		if len(degraded) > 0 {
			return true, "ready, degraded: " + strings.Join(degraded, "; ")
		}
		return true, "ready"
	}
	return false, strings.Join(missing, "; ")
}

// Healthy is false only when a child is crash-looping: what WATCHDOG=1 and
// /healthz stand for.
func (r *Reporter) Healthy() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range r.children {
		if c.CrashLoop {
			return false
		}
	}
	return true
}

// Children returns a snapshot, in registration order.
func (r *Reporter) Children() []Child {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Child, 0, len(r.order))
	for _, n := range r.order {
		out = append(out, *r.children[n])
	}
	return out
}

func (r *Reporter) sendStatus(s string) {
	r.mu.Lock()
	same := s == r.status
	r.status = s
	r.mu.Unlock()
	if !same {
		r.send("STATUS=" + s)
	}
}

func (r *Reporter) send(state string) {
	if r.notify != nil {
		_ = r.notify(state)
	}
}

// RunWatchdog pings systemd's watchdog at half its interval while healthy;
// it returns at once when the unit has no WatchdogSec.
func (r *Reporter) RunWatchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return
	}
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if r.Healthy() {
				r.send("WATCHDOG=1")
			}
		}
	}
}

// Handler serves /healthz, /readyz and /metrics.
func (r *Reporter) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !r.Healthy() {
			_, msg := r.Status()
			http.Error(w, "unhealthy: "+msg, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ok, msg := r.Status()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, msg)
		if req.URL.Query().Has("verbose") {
			for _, c := range r.Children() {
				fmt.Fprintf(w, "%s pid=%d up=%v ready=%v restarts=%d last_exit=%q\n", c.Name, c.Pid, c.Up, c.Ready, c.Restarts, c.LastExit)
			}
			WriteCentral(w, r.centralStatus())
		}
	})
	mux.Handle("/metrics", r.MetricsHandler())
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r.Snapshot())
	})
	return mux
}

// MetricsHandler serves the metrics registry (also behind the node API's authorizer).
func (r *Reporter) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(r.registry, promhttp.HandlerOpts{})
}

// Snapshot returns the current state.
func (r *Reporter) Snapshot() Snapshot {
	ok, msg := r.Status()
	s := Snapshot{Ready: ok, Status: msg, Version: version.Version, Uptime: time.Since(r.startedAt).Round(time.Second).String(), Central: r.centralStatus()}
	for _, c := range r.Children() {
		cs := ChildStatus{Name: c.Name, Pid: c.Pid, Up: c.Up, Ready: c.Ready, Waiting: c.Waiting, Restarts: c.Restarts, LastExit: c.LastExit, CrashLoop: c.CrashLoop, Degraded: c.Degraded}
		if c.Pid > 0 {
			cs.RSSBytes, _ = readRSS(c.Pid)
		}
		s.Children = append(s.Children, cs)
	}
	return s
}

// rssCollector reports each child's resident memory from /proc at scrape
// time, the number that tells an OOM-kill is coming (seed 004).
type rssCollector struct{ r *Reporter }

var rssDesc = prometheus.NewDesc("ovnhost_child_resident_memory_bytes", "Resident memory of the child process.", []string{"child"}, nil)

func (c *rssCollector) Describe(ch chan<- *prometheus.Desc) { ch <- rssDesc }

func (c *rssCollector) Collect(ch chan<- prometheus.Metric) {
	for _, k := range c.r.Children() {
		if k.Pid <= 0 {
			continue
		}
		if rss, ok := readRSS(k.Pid); ok {
			ch <- prometheus.MustNewConstMetric(rssDesc, prometheus.GaugeValue, float64(rss), k.Name)
		}
	}
}

// readRSS reads VmRSS of pid in bytes.
func readRSS(pid int) (int64, bool) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "status"))
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) >= 1 {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb * 1024, err == nil
			}
		}
	}
	return 0, false
}

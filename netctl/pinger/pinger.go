// Package pinger checks the network continuously from a pod: ICMP to the
// pinger pods of the other nodes (pod to pod across every node pair), to
// every node's address (the reply is the node-to-pod path), to outside
// addresses, and DNS queries to the cluster DNS Service; at an interval and
// a bounded probe rate. It exports Prometheus latency histograms and loss
// counters per target class and serves its latest round as JSON (/matrix),
// which the node daemon passes to netctl diagnose.
//
// It runs as its own DaemonSet (netctl pinger, on the pod network) and not
// inside the node daemon: only a process in a pod's network namespace takes
// the path pods take (its logical switch port, the pod subnet, egress NAT,
// the Service load balancer for DNS); the node daemon lives in the host's
// namespace, where "outside" and the DNS Service are reached without OVN.
// A separate pod also keeps the node daemon free of probing load and
// failure, and an operator can scale the probing down or off by itself.
package pinger

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/time/rate"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Target classes (the "class" label).
const (
	ClassPod      = "pod"      // the pinger pod on another node
	ClassNode     = "node"     // a node's InternalIP
	ClassExternal = "external" // an address outside the cluster
	ClassDNS      = "dns"      // a name through the DNS Service
)

// Options configure a pinger.
type Options struct {
	Kube      kubernetes.Interface
	Node      string // this pod's node (NODE_NAME)
	Namespace string // where the pinger pods are (POD_NAMESPACE)
	Selector  string // label selector of the pinger pods (app=ovnhost-pinger)
	Interval  time.Duration
	Count     int           // probes per target per round
	Timeout   time.Duration // per probe
	Rate      float64       // probes per second, at most
	External  []string      // outside addresses to ping
	DNSServer string        // IP[:port] of the DNS Service ("" with DNSName: from /etc/resolv.conf)
	DNSName   string        // name to resolve ("" disables the DNS class)
	Log       *slog.Logger
	Registry  *prometheus.Registry
}

// Probe is one target of a round.
type Probe struct {
	Class  string  `json:"class"`
	Target string  `json:"target"`
	Addr   string  `json:"addr"`
	Sent   int     `json:"sent"`
	Lost   int     `json:"lost"`
	RTTms  float64 `json:"rttMs"` // mean of the answered probes
	Error  string  `json:"error,omitempty"`
}

// Round is the latest set of results.
type Round struct {
	Node    string  `json:"node"`
	At      string  `json:"at"`
	Targets []Probe `json:"targets"`
}

// Pinger runs rounds and keeps the latest.
type Pinger struct {
	o       Options
	limiter *rate.Limiter
	icmp    *icmpConn

	rtt  *prometheus.HistogramVec
	sent *prometheus.CounterVec
	lost *prometheus.CounterVec
	last prometheus.Gauge

	mu     sync.Mutex
	latest *Round
}

// New checks the options and registers the metrics.
func New(o Options) (*Pinger, error) {
	if o.Kube == nil || o.Node == "" || o.Namespace == "" {
		return nil, errors.New("pinger: needs a Kubernetes client, NODE_NAME and POD_NAMESPACE")
	}
	if o.Selector == "" {
		o.Selector = "app=ovnhost-pinger"
	}
	if o.Interval <= 0 {
		o.Interval = 15 * time.Second
	}
	if o.Count <= 0 {
		o.Count = 3
	}
	if o.Timeout <= 0 {
		o.Timeout = time.Second
	}
	if o.Rate <= 0 {
		o.Rate = 20
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.DNSName != "" && o.DNSServer == "" {
		o.DNSServer = resolvConfServer("/etc/resolv.conf")
		if o.DNSServer == "" {
			return nil, errors.New("pinger: --dns-name needs --dns-server (no nameserver in /etc/resolv.conf)")
		}
	}
	p := &Pinger{o: o, limiter: rate.NewLimiter(rate.Limit(o.Rate), 1)}
	p.rtt = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ovnhost_pinger_rtt_seconds", Help: "Round-trip time of answered probes, per target class and target.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}}, []string{"class", "target"})
	p.sent = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovnhost_pinger_probes_total", Help: "Probes sent, per target class and target."}, []string{"class", "target"})
	p.lost = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovnhost_pinger_lost_total", Help: "Probes without an answer within the timeout, per target class and target."}, []string{"class", "target"})
	p.last = prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovnhost_pinger_last_round_timestamp_seconds", Help: "When the latest round ended (Unix time)."})
	o.Registry.MustRegister(p.rtt, p.sent, p.lost, p.last)
	return p, nil
}

// Latest returns the latest round (nil before the first).
func (p *Pinger) Latest() *Round {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.latest
}

// Handler serves /metrics and /matrix (read-only, as kube-ovn-pinger's port).
func (p *Pinger) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.o.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/matrix", func(w http.ResponseWriter, _ *http.Request) {
		r := p.Latest()
		if r == nil {
			http.Error(w, "no round finished yet", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(r)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	return mux
}

// Run probes every interval until ctx ends.
func (p *Pinger) Run(ctx context.Context) error {
	c, err := listenICMP()
	if err != nil {
		return fmt.Errorf("pinger: ICMP socket (needs CAP_NET_RAW): %w", err)
	}
	p.icmp = c
	defer c.close()
	for {
		p.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(p.o.Interval):
		}
	}
}

type target struct{ class, name, addr string }

func (p *Pinger) targets(ctx context.Context) ([]target, error) {
	var out []target
	pods, err := p.o.Kube.CoreV1().Pods(p.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: p.o.Selector})
	if err != nil {
		return nil, fmt.Errorf("listing pinger pods (%s in %s): %w", p.o.Selector, p.o.Namespace, err)
	}
	for _, pod := range pods.Items {
		if pod.Spec.NodeName == p.o.Node || pod.DeletionTimestamp != nil {
			continue
		}
		if ip := podIP(&pod); ip != "" {
			out = append(out, target{ClassPod, pod.Spec.NodeName, ip})
		}
	}
	nodes, err := p.o.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP && net.ParseIP(a.Address).To4() != nil {
				out = append(out, target{ClassNode, n.Name, a.Address})
				break
			}
		}
	}
	for _, e := range p.o.External {
		out = append(out, target{ClassExternal, e, e})
	}
	if p.o.DNSName != "" {
		out = append(out, target{ClassDNS, p.o.DNSName, p.o.DNSServer})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].class != out[j].class {
			return out[i].class < out[j].class
		}
		return out[i].name < out[j].name
	})
	return out, nil
}

// podIP is the pod's address: status.podIP (kubelet), else the controller's
// annotation (pods a test plays kubelet for have no status).
func podIP(p *corev1.Pod) string {
	if p.Status.PodIP != "" {
		return p.Status.PodIP
	}
	ip, _, _ := strings.Cut(p.Annotations["ovn.kubernetes.io/ip_address"], ",")
	return ip
}

func (p *Pinger) round(ctx context.Context) {
	ts, err := p.targets(ctx)
	r := &Round{Node: p.o.Node}
	if err != nil {
		p.o.Log.Warn("pinger: no targets this round", "err", err)
	}
	var wg sync.WaitGroup
	results := make([]Probe, len(ts))
	for i, t := range ts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = p.probe(ctx, t)
		}()
	}
	wg.Wait()
	r.Targets = results
	r.At = time.Now().UTC().Format(time.RFC3339)
	p.last.SetToCurrentTime()
	p.mu.Lock()
	p.latest = r
	p.mu.Unlock()
}

func (p *Pinger) probe(ctx context.Context, t target) Probe {
	res := Probe{Class: t.class, Target: t.name, Addr: t.addr}
	var total time.Duration
	for i := 0; i < p.o.Count; i++ {
		if err := p.limiter.Wait(ctx); err != nil {
			break
		}
		var rtt time.Duration
		var err error
		if t.class == ClassDNS {
			rtt, err = dnsProbe(ctx, t.addr, t.name, p.o.Timeout)
		} else {
			rtt, err = p.icmp.echo(ctx, t.addr, p.o.Timeout)
		}
		res.Sent++
		p.sent.WithLabelValues(t.class, t.name).Inc()
		if err != nil {
			res.Lost++
			res.Error = err.Error()
			p.lost.WithLabelValues(t.class, t.name).Inc()
			continue
		}
		total += rtt
		p.rtt.WithLabelValues(t.class, t.name).Observe(rtt.Seconds())
	}
	if ok := res.Sent - res.Lost; ok > 0 {
		res.RTTms = float64(total.Microseconds()) / 1000 / float64(ok)
		res.Error = ""
	}
	return res
}

func resolvConfServer(path string) string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(raw), "\n") {
		f := strings.Fields(l)
		if len(f) >= 2 && f[0] == "nameserver" {
			return f[1]
		}
	}
	return ""
}

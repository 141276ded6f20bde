// Package server is the CNI server embedded in the ovnhost node daemon. The
// ovnhost-cni plugin forwards every CNI request to it over a unix socket
// (HTTP, package cni/protocol); the server decodes it, serialises requests
// per container, bounds how many run at once, answers in the request's CNI
// version and counts them (metrics.go). It dispatches to its parts:
//
//   - the pod source (cni/podsource): a pod's network, from the
//     controller's annotations (Kubernetes) or allocated in-process
//     (standalone);
//   - the pod wiring (cni/podwire): veth, OVS port on br-int, QoS, mirror,
//     the wait for ovn-installed;
//   - in the background, the plugin and conflist installer (cni/cniconf)
//     and the node port ovn0 (cni/nodeport).
//
// New builds the default parts from Options; Assemble takes parts built
// elsewhere. The server is a lifecycle.Unit: the daemon starts it after
// ovn-controller is ready and stops it first.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Defaults.
const (
	DefaultAnnotationWait = 60 * time.Second
	DefaultInstallWait    = 30 * time.Second
)

// DefaultMaxConcurrent bounds the CNI requests handled at once; more wait
// for a slot (up to slotWait), then are answered "try again later".
const DefaultMaxConcurrent = 64

const slotWait = 30 * time.Second

// Wiring wires pods on the node (podwire.Wirer).
type Wiring interface {
	// Start checks the bridge and settles the datapath; Stop waits for
	// background work. Datapath is known after Start.
	Start(ctx context.Context) error
	Stop()
	Datapath() nodeconfig.Datapath
	// Status: pods can be wired (STATUS).
	Status(ctx context.Context) error

	// Add wires a pod, done builds the answer (ADD); Del and Forget undo
	// it (DEL); Check compares (CHECK); Owned and Remove are GC's.
	Add(ctx context.Context, a podwire.Attachment, n podwire.Network, done func(*podwire.Result) error) error
	Del(ctx context.Context, a podwire.Attachment) error
	Forget(a podwire.Attachment)
	Check(ctx context.Context, a podwire.Attachment, want podwire.Expected) error
	Owned(ctx context.Context) ([]podwire.Attachment, error)
	Remove(ctx context.Context, port string) error

	// Wired lists the wired pods; SetRates and ReapplyRates make their QoS
	// follow their rate annotations.
	Wired() []string
	SetRates(key string, ingressMbps, egressMbps int)
	ReapplyRates(ctx context.Context, key string, ingressMbps, egressMbps int)
}

// Installer installs the plugin and the conflist, and keep keeps them in
// place until its ctx ends (cniconf.Installer).
type Installer interface {
	Install() (keep func(ctx context.Context), err error)
}

// Runner runs in the background until ctx ends (nodeport.Port).
type Runner interface {
	Run(ctx context.Context)
}

// rateSource is a pod source whose pods' rate annotations change while
// they run (podsource.Kube).
type rateSource interface {
	OnRatesChanged(f func(key string, r podsource.Rates))
	WaitSynced(ctx context.Context) error
	PodRates(key string) (podsource.Rates, bool, error)
}

// Config is the transport's configuration.
type Config struct {
	Socket      string // default protocol.DefaultSocket
	SocketGroup string // group allowed on the socket ("" root only)
	// PodMTU is the node's pod MTU, used when neither the Subnet nor the
	// conflist gives one (<= 0: nodeconfig.FallbackPodMTU).
	PodMTU int
	// UnderlayMTU is a provider network's MTU on this node (0: unknown; nil:
	// underlay pods get PodMTU).
	UnderlayMTU func(providerNetwork string) int
	// AnnotationWait bounds ADD's wait for the pod's network (default
	// DefaultAnnotationWait); InstallWait is the wiring's wait for
	// ovn-installed (default DefaultInstallWait), named in its timeout
	// message. Both bound the HTTP write timeout.
	AnnotationWait, InstallWait time.Duration
	// InstallHeld says why ovn-controller installs no new flows now (""
	// when it does): an ADD then fails at once with that reason, before
	// anything is allocated, instead of waiting InstallWait for an
	// ovn-installed that cannot come (nil: never held).
	InstallHeld   func() string
	MaxConcurrent int // requests handled at once (default DefaultMaxConcurrent)
	// Registerer receives the metrics (nil: prometheus.DefaultRegisterer).
	Registerer prometheus.Registerer
	Log        *slog.Logger // default slog.Default()
}

// Parts are what the server dispatches to. Source and Wiring are
// required; Installer and NodePort are optional (nil: none).
type Parts struct {
	Source    podsource.Source
	Wiring    Wiring
	Installer Installer
	NodePort  Runner
}

// Server is the CNI server unit.
type Server struct {
	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	src      podsource.Source
	wire     Wiring
	install  Installer
	nodePort Runner
	// ownNetns are the host's network namespaces, refused as CNI_NETNS.
	ownNetns hostNetns

	slots     chan struct{}
	handlers  sync.WaitGroup     // requests in flight
	reqCancel context.CancelFunc // cancels the requests' base context
	locks     keyedMutex
	ln        net.Listener
	http      *http.Server
	served    chan struct{}

	bg     sync.WaitGroup
	bgStop context.CancelFunc
}

// Assemble builds the server from its parts; metrics are registered here.
func Assemble(c Config, p Parts) (*Server, error) {
	if p.Source == nil || p.Wiring == nil {
		return nil, errors.New("cni server: the pod source and the pod wiring are required")
	}
	if c.Socket == "" {
		c.Socket = protocol.DefaultSocket
	}
	if c.PodMTU <= 0 {
		c.PodMTU = nodeconfig.FallbackPodMTU
	}
	if c.AnnotationWait <= 0 {
		c.AnnotationWait = DefaultAnnotationWait
	}
	if c.InstallWait <= 0 {
		c.InstallWait = DefaultInstallWait
	}
	if c.MaxConcurrent <= 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.DefaultRegisterer
	}
	if c.Log == nil {
		c.Log = slog.Default()
	}
	own, err := ownNetns()
	if err != nil {
		return nil, fmt.Errorf("cni server: the daemon's own network namespace: %w", err)
	}
	m, err := newMetrics(c.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: c, log: c.Log, metrics: m, src: p.Source, wire: p.Wiring, install: p.Installer, nodePort: p.NodePort,
		ownNetns: own, slots: make(chan struct{}, c.MaxConcurrent)}, nil
}

// Name implements lifecycle.Unit.
func (s *Server) Name() string { return "cni-server" }

// Start checks br-int, starts the pod source, listens on the socket,
// installs the plugin and conflist, and starts the background loops (the
// installer's watch, ovn0, the rates of pods wired before this start). It
// returns once requests are served.
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	if err := s.wire.Start(ctx); err != nil {
		return err
	}
	rs, _ := s.src.(rateSource)
	if rs != nil {
		// Before the informers run: their handlers call it.
		rs.OnRatesChanged(func(key string, r podsource.Rates) { s.wire.SetRates(key, r.IngressMbps, r.EgressMbps) })
	}
	if err := s.src.Start(ctx); err != nil {
		return err
	}
	if err := s.listen(); err != nil {
		return err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.bgStop = cancel
	if s.install != nil {
		keep, err := s.install.Install()
		if err != nil {
			return err
		}
		s.bg.Add(1)
		go func() { defer s.bg.Done(); keep(bctx) }()
	}
	if s.nodePort != nil {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.nodePort.Run(bctx) }()
	}
	if rs != nil {
		// A rate changed while the daemon was down has no update event:
		// apply the current annotations once the informer has listed.
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.reapplyRates(bctx, rs) }()
	}
	s.log.Info("CNI server ready", "socket", s.cfg.Socket, "datapath", s.wire.Datapath(), "mode", s.mode())
	return nil
}

func (s *Server) mode() string {
	if s.src.Kubernetes() {
		return "kubernetes"
	}
	return "standalone"
}

func (s *Server) listen() error {
	sock := s.cfg.Socket
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return fmt.Errorf("CNI socket directory: %w", err)
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale CNI socket %s: %w", sock, err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on the CNI socket %s: %w", sock, err)
	}
	mode := os.FileMode(0o600)
	if g := s.cfg.SocketGroup; g != "" {
		gid, err := lookupGroup(g)
		if err != nil {
			ln.Close()
			return err
		}
		if err := os.Chown(sock, 0, gid); err != nil {
			ln.Close()
			return fmt.Errorf("chown CNI socket to group %s: %w", g, err)
		}
		mode = 0o660
	}
	if err := os.Chmod(sock, mode); err != nil {
		ln.Close()
		return fmt.Errorf("chmod CNI socket: %w", err)
	}
	s.ln = ln
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+protocol.Path, s.serveCNI)
	base, cancel := context.WithCancel(context.Background())
	s.reqCancel = cancel
	// A request is small and sent at once; its answer may wait for the
	// controller and for ovn-controller, never longer than the plugin's
	// own deadline (protocol.NetConf.TimeoutSeconds, 300 s by default).
	s.http = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: s.cfg.AnnotationWait + s.cfg.InstallWait + slotWait + time.Minute, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		ConnContext: withPeer, BaseContext: func(net.Listener) context.Context { return base }}
	s.served = make(chan struct{})
	go func() {
		defer close(s.served)
		if err := s.http.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("CNI server stopped serving", "err", err)
		}
	}()
	return nil
}

func lookupGroup(g string) (int, error) {
	if id, err := strconv.Atoi(g); err == nil {
		return id, nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return 0, fmt.Errorf("CNI socket group %q: %w", g, err)
	}
	return strconv.Atoi(gr.Gid)
}

// Stop stops serving (in-flight requests finish until ctx ends), the
// background loops, the wiring's and the pod source. Wired pods are left
// alone.
func (s *Server) Stop(ctx context.Context) error {
	var errs []error
	if s.http != nil {
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			_ = s.http.Close()
		}
		// Handlers still running (ctx ended first) are told to give up and
		// awaited: they use the OVS client and the pod source stopped below.
		s.reqCancel()
		s.handlers.Wait()
		<-s.served
		s.http = nil
		_ = os.Remove(s.cfg.Socket)
	}
	if s.bgStop != nil {
		s.bgStop()
		s.bg.Wait()
		s.bgStop = nil
	}
	if s.wire != nil {
		s.wire.Stop()
	}
	if s.src != nil {
		s.src.Stop()
	}
	return errors.Join(errs...)
}

// cniError is a failed request: CNI code, metrics reason, message.
type cniError struct {
	code   uint
	reason string
	msg    string
}

func (e *cniError) Error() string { return e.msg }

func fail(code uint, reason, format string, a ...any) *cniError {
	return &cniError{code: code, reason: reason, msg: fmt.Sprintf(format, a...)}
}

func (s *Server) serveCNI(w http.ResponseWriter, r *http.Request) {
	s.handlers.Add(1)
	defer s.handlers.Done()
	t0 := time.Now()
	var req protocol.Request
	var result []byte
	var cerr *cniError
	err := protocol.DecodeRequest(io.LimitReader(r.Body, protocol.MaxRequestBytes), &req)
	switch {
	case err != nil:
		cerr = fail(types.ErrDecodingFailure, "bad_request", "cannot decode the plugin's request: %v", err)
	default:
		release, ok := s.acquireSlot(r.Context())
		if !ok {
			cerr = fail(types.ErrTryAgainLater, "busy", "the CNI server is handling %d requests already and none finished within %s; try again later", cap(s.slots), slotWait)
			break
		}
		result, cerr = s.handle(r.Context(), &req)
		release()
	}
	cmd := req.Command
	if cmd == "" {
		cmd = "unknown"
	}
	resp := protocol.Response{Result: result}
	outcome := "success"
	if cerr != nil {
		outcome = "error"
		resp.Result = nil
		resp.Error = types.NewError(cerr.code, cerr.msg, "")
		s.metrics.errors.WithLabelValues(cmd, cerr.reason).Inc()
		s.log.Warn("CNI request failed", "command", cmd, "container", req.ContainerID, "reason", cerr.reason, "err", cerr.msg)
	}
	s.metrics.latency.WithLabelValues(cmd, outcome).Observe(time.Since(t0).Seconds())
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(resp)
}

// acquireSlot waits for one of the concurrent-request slots.
func (s *Server) acquireSlot(ctx context.Context) (func(), bool) {
	t := time.NewTimer(slotWait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots }, true
	case <-ctx.Done():
	case <-t.C:
	}
	return nil, false
}

// keyedMutex serialises requests per container ID.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*keyedEntry
}

type keyedEntry struct {
	mu   sync.Mutex
	refs int
}

func (k *keyedMutex) lock(key string) func() {
	k.mu.Lock()
	if k.m == nil {
		k.m = map[string]*keyedEntry{}
	}
	e := k.m[key]
	if e == nil {
		e = &keyedEntry{}
		k.m[key] = e
	}
	e.refs++
	k.mu.Unlock()
	e.mu.Lock()
	return func() {
		e.mu.Unlock()
		k.mu.Lock()
		e.refs--
		if e.refs == 0 {
			delete(k.m, key)
		}
		k.mu.Unlock()
	}
}

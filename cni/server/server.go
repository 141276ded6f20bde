// Package server is the CNI server embedded in the ovnhost node daemon. The
// ovnhost-cni plugin forwards every CNI request to it over a unix socket
// (HTTP, package cni/protocol); the server wires the pod: veth pair and
// addresses (package cni/podnet), the OVS port on br-int with Kube-OVN's
// external_ids, QoS and mirroring (libovsdb), and answers once ovn-controller
// has set ovn-installed=true on the interface.
//
// Pod addresses come from the controller's annotations through a node-local
// pod informer when a kubeconfig or in-cluster configuration exists, else
// (standalone hosts) from the controller's IPAM and northbound libraries run
// in-process.
//
// The server is a lifecycle.Unit: the daemon starts it after ovn-controller
// is ready and stops it first.
package server

import (
	"github.com/ovnhost/ovnhost/internal/annotations"

	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Defaults.
const (
	DefaultBridge         = "br-int"
	DefaultAnnotationWait = 60 * time.Second
	DefaultInstallWait    = 30 * time.Second
	NodePortName          = "ovn0"
)

// Option adjusts a Server.
type Option func(*Server)

// WithRegisterer registers the metrics on r instead of prometheus.DefaultRegisterer.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *Server) { s.reg = r } }

// WithPluginSource is the ovnhost-cni binary to install (default: next to
// the running executable).
func WithPluginSource(path string) Option { return func(s *Server) { s.pluginSrc = path } }

// WithKubeClient uses cs for Kubernetes mode instead of the configuration's
// kubeconfig or the in-cluster configuration.
func WithKubeClient(cs kubernetes.Interface) Option { return func(s *Server) { s.kube = cs } }

// WithStandalone forces standalone mode even when in-cluster configuration exists.
func WithStandalone() Option { return func(s *Server) { s.forceStandalone = true } }

// WithTimeouts sets how long ADD waits for the controller's annotations and
// for ovn-installed.
func WithTimeouts(annotations, installed time.Duration) Option {
	return func(s *Server) { s.annWait, s.installWait = annotations, installed }
}

// WithoutInstall skips installing the plugin binary and conflist (tests
// that exec the binary from the build directory).
func WithoutInstall() Option { return func(s *Server) { s.noInstall = true } }

// WithoutNodePort skips creating ovn0.
func WithoutNodePort() Option { return func(s *Server) { s.noNodePort = true } }

// Options are what the CNI server is given by the node daemon.
type Options struct {
	// Node is the node's resolved configuration: name, datapath, pod MTU,
	// the NB remote (with its TLS) for standalone mode.
	Node *nodeconfig.NodeConfig
	// OVS is a libovsdb client connected to the local conf.db with the
	// models of internal/ovsdb/vswitch; the server only transacts on it.
	OVS client.Client
	Log *slog.Logger

	Socket      string // default protocol.DefaultSocket
	SocketGroup string // group allowed on the socket ("" root only)
	BinDir      string // where the plugin is installed
	ConfDir     string // where the conflist is installed
	// ConfVersion is the installed conflist's cniVersion (default
	// protocol.DefaultConfVersion; one of protocol.ConfVersions). Requests
	// are answered in the version they carry, whatever this is.
	ConfVersion string
	// MirrorOutput is the port mirrored pods' traffic is copied to.
	MirrorOutput string
	// Kubeconfig selects Kubernetes mode ("" tries in-cluster, then
	// standalone allocation from Node.NB).
	Kubeconfig string
	// Egress is told what the host must masquerade for pod egress (the
	// node daemon's host NAT); nil leaves the host alone.
	Egress func(ctx context.Context, plan EgressPlan) error
	// ControllerFieldManagers are the field managers whose pod annotations
	// the node honours (nil: DefaultControllerManagers).
	ControllerFieldManagers []string
}

// Server is the CNI server unit.
type Server struct {
	cfg  Options
	node *nodeconfig.NodeConfig
	ovs  *ovsOps
	log  *slog.Logger

	reg             prometheus.Registerer
	dpType          nodeconfig.Datapath
	pluginSrc       string
	mtu             int
	kube            kubernetes.Interface
	forceStandalone bool
	annWait         time.Duration
	installWait     time.Duration
	noInstall       bool
	noNodePort      bool
	nodePortRetry   time.Duration
	maxConcurrent   int

	slots     chan struct{}
	handlers  sync.WaitGroup     // requests in flight
	reqCancel context.CancelFunc // cancels the requests' base context

	src     PodSource
	metrics *metrics
	locks   keyedMutex
	ln      net.Listener
	http    *http.Server
	served  chan struct{}
	bg      sync.WaitGroup
	bgStop  context.CancelFunc
	bgCtx   context.Context
	inst    *installer

	mu    sync.Mutex
	wired map[string]wiredPod // pod key -> its port, for annotation changes

	mirrorMu    sync.Mutex
	mirrorReady bool

	// ownNetns are the host's network namespaces, refused as CNI_NETNS.
	ownNetns hostNetns
}

type wiredPod struct {
	port string
	ids  map[string]string
}

// New builds the CNI server; metrics are registered here.
func New(o Options, opts ...Option) (*Server, error) {
	if o.Node == nil || o.OVS == nil {
		return nil, errors.New("cni server: the node configuration and the conf.db client are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Socket == "" {
		o.Socket = protocol.DefaultSocket
	}
	if o.ConfVersion == "" {
		o.ConfVersion = protocol.DefaultConfVersion
	}
	if !protocol.ValidConfVersion(o.ConfVersion) {
		return nil, fmt.Errorf("cni server: conflist cniVersion %q is not one of %s", o.ConfVersion, strings.Join(protocol.ConfVersions, ", "))
	}
	s := &Server{cfg: o, node: o.Node, ovs: &ovsOps{cl: o.OVS, bridge: DefaultBridge}, log: o.Log.With("unit", "cni"),
		reg: prometheus.DefaultRegisterer, dpType: o.Node.Datapath, mtu: o.Node.PodMTU,
		annWait: DefaultAnnotationWait, installWait: DefaultInstallWait, nodePortRetry: time.Second, wired: map[string]wiredPod{}}
	if s.mtu <= 0 {
		s.mtu = nodeconfig.FallbackPodMTU
	}
	own, err := ownNetns()
	if err != nil {
		return nil, fmt.Errorf("cni server: the daemon's own network namespace: %w", err)
	}
	s.ownNetns = own
	for _, o := range opts {
		o(s)
	}
	if s.maxConcurrent <= 0 {
		s.maxConcurrent = DefaultMaxConcurrent
	}
	s.slots = make(chan struct{}, s.maxConcurrent)
	m, err := newMetrics(s.reg)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	return s, nil
}

// Name implements lifecycle.Unit.
func (s *Server) Name() string { return "cni-server" }

// Start chooses the pod source, checks br-int, listens on the socket and
// installs the plugin and conflist. It returns once requests are served.
func (s *Server) Start(ctx context.Context) (err error) {
	defer func() {
		if err != nil {
			_ = s.Stop(context.WithoutCancel(ctx))
		}
	}()
	dp, ok, err := s.ovs.BridgeDatapathType(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("bridge %s does not exist in the local OVS database; the CNI server starts after it", DefaultBridge)
	}
	if s.dpType == "" {
		s.dpType = nodeconfig.Datapath(dp)
		if s.dpType == "" {
			s.dpType = nodeconfig.Kernel
		}
	}
	if err := s.chooseSource(); err != nil {
		return err
	}
	ks, _ := s.src.(*kubeSource)
	if ks != nil {
		// Before the informers run: their handlers call it.
		ks.setTrusted(s.cfg.ControllerFieldManagers)
		ks.setOnQoS(s.updateQoS)
	}
	// Pods wired before a restart keep following their rate annotations.
	if owned, err := s.ovs.OwnedInterfaces(ctx); err == nil {
		s.mu.Lock()
		for _, o := range owned {
			key := o.ExternalIDs[extPodNamespace] + "/" + o.ExternalIDs[extPodName]
			s.wired[key] = wiredPod{port: o.Name, ids: o.ExternalIDs}
		}
		s.mu.Unlock()
	}
	if err := s.src.Start(ctx); err != nil {
		return err
	}
	if err := s.listen(); err != nil {
		return err
	}
	bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.bgStop = cancel
	s.bgCtx = bctx
	if !s.noInstall {
		s.inst = newInstaller(s.cfg, s.pluginSrc, s.log)
		if err := s.inst.installAll(); err != nil {
			return err
		}
		w, err := s.inst.startWatch()
		if err != nil {
			return err
		}
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.inst.watch(bctx, w) }()
	}
	if !s.noNodePort {
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.nodePortLoop(bctx) }()
	}
	if ks != nil {
		// A rate changed while the daemon was down has no update event:
		// apply the current annotations once the informer has listed.
		s.bg.Add(1)
		go func() { defer s.bg.Done(); s.reapplyQoS(bctx, ks) }()
	}
	s.log.Info("CNI server ready", "socket", s.cfg.Socket, "datapath", s.dpType, "mode", s.mode())
	return nil
}

// ensureMirror creates the node's mirror and its output port the first time
// a pod asks for mirroring (no unused port on nodes that never mirror).
func (s *Server) ensureMirror(ctx context.Context) error {
	s.mirrorMu.Lock()
	defer s.mirrorMu.Unlock()
	if s.mirrorReady {
		return nil
	}
	out := s.cfg.MirrorOutput
	if out == "" {
		return fmt.Errorf("pod asks for traffic mirroring (%s=true) but no mirror output port is configured (--mirror-output)", annotations.Mirror)
	}
	if err := s.ovs.EnsureMirror(ctx, out); err != nil {
		return fmt.Errorf("mirror output port %s: %w", out, err)
	}
	s.mirrorReady = true
	// The output port is an internal port: bring it up so that
	// tcpdump -i <port> shows the mirrored traffic.
	bctx := s.bgCtx
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		wctx, cancel := context.WithTimeout(bctx, 30*time.Second)
		defer cancel()
		if l, err := podnet.WaitLink(wctx, out); err == nil {
			if err := netlink.LinkSetUp(l); err != nil {
				s.log.Warn("cannot bring the mirror output port up", "port", out, "err", err)
			}
		} else if bctx.Err() == nil {
			s.log.Warn("mirror output port did not appear", "port", out, "err", err)
		}
	}()
	return nil
}

func (s *Server) mode() string {
	if _, ok := s.src.(*kubeSource); ok {
		return "kubernetes"
	}
	return "standalone"
}

func (s *Server) chooseSource() error {
	if s.src != nil {
		return nil
	}
	if s.kube != nil && !s.forceStandalone {
		s.src = newKubeSourceFor(s.kube, s.node.Name, s.log)
		return nil
	}
	if !s.forceStandalone {
		rc, err := restConfig(s.cfg.Kubeconfig)
		if err != nil {
			return err
		}
		if rc != nil {
			ks, err := newKubeSource(rc, s.node.Name, s.log)
			if err != nil {
				return err
			}
			s.src = ks
			return nil
		}
	}
	s.src = newStandaloneSource(s.node.NB, s.node.Name, s.log)
	return nil
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
		WriteTimeout: s.annWait + s.installWait + slotWait + time.Minute, IdleTimeout: time.Minute, MaxHeaderBytes: 64 << 10,
		ConnContext: withPeer, BaseContext: func(net.Listener) context.Context { return base }}
	if s.slots == nil {
		s.slots = make(chan struct{}, DefaultMaxConcurrent)
	}
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
// background loops and the pod source. Wired pods are left alone.
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

// DefaultMaxConcurrent bounds the CNI requests handled at once; more wait
// for a slot (up to slotWait), then are answered "try again later".
const DefaultMaxConcurrent = 64

const slotWait = 30 * time.Second

// WithMaxConcurrent sets how many requests are handled at once.
func WithMaxConcurrent(n int) Option { return func(s *Server) { s.maxConcurrent = n } }

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

// request is a decoded CNI request.
type request struct {
	*protocol.Request
	conf protocol.NetConf
	pod  PodRef
	host string // host veth / OVS port name
}

func (s *Server) decode(req *protocol.Request) (*request, *cniError) {
	q := &request{Request: req}
	if err := json.Unmarshal(req.Config, &q.conf); err != nil {
		return nil, fail(types.ErrDecodingFailure, "bad_request", "network configuration is not valid JSON: %v", err)
	}
	if q.conf.CNIVersion == "" {
		q.conf.CNIVersion = "0.3.1"
	}
	switch req.Command {
	case "ADD", "DEL", "CHECK":
		if req.ContainerID == "" {
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "CNI_CONTAINERID is empty")
		}
		if req.IfName == "" {
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "CNI_IFNAME is empty")
		}
	}
	args, err := parseArgs(req.Args)
	if err != nil {
		return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "%v", err)
	}
	q.pod = PodRef{Namespace: args["K8S_POD_NAMESPACE"], Name: args["K8S_POD_NAME"], ContainerID: req.ContainerID, Annotations: map[string]string{}}
	if q.pod.Name == "" || q.pod.Namespace == "" {
		if _, kube := s.src.(*kubeSource); kube && (req.Command == "ADD" || req.Command == "CHECK") {
			// kubelet always passes both: a call without them is not a
			// pod of this cluster (and would wait for annotations in vain).
			var missing []string
			for _, k := range []string{"K8S_POD_NAMESPACE", "K8S_POD_NAME"} {
				if args[k] == "" {
					missing = append(missing, k)
				}
			}
			return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request",
				"%s %s: CNI_ARGS %q has no %s; the ovnhost CNI server runs in Kubernetes mode (pods come from the API server), where the runtime must pass K8S_POD_NAMESPACE and K8S_POD_NAME (kubelet does); containers without a pod need a node in standalone mode (no kubeconfig)",
				req.Command, req.ContainerID, req.Args, strings.Join(missing, " and "))
		}
	}
	if q.pod.Name == "" {
		// podman, nerdctl, plain containerd: the container is the pod.
		q.pod.Name = containerPodName(req.ContainerID)
	}
	if q.pod.Namespace == "" {
		q.pod.Namespace = "default"
	}
	for k, a := range map[string]string{"IP": annotations.IPAddress, "MAC": annotations.MACAddress, "INGRESS_RATE": annotations.IngressRate,
		"EGRESS_RATE": annotations.EgressRate, "MIRROR": annotations.Mirror, "LOGICAL_SWITCH": annotations.LogicalSwitch} {
		if v, ok := args[k]; ok {
			q.pod.Annotations[a] = v
		}
	}
	q.host = podnet.HostIfName(req.ContainerID, req.IfName)
	return q, nil
}

// containerPodName is the pod name of a container attached without
// Kubernetes arguments (podman, nerdctl): the runtime's short ID (12
// characters) for the usual hexadecimal IDs and short IDs that are valid
// names as they are, else a readable prefix and a hash of the whole ID.
// It is a valid DNS label of at most 31 characters, so "<name>.default" is
// a valid OVN port name, and the same container ID always gives the same
// name (DEL and GC find what ADD made).
func containerPodName(id string) string {
	if isLabel(id) && (len(id) <= 12 || isHex(id)) {
		return shortID(id)
	}
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		if b.Len() >= 20 {
			break
		}
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else if b.Len() > 0 && !strings.HasSuffix(b.String(), "-") {
			b.WriteByte('-')
		}
	}
	sum := sha256.Sum256([]byte(id))
	prefix := strings.TrimSuffix(b.String(), "-")
	if prefix == "" {
		prefix = "ctr"
	}
	return prefix + "-" + hex.EncodeToString(sum[:5])
}

func isHex(s string) bool {
	for _, r := range s {
		if !(r >= '0' && r <= '9' || r >= 'a' && r <= 'f') {
			return false
		}
	}
	return s != ""
}

// isLabel: lowercase letters, digits and inner '-'.
func isLabel(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

func parseArgs(s string) (map[string]string, error) {
	out := map[string]string{}
	if s == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ";") {
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("CNI_ARGS entry %q is not KEY=VALUE", kv)
		}
		out[k] = v
	}
	return out, nil
}

func (s *Server) handle(ctx context.Context, req *protocol.Request) ([]byte, *cniError) {
	q, cerr := s.decode(req)
	if cerr != nil {
		return nil, cerr
	}
	switch req.Command {
	case "ADD":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return s.add(ctx, q)
	case "DEL":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return nil, s.del(ctx, q)
	case "CHECK":
		unlock := s.locks.lock(req.ContainerID)
		defer unlock()
		return nil, s.check(ctx, q)
	case "STATUS", "GC":
		// The plugin's skel already refuses these below 1.1.0; a request
		// that reaches the server anyway gets the same answer.
		if ok, err := version.GreaterThanOrEqualTo(q.conf.CNIVersion, "1.1.0"); err != nil || !ok {
			return nil, fail(types.ErrIncompatibleCNIVersion, "bad_request", "config version does not allow %s (cniVersion %q; %s needs 1.1.0)", req.Command, q.conf.CNIVersion, req.Command)
		}
		if req.Command == "STATUS" {
			return nil, s.status(ctx)
		}
		return nil, s.gc(ctx, q)
	}
	return nil, fail(types.ErrInvalidEnvironmentVariables, "bad_request", "unknown CNI command %q", req.Command)
}

// podMTU is the pod interface's MTU: its Subnet's mtu (n may be nil), else
// the conflist's, else the node's (underlay minus encapsulation).
func (s *Server) podMTU(q *request, n *PodNetwork) int {
	switch {
	case n != nil && n.MTU > 0:
		return n.MTU
	case q.conf.MTU > 0:
		return q.conf.MTU
	}
	return s.mtu
}

func (s *Server) add(ctx context.Context, q *request) (_ []byte, cerr *cniError) {
	if q.Netns == "" {
		return nil, fail(types.ErrInvalidNetNS, "bad_request", "CNI_NETNS is empty")
	}
	if err := checkPodNetns(q.Netns, s.ownNetns); err != nil {
		return nil, fail(types.ErrInvalidNetNS, "netns", "CNI_NETNS %s: %v", q.Netns, err)
	}
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, s.annWait)
	n, err := s.src.PodNetwork(actx, q.pod)
	cancel()
	tNet := time.Now()
	if err != nil {
		return nil, s.sourceError(q, err)
	}
	ok := false
	defer func() {
		if !ok {
			if err := s.src.Release(context.WithoutCancel(ctx), q.pod); err != nil {
				s.log.Warn("release after a failed ADD", "pod", q.pod.Key(), "err", err)
			}
		}
	}()
	// Ports of an earlier sandbox of the same pod (same iface-id) and a
	// leftover of an earlier attempt for this container go first.
	if err := s.removeStale(ctx, q); err != nil {
		return nil, fail(types.ErrInternal, "ovs", "remove stale ports of %s: %v", q.pod.LSP(), err)
	}
	pc := podnet.Config{NetNS: q.Netns, IfName: q.IfName, HostIfName: q.host, MAC: n.MAC, MTU: s.podMTU(q, n),
		Addrs: n.Addrs, Routes: n.podRoutes(), TxChecksumOff: s.dpType.IsUserspace()}
	if err := pc.Validate(); err != nil {
		return nil, fail(types.ErrInvalidNetworkConfig, "bad_request", "%v", err)
	}
	tStale := time.Now()
	res, err := podnet.Setup(pc)
	if err != nil {
		return nil, fail(types.ErrInternal, "plumbing", "pod %s: %v", q.pod.Key(), err)
	}
	defer func() {
		if !ok {
			if err := podnet.Teardown(q.host, q.Netns, q.IfName); err != nil {
				s.log.Warn("rollback of the veth after a failed ADD", "pod", q.pod.Key(), "err", err)
			}
		}
	}()
	if n.Mirror {
		if err := s.ensureMirror(ctx); err != nil {
			return nil, fail(types.ErrInvalidNetworkConfig, "ovs", "pod %s: %v", q.pod.Key(), err)
		}
	}
	ids := map[string]string{
		extIfaceID: q.pod.LSP(), extPodName: q.pod.Name, extPodNamespace: q.pod.Namespace, extPodNetns: q.Netns,
		extIP: joinPrefixes(n.Addrs), extAttachedMAC: n.MAC.String(), extVendor: vendor,
		extContainerID: q.ContainerID, extIfName: q.IfName,
	}
	tVeth := time.Now()
	if err := s.ovs.AddPort(ctx, portSpec{Name: q.host, ExternalIDs: ids, IngressMbps: n.IngressMbps, EgressMbps: n.EgressMbps, Mirror: n.Mirror}); err != nil {
		return nil, fail(types.ErrInternal, "ovs", "pod %s: %v", q.pod.Key(), err)
	}
	defer func() {
		if !ok {
			if err := s.ovs.DeletePort(context.WithoutCancel(ctx), q.host); err != nil {
				s.log.Warn("rollback of the OVS port after a failed ADD", "pod", q.pod.Key(), "err", err)
			}
		}
	}()
	if s.dpType.IsUserspace() && n.EgressMbps > 0 {
		if err := podnet.SetEgressLimit(q.Netns, q.IfName, n.EgressMbps); err != nil {
			return nil, fail(types.ErrInternal, "plumbing", "pod %s: %v", q.pod.Key(), err)
		}
	}
	tPort := time.Now()
	if err := s.ovs.WaitInstalled(ctx, q.host, s.installWait); err != nil {
		if errors.Is(err, errInstallTimeout) {
			return nil, fail(types.ErrTryAgainLater, "ovn_install_timeout",
				"pod %s: timed out after %s waiting for ovn-controller to set external_ids:ovn-installed=true on OVS interface %s (iface-id=%s); check that ovn-controller runs and that logical switch port %s exists in the OVN northbound database",
				q.pod.Key(), s.installWait, q.host, q.pod.LSP(), q.pod.LSP())
		}
		return nil, fail(types.ErrInternal, "ovs", "pod %s: waiting for ovn-installed on %s: %v", q.pod.Key(), q.host, err)
	}
	out, err := s.result(q, n, res)
	if err != nil {
		return nil, fail(types.ErrInternal, "internal", "encode result: %v", err)
	}
	ok = true
	s.mu.Lock()
	s.wired[q.pod.Key()] = wiredPod{port: q.host, ids: ids}
	s.mu.Unlock()
	now := time.Now()
	ms := func(a, b time.Time) float64 { return float64(b.Sub(a).Microseconds()) / 1000 }
	s.log.Info("pod wired", "pod", q.pod.Key(), "container", shortID(q.ContainerID), "port", q.host, "ip", joinPrefixes(n.Addrs),
		"ms_total", ms(t0, now), "ms_pod_network", ms(t0, tNet), "ms_stale", ms(tNet, tStale), "ms_veth", ms(tStale, tVeth),
		"ms_ovs_port", ms(tVeth, tPort), "ms_ovn_installed", ms(tPort, now))
	return out, nil
}

func (s *Server) sourceError(q *request, err error) *cniError {
	var ae *AnnotationError
	var at *annotationTimeout
	var ie *ipamError
	switch {
	case errors.As(err, &ae):
		return fail(types.ErrInvalidNetworkConfig, "invalid_annotation", "pod %s: %v", q.pod.Key(), err)
	case errors.As(err, &at):
		return fail(types.ErrTryAgainLater, "annotation_timeout", "%v", err)
	case errors.As(err, &ie):
		return fail(types.ErrInternal, "ipam", "pod %s: %v", q.pod.Key(), err)
	}
	return fail(types.ErrInternal, "pod_network", "pod %s: %v", q.pod.Key(), err)
}

func (s *Server) removeStale(ctx context.Context, q *request) error {
	names, err := s.ovs.PortsByIfaceID(ctx, q.pod.LSP())
	if err != nil {
		return err
	}
	if !contains(names, q.host) {
		names = append(names, q.host)
	}
	for _, n := range names {
		if err := s.ovs.DeletePort(ctx, n); err != nil {
			return err
		}
		if n != q.host {
			_ = podnet.Teardown(n, "", "")
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func joinPrefixes(ps []netip.Prefix) string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Addr().String()
	}
	return strings.Join(out, ",")
}

func addrFromIPNet(n net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

func routeFromCNI(r *types.Route) (podnet.Route, bool) {
	d, ok := addrFromIPNet(r.Dst)
	if !ok {
		return podnet.Route{}, false
	}
	rt := podnet.Route{Dst: d.Masked()}
	if r.GW != nil {
		g, ok := netip.AddrFromSlice(r.GW)
		if ok {
			rt.GW = g.Unmap()
		}
	}
	return rt, true
}

func (s *Server) result(q *request, n *PodNetwork, res *podnet.Result) ([]byte, error) {
	return encodeResult(s.buildResult(q, n, res), q.conf.CNIVersion)
}

// encodeResult converts r with the CNI library to the request's version
// (what the runtime's libcni will parse) and encodes it.
func encodeResult(r *types100.Result, cniVersion string) ([]byte, error) {
	conv, err := r.GetAsVersion(cniVersion)
	if err != nil {
		return nil, err
	}
	return json.Marshal(conv)
}

func (s *Server) buildResult(q *request, n *PodNetwork, res *podnet.Result) *types100.Result {
	r := &types100.Result{CNIVersion: types100.ImplementedSpecVersion}
	r.Interfaces = []*types100.Interface{
		{Name: res.HostIfName, Mac: res.HostMAC.String()},
		{Name: q.IfName, Mac: n.MAC.String(), Sandbox: q.Netns, Mtu: s.podMTU(q, n)},
	}
	idx := 1
	for _, a := range n.Addrs {
		ip := &types100.IPConfig{Interface: &idx, Address: net.IPNet{IP: net.IP(a.Addr().AsSlice()), Mask: net.CIDRMask(a.Bits(), a.Addr().BitLen())}}
		for _, g := range n.Gateways {
			if g.Is4() == a.Addr().Is4() {
				ip.Gateway = net.IP(g.AsSlice())
			}
		}
		r.IPs = append(r.IPs, ip)
	}
	for _, rt := range n.podRoutes() {
		tr := &types.Route{Dst: net.IPNet{IP: net.IP(rt.Dst.Addr().AsSlice()), Mask: net.CIDRMask(rt.Dst.Bits(), rt.Dst.Addr().BitLen())}}
		if rt.GW.IsValid() {
			tr.GW = net.IP(rt.GW.AsSlice())
		}
		r.Routes = append(r.Routes, tr)
	}
	r.DNS = q.conf.DNS
	return r
}

func (s *Server) del(ctx context.Context, q *request) *cniError {
	if err := s.ovs.DeletePort(ctx, q.host); err != nil {
		return fail(types.ErrTryAgainLater, "ovs", "DEL %s: %v", q.pod.Key(), err)
	}
	if err := podnet.Teardown(q.host, q.Netns, q.IfName); err != nil {
		return fail(types.ErrInternal, "plumbing", "DEL %s: %v", q.pod.Key(), err)
	}
	if err := s.src.Release(ctx, q.pod); err != nil {
		return fail(types.ErrTryAgainLater, "pod_network", "DEL %s: %v", q.pod.Key(), err)
	}
	s.mu.Lock()
	if w, ok := s.wired[q.pod.Key()]; ok && w.port == q.host {
		delete(s.wired, q.pod.Key())
	}
	s.mu.Unlock()
	return nil
}

func (s *Server) check(ctx context.Context, q *request) *cniError {
	if q.conf.RawPrevResult == nil {
		return fail(types.ErrInvalidNetworkConfig, "bad_request", "CHECK needs prevResult in the network configuration")
	}
	prev, err := prevResult(&q.conf.NetConf)
	if err != nil {
		return fail(types.ErrDecodingFailure, "bad_request", "CHECK: prevResult: %v", err)
	}
	pc := podnet.Config{NetNS: q.Netns, IfName: q.IfName, HostIfName: q.host, MTU: s.podMTU(q, nil)}
	if !hasMTU(prev, q.IfName) {
		// Results before 1.0.0 carry no MTU: the host end was created with
		// the pod end's MTU (the Subnet's may differ from the node's).
		if l, err := netlink.LinkByName(q.host); err == nil {
			pc.MTU = l.Attrs().MTU
		}
	}
	for _, i := range prev.Interfaces {
		if i.Sandbox != "" && i.Name == q.IfName {
			pc.MAC, _ = net.ParseMAC(i.Mac)
			if i.Mtu > 0 {
				// ADD reported the MTU it set (the Subnet's may differ from the node's).
				pc.MTU = i.Mtu
			}
		}
	}
	for _, ip := range prev.IPs {
		if a, ok := addrFromIPNet(ip.Address); ok {
			pc.Addrs = append(pc.Addrs, a)
		}
	}
	for _, r := range prev.Routes {
		if rt, ok := routeFromCNI(r); ok {
			pc.Routes = append(pc.Routes, rt)
		}
	}
	if err := podnet.Check(pc); err != nil {
		return fail(types.ErrInternal, "check", "CHECK %s: %v", q.pod.Key(), err)
	}
	ids, ok, err := s.ovs.Interface(ctx, q.host)
	if err != nil {
		return fail(types.ErrTryAgainLater, "ovs", "CHECK %s: %v", q.pod.Key(), err)
	}
	if !ok {
		return fail(types.ErrInternal, "check", "CHECK %s: OVS interface %s is missing from %s", q.pod.Key(), q.host, DefaultBridge)
	}
	if ids[extIfaceID] != q.pod.LSP() {
		return fail(types.ErrInternal, "check", "CHECK %s: OVS interface %s has iface-id %q, want %q", q.pod.Key(), q.host, ids[extIfaceID], q.pod.LSP())
	}
	if ids[extOVNInstalled] != "true" {
		return fail(types.ErrInternal, "check", "CHECK %s: OVS interface %s is not ovn-installed", q.pod.Key(), q.host)
	}
	return nil
}

// prevResult parses CHECK's prevResult in the configuration's cniVersion
// (0.4.0, 1.0.0 or 1.1.0 form) with the CNI library and converts it to the
// current result type.
func prevResult(conf *types.NetConf) (*types100.Result, error) {
	if err := version.ParsePrevResult(conf); err != nil {
		return nil, err
	}
	if conf.PrevResult == nil {
		return nil, errors.New("missing")
	}
	return types100.NewResultFromResult(conf.PrevResult)
}

func hasMTU(r *types100.Result, ifName string) bool {
	for _, i := range r.Interfaces {
		if i.Sandbox != "" && i.Name == ifName && i.Mtu > 0 {
			return true
		}
	}
	return false
}

func (s *Server) status(ctx context.Context) *cniError {
	if _, ok, err := s.ovs.BridgeDatapathType(ctx); err != nil || !ok {
		why := "is missing"
		if err != nil {
			why = err.Error()
		}
		return fail(types.ErrPluginNotAvailable, "status", "ovnhost: bridge %s %s", DefaultBridge, why)
	}
	return nil
}

// gc removes ports this server created whose (container, ifname) is not in
// the runtime's list of valid attachments.
func (s *Server) gc(ctx context.Context, q *request) *cniError {
	var conf struct {
		Valid []struct {
			ContainerID string `json:"containerID"`
			IfName      string `json:"ifname"`
		} `json:"cni.dev/valid-attachments"`
	}
	if err := json.Unmarshal(q.Config, &conf); err != nil {
		return fail(types.ErrDecodingFailure, "bad_request", "GC: %v", err)
	}
	valid := map[string]bool{}
	for _, a := range conf.Valid {
		valid[a.ContainerID+"/"+a.IfName] = true
	}
	owned, err := s.ovs.OwnedInterfaces(ctx)
	if err != nil {
		return fail(types.ErrTryAgainLater, "ovs", "GC: %v", err)
	}
	keep := 0
	for _, o := range owned {
		if valid[o.ExternalIDs[extContainerID]+"/"+o.ExternalIDs[extIfName]] {
			keep++
		}
	}
	if p := peerOf(ctx); len(owned) > 0 && keep == 0 && (!p.known || p.uid != 0) {
		return fail(types.ErrInvalidNetworkConfig, "gc_refused",
			"GC would remove every pod port on this node (%d, none of them in cni.dev/valid-attachments); refused because the request does not come from root (uid %d): only the container runtime running as root may do that", len(owned), p.uid)
	}
	var errs []string
	for _, o := range owned {
		cid, ifn := o.ExternalIDs[extContainerID], o.ExternalIDs[extIfName]
		if valid[cid+"/"+ifn] {
			continue
		}
		unlock := s.locks.lock(cid)
		ref := PodRef{Namespace: o.ExternalIDs[extPodNamespace], Name: o.ExternalIDs[extPodName], ContainerID: cid}
		err := errors.Join(s.ovs.DeletePort(ctx, o.Name), podnet.Teardown(o.Name, "", ""), s.src.Release(ctx, ref))
		unlock()
		if err != nil {
			errs = append(errs, o.Name+": "+err.Error())
		} else {
			s.log.Info("GC removed a stale pod port", "port", o.Name, "pod", ref.Key(), "container", cid)
		}
	}
	if len(errs) > 0 {
		return fail(types.ErrInternal, "gc", "GC: %s", strings.Join(errs, "; "))
	}
	return nil
}

// reapplyQoS applies the current rate annotations of every pod wired
// before this start.
func (s *Server) reapplyQoS(ctx context.Context, ks *kubeSource) {
	if ks.waitSynced(ctx) != nil {
		return
	}
	s.mu.Lock()
	keys := make([]string, 0, len(s.wired))
	for k := range s.wired {
		keys = append(keys, k)
	}
	s.mu.Unlock()
	for _, key := range keys {
		p := ks.getPod(key)
		if p == nil {
			continue
		}
		var n PodNetwork
		if err := parseOptional(p.Annotations, &n); err != nil {
			s.log.Warn("pod rate annotation is invalid; QoS left unchanged", "pod", key, "err", err)
			continue
		}
		s.mu.Lock()
		w := s.wired[key]
		s.mu.Unlock()
		if in, eg, err := s.ovs.Rates(ctx, w.port); err == nil && in == n.IngressMbps && eg == n.EgressMbps {
			continue
		}
		s.log.Info("pod rates changed while the node daemon was down; applying them", "pod", key)
		s.updateQoS(key, &n)
	}
}

// updateQoS applies changed rate annotations to a running pod.
func (s *Server) updateQoS(key string, n *PodNetwork) {
	s.mu.Lock()
	w, ok := s.wired[key]
	s.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The pod-side limit first: once the OVS rows show the new rates,
	// everything is in place.
	if s.dpType.IsUserspace() && w.ids[extPodNetns] != "" {
		if err := podnet.SetEgressLimit(w.ids[extPodNetns], w.ids[extIfName], n.EgressMbps); err != nil {
			s.log.Warn("cannot update the pod's egress limit", "pod", key, "err", err)
			return
		}
	}
	if err := s.ovs.SetQoS(ctx, w.port, w.ids, n.IngressMbps, n.EgressMbps); err != nil {
		s.log.Warn("cannot update the pod's QoS", "pod", key, "port", w.port, "err", err)
		return
	}
	s.log.Info("pod QoS updated", "pod", key, "port", w.port, "ingress_mbps", n.IngressMbps, "egress_mbps", n.EgressMbps)
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

package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// Backend does the work behind the API; Start wires it to Ops.
type Backend struct {
	Node    string
	Doctor  func(ctx context.Context) (report any, exitCode int, err error)
	Pinger  func(ctx context.Context) (any, error) // the local pinger pod's latest round
	Pod     func(ctx context.Context, namespace, name string) (*api.PodPort, error)
	Appctl  func(ctx context.Context, r api.AppctlRequest) (string, error)
	OVSDB   func(ctx context.Context, r api.OVSDBRequest) (*api.OVSDBResult, error)
	Trace   func(ctx context.Context, r api.TraceRequest) (*api.TraceResult, error)
	Capture func(ctx context.Context, r api.CaptureRequest, w io.Writer, started func()) error
}

// BadRequest marks an error the caller made (400, not 500).
type BadRequest struct{ Err error }

func (b BadRequest) Error() string { return b.Err.Error() }
func (b BadRequest) Unwrap() error { return b.Err }

// handler serves the API's paths; each runs behind guard.
type handler struct {
	b      Backend
	health *health.Reporter
	auth   Authorizer
	log    *slog.Logger
	lim    Limits
}

// Handler serves the node API behind auth (nil auth refuses every
// request: there is no anonymous mode) with DefaultLimits. /metrics and
// /v1/status are h's.
func Handler(h *health.Reporter, b Backend, auth Authorizer, log *slog.Logger) http.Handler {
	return HandlerWith(h, b, auth, log, DefaultLimits())
}

// CaptureAttributes is what a capture asks for: verb capture (no read-only
// role has it, however wide its wildcards) on nodes/capture for a pod's
// veth, on nodes/hostcapture for any other interface of the node (its
// uplinks, br-int, ovn0: every pod's and the node's own traffic).
func CaptureAttributes(node string, q url.Values) Attributes {
	sub := api.SubresourceCapture
	if q.Get("pod") == "" && q.Get("iface") != "" {
		sub = api.SubresourceHostCapture
	}
	return Attributes{Verb: api.VerbCapture, Group: api.APIGroup, Resource: api.ResourceNodes, Subresource: sub, Name: node}
}

// HandlerWith is Handler with the body and stream limits of lim.
func HandlerWith(h *health.Reporter, b Backend, auth Authorizer, log *slog.Logger, lim Limits) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	s := &handler{b: b, health: h, auth: auth, log: log, lim: lim.orDefault()}
	diag := func(verb string) func(*http.Request) Attributes {
		return fixed(Attributes{Verb: verb, Group: api.APIGroup, Resource: api.ResourceNodes, Subresource: api.SubresourceDiag, Name: b.Node})
	}
	capture := func(req *http.Request) Attributes { return CaptureAttributes(b.Node, req.URL.Query()) }
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.guard(http.MethodGet, fixed(Attributes{Verb: "get", Path: "/metrics"}), h.MetricsHandler().ServeHTTP))
	mux.HandleFunc(api.PathStatus, s.guard(http.MethodGet, diag("get"), s.status))
	mux.HandleFunc(api.PathDoctor, s.guard(http.MethodGet, diag("get"), s.doctor))
	mux.HandleFunc(api.PathPinger, s.guard(http.MethodGet, diag("get"), s.pinger))
	mux.HandleFunc(api.PathPod, s.guard(http.MethodGet, diag("get"), s.pod))
	mux.HandleFunc(api.PathAppctl, s.guard(http.MethodPost, diag("create"), s.post(s.appctl)))
	mux.HandleFunc(api.PathOVSDB, s.guard(http.MethodPost, diag("create"), s.post(s.ovsdb)))
	mux.HandleFunc(api.PathTrace, s.guard(http.MethodPost, diag("create"), s.post(s.trace)))
	mux.HandleFunc(api.PathCapture, s.guard(http.MethodGet, capture, s.capture))
	return mux
}

func fixed(a Attributes) func(*http.Request) Attributes {
	return func(*http.Request) Attributes { return a }
}

// guard checks the method, then who asks and whether they may.
func (s *handler) guard(method string, attrsOf func(*http.Request) Attributes, h func(w http.ResponseWriter, req *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		attrs := attrsOf(req)
		if req.Method != method {
			w.Header().Set("Allow", method)
			writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", req.Method, req.URL.Path, method))
			return
		}
		if s.auth == nil {
			writeErr(w, http.StatusForbidden, errors.New("the node API has no authorizer"))
			return
		}
		user, status, err := s.auth.Check(req.Context(), req, attrs)
		if err != nil {
			s.log.Info("node API request refused", "path", req.URL.Path, "user", user, "status", status, "reason", err)
			writeErr(w, status, err)
			return
		}
		s.log.Debug("node API request", "path", req.URL.Path, "user", user)
		h(w, req)
	}
}

func (s *handler) status(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.health.Snapshot())
}

func (s *handler) doctor(w http.ResponseWriter, req *http.Request) {
	if s.b.Doctor == nil {
		writeErr(w, http.StatusNotImplemented, errors.New("doctor is not wired on this node"))
		return
	}
	rep, code, err := s.b.Doctor(req.Context())
	if err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	w.Header().Set(api.HeaderDoctorExitCode, fmt.Sprint(code))
	writeJSON(w, http.StatusOK, rep)
}

func (s *handler) pinger(w http.ResponseWriter, req *http.Request) {
	if s.b.Pinger == nil {
		writeErr(w, http.StatusNotFound, errors.New("no pinger on this node"))
		return
	}
	round, err := s.b.Pinger(req.Context())
	if err != nil {
		writeErr(w, http.StatusNotFound, err)
		return
	}
	writeJSON(w, http.StatusOK, round)
}

func (s *handler) pod(w http.ResponseWriter, req *http.Request) {
	ns, name := req.URL.Query().Get("namespace"), req.URL.Query().Get("name")
	if ns == "" || name == "" || s.b.Pod == nil {
		writeErr(w, http.StatusBadRequest, errors.New("namespace and name are required"))
		return
	}
	p, err := s.b.Pod(req.Context(), ns, name)
	respond(w, p, err)
}

// post serves a POST whose JSON body decode reads: at most lim.MaxBody
// bytes, 413 past them.
func (s *handler) post(decode func(context.Context, io.Reader) (any, error)) func(w http.ResponseWriter, req *http.Request) {
	return func(w http.ResponseWriter, req *http.Request) {
		res, err := decode(req.Context(), http.MaxBytesReader(w, req.Body, s.lim.MaxBody))
		respond(w, res, err)
	}
}

func (s *handler) appctl(ctx context.Context, body io.Reader) (any, error) {
	var a api.AppctlRequest
	if err := json.NewDecoder(body).Decode(&a); err != nil {
		return nil, BadRequest{fmt.Errorf("appctl request: %w", err)}
	}
	if s.b.Appctl == nil {
		return nil, errors.New("appctl is not wired on this node")
	}
	out, err := s.b.Appctl(ctx, a)
	return api.AppctlResult{Output: out}, err
}

func (s *handler) ovsdb(ctx context.Context, body io.Reader) (any, error) {
	var o api.OVSDBRequest
	if err := json.NewDecoder(body).Decode(&o); err != nil {
		return nil, BadRequest{fmt.Errorf("ovsdb request: %w", err)}
	}
	if s.b.OVSDB == nil {
		return nil, errors.New("ovsdb is not wired on this node")
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return s.b.OVSDB(ctx, o)
}

func (s *handler) trace(ctx context.Context, body io.Reader) (any, error) {
	var t api.TraceRequest
	if err := json.NewDecoder(body).Decode(&t); err != nil {
		return nil, BadRequest{fmt.Errorf("trace request: %w", err)}
	}
	if s.b.Trace == nil {
		return nil, errors.New("trace is not wired on this node")
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return s.b.Trace(ctx, t)
}

// capture streams pcap once the capture started; an error before that is
// an ordinary JSON error.
func (s *handler) capture(w http.ResponseWriter, req *http.Request) {
	r, err := api.ParseCaptureQuery(req.URL.Query())
	if err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if s.b.Capture == nil {
		writeErr(w, http.StatusNotImplemented, errors.New("capture is not wired on this node"))
		return
	}
	// The stream outlives the server's read and write timeouts: no read
	// deadline (a read timeout would cancel the request's context), and a
	// write deadline of StreamIdle renewed at every write, so a client
	// that stops reading is cut and one that reads is not.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	started := false
	err = s.b.Capture(req.Context(), r, flushWriter{w: w, rc: rc, idle: s.lim.StreamIdle}, func() {
		started = true
		w.Header().Set("Content-Type", "application/vnd.tcpdump.pcap")
		w.WriteHeader(http.StatusOK)
	})
	if err != nil && !started {
		status := http.StatusInternalServerError
		var br BadRequest
		if errors.As(err, &br) {
			status = http.StatusBadRequest
		}
		writeErr(w, status, err)
	}
}

type flushWriter struct {
	w    http.ResponseWriter
	rc   *http.ResponseController
	idle time.Duration
}

func (f flushWriter) Write(p []byte) (int, error) {
	_ = f.rc.SetWriteDeadline(time.Now().Add(f.idle))
	n, err := f.w.Write(p)
	if err == nil {
		_ = f.rc.Flush()
	}
	return n, err
}

func respond(w http.ResponseWriter, v any, err error) {
	var br BadRequest
	var big *http.MaxBytesError
	switch {
	case errors.As(err, &big):
		writeErr(w, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is larger than %d bytes, the node API's limit: send a smaller request", big.Limit))
	case errors.As(err, &br):
		writeErr(w, http.StatusBadRequest, err)
	case err != nil:
		writeErr(w, http.StatusInternalServerError, err)
	default:
		writeJSON(w, http.StatusOK, v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, api.ErrorBody{Error: strings.TrimSpace(err.Error())})
}

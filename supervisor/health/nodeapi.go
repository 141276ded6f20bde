package health

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// The node API is the node daemon's authenticated HTTPS endpoint for
// cluster-wide operations (netctl diagnose, trace, nbctl/sbctl/vsctl,
// appctl, tcpdump) and for an in-cluster Prometheus (/metrics). Every
// request carries a bearer token; the API server says who it is
// (TokenReview) and whether they may (SubjectAccessReview), as
// kube-rbac-proxy does:
//
//	GET  /metrics                  non-resource URL /metrics, verb get
//	GET  /v1/{doctor,status,pinger,pod}
//	                               ovnhost.io nodes/diagnostics NODE, verb get
//	POST /v1/{appctl,ovsdb,trace}  ovnhost.io nodes/diagnostics NODE, verb create
//	GET  /v1/capture               ovnhost.io nodes/capture NODE, verb get
//
// (ovnhost.io is no served API group: RBAC rules may name it all the same.)
// Nothing here changes the node: appctl and ovsdb accept read operations only.

// API paths.
const (
	PathDoctor  = "/v1/doctor"
	PathStatus  = "/v1/status"
	PathPinger  = "/v1/pinger"
	PathPod     = "/v1/pod"
	PathAppctl  = "/v1/appctl"
	PathOVSDB   = "/v1/ovsdb"
	PathTrace   = "/v1/trace"
	PathCapture = "/v1/capture"
)

// RBAC names of the node API's SubjectAccessReview.
const (
	APIGroup           = "ovnhost.io"
	ResourceNodes      = "nodes"
	SubresourceDiag    = "diagnostics"
	SubresourceCapture = "capture"
)

// Node annotations through which netctl finds a node's API and pins its
// certificate (the node writes them with its own credentials).
const (
	AnnotationNodeAPIAddr = "ovnhost.io/node-api-address"     // "192.168.1.5:10666"
	AnnotationNodeAPICert = "ovnhost.io/node-api-cert-sha256" // hex SHA-256 of the serving leaf certificate
)

// AppctlRequest asks a daemon's control socket one read-only command.
type AppctlRequest struct {
	Target  string   `json:"target"` // ovs-vswitchd, ovn-controller, ovsdb-server
	Command string   `json:"command"`
	Args    []string `json:"args,omitempty"`
}

// OVSDBRequest is an ovs-vsctl/ovn-nbctl/ovn-sbctl-like read.
type OVSDBRequest struct {
	DB   string   `json:"db"`   // Open_vSwitch, OVN_Northbound, OVN_Southbound
	Args []string `json:"args"` // show | list TABLE [RECORD] | get TABLE RECORD COLUMN | find TABLE COL=VAL...
}

// TraceRequest traces a packet from a pod on this node.
type TraceRequest struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	Dst       string `json:"dst"`      // destination IP
	DstMAC    string `json:"dstMAC"`   // the next hop's MAC (the pod's gateway or a same-subnet peer)
	Protocol  string `json:"protocol"` // tcp, udp, icmp
	Port      int    `json:"port,omitempty"`
	// SrcMAC overrides the pod's MAC (to show a port-security drop).
	SrcMAC string `json:"srcMAC,omitempty"`
}

// TraceResult holds both traces and where the packet ends.
type TraceResult struct {
	Microflow string       `json:"microflow"`
	Logical   string       `json:"logical"`  // ovn-trace output
	Physical  string       `json:"physical"` // ofproto/trace output
	Verdict   TraceVerdict `json:"verdict"`
}

// TraceVerdict is what the traces say about the packet.
type TraceVerdict struct {
	Delivered bool     `json:"delivered"`
	Output    string   `json:"output,omitempty"` // logical port or "tunnel to CHASSIS"
	DropStage string   `json:"dropStage,omitempty"`
	DropFlow  string   `json:"dropFlow,omitempty"`
	ACLs      []string `json:"acls,omitempty"` // ACLs that matched, with their name/action
	LBs       []string `json:"lbs,omitempty"`  // load balancers that rewrote the destination
	Physical  string   `json:"physicalVerdict,omitempty"`
}

// PodPort is what the node holds for one pod.
type PodPort struct {
	Interface    string            `json:"interface"`
	OFPort       int               `json:"ofport"`
	OVNInstalled bool              `json:"ovnInstalled"`
	Ingress      int               `json:"ingressPolicingRate,omitempty"`
	IngressBurst int               `json:"ingressPolicingBurst,omitempty"`
	QoS          map[string]string `json:"qos,omitempty"`
	ExternalIDs  map[string]string `json:"externalIDs,omitempty"`
	BoundChassis string            `json:"boundChassis,omitempty"`
}

// NodeAPIError is the JSON body of a failed request.
type NodeAPIError struct {
	Error string `json:"error"`
}

// NodeOps does the work behind the API; the node daemon wires it.
type NodeOps struct {
	Node    string
	Doctor  func(ctx context.Context) (report any, exitCode int, err error)
	Pinger  func(ctx context.Context) (any, error) // the local pinger pod's latest round
	Pod     func(ctx context.Context, namespace, name string) (*PodPort, error)
	Appctl  func(ctx context.Context, r AppctlRequest) (string, error)
	OVSDB   func(ctx context.Context, r OVSDBRequest) (any, error) // {"output": text, "rows": [...]}
	Trace   func(ctx context.Context, r TraceRequest) (*TraceResult, error)
	Capture func(ctx context.Context, namespace, pod, iface string, count int, d time.Duration, w io.Writer, started func()) error
}

// BadRequest marks an error the caller made (400, not 500).
type BadRequest struct{ Err error }

func (b BadRequest) Error() string { return b.Err.Error() }
func (b BadRequest) Unwrap() error { return b.Err }

// NodeAPIHandler serves the node API behind auth (nil auth refuses every
// request: there is no anonymous mode).
func (r *Reporter) NodeAPIHandler(ops NodeOps, auth Authorizer, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	diag := func(verb string) Attributes {
		return Attributes{Verb: verb, Group: APIGroup, Resource: ResourceNodes, Subresource: SubresourceDiag, Name: ops.Node}
	}
	guard := func(method string, attrs Attributes, h func(w http.ResponseWriter, req *http.Request)) http.HandlerFunc {
		return func(w http.ResponseWriter, req *http.Request) {
			if req.Method != method {
				w.Header().Set("Allow", method)
				writeErr(w, http.StatusMethodNotAllowed, fmt.Errorf("%s %s: use %s", req.Method, req.URL.Path, method))
				return
			}
			if auth == nil {
				writeErr(w, http.StatusForbidden, errors.New("the node API has no authorizer"))
				return
			}
			user, status, err := auth.Check(req.Context(), req, attrs)
			if err != nil {
				log.Info("node API request refused", "path", req.URL.Path, "user", user, "status", status, "reason", err)
				writeErr(w, status, err)
				return
			}
			log.Debug("node API request", "path", req.URL.Path, "user", user)
			h(w, req)
		}
	}
	mux.Handle("/metrics", guard(http.MethodGet, Attributes{Verb: "get", Path: "/metrics"}, r.metricsHandler().ServeHTTP))
	mux.HandleFunc(PathStatus, guard(http.MethodGet, diag("get"), func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, r.Snapshot())
	}))
	mux.HandleFunc(PathDoctor, guard(http.MethodGet, diag("get"), func(w http.ResponseWriter, req *http.Request) {
		if ops.Doctor == nil {
			writeErr(w, http.StatusNotImplemented, errors.New("doctor is not wired on this node"))
			return
		}
		rep, code, err := ops.Doctor(req.Context())
		if err != nil {
			writeErr(w, http.StatusInternalServerError, err)
			return
		}
		w.Header().Set("X-Doctor-Exit-Code", fmt.Sprint(code))
		writeJSON(w, http.StatusOK, rep)
	}))
	mux.HandleFunc(PathPinger, guard(http.MethodGet, diag("get"), func(w http.ResponseWriter, req *http.Request) {
		if ops.Pinger == nil {
			writeErr(w, http.StatusNotFound, errors.New("no pinger on this node"))
			return
		}
		round, err := ops.Pinger(req.Context())
		if err != nil {
			writeErr(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, round)
	}))
	mux.HandleFunc(PathPod, guard(http.MethodGet, diag("get"), func(w http.ResponseWriter, req *http.Request) {
		ns, name := req.URL.Query().Get("namespace"), req.URL.Query().Get("name")
		if ns == "" || name == "" || ops.Pod == nil {
			writeErr(w, http.StatusBadRequest, errors.New("namespace and name are required"))
			return
		}
		p, err := ops.Pod(req.Context(), ns, name)
		respond(w, p, err)
	}))
	post := func(path string, decode func(io.Reader) (any, error)) {
		mux.HandleFunc(path, guard(http.MethodPost, diag("create"), func(w http.ResponseWriter, req *http.Request) {
			res, err := decode(io.LimitReader(req.Body, 1<<20))
			respond(w, res, err)
		}))
	}
	post(PathAppctl, func(body io.Reader) (any, error) {
		var a AppctlRequest
		if err := json.NewDecoder(body).Decode(&a); err != nil {
			return nil, BadRequest{fmt.Errorf("appctl request: %w", err)}
		}
		if ops.Appctl == nil {
			return nil, errors.New("appctl is not wired on this node")
		}
		out, err := ops.Appctl(context.Background(), a)
		return map[string]string{"output": out}, err
	})
	post(PathOVSDB, func(body io.Reader) (any, error) {
		var o OVSDBRequest
		if err := json.NewDecoder(body).Decode(&o); err != nil {
			return nil, BadRequest{fmt.Errorf("ovsdb request: %w", err)}
		}
		if ops.OVSDB == nil {
			return nil, errors.New("ovsdb is not wired on this node")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return ops.OVSDB(ctx, o)
	})
	post(PathTrace, func(body io.Reader) (any, error) {
		var t TraceRequest
		if err := json.NewDecoder(body).Decode(&t); err != nil {
			return nil, BadRequest{fmt.Errorf("trace request: %w", err)}
		}
		if ops.Trace == nil {
			return nil, errors.New("trace is not wired on this node")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return ops.Trace(ctx, t)
	})
	capAttrs := Attributes{Verb: "get", Group: APIGroup, Resource: ResourceNodes, Subresource: SubresourceCapture, Name: ops.Node}
	mux.HandleFunc(PathCapture, guard(http.MethodGet, capAttrs, func(w http.ResponseWriter, req *http.Request) {
		q := req.URL.Query()
		count, d := 0, 10*time.Second
		if v := q.Get("count"); v != "" {
			if _, err := fmt.Sscan(v, &count); err != nil || count < 0 {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("count %q: want a number of packets", v))
				return
			}
		}
		if v := q.Get("duration"); v != "" {
			pd, err := time.ParseDuration(v)
			if err != nil || pd <= 0 || pd > time.Hour {
				writeErr(w, http.StatusBadRequest, fmt.Errorf("duration %q: want e.g. 30s, at most 1h", v))
				return
			}
			d = pd
		}
		if ops.Capture == nil {
			writeErr(w, http.StatusNotImplemented, errors.New("capture is not wired on this node"))
			return
		}
		started := false
		err := ops.Capture(req.Context(), q.Get("namespace"), q.Get("pod"), q.Get("iface"), count, d, flushWriter{w}, func() {
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
	}))
	return mux
}

type flushWriter struct{ w http.ResponseWriter }

func (f flushWriter) Write(p []byte) (int, error) {
	n, err := f.w.Write(p)
	if fl, ok := f.w.(http.Flusher); ok {
		fl.Flush()
	}
	return n, err
}

func respond(w http.ResponseWriter, v any, err error) {
	var br BadRequest
	switch {
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
	writeJSON(w, status, NodeAPIError{Error: strings.TrimSpace(err.Error())})
}

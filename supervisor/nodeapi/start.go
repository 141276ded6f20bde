// Package nodeapi is the node daemon's authenticated HTTPS API (:10666,
// the contract in internal/nodeapi) in one room: its serving certificate
// and publication on the Node (start.go), who may ask (TokenReview and
// SubjectAccessReview, kubeauth.go), the paths (handler.go), and the work
// behind them: read-only OVSDB queries in the manner of
// ovs-vsctl/ovn-nbctl/ovn-sbctl, read-only control-socket commands, packet
// traces (ovn-trace and ofproto/trace), a pod's OVS port, packet capture on
// a pod's host veth, the local pinger's latest round, doctor on the running
// node's configuration, and OVS/OVN internals as metrics. It changes
// nothing on the node.
package nodeapi

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// Deps is what the node API needs of the running node.
type Deps struct {
	// Node is the running daemon's configuration: what the API reads,
	// traces and captures on, and what /v1/doctor judges.
	Node *nodeconfig.NodeConfig
	// Health serves /metrics and /v1/status and knows the children's pids.
	Health *health.Reporter
	// Kube reviews the requests' credentials and publishes the API on the
	// Node; nil (a standalone node) serves no API: nobody could be
	// authenticated.
	Kube kubernetes.Interface
	Log  *slog.Logger
	// Addr is where the API listens (--node-api-addr); "" serves none.
	Addr string
	// CertFile and KeyFile are its serving certificate (--node-api-cert,
	// --node-api-key); without them a self-signed one is made, which
	// netctl pins through the Node annotation.
	CertFile, KeyFile string
	// Host are the settings /v1/doctor reads beside Node, and the SSL
	// files ovn-trace uses against ssl: databases.
	Host nodeconfig.HostSettings
	// PingerNamespace is where the pinger DaemonSet runs ("": the node
	// daemon's own namespace, see OwnNamespace).
	PingerNamespace string
	// Limits bound the API's connections and requests (zero: DefaultLimits).
	Limits *Limits
}

// Start serves the authenticated node API and publishes its address and
// certificate fingerprint on the Node. It returns a stop function; a
// listen failure is an error (the port is taken), no address or no
// Kubernetes client is not (nothing is served).
func Start(ctx context.Context, d Deps) (stop func(), err error) {
	noop := func() {}
	if d.Addr == "" || d.Kube == nil {
		return noop, nil
	}
	var cert *ServingCert
	if d.CertFile != "" {
		cert, err = LoadServingCert(d.CertFile, d.KeyFile)
	} else {
		cert, err = SelfSignedCert(d.Node.EncapIP, d.Node.Name)
	}
	if err != nil {
		return noop, err
	}
	l, err := net.Listen("tcp", d.Addr)
	if err != nil {
		return noop, err
	}
	auth := &KubeAuthorizer{Client: d.Kube, Audiences: []string{api.NodeAudience(d.Node.Name)}}
	lim := DefaultLimits()
	if d.Limits != nil {
		lim = d.Limits.orDefault()
	}
	h := HandlerWith(d.Health, d.backend(), auth, d.Log.With("component", "node-api"), lim)
	srv, limited := NewServer(l, h, lim)
	srv.TLSConfig = servingTLS(cert, auth)
	go func() { _ = srv.ServeTLS(limited, "", "") }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	advertise := net.JoinHostPort(d.Node.EncapIP, port)
	if host, _, _ := net.SplitHostPort(d.Addr); host != "" && host != "0.0.0.0" && host != "::" {
		advertise = l.Addr().String()
	}
	d.Log.Info("serving the node API", "addr", l.Addr().String(), "advertise", advertise, "cert_sha256", cert.Fingerprint)
	actx, cancel := context.WithCancel(ctx)
	go publish(actx, d.Kube, d.Node.Name, advertise, cert.Fingerprint, d.Log)
	return func() { cancel(); _ = srv.Close() }, nil
}

// servingTLS serves cert. Client certificates of the cluster's CA
// authenticate like at the API server; without one, a bearer token is
// reviewed.
func servingTLS(cert *ServingCert, auth *KubeAuthorizer) *tls.Config {
	base := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert.Cert}}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert.Cert},
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			c := base.Clone()
			if pool := auth.ClientCAPool(hello.Context()); pool != nil {
				c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
			}
			return c, nil
		}}
}

// backend wires the API's paths to this node.
func (d Deps) backend() Backend {
	ops := d.ops()
	return Backend{Node: d.Node.Name, Appctl: ops.Appctl, OVSDB: ops.OVSDB, Pod: ops.Pod, Trace: ops.Trace, Capture: ops.Capture,
		Pinger: d.pinger().Latest,
		Doctor: func(ctx context.Context) (any, int, error) {
			r := hostcheck.Doctor(ctx, d.Host, hostcheck.Running(d.Node), hostcheck.NewDoctorHost(d.Host), hostcheck.DoctorOptions{})
			return r, r.ExitCode(), nil
		}}
}

// pinger is the relay of this node's pinger pod (PingerSource).
func (d Deps) pinger() PingerSource {
	ns := d.PingerNamespace
	if ns == "" {
		ns = OwnNamespace()
	}
	return PingerSource{Kube: d.Kube, Node: d.Node.Name, Namespace: ns}
}

func (d Deps) ops() *Ops {
	return &Ops{Config: d.Node, SSLKey: d.Host.SSLKey, SSLCert: d.Host.SSLCert, SSLCACert: d.Host.SSLCACert, Log: d.Log.With("component", "node-api"),
		ControllerPid: func() int {
			for _, c := range d.Health.Children() {
				if c.Name == "ovn-controller" {
					return c.Pid
				}
			}
			return 0
		}}
}

// RegisterMetrics adds the OVS/OVN internals (memory, coverage, database
// sizes, active gateways) to the node's metrics, read at each scrape. It
// needs Node, Health and Log of d, with or without the API.
func RegisterMetrics(d Deps) {
	d.Health.Registry().MustRegister(&Collector{Ops: d.ops(), SystemID: func() string {
		raw, err := os.ReadFile(d.Node.Layout.SystemIDFile)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(raw))
	}})
}

// publish writes the API's address and certificate fingerprint on the
// Node, retrying with back-off until it succeeds or ctx ends.
func publish(ctx context.Context, kc kubernetes.Interface, node, addr, fp string, log *slog.Logger) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		api.AnnotationNodeAPIAddr: addr, api.AnnotationNodeAPICert: fp}}})
	for delay := 200 * time.Millisecond; ; delay = min(2*delay, 10*time.Second) {
		_, err := kc.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return
		}
		log.Warn("cannot publish the node API on the Node; netctl cannot reach this node until it is", "node", node, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

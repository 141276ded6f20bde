package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/netctl/doctor"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/nodeapi"
)

// startNodeAPI serves the authenticated node API (supervisor/health) when
// the node has a Kubernetes client, and publishes its address and
// certificate fingerprint on the Node. It returns a stop function; a
// listen failure is an error (the port is taken), a missing Kubernetes
// client is not (standalone hosts have no one to authenticate against).
func startNodeAPI(ctx context.Context, cfg *config.Config, nc *nodeconfig.NodeConfig, h *health.Reporter, extra nodeAPIExtras, log *slog.Logger) (func(), error) {
	noop := func() {}
	if cfg.NodeAPIAddr == "" {
		return noop, nil
	}
	rc, err := kubeConfig(cfg.Kubeconfig)
	if err != nil || rc == nil {
		if err != nil {
			log.Warn("node API off: no Kubernetes client to authenticate requests with", "err", err)
		}
		return noop, nil
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return noop, err
	}
	var cert *health.ServingCert
	if cfg.NodeAPICert != "" {
		cert, err = health.LoadServingCert(cfg.NodeAPICert, cfg.NodeAPIKey)
	} else {
		cert, err = health.SelfSignedCert(nc.EncapIP, nc.Name)
	}
	if err != nil {
		return noop, err
	}
	ops := newOps(cfg, nc, h, log)
	wiring := health.NodeOps{Node: nc.Name, Appctl: ops.Appctl, OVSDB: ops.OVSDB, Pod: ops.Pod, Trace: ops.Trace, Capture: ops.Capture,
		Pinger: func(ctx context.Context) (any, error) { return localPinger(ctx, kc, nc.Name) },
		Doctor: func(ctx context.Context) (any, int, error) {
			r := doctor.Run(ctx, cfg, doctor.Options{})
			return r, r.ExitCode(), nil
		}}
	l, err := net.Listen("tcp", cfg.NodeAPIAddr)
	if err != nil {
		return noop, err
	}
	auth := &health.KubeAuthorizer{Client: kc}
	base := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert.Cert}}
	srv := &http.Server{
		Handler: h.NodeAPIHandler(wiring, auth, log.With("component", "node-api")),
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert.Cert},
			// Client certificates of the cluster's CA authenticate like at
			// the API server; without one, a bearer token is reviewed.
			GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
				c := base.Clone()
				if pool := auth.ClientCAPool(hello.Context()); pool != nil {
					c.ClientCAs, c.ClientAuth = pool, tls.VerifyClientCertIfGiven
				}
				return c, nil
			}},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	advertise := net.JoinHostPort(nc.EncapIP, port)
	if host, _, _ := net.SplitHostPort(cfg.NodeAPIAddr); host != "" && host != "0.0.0.0" && host != "::" {
		advertise = l.Addr().String()
	}
	log.Info("serving the node API", "addr", l.Addr().String(), "advertise", advertise, "cert_sha256", cert.Fingerprint)
	actx, cancel := context.WithCancel(ctx)
	go publishNodeAPI(actx, kc, nc.Name, advertise, cert.Fingerprint, log)
	return func() { cancel(); _ = srv.Close() }, nil
}

func newOps(cfg *config.Config, nc *nodeconfig.NodeConfig, h *health.Reporter, log *slog.Logger) *nodeapi.Ops {
	return &nodeapi.Ops{Config: nc, SSLKey: cfg.SSLKey, SSLCert: cfg.SSLCert, SSLCACert: cfg.SSLCACert, Log: log.With("component", "node-api"),
		ControllerPid: func() int {
			for _, c := range h.Children() {
				if c.Name == "ovn-controller" {
					return c.Pid
				}
			}
			return 0
		}}
}

// registerOVSMetrics adds the OVS/OVN internals (memory, coverage, database
// sizes, active gateways) to the node's metrics, read at each scrape.
func registerOVSMetrics(cfg *config.Config, nc *nodeconfig.NodeConfig, h *health.Reporter, log *slog.Logger) {
	h.Registry().MustRegister(&nodeapi.Collector{Ops: newOps(cfg, nc, h, log), SystemID: func() string {
		raw, err := os.ReadFile(nc.Layout.SystemIDFile)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(raw))
	}})
}

// nodeAPIExtras are optional providers wired elsewhere.
type nodeAPIExtras struct{}

// localPinger fetches the latest round of the pinger pod on this node (the
// ovnhost-pinger DaemonSet, label app=ovnhost-pinger, any namespace) from
// its /matrix on the pod network, which this node reaches through ovn0.
func localPinger(ctx context.Context, kc kubernetes.Interface, node string) (any, error) {
	pods, err := kc.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: "app=ovnhost-pinger", FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		return nil, fmt.Errorf("listing the pinger pods of this node: %w", err)
	}
	var errs []string
	for _, p := range pods.Items {
		ip := p.Status.PodIP
		if ip == "" {
			ip, _, _ = strings.Cut(p.Annotations[annotations.IPAddress], ",")
		}
		if ip == "" {
			continue
		}
		port := "8080"
		for _, c := range p.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.Name == "metrics" {
					port = fmt.Sprint(cp.ContainerPort)
				}
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		req, _ := http.NewRequestWithContext(cctx, http.MethodGet, "http://"+net.JoinHostPort(ip, port)+"/matrix", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			errs = append(errs, p.Name+": "+err.Error())
			continue
		}
		var round json.RawMessage
		err = json.NewDecoder(resp.Body).Decode(&round)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != http.StatusOK {
			errs = append(errs, fmt.Sprintf("%s: %s %v", p.Name, resp.Status, err))
			continue
		}
		return round, nil
	}
	if len(errs) == 0 {
		return nil, errors.New("no ovnhost-pinger pod runs on this node")
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

// publishNodeAPI writes the API's address and certificate fingerprint on
// the Node, retrying with back-off until it succeeds or ctx ends.
func publishNodeAPI(ctx context.Context, kc kubernetes.Interface, node, addr, fp string, log *slog.Logger) {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		health.AnnotationNodeAPIAddr: addr, health.AnnotationNodeAPICert: fp}}})
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

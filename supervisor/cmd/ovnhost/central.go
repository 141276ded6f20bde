package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/version"
	"github.com/ovnhost/ovnhost/supervisor/central"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/preflight"
)

// runCentral is `ovnhost run --role=central`: one member of the clustered
// OVN central. The node's host checks (datapath, tunnel interface) do not
// apply; a bad membership is a configuration error (exit 2).
func runCentral(ctx context.Context, cfg *config.Config, log *slog.Logger, stderr io.Writer) int {
	var tlsFiles *ovsdbconn.TLSFiles
	if cfg.EnableSSL {
		var err error
		tlsFiles, err = ovsdbconn.LoadTLS(cfg.SSLKey, cfg.SSLCert, cfg.SSLCACert, log)
		if err != nil {
			fmt.Fprintf(stderr, "ovnhost: ENABLE_SSL: %v; check --ssl-key, --ssl-cert and --ssl-ca-cert (default <ssl-dir>/ovn-privkey.pem, ovn-cert.pem, cacert.pem)\n", err)
			return exitConfig
		}
	}
	h := health.New()
	c, err := central.New(cfg, central.Options{Log: log, Health: h, TLS: tlsFiles, ExplainExec: preflight.ExplainExec})
	if err != nil {
		var ce *config.Error
		if errors.As(err, &ce) {
			fmt.Fprintln(stderr, err)
			fmt.Fprintln(stderr, "ovnhost: configuration rejected; nothing was started")
			return exitConfig
		}
		log.Error("cannot run the central", "err", err)
		return exitFailure
	}
	h.Registry().MustRegister(c.Collector())
	log.Info("starting", "version", version.Version, "role", cfg.Role, "address", c.Self(), "members", strings.Join(cfg.OVNDBIPs, ","), "ssl", cfg.EnableSSL)
	if cfg.HealthAddr != "" {
		l, err := net.Listen("tcp", cfg.HealthAddr)
		if err != nil {
			log.Error("health endpoint", "addr", cfg.HealthAddr, "err", err, "fix", "free the port or change --health-addr")
			return exitFailure
		}
		srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		defer srv.Close()
		log.Info("serving /healthz /readyz /metrics", "addr", l.Addr().String())
	}
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go h.RunWatchdog(wctx)
	t0 := time.Now()
	if err := c.Start(ctx); err != nil {
		if errors.Is(err, central.ErrLeft) {
			log.Info("left the cluster; nothing left to run here", "address", c.Self())
			h.Stopping()
			return exitOK
		}
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("stopped while starting")
			h.Stopping()
			return exitOK
		}
		log.Error("start failed; everything started was stopped", "err", err)
		return exitFailure
	}
	log.Info("ready", "took", time.Since(t0).Round(time.Millisecond))
	debug.FreeOSMemory()
	<-ctx.Done()
	log.Info("stopping")
	h.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), 4*cfg.StopTimeout)
	defer cancel()
	if err := c.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

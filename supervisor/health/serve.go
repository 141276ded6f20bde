package health

import (
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Serve serves r's /healthz, /readyz and /metrics on addr until the
// returned stop is called; addr "" serves nothing. A listen failure is
// logged with its fix and returned (the port is taken).
func (r *Reporter) Serve(addr string, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Error("health endpoint", "addr", addr, "err", err, "fix", "free the port or change --health-addr")
		return nil, err
	}
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.Info("serving /healthz /readyz /metrics", "addr", l.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// Package ovsdbconn is ovnhost's one OVSDB access layer. It holds
// long-lived libovsdb connections: dial with a deadline (waiting for a unix
// socket to appear rather than polling for it), reconnect on loss, and wait
// for a condition on the monitored cache, so callers gate on database state
// instead of sleeping. Transact runs a transaction and names the operation
// that failed; ClusterRemotes derives the NB and SB remotes from OVN_DB_IPS.
package ovsdbconn

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/cache"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
)

// Options for Dial.
type Options struct {
	// Tables to monitor; nil monitors every table of the model.
	Tables []model.Model
	// Monitor, when set, replaces Tables with these monitor requests, for
	// callers that monitor only some columns of a table:
	// client.WithTable(ls, &ls.Name, &ls.ExternalIDs).
	Monitor []client.MonitorOption
	// TLS is required for ssl: endpoints; see LoadTLS.
	TLS *tls.Config
	// Log receives libovsdb's messages at debug level (default slog.Default()).
	Log *slog.Logger
	// Timeout bounds each connection attempt and each reconnection
	// attempt (default DefaultTimeout).
	Timeout time.Duration
	// Exited, when set, ends the wait early: the server died before answering.
	Exited <-chan struct{}
	// Name is the server's name for error messages ("ovsdb-server (conf.db)").
	Name string
	// Probe only proves the server answers: no monitor, no reconnect.
	Probe bool
	// Once makes a single connection attempt: for one-shot questions
	// (netctl doctor) where a server that does not answer now is the answer.
	Once bool
}

// DefaultTimeout bounds one connection attempt when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Conn is a connected, monitoring libovsdb client plus a change signal.
type Conn struct {
	client.Client
	endpoint string

	mu      sync.Mutex
	changed chan struct{}
}

// Dial connects to endpoint (comma-separated OVSDB remotes: unix:PATH,
// tcp:IP:PORT, ssl:IP:PORT), starts the monitor, and keeps reconnecting if
// the server goes away. It retries until ctx ends; for a unix socket it
// waits for the file to appear. This is the one dialling policy of every
// OVSDB client in ovnhost (node daemon, CNI server, controller, doctor).
func Dial(ctx context.Context, dbModel model.ClientDBModel, endpoint string, o Options) (*Conn, error) {
	log := o.Log
	if log == nil {
		log = slog.Default()
	}
	name := o.Name
	if name == "" {
		name = dbModel.Name()
	}
	timeout := o.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	eps, err := splitEndpoints(endpoint, o.TLS != nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	// libovsdb logs every failed reconnect as an error; the supervisor
	// reports the server's state itself, so its chatter goes to debug.
	lg := logr.FromSlogHandler(debugOnly{log.Handler()}).WithValues("db", dbModel.Name())
	opts := []client.Option{client.WithLogger(&lg), client.WithLeaderOnly(false)}
	if !o.Probe {
		opts = append(opts, client.WithReconnect(timeout, reconnectBackoff()))
	}
	for _, ep := range eps {
		opts = append(opts, client.WithEndpoint(ep))
	}
	if o.TLS != nil {
		opts = append(opts, client.WithTLSConfig(o.TLS))
	}
	cl, err := client.NewOVSDBClient(dbModel, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if o.Once {
		if err := cl.Connect(ctx); err != nil {
			return nil, fmt.Errorf("%s does not answer on %s: %w", name, endpoint, err)
		}
	} else if err := connect(ctx, cl, endpoint, name, timeout, o.Exited); err != nil {
		return nil, err
	}
	c := &Conn{Client: cl, endpoint: endpoint, changed: make(chan struct{})}
	if o.Probe {
		return c, nil
	}
	cl.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(string, model.Model) { c.notify() },
		UpdateFunc: func(string, model.Model, model.Model) { c.notify() },
		DeleteFunc: func(string, model.Model) { c.notify() },
	})
	switch {
	case o.Monitor != nil:
		_, err = cl.Monitor(ctx, cl.NewMonitor(o.Monitor...))
	case o.Tables == nil:
		_, err = cl.MonitorAll(ctx)
	default:
		var tabs []client.MonitorOption
		for _, m := range o.Tables {
			tabs = append(tabs, client.WithTable(m))
		}
		_, err = cl.Monitor(ctx, cl.NewMonitor(tabs...))
	}
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("%s: monitor: %w", name, err)
	}
	return c, nil
}

// splitEndpoints checks the comma-separated remotes: each needs a scheme,
// and ssl: needs a TLS configuration.
func splitEndpoints(endpoint string, haveTLS bool) ([]string, error) {
	var eps []string
	for _, ep := range strings.Split(endpoint, ",") {
		ep = strings.TrimSpace(ep)
		if ep == "" {
			continue
		}
		switch {
		case strings.HasPrefix(ep, "unix:"), strings.HasPrefix(ep, "tcp:"):
		case strings.HasPrefix(ep, "ssl:"):
			if !haveTLS {
				return nil, fmt.Errorf("endpoint %q uses ssl: but no TLS configuration was given; pass the key, certificate and CA (ENABLE_SSL)", ep)
			}
		default:
			return nil, fmt.Errorf("endpoint %q has no scheme; write unix:/path, tcp:IP:PORT or ssl:IP:PORT", ep)
		}
		eps = append(eps, ep)
	}
	if len(eps) == 0 {
		return nil, errors.New("no OVSDB endpoint given")
	}
	return eps, nil
}

func reconnectBackoff() backoff.BackOff {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 50 * time.Millisecond
	b.MaxInterval = 2 * time.Second
	b.MaxElapsedTime = 0
	return b
}

// connect tries until ctx ends. Unix sockets are awaited with inotify; a
// refused connection (socket bound but not yet listening, or a TCP server
// not up) is retried with a short capped back-off.
func connect(ctx context.Context, cl client.Client, endpoint, name string, timeout time.Duration, exited <-chan struct{}) error {
	var sockets []string
	for _, ep := range strings.Split(endpoint, ",") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(ep), "unix:"); ok {
			sockets = append(sockets, p)
		}
	}
	delay := 5 * time.Millisecond
	var lastErr error
	for {
		if len(sockets) > 0 {
			if err := waitForFile(ctx, sockets[0], exited); err != nil {
				return fmt.Errorf("waiting for %s to create %s: %w", name, sockets[0], err)
			}
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
		err := cl.Connect(actx)
		cancel()
		if err == nil {
			return nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to answer on %s: %w (last error: %v)", name, endpoint, ctx.Err(), lastErr)
		case <-exited:
			return fmt.Errorf("%s exited before answering on %s", name, endpoint)
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// waitForFile returns once path exists, using inotify on its directory.
func waitForFile(ctx context.Context, path string, exited <-chan struct{}) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-exited:
			return errors.New("the server exited")
		case err := <-w.Errors:
			return err
		case <-w.Events:
		}
	}
}

// IsRefused reports whether err is a refused connection.
func IsRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

func (c *Conn) notify() {
	c.mu.Lock()
	close(c.changed)
	c.changed = make(chan struct{})
	c.mu.Unlock()
}

// Changed returns a channel closed at the next change of the cache.
func (c *Conn) Changed() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.changed
}

// WaitUntil returns once cond holds on the cache, re-checking on every
// change. what says what is awaited, for the error when ctx ends.
func (c *Conn) WaitUntil(ctx context.Context, what string, cond func() bool, exited <-chan struct{}) error {
	for {
		ch := c.Changed()
		if cond() {
			return nil
		}
		select {
		case <-ch:
		case <-exited:
			return fmt.Errorf("gave up waiting for %s: the daemon exited", what)
		case <-ctx.Done():
			return fmt.Errorf("timed out waiting for %s: %w", what, ctx.Err())
		}
	}
}

// Endpoint is what Dial connected to.
func (c *Conn) Endpoint() string { return c.endpoint }

// debugOnly logs every record at debug level.
type debugOnly struct{ h slog.Handler }

func (d debugOnly) Enabled(ctx context.Context, _ slog.Level) bool {
	return d.h.Enabled(ctx, slog.LevelDebug)
}

func (d debugOnly) Handle(ctx context.Context, r slog.Record) error {
	if !d.h.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return d.h.Handle(ctx, r)
}

func (d debugOnly) WithAttrs(a []slog.Attr) slog.Handler { return debugOnly{d.h.WithAttrs(a)} }
func (d debugOnly) WithGroup(g string) slog.Handler      { return debugOnly{d.h.WithGroup(g)} }

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
	"reflect"
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
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Options for Dial.
type Options struct {
	// Tables to monitor; nil monitors every table of the model.
	Tables []model.Model
	// Monitor, when set, replaces Tables with these monitor requests, for
	// callers that monitor only some columns or rows of a table.
	Monitor []Table
	// Optional tables: dropped from the model when the server lacks them
	// (or a column of theirs), so that an older server is still served;
	// Conn.Unavailable says which feature is then off and since when it
	// exists. Their monitors are dropped with them.
	Optional []Feature
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

// Table is one monitor request: the table of Model, only the columns of
// Fields (pointers into Model; nil: every column of the model, never the
// server's extra ones), only the rows matching Where (nil: all rows).
type Table struct {
	Model  model.Model
	Fields []any
	Where  []model.Condition
}

// DefaultTimeout bounds one connection attempt when Options.Timeout is 0.
const DefaultTimeout = 5 * time.Second

// Conn is a connected, monitoring libovsdb client plus a change signal.
type Conn struct {
	client.Client
	endpoint string

	mu      sync.Mutex
	changed chan struct{}

	db          string
	model       model.ClientDBModel // what the client was built with
	unavailable []*Unavailable
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
	base := []client.Option{client.WithLogger(&lg), client.WithLeaderOnly(false)}
	for _, ep := range eps {
		base = append(base, client.WithEndpoint(ep))
	}
	if o.TLS != nil {
		base = append(base, client.WithTLSConfig(o.TLS))
	}
	opts := base
	if !o.Probe {
		opts = append(append([]client.Option{}, base...), client.WithReconnect(timeout, reconnectBackoff()))
	}
	if o.Probe {
		// A probe proves the server answers; it needs no table.
		if dbModel, err = model.NewClientDBModel(dbModel.Name(), map[string]model.Model{}); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	c := &Conn{endpoint: endpoint, changed: make(chan struct{}), db: dbModel.Name()}
	cl, err := c.open(ctx, dbModel, endpoint, name, timeout, o, opts)
	if errors.Is(err, errValidation) {
		// The server's schema is not the model's: find out what it lacks,
		// drop optional tables, or say what is missing and what is needed.
		var schema ovsdb.DatabaseSchema
		sctx, cancel := context.WithTimeout(ctx, timeout)
		schema, err = serverSchema(sctx, dbModel.Name(), endpoint, base)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: reading the server's schema after libovsdb refused it: %w", name, err)
		}
		var reduced model.ClientDBModel
		reduced, err = c.adapt(dbModel, schema, o.Optional, endpoint)
		if err != nil {
			return nil, err
		}
		for _, u := range c.unavailable {
			log.Warn("feature unavailable on this server", "db", c.db, "server", endpoint, "err", u.Error())
		}
		cl, err = c.open(ctx, reduced, endpoint, name, timeout, o, opts)
		if errors.Is(err, errValidation) {
			return nil, fmt.Errorf("%s: libovsdb still refuses the schema after dropping %d optional tables: %w", name, len(c.unavailable), err)
		}
	}
	if err != nil {
		return nil, err
	}
	c.Client = cl
	if o.Probe {
		return c, nil
	}
	cl.Cache().AddEventHandler(&cache.EventHandlerFuncs{
		AddFunc:    func(string, model.Model) { c.notify() },
		UpdateFunc: func(string, model.Model, model.Model) { c.notify() },
		DeleteFunc: func(string, model.Model) { c.notify() },
	})
	if _, err := cl.Monitor(ctx, cl.NewMonitor(c.monitors(o)...)); err != nil {
		cl.Close()
		return nil, fmt.Errorf("%s: monitor: %w", name, err)
	}
	return c, nil
}

// open makes a libovsdb client for m and connects it; a schema libovsdb
// refuses is errValidation, at once (retrying cannot fix it).
func (c *Conn) open(ctx context.Context, m model.ClientDBModel, endpoint, name string, timeout time.Duration, o Options, opts []client.Option) (client.Client, error) {
	cl, err := client.NewOVSDBClient(m, opts...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	c.model = m
	if o.Once {
		err = cl.Connect(ctx)
		if isValidation(err) {
			return nil, fmt.Errorf("%w: %v", errValidation, err)
		}
		if err != nil {
			return nil, fmt.Errorf("%s does not answer on %s: %w", name, endpoint, err)
		}
		return cl, nil
	}
	if err := connect(ctx, cl, endpoint, name, timeout, o.Exited); err != nil {
		return nil, err
	}
	return cl, nil
}

// adapt returns the model without the optional tables the server cannot
// serve, or a *SchemaError when it lacks something else.
func (c *Conn) adapt(m model.ClientDBModel, schema ovsdb.DatabaseSchema, optional []Feature, endpoint string) (model.ClientDBModel, error) {
	opt := map[string]Feature{}
	for _, f := range optional {
		opt[tableOf(m, f.Table)] = f
	}
	drop := map[string]bool{}
	var hard []string
	for _, g := range Compare(m, schema) {
		if f, ok := opt[g.Table]; ok {
			drop[g.Table] = true
			c.unavailable = append(c.unavailable, &Unavailable{Feature: f, Table: g.Table, DB: m.Name(), Server: schema.Version})
			continue
		}
		hard = append(hard, g.String())
	}
	if len(hard) > 0 {
		return m, &SchemaError{DB: m.Name(), Server: schema.Version, Model: modelVersion(m.Name()), Missing: hard, Remote: endpoint}
	}
	return without(m, drop)
}

// monitors are the monitor requests: every column of the model by name
// (a newer server's extra columns would break the cache on update), and
// nothing of a dropped optional table.
func (c *Conn) monitors(o Options) []client.MonitorOption {
	tables := o.Monitor
	if tables == nil {
		if o.Tables != nil {
			for _, m := range o.Tables {
				tables = append(tables, Table{Model: m})
			}
		} else {
			for _, typ := range c.model.Types() {
				tables = append(tables, Table{Model: reflect.New(typ.Elem()).Interface().(model.Model)})
			}
		}
	}
	var mons []client.MonitorOption
	for _, t := range tables {
		if c.dropped(t.Model) {
			continue
		}
		fields := t.Fields
		if len(fields) == 0 {
			fields = Columns(t.Model)
		}
		if t.Where != nil {
			mons = append(mons, client.WithConditionalTable(t.Model, t.Where, fields...))
		} else {
			mons = append(mons, client.WithTable(t.Model, fields...))
		}
	}
	return mons
}

func (c *Conn) dropped(m model.Model) bool { return c.Unavailable(m) != nil }

// Unavailable returns nil when the server has the optional table t, else
// the error that names the feature and the release it needs.
func (c *Conn) Unavailable(t model.Model) error {
	for _, u := range c.unavailable {
		if reflect.TypeOf(u.Feature.Table) == reflect.TypeOf(t) {
			return u
		}
	}
	return nil
}

// Degraded lists the optional features this server cannot serve.
func (c *Conn) Degraded() []*Unavailable { return c.unavailable }

// ServerSchema is the server's schema version and its release ("8.2.0", "OVS 2.15").
func (c *Conn) ServerSchema() (version, release string) {
	v := c.Schema().Version
	return v, ReleaseOf(c.db, v)
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
		if isValidation(err) {
			return fmt.Errorf("%w: %v", errValidation, err)
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

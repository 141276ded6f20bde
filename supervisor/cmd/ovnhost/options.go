package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/fsnotify/fsnotify"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// newLogger is the daemon's logger at the configured level and format.
func newLogger(cfg *config.Config, level *slog.LevelVar, w io.Writer) *slog.Logger {
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	mk := func(w io.Writer) slog.Handler {
		if cfg.LogFormat == "json" {
			return slog.NewJSONHandler(w, opts)
		}
		return slog.NewTextHandler(w, opts)
	}
	// Under systemd each line carries its journald priority.
	if f, ok := w.(*os.File); ok && health.UnderJournal(f, os.Getenv("JOURNAL_STREAM")) {
		return slog.New(health.JournalHandler(w, mk))
	}
	return slog.New(mk(w))
}

// loadTLS reads the SSL files with ENABLE_SSL (nil without); false when
// they cannot be read, said on stderr (exit 2).
func loadTLS(cfg *config.Config, log *slog.Logger, stderr io.Writer) (*ovsdbconn.TLSFiles, bool) {
	if !cfg.EnableSSL {
		return nil, true
	}
	t, err := ovsdbconn.LoadTLS(cfg.SSLKey, cfg.SSLCert, cfg.SSLCACert, log)
	if err != nil {
		what := "ENABLE_SSL"
		if cfg.IsCentral() {
			what = "SSL (the central's default)"
		}
		fmt.Fprintf(stderr, "ovnhost: %s: %v; check --ssl-key, --ssl-cert and --ssl-ca-cert (default <ssl-dir>/ovn-privkey.pem, ovn-cert.pem, cacert.pem), or make them with `ovnhost certs --dir=%s` and copy them (not cakey.pem) to every member and node, which must share the CA; ENABLE_SSL=false serves plain TCP (unsafe, docs/security.md)\n", what, err, cfg.SSLDir)
		return nil, false
	}
	return t, true
}

// watchConfigFile re-reads the configuration file when it changes. The log
// level applies at once; any other change is reported as waiting for a
// restart (the daemons' command lines and databases depend on it), and an
// invalid file is reported and ignored: the running node is never touched.
func watchConfigFile(ctx context.Context, running *config.Config, args, environ []string, level *slog.LevelVar, log *slog.Logger) error {
	if running.File == "" {
		return nil
	}
	snapshot := *running
	cur := &snapshot
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	// The directory, not the file: editors and ConfigMaps replace files.
	if err := w.Add(filepath.Dir(cur.File)); err != nil {
		w.Close()
		return err
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err := <-w.Errors:
				log.Warn("config file watch", "file", cur.File, "err", err)
			case ev := <-w.Events:
				if filepath.Clean(ev.Name) != filepath.Clean(cur.File) && !strings.HasPrefix(filepath.Base(ev.Name), "..") {
					continue
				}
				next, err := config.Load(args, environ, io.Discard)
				if err != nil {
					log.Warn("config file changed but is not valid; keeping the running configuration", "file", cur.File, "err", err)
					continue
				}
				changed := changedSettings(cur, next)
				if len(changed) == 0 {
					continue
				}
				if next.LogLevel != cur.LogLevel {
					_ = level.UnmarshalText([]byte(next.LogLevel))
					log.Info("log level changed", "level", next.LogLevel)
					cur.LogLevel = next.LogLevel
					changed = changedSettings(cur, next)
				}
				if len(changed) > 0 {
					log.Warn("config file changed; these settings take effect at the next restart", "file", cur.File, "settings", strings.Join(changed, ", "))
				}
			}
		}
	}()
	return nil
}

// changedSettings names the fields of Config that differ.
func changedSettings(a, b *config.Config) []string {
	va, vb := reflect.ValueOf(a).Elem(), reflect.ValueOf(b).Elem()
	var out []string
	for i := 0; i < va.NumField(); i++ {
		if !reflect.DeepEqual(va.Field(i).Interface(), vb.Field(i).Interface()) {
			out = append(out, va.Type().Field(i).Name)
		}
	}
	return out
}

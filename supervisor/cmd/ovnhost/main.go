// Command ovnhost is the node daemon: preflight, the supervisor of
// ovsdb-server, ovs-vswitchd and ovn-controller (plus the local OVN
// databases and ovn-northd in all-in-one mode), health, and the CNI server.
//
//	ovnhost run [flags]        run the node (systemd, Talos, DaemonSet entrypoint)
//	ovnhost preflight [flags]  run the host checks alone
//	ovnhost cleanup [--purge] [flags]  remove what ovnhost put on the host
//	ovnhost version
//
// Exit status: 0 clean stop, 1 runtime failure, 2 bad configuration,
// 3 a preflight check failed.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/version"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
	"github.com/ovnhost/ovnhost/supervisor/node"
	"github.com/ovnhost/ovnhost/supervisor/preflight"
)

const (
	exitOK        = 0
	exitFailure   = 1
	exitConfig    = 2
	exitPreflight = 3
	// exitUpgrade: stopped on SIGUSR2 for the next ovnhost, the datapath
	// (and with adopt-children the daemons) left running; the systemd unit
	// restarts on it (RestartForceExitStatus).
	exitUpgrade = 75
)

func main() {
	os.Exit(run(os.Args[1:], os.Environ(), os.Stdout, os.Stderr))
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: ovnhost run|preflight|cleanup [--purge]|version [flags]; `ovnhost run --help` lists the settings")
}

func run(args, environ []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitConfig
	}
	switch args[0] {
	case "version", "--version":
		fmt.Fprintln(stdout, "ovnhost", version.Version)
		return exitOK
	case "run", "preflight":
	case "cleanup":
		return cleanup(args[1:], environ, stdout, stderr)
	case "-h", "--help", "help":
		usage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "ovnhost: unknown command %q\n", args[0])
		usage(stderr)
		return exitConfig
	}
	cfg, err := config.Load(args[1:], environ, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		fmt.Fprintln(stderr, "ovnhost: configuration rejected; nothing was started")
		return exitConfig
	}
	level := new(slog.LevelVar)
	log := newLogger(cfg, level, stderr)
	for _, k := range cfg.IgnoredEnv {
		log.Debug("ignoring a Kubernetes service-link variable (a Service named ovnhost-* in this namespace; set enableServiceLinks: false)", "env", k)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// A reader of our log that goes away (a pipe, a restarted journald)
	// must not kill the supervisor and orphan its children: with SIGPIPE
	// handled, the write fails instead. Handled, not ignored, so children
	// start with the default disposition.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	if cfg.IsCentral() && args[0] == "run" {
		return runCentral(ctx, cfg, log, stderr)
	}

	pre := preflight.Run(ctx, cfg)
	if args[0] == "preflight" {
		pre.Print(stdout)
		if pre.Failed() {
			return exitPreflight
		}
		return exitOK
	}
	if pre.Failed() {
		pre.Print(stderr)
		fmt.Fprintln(stderr, "ovnhost: preflight failed; nothing was started")
		return exitPreflight
	}
	for _, c := range pre.Checks {
		if c.Status == preflight.Warn {
			log.Warn("preflight", "check", c.Name, "found", c.Found, "fix", c.Fix)
		}
	}
	if err := watchConfigFile(ctx, cfg, args[1:], environ, level, log); err != nil {
		log.Warn("cannot watch the config file; changes need a restart", "file", cfg.File, "err", err)
	}
	var tlsFiles *ovsdbconn.TLSFiles
	var tlsConfig *tls.Config
	if cfg.EnableSSL {
		tlsFiles, err = ovsdbconn.LoadTLS(cfg.SSLKey, cfg.SSLCert, cfg.SSLCACert, log)
		if err != nil {
			fmt.Fprintf(stderr, "ovnhost: ENABLE_SSL: %v; check --ssl-key, --ssl-cert and --ssl-ca-cert (default <ssl-dir>/ovn-privkey.pem, ovn-cert.pem, cacert.pem)\n", err)
			return exitConfig
		}
		tlsConfig = tlsFiles.Config()
	}
	nc, err := cfg.Resolve(pre.Findings, tlsConfig)
	if err != nil {
		fmt.Fprintln(stderr, "ovnhost:", err)
		return exitPreflight
	}
	return runNode(ctx, cfg, nc, tlsFiles, log, environ)
}

func envMap(environ []string) map[string]string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return m
}

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

func runNode(ctx context.Context, cfg *config.Config, nc *nodeconfig.NodeConfig, tlsFiles *ovsdbconn.TLSFiles, log *slog.Logger, environ []string) int {
	// SIGUSR2: hand over to the next ovnhost (an upgrade of ovnhost
	// itself); registered first, since its default action kills us.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	h := health.New()
	log.Info("starting", "version", version.Version, "node", nc.Name, "mode", cfg.Mode, "datapath", nc.Datapath,
		"tunnel_iface", nc.TunnelIface, "encap_ip", nc.EncapIP, "pod_mtu", nc.PodMTU, "sb", nc.SB)
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
	registerOVSMetrics(cfg, nc, h, log)
	stopAPI, err := startNodeAPI(wctx, cfg, nc, h, nodeAPIExtras{}, log)
	if err != nil {
		log.Error("node API", "addr", cfg.NodeAPIAddr, "err", err, "fix", "free the port, fix --node-api-cert/--node-api-key, or set --node-api-addr= to disable it")
		return exitFailure
	}
	defer stopAPI()

	n, err := node.New(cfg, nc, node.Options{Log: log, Health: h, TLS: tlsFiles, ExplainExec: preflight.ExplainExec})
	if err != nil {
		log.Error("cannot run the node", "err", err)
		return exitFailure
	}
	if cniPossible(cfg, envMap(environ)) {
		egress := &egressUnit{backend: cfg.NATBackend, keepDatapath: cfg.KeepDatapath, log: log,
			n: n, nodeName: nc.Name, kubeconfig: cfg.Kubeconfig, sb: nc.SB}
		n.AddUnit(egress)
		if rc, _ := kubeConfig(cfg.Kubeconfig); rc != nil { // EIP/SNAT come from a ConfigMap: Kubernetes mode only
			n.AddUnit(&externalGatewayUnit{n: n, nodeName: nc.Name, kubeconfig: cfg.Kubeconfig, tunnelIface: nc.TunnelIface,
				keepDatapath: cfg.KeepDatapath, log: log})
		}
		cni := newCNIUnit(n, cfg, nc, log, h.Registry())
		cni.opts.Egress = egress.apply
		n.AddUnit(cni)
	} else {
		log.Warn("CNI server disabled: no Kubernetes configuration and no northbound database to allocate pod addresses from", "fix", "set KUBECONFIG (or run in-cluster), or OVN_DB_IPS for standalone allocation")
	}
	t0 := time.Now()
	if err := n.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			log.Info("stopped while starting")
			h.Stopping()
			return exitOK
		}
		log.Error("start failed; everything started was stopped", "err", err)
		return exitFailure
	}
	log.Info("ready", "took", time.Since(t0).Round(time.Millisecond), "system_id", n.SystemID())
	// Start-up garbage (schemas, initial monitor contents) is the bulk of
	// the heap: hand it back now rather than at the next GC cycles.
	debug.FreeOSMemory()
	upgrade := waitForStop(ctx, usr2, log)
	h.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), 6*cfg.StopTimeout)
	defer cancel()
	if upgrade {
		handedOver, err := n.StopForUpgrade(sctx)
		if err != nil {
			log.Error("stop for an upgrade", "err", err)
			return exitFailure
		}
		if handedOver {
			log.Info("handed over: ovsdb-server, ovs-vswitchd and ovn-controller keep running for the next ovnhost to adopt")
		} else {
			log.Info("stopped for an upgrade, the datapath kept (without adopt-children the daemons cannot outlive ovnhost)")
		}
		return exitUpgrade
	}
	if err := n.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

// waitForStop returns when ovnhost should stop: true for an upgrade
// (SIGUSR2), false for SIGTERM/SIGINT.
func waitForStop(ctx context.Context, usr2 <-chan os.Signal, log *slog.Logger) bool {
	select {
	case <-ctx.Done():
		log.Info("stopping")
		return false
	case <-usr2:
		log.Info("SIGUSR2: stopping for the next ovnhost (an upgrade)")
		return true
	}
}

// cleanup is `ovnhost cleanup [--purge] [flags]`: the same settings as run,
// so it finds the same directories.
func cleanup(args, environ []string, stdout, stderr io.Writer) int {
	purge := false
	var rest []string
	for _, a := range args {
		if a == "--purge" || a == "-purge" {
			purge = true
			continue
		}
		rest = append(rest, a)
	}
	cfg, err := config.Load(rest, environ, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintln(stderr, err)
		return exitConfig
	}
	removed, err := node.Cleanup(cfg, purge)
	if err == nil {
		// The egress masquerade rules of either backend (no-op when absent).
		err = hostnat.Cleanup(nil)
	}
	for _, r := range removed {
		fmt.Fprintln(stdout, "removed", r)
	}
	if err != nil {
		fmt.Fprintln(stderr, "ovnhost cleanup:", err)
		return exitFailure
	}
	if len(removed) == 0 {
		fmt.Fprintln(stdout, "nothing to remove")
	}
	return exitOK
}

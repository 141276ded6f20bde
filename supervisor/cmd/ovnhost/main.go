// Command ovnhost is the node daemon: preflight, the supervisor of
// ovsdb-server, ovs-vswitchd and ovn-controller (plus the local OVN
// databases and ovn-northd in all-in-one mode), health, and the CNI server.
//
//	ovnhost run [flags]        run the node (systemd, Talos, DaemonSet entrypoint)
//	ovnhost preflight [flags]  run the host checks alone
//	ovnhost cleanup [--purge] [flags]  remove what ovnhost put on the host
//	ovnhost certs --dir=DIR|--secret=NS/NAME  create or renew the OVN certificates
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
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/version"
	"github.com/ovnhost/ovnhost/supervisor/agent"
	"github.com/ovnhost/ovnhost/supervisor/health"
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
	fmt.Fprintln(w, "usage: ovnhost run|preflight|cleanup [--purge]|certs --dir=DIR|--secret=NS/NAME|version [flags]; `ovnhost run --help` lists the settings")
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
	case "certs":
		return certs(args[1:], environ, stdout, stderr)
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
	if cfg.SSLUnused {
		log.Info("ENABLE_SSL does not apply all-in-one: the local NB/SB databases are reached over unix sockets; no certificates are read")
	}
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

	pre := hostcheck.Preflight(ctx, cfg.HostSettings())
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
		if c.Status == hostcheck.Warn {
			log.Warn("preflight", "check", c.Name, "found", c.Found, "fix", c.Fix)
		}
	}
	if err := watchConfigFile(ctx, cfg, args[1:], environ, level, log); err != nil {
		log.Warn("cannot watch the config file; changes need a restart", "file", cfg.File, "err", err)
	}
	tlsFiles, ok := loadTLS(cfg, log, stderr)
	if !ok {
		return exitConfig
	}
	var tlsConfig *tls.Config
	if tlsFiles != nil {
		tlsConfig = tlsFiles.Config()
	}
	nc, err := cfg.Resolve(pre.Findings, tlsConfig)
	if err != nil {
		fmt.Fprintln(stderr, "ovnhost:", err)
		return exitPreflight
	}
	return runNode(ctx, cfg, nc, tlsFiles, log)
}

// runNode is `ovnhost run`: the node assembled by supervisor/agent, from
// start to a stop or a hand-over to the next ovnhost.
func runNode(ctx context.Context, cfg *config.Config, nc *nodeconfig.NodeConfig, tlsFiles *ovsdbconn.TLSFiles, log *slog.Logger) int {
	// SIGUSR2: hand over to the next ovnhost (an upgrade of ovnhost
	// itself); registered first, since its default action kills us.
	usr2 := make(chan os.Signal, 1)
	signal.Notify(usr2, syscall.SIGUSR2)
	defer signal.Stop(usr2)
	h := health.New()
	log.Info("starting", "version", version.Version, "node", nc.Name, "mode", cfg.Mode, "datapath", nc.Datapath,
		"tunnel_iface", nc.TunnelIface, "encap_ip", nc.EncapIP, "pod_mtu", nc.PodMTU, "sb", nc.SB)
	stopHealth, err := h.Serve(cfg.HealthAddr, log)
	if err != nil {
		return exitFailure
	}
	defer stopHealth()
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go h.RunWatchdog(wctx)

	a, err := agent.New(nc, agent.Options{Log: log, Health: h, TLS: tlsFiles, ExplainExec: hostcheck.ExplainExec})
	if err != nil {
		log.Error("cannot run the node", "err", err)
		return exitFailure
	}
	t0 := time.Now()
	if err := a.Start(ctx); err != nil {
		switch {
		case errors.Is(err, agent.ErrNodeAPI): // logged with its fix
		case ctx.Err() != nil && errors.Is(err, context.Canceled):
			log.Info("stopped while starting")
			h.Stopping()
			return exitOK
		default:
			log.Error("start failed; everything started was stopped", "err", err)
		}
		return exitFailure
	}
	log.Info("ready", "took", time.Since(t0).Round(time.Millisecond), "system_id", a.SystemID())
	// Start-up garbage (schemas, initial monitor contents) is the bulk of
	// the heap: hand it back now rather than at the next GC cycles.
	debug.FreeOSMemory()
	upgrade := waitForStop(ctx, usr2, log)
	h.Stopping()
	sctx, cancel := context.WithTimeout(context.Background(), 6*nc.Daemons.StopTimeout)
	defer cancel()
	if upgrade {
		handedOver, err := a.StopForUpgrade(sctx)
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
	if err := a.Stop(sctx); err != nil {
		log.Error("stop", "err", err)
		return exitFailure
	}
	log.Info("stopped")
	return exitOK
}

// runCentral is `ovnhost run --role=central`: one member of the clustered
// OVN central. The node's host checks (datapath, tunnel interface) do not
// apply; a bad membership is a configuration error (exit 2).
func runCentral(ctx context.Context, cfg *config.Config, log *slog.Logger, stderr io.Writer) int {
	tlsFiles, ok := loadTLS(cfg, log, stderr)
	if !ok {
		return exitConfig
	}
	h := health.New()
	c, err := agent.NewCentral(cfg, agent.Options{Log: log, Health: h, TLS: tlsFiles, ExplainExec: hostcheck.ExplainExec})
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
	log.Info("starting", "version", version.Version, "role", cfg.Role, "address", c.Self(), "members", strings.Join(cfg.OVNDBIPs, ","), "ssl", cfg.EnableSSL)
	stopHealth, err := h.Serve(cfg.HealthAddr, log)
	if err != nil {
		return exitFailure
	}
	defer stopHealth()
	wctx, wcancel := context.WithCancel(context.Background())
	defer wcancel()
	go h.RunWatchdog(wctx)
	t0 := time.Now()
	if err := c.Start(ctx); err != nil {
		if errors.Is(err, agent.ErrLeft) {
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
	removed, err := agent.Cleanup(cfg, purge)
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

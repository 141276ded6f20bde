// Package doctor is `netctl doctor`: on a node, the node's checks
// (internal/hostcheck: preflight without changing the host, then CNI,
// firewall, OVSDB, clock) on the node as its settings resolve it; on a
// member of the OVN central (role=central), the central's own checks
// (central.go). It reads the same settings as `ovnhost run`, so it finds the
// same directories, and prints a table, JSON or YAML with exit 0/1/2.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Options tune a run.
type Options struct {
	// Timeout bounds each network question (default 3s).
	Timeout time.Duration
	// Facts replaces the real host (tests); a central member's also
	// implement CentralFacts.
	Facts hostcheck.DoctorFacts
}

// Run runs every check and never changes the host.
func Run(ctx context.Context, cfg *config.Config, opts Options) *hostcheck.Report {
	if cfg.IsCentral() {
		return RunCentral(ctx, cfg, opts)
	}
	s := cfg.HostSettings()
	f := opts.Facts
	if f == nil {
		f = hostcheck.NewDoctorHost(s)
	}
	return hostcheck.Doctor(ctx, s, resolve(cfg), f, hostcheck.DoctorOptions{Timeout: opts.Timeout})
}

// resolve is the node as the settings and what preflight found make it
// (what `ovnhost run` would run). TLS is loaded per question by the facts.
func resolve(cfg *config.Config) hostcheck.Resolver {
	return func(found nodeconfig.Findings) *nodeconfig.NodeConfig {
		if nc, err := cfg.Resolve(found, nil); err == nil {
			return nc
		}
		// datapath=kernel without the kernel datapath, already a failed
		// check: judge the rest with the datapath unknown.
		found.KernelDatapath = true
		nc, _ := cfg.Resolve(found, nil)
		nc.Datapath = ""
		return nc
	}
}

// WriteTable prints the report for people.
func WriteTable(w io.Writer, r *hostcheck.Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tCHECK\tFOUND")
	for _, c := range r.Checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(string(c.Status)), c.Name, c.Found)
		if c.Status != hostcheck.Pass && c.Fix != "" {
			fmt.Fprintf(tw, "\t\tfix: %s\n", c.Fix)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var nf, nw int
	for _, c := range r.Checks {
		switch c.Status {
		case hostcheck.Fail:
			nf++
		case hostcheck.Warn:
			nw++
		}
	}
	_, err := fmt.Fprintf(w, "\n%s: %d checks, %d failed, %d warnings (datapath %s, tunnel interface %s, encap IP %s)\n",
		strings.ToUpper(string(r.Status)), len(r.Checks), nf, nw, dash(string(r.Datapath)), dash(r.TunnelIface), dash(r.EncapIP))
	return err
}

// WriteJSON prints the report for machines.
func WriteJSON(w io.Writer, r *hostcheck.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteYAML prints the report as YAML (the JSON field names).
func WriteYAML(w io.Writer, r *hostcheck.Report) error {
	raw, err := json.Marshal(r)
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(raw)
	if err != nil {
		return err
	}
	_, err = w.Write(y)
	return err
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Package preflight checks the host before the node daemon starts anything:
// the datapath, capabilities (of the process and of every binary it will
// exec), the directories it writes to, and the tunnel interface. Every check
// says what it found and gives a one-line fix, and every failure is reported,
// not just the first.
//
// Checks are data-driven: each one reads the host only through a small
// interface (see Facts), so its logic is unit-tested with fake facts and the
// real collectors (Host) are tested as root.
package preflight

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/config"
)

// Status is the outcome of one check.
type Status string

// Check outcomes.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is the result of one check: what was looked at, what was found and,
// unless it passed, the one-line fix.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix,omitempty"`
}

// Result is what preflight checked and found. It decides nothing: the
// node's configuration is resolved from the settings and these findings
// (config.Resolve).
type Result struct {
	Checks   []Check
	Findings nodeconfig.Findings
}

// Options changes what Run may do to the host.
type Options struct {
	// NoModuleLoad never loads a kernel module, whatever the configuration
	// says (netctl doctor only looks).
	NoModuleLoad bool
}

// Run runs every check that applies before the daemons start, against the
// real host. It may load the openvswitch module when module management is
// enabled and the kernel datapath is missing.
func Run(ctx context.Context, cfg *config.Config) *Result {
	return RunWith(ctx, cfg, NewHost(), Options{})
}

// RunWith runs the checks against the given facts.
func RunWith(ctx context.Context, cfg *config.Config, f Facts, opts Options) *Result {
	r := &Result{}
	kernel, dpChecks := CheckDatapath(cfg, f, opts)
	r.Findings.KernelDatapath = kernel
	r.add(dpChecks...)
	// Tunnel devices of the kernel datapath are only worth probing when it
	// is there; a missing datapath has already failed or fallen back.
	if dp, err := nodeconfig.PickDatapath(cfg.Datapath, kernel); err == nil {
		r.add(CheckTunnelSupport(cfg, dp, f))
	}
	pc, err := f.ProcessCaps()
	r.add(CheckProcessCaps(cfg, pc, err))
	if ctx.Err() != nil {
		r.add(Check{Name: "preflight", Status: Fail, Found: "interrupted: " + ctx.Err().Error(), Fix: "run again"})
		return r
	}
	r.add(CheckBinaries(cfg, Binaries(cfg), pc, err, f)...)
	r.add(CheckPaths(PathSettings(cfg), f)...)
	tun, ichecks := checkInterfaces(cfg, f)
	r.Findings.TunnelIface, r.Findings.EncapIP, r.Findings.UnderlayMTU = tun.iface, tun.encapIP, tun.mtu
	r.add(ichecks...)
	r.add(CheckSystemID(cfg, f))
	r.add(CheckSSL(cfg, f)...)
	return r
}

func (r *Result) add(cs ...Check) { r.Checks = append(r.Checks, cs...) }

// Failed reports whether any check failed.
func (r *Result) Failed() bool { return Worst(r.Checks) == Fail }

// Worst is the most severe status among checks (Pass when there are none).
func Worst(cs []Check) Status {
	w := Pass
	for _, c := range cs {
		switch c.Status {
		case Fail:
			return Fail
		case Warn:
			w = Warn
		}
	}
	return w
}

// Print writes every check: status, name and what was found, then the fix
// for each one that did not pass. Failures are never cut short.
func (r *Result) Print(w io.Writer) {
	PrintChecks(w, r.Checks)
	fd := r.Findings
	fmt.Fprintf(w, "kernel_datapath=%t tunnel_iface=%s underlay_mtu=%d encap_ip=%s\n", fd.KernelDatapath, orNone(fd.TunnelIface), fd.UnderlayMTU, orNone(fd.EncapIP))
}

// PrintChecks writes checks in the format of Result.Print.
func PrintChecks(w io.Writer, cs []Check) {
	width := 0
	for _, c := range cs {
		width = max(width, len(c.Name))
	}
	for _, c := range cs {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", strings.ToUpper(string(c.Status)), width, c.Name, c.Found)
		if c.Status != Pass && c.Fix != "" {
			fmt.Fprintf(w, "      %-*s  fix: %s\n", width, "", c.Fix)
		}
	}
	var nf, nw int
	for _, c := range cs {
		switch c.Status {
		case Fail:
			nf++
		case Warn:
			nw++
		}
	}
	fmt.Fprintf(w, "%d checks: %d failed, %d warnings\n", len(cs), nf, nw)
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

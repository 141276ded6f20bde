package hostcheck

import (
	"context"
	"fmt"
	"io"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// PreflightResult is what preflight checked and found. It decides nothing:
// the node's configuration is resolved from the settings and these findings
// (config.Resolve).
type PreflightResult struct {
	Checks   []Check
	Findings nodeconfig.Findings
}

// Options changes what Preflight may do to the host.
type Options struct {
	// NoModuleLoad never loads a kernel module, whatever the configuration
	// says (netctl doctor only looks).
	NoModuleLoad bool
}

// Preflight runs every check that applies before the daemons start, against
// the real host. It may load the openvswitch module when module management
// is enabled and the kernel datapath is missing.
func Preflight(ctx context.Context, s nodeconfig.HostSettings) *PreflightResult {
	return PreflightWith(ctx, s, NewHost(), Options{})
}

// PreflightWith runs the checks against the given facts.
func PreflightWith(ctx context.Context, s nodeconfig.HostSettings, f Facts, opts Options) *PreflightResult {
	r := &PreflightResult{}
	kernel, dpChecks := CheckDatapath(s, f, opts)
	r.Findings.KernelDatapath = kernel
	r.add(dpChecks...)
	// Tunnel devices of the kernel datapath are only worth probing when it
	// is there; a missing datapath has already failed or fallen back.
	if dp, err := nodeconfig.PickDatapath(s.Datapath, kernel); err == nil {
		r.add(CheckTunnelSupport(s, dp, f))
	}
	pc, err := f.ProcessCaps()
	r.add(CheckProcessCaps(s, pc, err))
	if ctx.Err() != nil {
		r.add(Check{Name: "preflight", Status: Fail, Found: "interrupted: " + ctx.Err().Error(), Fix: "run again"})
		return r
	}
	r.add(CheckBinaries(s, Binaries(s), pc, err, f)...)
	r.add(CheckPaths(s.Dirs, f)...)
	tun, ichecks := checkInterfaces(s, f)
	r.Findings.TunnelIface, r.Findings.EncapIP, r.Findings.UnderlayMTU = tun.iface, tun.encapIP, tun.mtu
	r.add(ichecks...)
	r.add(CheckIPv6Node(ReadIPv6State(f.ReadFile, links(f), tun.iface, ""), preflightIPv6Need(s, kernel, tun.encapIP)))
	r.add(CheckSystemID(s, f))
	r.add(CheckSSL(s, f)...)
	return r
}

func (r *PreflightResult) add(cs ...Check) { r.Checks = append(r.Checks, cs...) }

// preflightIPv6Need is what the settings and the findings ask of the
// host's IPv6 before a NodeConfig exists.
func preflightIPv6Need(s nodeconfig.HostSettings, kernel bool, encapIP string) IPv6Need {
	n := servicesNeed(s.ServiceCIDRs)
	n.Encap6 = nodeconfig.IsIPv6(encapIP)
	if dp, err := nodeconfig.PickDatapath(s.Datapath, kernel); err == nil {
		n.KernelTunnel = !dp.IsUserspace() && s.TunnelType != "stt"
	}
	return n
}

// Failed reports whether any check failed.
func (r *PreflightResult) Failed() bool { return Worst(r.Checks) == Fail }

// Print writes every check: status, name and what was found, then the fix
// for each one that did not pass. Failures are never cut short.
func (r *PreflightResult) Print(w io.Writer) {
	PrintChecks(w, r.Checks)
	fd := r.Findings
	fmt.Fprintf(w, "kernel_datapath=%t tunnel_iface=%s underlay_mtu=%d encap_ip=%s\n", fd.KernelDatapath, orNone(fd.TunnelIface), fd.UnderlayMTU, orNone(fd.EncapIP))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

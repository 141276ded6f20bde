package hostcheck

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/version"
)

// Report is the result of a doctor run: the body of the node API's
// /v1/doctor and of `netctl doctor -o json`.
type Report struct {
	Status      Status              `json:"status"`
	Checks      []Check             `json:"checks"`
	Datapath    nodeconfig.Datapath `json:"datapath"`
	TunnelIface string              `json:"tunnelIface"`
	EncapIP     string              `json:"encapIP"`
}

// ExitCode is 0 when every check passed, 1 with warnings, 2 with failures.
func (r *Report) ExitCode() int {
	switch r.Status {
	case Fail:
		return 2
	case Warn:
		return 1
	}
	return 0
}

// DoctorOptions tune a doctor run.
type DoctorOptions struct {
	// Timeout bounds each network question (default 3s).
	Timeout time.Duration
}

// Resolver is the node configuration doctor judges, given what preflight
// found on the host: netctl resolves it from the settings (config.Resolve);
// a running daemon has its own (Running).
type Resolver func(nodeconfig.Findings) *nodeconfig.NodeConfig

// Running is the Resolver of a running daemon: the NodeConfig it runs with,
// whatever the host shows now.
func Running(nc *nodeconfig.NodeConfig) Resolver {
	return func(nodeconfig.Findings) *nodeconfig.NodeConfig { return nc }
}

// Doctor is `netctl doctor` on a node and the node API's /v1/doctor: the
// preflight checks (without changing anything on the host) plus what needs
// running daemons or outside state: the CNI plugin and configuration, the
// host firewall, the OVSDB sockets, ovn-controller's SB connection,
// reachability of remote NB/SB, duplicate chassis in the SB database and of
// the encap IP on the wire (one ARP probe), and clock and certificate
// validity. It works on a node where ovnhost is not running: what depends on
// the daemons is then reported as a warning that says so. The checks after
// preflight judge the node as resolve gives it.
//
// Doctor changes nothing: it loads no module, writes no file, and only
// reads the packet filter (iptables-{legacy,nft}-save, or iptables-save
// where iptables predates 1.8, as CentOS 7's 1.4.21). The only side
// effects are a throwaway network namespace for the tunnel-device probe
// (kernel datapath only) and one broadcast ARP probe for the encap IP.
//
// Checks, in order: the preflight checks (datapath, tunnel-support,
// capabilities, exec:<binary>, path:<setting>, tunnel-interface, encap-ip,
// mtu, system-id, ssl:*), cni-plugin, cni-config, cni-server, firewalld,
// iptables-backends, tunnel-port:{legacy,nft}, duplicate-address, the host
// checks (kernel-geneve, ipv6, ipv6-forwarding and ipv6-ra when the cluster
// has IPv6, underlay-host:<nic> for each bridged NIC, selinux,
// ovs-owner, disk, oom-kills),
// ovsdb:Open_vSwitch, ovs-vswitchd, vswitchd-upcalls and vswitchd-tunnel-restart
// (kernel datapath), ovn-controller,
// ofctrl-wait-before-clear, the NB/SB checks
// (ovsdb:OVN_Northbound/OVN_Southbound all-in-one, nb-reachable and
// sb-reachable remote), chassis, ovn-version-skew, clock.
func Doctor(ctx context.Context, s nodeconfig.HostSettings, resolve Resolver, f DoctorFacts, opts DoctorOptions) *Report {
	to := opts.Timeout
	if to <= 0 {
		to = 3 * time.Second
	}
	pre := PreflightWith(ctx, s, f, Options{NoModuleLoad: true})
	nc := resolve(pre.Findings)
	r := &Report{Datapath: nc.Datapath, TunnelIface: nc.TunnelIface, EncapIP: nc.EncapIP}
	r.Checks = append(r.Checks, pre.Checks...)

	r.Checks = append(r.Checks, CheckCNIPlugin(ctx, s.CNIBinDir, f)...)
	r.Checks = append(r.Checks, CheckCNIConfig(s.CNIConfDir, f))
	r.Checks = append(r.Checks, CheckCNIServer(s.CNISocket, f, to))

	r.Checks = append(r.Checks, CheckFirewalld(f))
	r.Checks = append(r.Checks, firewallChecks(nc.TunnelType, r.EncapIP, f)...)
	if c, ok := duplicateAddress(r.EncapIP, f, min(to, time.Second)); ok {
		r.Checks = append(r.Checks, c)
	}

	r.Checks = append(r.Checks, hostChecks(s, nc, f)...)

	svc := services{nc: nc, f: f, timeout: to}
	r.Checks = append(r.Checks, svc.run(ctx)...)
	r.Checks = append(r.Checks, CheckClock(s, f))
	r.Status = Worst(r.Checks)
	return r
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// CheckCNIPlugin checks the ovnhost-cni binary in the CNI bin dir: present,
// a regular executable file, and the same build as this program (or as the
// running ovnhost daemon when one is found).
func CheckCNIPlugin(ctx context.Context, binDir string, f DoctorFacts) []Check {
	const name = "cni-plugin"
	path := filepath.Join(binDir, cniconf.PluginType)
	st, err := f.Stat(path)
	if err != nil {
		return []Check{{Name: name, Status: Fail, Found: path + " is missing: kubelet cannot run ovnhost's plugin, pods stay in ContainerCreating",
			Fix: "start ovnhost (it installs the plugin), or set --cni-bin-dir (CNI_BIN_DIR) to the directory kubelet uses"}}
	}
	if !st.Mode().IsRegular() {
		return []Check{{Name: name, Status: Fail, Found: fmt.Sprintf("%s is not a regular file (%s)", path, st.Mode().Type()), Fix: "remove it and restart ovnhost to reinstall the plugin"}}
	}
	if st.Mode().Perm()&0o111 != 0o111 {
		return []Check{{Name: name, Status: Fail, Found: fmt.Sprintf("%s has mode %04o: not executable by everyone", path, st.Mode().Perm()), Fix: "chmod 0755 " + path + " (ovnhost reinstalls it on start)"}}
	}
	stamp, err := f.PluginStamp(ctx, path)
	if err != nil {
		return []Check{{Name: name, Status: Warn, Found: fmt.Sprintf("%s is executable but its build is unknown: %v", path, err), Fix: "restart ovnhost to reinstall the plugin"}}
	}
	want, who := version.Version, "this netctl"
	if d, err := f.DaemonStamp(); err == nil && d != "" {
		want, who = d, "the running ovnhost"
	}
	if stamp != want {
		return []Check{{Name: name, Status: Warn, Found: fmt.Sprintf("%s is build %q, %s is build %q", path, stamp, who, want),
			Fix: "restart ovnhost to install its own plugin build"}}
	}
	return []Check{{Name: name, Status: Pass, Found: fmt.Sprintf("%s is executable, build %q like %s", path, stamp, who)}}
}

// CheckCNIConfig checks that 00-ovnhost.conflist is present and first (or
// behind a Multus configuration that delegates the default network to it),
// and names every other configuration that outranks or shadows it.
func CheckCNIConfig(confDir string, f DoctorFacts) Check {
	const name = "cni-config"
	rep, err := f.ScanCNIConf(confDir, cniconf.Conflist)
	if err != nil {
		return Check{Name: name, Status: Fail, Found: "cannot read " + confDir + ": " + err.Error(),
			Fix: "start ovnhost (it creates the directory and the conflist), or set --cni-conf-dir (CNI_CONF_DIR) to the runtime's conf dir"}
	}
	return Check{Name: name, Status: Status(rep.Status), Found: rep.Found, Fix: rep.Fix}
}

// CheckFirewalld reports a running firewalld.
func CheckFirewalld(f DoctorFacts) Check {
	const name = "firewalld"
	active, how, err := f.Firewalld()
	switch {
	case err != nil:
		return Check{Name: name, Status: Warn, Found: "cannot tell whether firewalld runs: " + err.Error(), Fix: "check with systemctl is-active firewalld"}
	case active:
		return Check{Name: name, Status: Warn,
			Found: "firewalld is active (" + how + "): it rewrites the host rules on reload and rejects unlisted ports, including the tunnel port and NAT for pods",
			Fix:   "open the tunnel port and trust the pod interfaces (firewall-cmd --permanent --add-port=6081/udp; --zone=trusted --add-interface=ovn0), or systemctl disable --now firewalld"}
	}
	return Check{Name: name, Status: Pass, Found: "firewalld is not running"}
}

func firewallChecks(tunnelType, encapIP string, f DoctorFacts) []Check {
	legacy, lerr := f.IptablesSave("legacy", isV6(encapIP))
	nft, nerr := f.IptablesSave("nft", isV6(encapIP))
	proto := "udp"
	if tunnelType == "stt" {
		proto = "tcp"
	}
	port := TunnelPort(tunnelType)
	if lerr != nil && nerr != nil {
		// iptables before 1.8 (CentOS 7: 1.4.21) ships only iptables-save,
		// and the only backend it knows is the legacy one.
		plain, perr := f.IptablesSave("", isV6(encapIP))
		if perr != nil {
			return []Check{CheckMixedBackends(legacy, nft, lerr, fmt.Errorf("%v; iptables-save: %v", nerr, perr))}
		}
		backend, ver := SaveBackend(plain)
		label := "iptables-save"
		if ver != "" {
			label += " v" + ver
		}
		label += " (" + backend + ")"
		return []Check{
			{Name: "iptables-backends", Status: Pass, Found: fmt.Sprintf("only %s is installed: one backend, %d rules", label, parseSave(plain).count)},
			CheckTunnelPort("tunnel-port:"+backend, label, plain, proto, port),
		}
	}
	out := []Check{CheckMixedBackends(legacy, nft, lerr, nerr)}
	if lerr == nil {
		out = append(out, CheckTunnelPort("tunnel-port:legacy", "iptables-legacy", legacy, proto, port))
	}
	if nerr == nil {
		out = append(out, CheckTunnelPort("tunnel-port:nft", "iptables-nft", nft, proto, port))
	}
	return out
}

func isV6(ip string) bool { return strings.Contains(ip, ":") }

// ClockFacts are what CheckClock reads: a node's DoctorFacts and netctl
// doctor's central facts both have them.
type ClockFacts interface {
	ClockSync() (synced bool, maxError time.Duration, err error)
	Now() time.Time
	CertValidity(path string) (notBefore, notAfter time.Time, err error)
}

// CheckClock reports an unsynchronised clock, and certificates not yet or
// no longer valid, when SSL is on: both break TLS to the OVN databases.
func CheckClock(s nodeconfig.HostSettings, f ClockFacts) Check {
	const name = "clock"
	synced, maxErr, err := f.ClockSync()
	now := f.Now()
	var problems, fixes []string
	status := Pass
	found := ""
	switch {
	case err != nil:
		found = "cannot read the clock state: " + err.Error()
	case !synced:
		found = fmt.Sprintf("the clock is not synchronised (max error %s)", maxErr)
	default:
		found = fmt.Sprintf("the clock is synchronised (max error %s)", maxErr)
	}
	if !s.EnableSSL {
		// Without TLS a skewed clock breaks nothing ovnhost depends on.
		return Check{Name: name, Status: Pass, Found: found + "; SSL is off, so skew cannot break the OVN connections"}
	}
	if !synced && err == nil {
		status = Warn
		fixes = append(fixes, "enable NTP: TLS fails once the skew exceeds certificate validity margins")
	}
	for _, p := range []string{s.SSLCert, s.SSLCACert} {
		nb, na, cerr := f.CertValidity(p)
		switch {
		case cerr != nil:
			problems = append(problems, fmt.Sprintf("cannot read %s: %v", p, cerr))
			status = Fail
			fixes = append(fixes, "mount the OVN certificates at the configured paths")
		case now.Before(nb):
			problems = append(problems, fmt.Sprintf("%s is not valid until %s, %s from now: the clock is behind or the certificate is from the future", p, nb.UTC().Format(time.RFC3339), nb.Sub(now).Round(time.Second)))
			status = Fail
			fixes = append(fixes, "fix the clock (NTP) or reissue the certificate")
		case now.After(na):
			problems = append(problems, fmt.Sprintf("%s expired at %s", p, na.UTC().Format(time.RFC3339)))
			status = Fail
			fixes = append(fixes, "renew the certificate (or fix a clock that is ahead)")
		}
	}
	if len(problems) > 0 {
		found += "; " + strings.Join(problems, "; ")
	} else {
		found += "; certificates are within their validity"
	}
	return Check{Name: name, Status: status, Found: found, Fix: strings.Join(uniq(fixes), "; ")}
}

func uniq(ss []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// duplicateAddress probes the encap IP on the interface that holds it.
func duplicateAddress(encapIP string, f DoctorFacts, wait time.Duration) (Check, bool) {
	ip, err := netip.ParseAddr(encapIP)
	if err != nil || !ip.Is4() || ip.IsLoopback() {
		return Check{}, false
	}
	links, err := f.Links()
	if err != nil {
		return Check{}, false
	}
	for _, l := range links {
		for _, a := range l.Addrs {
			if a.Addr() == ip && l.MAC != "" && !l.Loopback {
				macs, err := f.ARPProbe(l.Name, ip, wait)
				return CheckDuplicateAddress(l.Name, encapIP, l.MAC, macs, err), true
			}
		}
	}
	return Check{}, false
}

// CheckCNIServer checks the node daemon's CNI socket, which the plugin
// forwards every request to: without it pods stay in ContainerCreating.
func CheckCNIServer(socket string, f DoctorFacts, timeout time.Duration) Check {
	const name = "cni-server"
	if socket == "" {
		return Check{Name: name, Status: Pass, Found: "no CNI socket configured"}
	}
	if _, err := f.Stat(socket); err != nil {
		return Check{Name: name, Status: Warn, Found: socket + " does not exist: the ovnhost CNI server is not running, pod sandboxes cannot be created", Fix: "start ovnhost"}
	}
	if err := f.DialUnix(socket, timeout); err != nil {
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s exists but refuses connections (%v): the CNI plugin fails every request", socket, err), Fix: "restart ovnhost (a stale socket is replaced on start)"}
	}
	return Check{Name: name, Status: Pass, Found: socket + " accepts connections"}
}

package config

import (
	"fmt"
	"net"
	"net/netip"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// setting is one configuration key. Name is the flag (--name) and the file
// key; Env lists the environment variables that set it, Kube-OVN's first.
type setting struct {
	Name    string
	Env     []string
	Default string
	Help    string
	Set     func(c *Config, v string) error
	// Bool settings are flags that may be given without a value.
	Bool bool
}

// problem is what a setter returns: the reason and the fix.
type problem struct{ reason, fix string }

func (p *problem) Error() string { return p.reason }

func bad(reason, fix string) error { return &problem{reason, fix} }

func envName(name string) string {
	return "OVNHOST_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

func parseBool(dst *bool) func(*Config, string) error {
	return func(_ *Config, v string) error {
		b, err := strconv.ParseBool(strings.TrimSpace(v))
		if err != nil {
			return bad("not a boolean", "use true or false")
		}
		*dst = b
		return nil
	}
}

func absPath(dst *string) func(*Config, string) error {
	return func(_ *Config, v string) error {
		if v == "" || !filepath.IsAbs(v) {
			return bad("not an absolute path", "give a path starting with /")
		}
		*dst = filepath.Clean(v)
		return nil
	}
}

func optAbsPath(dst *string) func(*Config, string) error {
	return func(c *Config, v string) error {
		if v == "" {
			*dst = ""
			return nil
		}
		return absPath(dst)(c, v)
	}
}

func positiveDuration(dst *time.Duration, unit time.Duration, unitName string) func(*Config, string) error {
	return func(_ *Config, v string) error {
		v = strings.TrimSpace(v)
		if n, err := strconv.ParseInt(v, 10, 64); err == nil {
			if n <= 0 {
				return bad("must be positive", "give a number of "+unitName)
			}
			*dst = time.Duration(n) * unit
			return nil
		}
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("not a positive duration", "give a number of "+unitName+" or a Go duration such as 30s")
		}
		*dst = d
		return nil
	}
}

func oneOf(dst *string, choices ...string) func(*Config, string) error {
	return func(_ *Config, v string) error {
		v = strings.ToLower(strings.TrimSpace(v))
		for _, ch := range choices {
			if v == ch {
				*dst = v
				return nil
			}
		}
		return bad("not one of "+strings.Join(choices, ", "), "use one of "+strings.Join(choices, ", "))
	}
}

// familyCIDRs parses a comma-separated list of at most one CIDR per IP
// family ("" is none); fix says how to write it.
func familyCIDRs(v, fix string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	fams := map[bool]netip.Prefix{}
	for _, f := range splitList(v) {
		p, err := netip.ParsePrefix(f)
		if err != nil {
			return nil, bad(fmt.Sprintf("%q is not a CIDR", f), fix)
		}
		if p != p.Masked() {
			return nil, bad(fmt.Sprintf("%q has host bits set", f), "use "+p.Masked().String())
		}
		if o, dup := fams[p.Addr().Is4()]; dup {
			return nil, bad(fmt.Sprintf("%s and %s are of the same IP family", o, p), "give at most one IPv4 and one IPv6 CIDR")
		}
		fams[p.Addr().Is4()] = p
		out = append(out, p)
	}
	return out, nil
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }) {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// settings is the whole configuration surface of `ovnhost run`.
func settings() []setting {
	return append(append(baseSettings(), centralSettings()...), dirSettings()...)
}

// dirSettings are the directory settings of the node's layout, whose names
// and defaults the layout package owns.
func dirSettings() []setting {
	var out []setting
	for _, d := range layout.DirSettings {
		out = append(out, setting{Name: d.Name, Env: []string{d.Env}, Default: d.Default, Help: d.Help,
			Set: func(c *Config, v string) error { return absPath(d.Dir(&c.Paths))(c, v) }})
	}
	return out
}

func baseSettings() []setting {
	return []setting{
		{Name: "node-name", Env: []string{"NODE_NAME", "KUBE_NODE_NAME"}, Help: "Kubernetes node name (default: the hostname)",
			Set: func(c *Config, v string) error { c.NodeName = strings.TrimSpace(v); return nil }},
		{Name: "ovn-db-ips", Env: []string{"OVN_DB_IPS", "NODE_IPS"}, Help: "comma-separated IPs of the OVN NB/SB databases; empty runs all-in-one (NODE_IPS is the name Kube-OVN's ovn-central reads)",
			Set: func(c *Config, v string) error {
				c.OVNDBIPs = nil
				for _, ip := range splitList(v) {
					if _, err := netip.ParseAddr(ip); err != nil {
						return bad(fmt.Sprintf("%q is not an IP address", ip), "list the OVN database IPs separated by commas, e.g. 10.0.0.2,10.0.0.3")
					}
					c.OVNDBIPs = append(c.OVNDBIPs, ip)
				}
				return nil
			}},
		{Name: "ovn-sb-addr", Env: []string{"OVN_SB_ADDR"}, Help: "OVSDB remote of the SB database, overriding the one derived from ovn-db-ips (tcp:IP:PORT, ssl:IP:PORT, unix:PATH)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v == "" {
					c.SBRemote = ""
					return nil
				}
				for _, r := range strings.Split(v, ",") {
					if err := checkRemote(r); err != nil {
						return err
					}
				}
				c.SBRemote = v
				return nil
			}},
		{Name: "ovn-nb-addr", Env: []string{"OVN_NB_ADDR"}, Help: "OVSDB remote of the NB database, overriding the one derived from ovn-db-ips; a node never needs it, its node API reads the NB through it for netctl (nbctl, vpc, diagnose pod) (tcp:IP:PORT, ssl:IP:PORT, unix:PATH)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				for _, r := range strings.Split(v, ",") {
					if v == "" {
						break
					}
					if err := checkRemote(r); err != nil {
						return err
					}
				}
				c.NBAddr = v
				return nil
			}},
		{Name: "tunnel-type", Env: []string{"TUNNEL_TYPE"}, Default: "geneve", Help: "geneve, vxlan or stt",
			Set: func(c *Config, v string) error { return oneOf(&c.TunnelType, "geneve", "vxlan", "stt")(c, v) }},
		{Name: "iface", Env: []string{"IFACE"}, Help: "tunnel interface: comma-separated names or regular expressions, first match wins (default: the default-route interface)",
			Set: func(c *Config, v string) error {
				c.Iface = nil
				for _, p := range splitList(v) {
					if _, err := regexp.Compile("^(?:" + p + ")$"); err != nil {
						return bad(fmt.Sprintf("%q is not a valid regular expression: %v", p, err), "escape special characters or list plain interface names")
					}
					c.Iface = append(c.Iface, p)
				}
				return nil
			}},
		{Name: "encap-ip", Env: []string{"ENCAP_IP"}, Help: "tunnel endpoint IP (default: the first address of the tunnel interface)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if _, err := netip.ParseAddr(v); err != nil {
						return bad("not an IP address", "give the node's underlay IP, e.g. 192.168.1.10")
					}
				}
				c.EncapIP = v
				return nil
			}},
		{Name: "enable-ssl", Bool: true, Env: []string{"ENABLE_SSL"}, Default: "false", Help: "talk to the OVN databases over SSL (default true for role=central; ignored all-in-one, where the databases are local unix sockets)", Set: func(c *Config, v string) error { return parseBool(&c.EnableSSL)(c, v) }},
		{Name: "ssl-key", Env: nil, Help: "private key for SSL (default <ssl-dir>/ovn-privkey.pem when enable-ssl)", Set: func(c *Config, v string) error { return optAbsPath(&c.SSLKey)(c, v) }},
		{Name: "ssl-cert", Env: nil, Help: "certificate for SSL (default <ssl-dir>/ovn-cert.pem when enable-ssl)", Set: func(c *Config, v string) error { return optAbsPath(&c.SSLCert)(c, v) }},
		{Name: "ssl-ca-cert", Env: nil, Help: "CA certificate for SSL (default <ssl-dir>/cacert.pem when enable-ssl)", Set: func(c *Config, v string) error { return optAbsPath(&c.SSLCACert)(c, v) }},
		{Name: "ssl-dir", Env: nil, Default: "/var/lib/ovn/pki", Help: "directory of ovn-privkey.pem, ovn-cert.pem and cacert.pem", Set: func(c *Config, v string) error { return absPath(&c.SSLDir)(c, v) }},
		{Name: "hw-offload", Bool: true, Env: []string{"HW_OFFLOAD"}, Default: "false", Help: "enable OVS hardware offload", Set: func(c *Config, v string) error { return parseBool(&c.HWOffload)(c, v) }},
		{Name: "datapath", Env: nil, Default: string(nodeconfig.ChooseAuto), Help: "auto (kernel when present, else userspace), kernel, or netdev (userspace)",
			Set: func(c *Config, v string) error {
				var choice string
				if err := oneOf(&choice, string(nodeconfig.ChooseAuto), string(nodeconfig.ChooseKernel), string(nodeconfig.ChooseUserspace))(c, v); err != nil {
					return err
				}
				c.Datapath = nodeconfig.DatapathChoice(choice)
				return nil
			}},
		{Name: "nat-backend", Env: nil, Default: "auto", Help: "how pod egress is masqueraded: nft, iptables-legacy, or auto (the one the host's iptables uses)",
			Set: func(c *Config, v string) error { return oneOf(&c.NATBackend, "auto", "nft", "iptables-legacy")(c, v) }},
		{Name: "host-guard", Env: nil, Default: "required", Help: "the host firewall guard that drops pod traffic to the OVN, node API and tunnel ports (docs/security.md): required (the node is not ready without it) or off (only for a kernel without netfilter, where pods are then not kept off those ports)",
			Set: func(c *Config, v string) error { return oneOf(&c.HostGuard, "required", "off")(c, v) }},
		{Name: "pod-mtu", Env: nil, Default: "0", Help: "MTU of pod interfaces; 0 takes the tunnel interface's MTU minus the encapsulation (100 bytes for geneve, 50 for vxlan, 78 for stt)",
			Set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 0 || (n > 0 && n < 576) || n > 65535 {
					return bad("not an MTU", "give a number from 576 to 65535, or 0 to derive it from the tunnel interface")
				}
				c.PodMTU = n
				return nil
			}},
		{Name: "service-cluster-ip-range", Env: []string{"SVC_CIDR"}, Default: "10.96.0.0/12", Help: "the cluster's Service CIDR(s), comma-separated, one per IP family (Kube-OVN's SVC_CIDR): routed via ovn0 so the node reaches ClusterIPs",
			Set: func(c *Config, v string) (err error) {
				c.ServiceCIDRs, err = familyCIDRs(v, "give the apiserver's --service-cluster-ip-range, e.g. 10.96.0.0/12 or 10.96.0.0/12,fd00:10:96::/112")
				if err == nil && len(c.ServiceCIDRs) == 0 {
					return bad("empty", "give the cluster's Service CIDR, e.g. 10.96.0.0/12 (Kube-OVN's default)")
				}
				return err
			}},
		{Name: "default-cidr", Env: []string{"POD_CIDR"}, Help: "standalone nodes: ovn-default's CIDR(s), one per IP family, e.g. 10.16.0.0/16,fd00:10:16::/64 for dual-stack pods (default 10.16.0.0/16; Kubernetes nodes take Subnets from the controller)",
			Set: func(c *Config, v string) (err error) {
				c.StandaloneCIDRs, err = familyCIDRs(v, "give one CIDR per IP family, e.g. 10.16.0.0/16 or 10.16.0.0/16,fd00:10:16::/64")
				return err
			}},
		{Name: "node-switch-cidr", Env: []string{"JOIN_CIDR"}, Help: "standalone nodes: the join subnet's CIDR(s) (ovn0), one per IP family of --default-cidr, e.g. 100.64.0.0/16,fd00:100:64::/112 (default 100.64.0.0/16)",
			Set: func(c *Config, v string) (err error) {
				c.StandaloneJoinCIDRs, err = familyCIDRs(v, "give one CIDR per IP family, e.g. 100.64.0.0/16 or 100.64.0.0/16,fd00:100:64::/112")
				return err
			}},
		{Name: "disable-modules-management", Bool: true, Env: []string{"DISABLE_MODULES_MANAGEMENT"}, Default: "false", Help: "never try to load kernel modules (Talos)", Set: func(c *Config, v string) error { return parseBool(&c.DisableMod)(c, v) }},
		{Name: "userspace-tunnel", Bool: true, Env: nil, Default: "false", Help: "with the userspace (netdev) datapath, attach the tunnel interface to OVS bridge br-phy and move its addresses and routes there, so Geneve/VXLAN reach other nodes; restored on stop",
			Set: func(c *Config, v string) error { return parseBool(&c.UserspaceTunnel)(c, v) }},
		{Name: "provider-networks", Env: nil, Help: "underlay networks of a standalone node, name:nic[,name:nic...]: each NIC goes into OVS bridge br-<name> with its addresses, routes of every table, rules and permanent neighbours, and ovn-bridge-mappings maps name to it; given back on stop (Kubernetes nodes take them from ProviderNetwork objects)",
			Set: func(c *Config, v string) error {
				pns, err := parseProviderNetworks(v)
				if err != nil {
					return err
				}
				c.ProviderNetworks = pns
				return nil
			}},
		{Name: "mlockall", Bool: true, Env: nil, Default: "false", Help: "run ovs-vswitchd with --mlockall (needs CAP_IPC_LOCK)", Set: func(c *Config, v string) error { return parseBool(&c.MLockAll)(c, v) }},
		{Name: "ovn-remote-probe-interval", Env: []string{"OVN_REMOTE_PROBE_INTERVAL"}, Default: "10000", Help: "ovn-controller's SB probe interval in milliseconds",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.ProbeInterval, time.Millisecond, "milliseconds")(c, v)
			}},
		{Name: "ovn-remote-openflow-interval", Env: []string{"OVN_REMOTE_OPENFLOW_INTERVAL"}, Default: "180", Help: "ovn-controller's OpenFlow probe interval in seconds",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.OpenflowProbeInterval, time.Second, "seconds")(c, v)
			}},
		{Name: "ovn-ofctrl-wait-before-clear", Default: strconv.Itoa(DefaultOfctrlWaitBeforeClearMs),
			Help: "milliseconds a restarted ovn-controller keeps the flows on br-int before replacing them with the ones it computed (Open_vSwitch external_ids:ovn-ofctrl-wait-before-clear); applied when ovn-controller starts against an ovs-vswitchd that kept its flows, 0 when ovs-vswitchd starts empty. Raise it on nodes whose flow generation takes longer than half of it (netctl doctor's ofctrl-wait-before-clear check; OpenShift uses 10000); 0 replaces them at once",
			Set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 0 || n > MaxOfctrlWaitBeforeClearMs {
					return bad(fmt.Sprintf("not a number of milliseconds from 0 to %d", MaxOfctrlWaitBeforeClearMs),
						"give twice ovn-controller's longest flow generation in milliseconds (ovn-appctl -t ovn-controller stopwatch/show flow-generation), e.g. 10000 for a node with 100k flows, or 0 to replace the flows at once")
				}
				c.OfctrlWaitBeforeClear = time.Duration(n) * time.Millisecond
				return nil
			}},
		{Name: "run-dir-owner", Env: nil, Default: "root:root", Help: "user:group that owns the runtime directories recreated at every start",
			Set: func(c *Config, v string) error {
				o, err := parseOwner(v)
				if err != nil {
					return err
				}
				c.RunOwner = o
				return nil
			}},
		{Name: "health-addr", Env: nil, Default: "127.0.0.1:10665", Help: "address of /healthz, /readyz and /metrics; empty disables",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
						return bad("not a host:port address", "use e.g. 127.0.0.1:10665, or an empty value to disable")
					}
				}
				c.HealthAddr = v
				return nil
			}},
		{Name: "node-api-addr", Env: nil, Default: ":10666", Help: "address of the authenticated node API (HTTPS; bearer tokens checked with TokenReview and SubjectAccessReview) for netctl diagnose/trace/tcpdump and Prometheus /metrics; Kubernetes mode only; empty disables",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if _, port, err := net.SplitHostPort(v); err != nil || port == "" {
						return bad("not a host:port address", "use e.g. :10666, or an empty value to disable")
					}
				}
				c.NodeAPIAddr = v
				return nil
			}},
		{Name: "node-api-cert", Env: nil, Help: "PEM serving certificate of the node API (default: a self-signed one made at start, whose SHA-256 netctl pins from the Node annotation ovnhost.io/node-api-cert-sha256)",
			Set: func(c *Config, v string) error { return optAbsPath(&c.NodeAPICert)(c, v) }},
		{Name: "node-api-key", Env: nil, Help: "PEM private key of --node-api-cert",
			Set: func(c *Config, v string) error { return optAbsPath(&c.NodeAPIKey)(c, v) }},
		{Name: "keep-datapath", Bool: true, Env: nil, Default: "false", Help: "on stop, leave the datapath and its ports in place (for an upgrade)", Set: func(c *Config, v string) error { return parseBool(&c.KeepDatapath)(c, v) }},
		{Name: "adopt-children", Bool: true, Env: nil, Default: "false", Help: "let ovsdb-server, ovs-vswitchd and ovn-controller outlive a crash of ovnhost, and take over the running ones at start (their pidfiles and output FIFOs in the run directories) instead of restarting them: no data-plane gap after a crash. Only where the service manager leaves children running (systemd: KillMode=process, as the shipped unit sets); never in a container, whose processes die with it", Set: func(c *Config, v string) error { return parseBool(&c.AdoptChildren)(c, v) }},
		{Name: "start-timeout", Env: nil, Default: "60s", Help: "deadline for each readiness gate",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.StartTimeout, time.Second, "seconds")(c, v)
			}},
		{Name: "stop-timeout", Env: nil, Default: "10s", Help: "deadline for stopping each child before it is killed",
			Set: func(c *Config, v string) error { return positiveDuration(&c.StopTimeout, time.Second, "seconds")(c, v) }},
		{Name: "ovs-schema", Env: nil, Default: "/usr/share/openvswitch/vswitch.ovsschema", Help: "the installed OVS schema, to create and upgrade conf.db", Set: func(c *Config, v string) error { return absPath(&c.OVSSchema)(c, v) }},
		{Name: "ovn-schema-dir", Env: nil, Default: "/usr/share/ovn", Help: "directory with ovn-nb.ovsschema and ovn-sb.ovsschema", Set: func(c *Config, v string) error { return absPath(&c.OVNSchema)(c, v) }},
		{Name: "bin-dirs", Env: nil, Default: "/usr/sbin,/usr/bin,/sbin,/bin,/usr/local/sbin,/usr/local/bin", Help: "where to find the OVS/OVN programs, searched in order",
			Set: func(c *Config, v string) error {
				c.BinDirs = nil
				for _, d := range splitList(v) {
					if !filepath.IsAbs(d) {
						return bad(fmt.Sprintf("%q is not an absolute path", d), "list absolute directories separated by commas")
					}
					c.BinDirs = append(c.BinDirs, d)
				}
				if len(c.BinDirs) == 0 {
					return bad("empty", "list at least one directory")
				}
				return nil
			}},
		{Name: "cni-bin-dir", Env: []string{"CNI_BIN_DIR"}, Default: "/opt/cni/bin", Help: "where the ovnhost-cni plugin is installed", Set: func(c *Config, v string) error { return absPath(&c.CNIBinDir)(c, v) }},
		{Name: "cni-conf-dir", Env: []string{"CNI_CONF_DIR"}, Default: "/etc/cni/net.d", Help: "where the CNI conflist is installed", Set: func(c *Config, v string) error { return absPath(&c.CNIConfDir)(c, v) }},
		{Name: "cni-socket", Env: nil, Default: "/run/ovnhost/cni.sock", Help: "unix socket of the embedded CNI server", Set: func(c *Config, v string) error { return absPath(&c.CNISocket)(c, v) }},
		{Name: "cni-socket-group", Env: nil, Help: "group allowed to use the CNI socket (default: root only, mode 0600); its members are root-equivalent on the node (cni/README.md)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if _, err := user.LookupGroup(v); err != nil {
						if _, err2 := user.LookupGroupId(v); err2 != nil {
							return bad("no such group", "create the group or give an existing group name or gid")
						}
					}
				}
				c.CNISocketGroup = v
				return nil
			}},
		{Name: "cni-version", Env: nil, Default: protocol.DefaultConfVersion,
			Help: "cniVersion of the installed conflist: " + strings.Join(protocol.ConfVersions, ", ") + " (the highest the node's container runtime accepts; docs/cni-versions.md)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if !protocol.ValidConfVersion(v) {
					return bad("not a CNI version ovnhost installs", "use one of "+strings.Join(protocol.ConfVersions, ", ")+
						" (0.4.0 for every runtime; 1.0.0 for containerd 1.6+/CRI-O/podman 4; 1.1.0 only for runtimes with libcni 1.2 or later, e.g. containerd 2)")
				}
				c.CNIVersion = v
				return nil
			}},
		{Name: "mirror-output", Env: []string{"MIRROR_IFACE"}, Default: "mirror0", Help: "output port of the traffic mirror for pods annotated ovn.kubernetes.io/mirror=true",
			Set: func(c *Config, v string) error { c.MirrorOutput = strings.TrimSpace(v); return nil }},
		{Name: "controller-field-managers", Default: "ovnhost-controller,kube-ovn-controller", Help: "comma-separated field managers whose pod annotations the node honours (managedFields); the controller's own, and upstream kube-ovn-controller's for a migration",
			Set: func(c *Config, v string) error {
				c.ControllerFieldManagers = nil
				for _, m := range strings.Split(v, ",") {
					if m = strings.TrimSpace(m); m != "" {
						c.ControllerFieldManagers = append(c.ControllerFieldManagers, m)
					}
				}
				if len(c.ControllerFieldManagers) == 0 {
					return bad("no field manager given", "name at least the controller's field manager, ovnhost-controller")
				}
				return nil
			}},
		{Name: "child-probe-interval", Default: "5s", Help: "how often each child (ovsdb-server, ovs-vswitchd, ovn-controller) is probed on its own socket",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.ChildProbeInterval, time.Second, "seconds")(c, v)
			}},
		{Name: "child-probe-misses", Default: "3", Help: "missed probes in a row after which a hung child is killed and restarted",
			Set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 1 || n > 100 {
					return bad("not a whole number from 1 to 100", "give the number of missed probes, e.g. 3")
				}
				c.ChildProbeMisses = n
				return nil
			}},
		{Name: "kubeconfig", Env: []string{"KUBECONFIG"}, Help: "kubeconfig for the pod informer (default: in-cluster config, else standalone)", Set: func(c *Config, v string) error { return optAbsPath(&c.Kubeconfig)(c, v) }},
		{Name: "log-level", Env: nil, Default: "info", Help: "debug, info, warn or error", Set: func(c *Config, v string) error { return oneOf(&c.LogLevel, "debug", "info", "warn", "error")(c, v) }},
		{Name: "log-file-max-size", Default: "100Mi", Help: "rotate a child's log file (kept once as .1) when it grows past this size: bytes, or with Ki/Mi/Gi; 0 never rotates",
			Set: func(c *Config, v string) error {
				n, err := parseSize(v)
				if err != nil {
					return err
				}
				c.LogFileMaxSize = n
				return nil
			}},
		{Name: "log-rotate-interval", Default: "30s", Help: "how often the log file sizes are checked",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.LogRotateInterval, time.Second, "seconds")(c, v)
			}},
		{Name: "log-format", Env: nil, Default: "text", Help: "text or json", Set: func(c *Config, v string) error { return oneOf(&c.LogFormat, "text", "json")(c, v) }},
	}
}

func checkRemote(r string) error {
	r = strings.TrimSpace(r)
	scheme, rest, ok := strings.Cut(r, ":")
	fix := "use tcp:IP:PORT, ssl:IP:PORT or unix:/path"
	if !ok {
		return bad(fmt.Sprintf("%q has no scheme", r), fix)
	}
	switch scheme {
	case "unix":
		if !filepath.IsAbs(rest) {
			return bad(fmt.Sprintf("%q: socket path is not absolute", r), fix)
		}
	case "tcp", "ssl":
		host, port, err := net.SplitHostPort(rest)
		if err != nil {
			return bad(fmt.Sprintf("%q: %v", r, err), fix)
		}
		if _, err := netip.ParseAddr(host); err != nil {
			return bad(fmt.Sprintf("%q: %q is not an IP address", r, host), fix)
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
			return bad(fmt.Sprintf("%q: bad port", r), fix)
		}
	default:
		return bad(fmt.Sprintf("%q: unknown scheme %q", r, scheme), fix)
	}
	return nil
}

func parseOwner(v string) (Owner, error) {
	u, g, _ := strings.Cut(strings.TrimSpace(v), ":")
	o := Owner{UID: -1, GID: -1, Spec: v}
	fix := "give user:group that exist on this host, e.g. root:root or openvswitch:openvswitch"
	if u != "" {
		if id, err := strconv.Atoi(u); err == nil {
			o.UID = id
		} else if usr, err := user.Lookup(u); err == nil {
			o.UID, _ = strconv.Atoi(usr.Uid)
		} else {
			return o, bad(fmt.Sprintf("no user %q", u), fix)
		}
	}
	if g != "" {
		if id, err := strconv.Atoi(g); err == nil {
			o.GID = id
		} else if grp, err := user.LookupGroup(g); err == nil {
			o.GID, _ = strconv.Atoi(grp.Gid)
		} else {
			return o, bad(fmt.Sprintf("no group %q", g), fix)
		}
	}
	return o, nil
}

// Keys lists every setting name, sorted (for docs and tests).
func Keys() []string {
	var ks []string
	for _, s := range settings() {
		ks = append(ks, s.Name)
	}
	sort.Strings(ks)
	return ks
}

// parseSize reads 123, 64Ki, 100Mi or 1Gi.
func parseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	mult := int64(1)
	for suffix, m := range map[string]int64{"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30} {
		if strings.HasSuffix(v, suffix) {
			mult, v = m, strings.TrimSuffix(v, suffix)
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return 0, bad("not a size", "give bytes, or a number with Ki, Mi or Gi, e.g. 100Mi; 0 turns rotation off")
	}
	return n * mult, nil
}

// Described is a setting as a message names it: flag, the environment
// variable users know it by (Kube-OVN's when there is one), the default.
type Described struct {
	Name, Env, Default string
}

// Describe looks a setting up in the table, so messages elsewhere name it
// without writing its names and default a second time. It panics on a name
// the table lacks: that is a programming error, caught by any test.
func Describe(name string) Described {
	for _, s := range settings() {
		if s.Name == name {
			d := Described{Name: s.Name, Default: s.Default}
			if len(s.Env) > 0 {
				d.Env = s.Env[0]
			}
			return d
		}
	}
	panic("config: no setting " + name)
}

// DefaultOfctrlWaitBeforeClearMs is ovn-ofctrl-wait-before-clear's default.
// In OVN 23.03 (ofctrl.c, S_WAIT_BEFORE_CLEAR) the wait is a plain timer
// started when ovn-controller connects to br-int: until it expires nothing
// is installed (not even new pods' flows); when it expires the next flow
// update deletes every flow and installs what has been computed so far in
// one bundle, so a wait shorter than the computation still goes dark for
// the rest of it. OVN's manual recommends twice the longest
// flow-generation. On these machines ovn-controller starts to flows on
// br-int in 74-76 ms (the BRIEF's measurement, a handful of ports), so
// 2000 ms covers tables some ten times larger with OVN's factor of two,
// and it stays within the 2 s in which new pods must work after a restart
// (issue 28); doctor warns when a node's own flow generation needs more
// (OpenShift's large clusters use 10000). tests/node
// TestOVNControllerRestartKeepsFlows measured the restart itself with ten
// pods: flows back 69-76 ms after a kill -9 without the wait (one 10 ms
// echo lost), longest flow generation 5-13 ms (docs/reliability.md).
const DefaultOfctrlWaitBeforeClearMs = 2000

// MaxOfctrlWaitBeforeClearMs refuses waits that would freeze a node's
// flows for longer than any flow computation takes (OpenShift's large
// clusters use 10 s).
const MaxOfctrlWaitBeforeClearMs = 300000

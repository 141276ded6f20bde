// Package config is the node daemon's configuration: one table of settings,
// each reachable as a flag, an environment variable (Kube-OVN's ovs-ovn names
// where they exist, OVNHOST_<NAME> otherwise) and a key of an optional YAML
// file. Precedence is flag > environment > file > default. Everything is
// validated before the daemon touches the host; a bad setting is an *Error
// that names the key, the problem and the fix, and the caller exits 2.
package config

import (
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// Mode says where the OVN databases are.
type Mode string

const (
	// AllInOne runs local NB/SB ovsdb-servers and ovn-northd (no OVN_DB_IPS).
	AllInOne Mode = "all-in-one"
	// Remote connects ovn-controller to the cluster's SB database.
	Remote Mode = "remote"
)

// Config is the validated configuration of one node daemon.
type Config struct {
	NodeName string
	Mode     Mode
	// Role is node (default) or central; Central holds the central's settings.
	Role    Role
	Central Central
	// OVNDBIPs are the cluster's OVN database addresses (OVN_DB_IPS).
	OVNDBIPs []string
	// SBRemote and NBRemote are OVSDB connection strings ("unix:...",
	// "tcp:IP:PORT", "ssl:IP:PORT", comma separated for clusters).
	SBRemote string
	NBRemote string
	// NBAddr is OVN_NB_ADDR: the NB remote given outright. A node needs
	// no NB; its node API answers netctl's NB reads (nbctl, vpc) through it.
	NBAddr string

	TunnelType string
	// Iface lists interface names or regular expressions (IFACE); the first
	// match is the tunnel interface. Empty: the default-route interface.
	Iface   []string
	EncapIP string

	EnableSSL bool
	SSLKey    string
	SSLCert   string
	SSLCACert string
	SSLDir    string
	// SSLUnused: ENABLE_SSL was set but the node runs all-in-one, where
	// the databases are reached over unix sockets (EnableSSL is false).
	SSLUnused bool
	HWOffload bool
	Datapath  nodeconfig.DatapathChoice
	// PodMTU is the pod interface MTU; 0 derives it from the underlay.
	PodMTU int
	// ServiceCIDRs are the cluster's Service ranges (SVC_CIDR), routed
	// through ovn0 so the node reaches ClusterIPs.
	ServiceCIDRs []netip.Prefix
	// StandaloneCIDRs and StandaloneJoinCIDRs are ovn-default's and join's
	// ranges on a standalone node (one per IP family; nil: the defaults).
	// A Kubernetes node takes them from the controller's Subnets.
	StandaloneCIDRs, StandaloneJoinCIDRs []netip.Prefix
	// NATBackend is how pod egress is masqueraded: auto, nft or iptables-legacy.
	NATBackend string
	// HostGuard is "required" or "off" (the host firewall guard).
	HostGuard  string
	DisableMod bool // DISABLE_MODULES_MANAGEMENT
	MLockAll   bool
	// UserspaceTunnel puts the tunnel interface on OVS bridge br-phy and
	// moves its addresses there: the userspace datapath encapsulates only
	// from an address on one of its own bridges.
	UserspaceTunnel bool
	// ProviderNetworks are the underlay networks of a standalone node
	// (--provider-networks name:nic,...): each NIC goes into OVS bridge
	// br-<name> with its IP configuration.
	ProviderNetworks []nodeconfig.ProviderNetwork

	ProbeInterval         time.Duration // OVN_REMOTE_PROBE_INTERVAL (ms)
	OpenflowProbeInterval time.Duration // OVN_REMOTE_OPENFLOW_INTERVAL (s)
	// OfctrlWaitBeforeClear is how long a restarted ovn-controller keeps
	// br-int's flows before replacing them (ovn-ofctrl-wait-before-clear).
	OfctrlWaitBeforeClear time.Duration

	Paths    layout.Paths
	RunOwner Owner // owner of the runtime dirs recreated on every start

	HealthAddr string
	// NodeAPIAddr serves the authenticated node API (TLS, TokenReview and
	// SubjectAccessReview) in Kubernetes mode; "" disables it. NodeAPICert
	// and NodeAPIKey name its serving certificate (default: self-signed,
	// pinned by netctl through a Node annotation).
	NodeAPIAddr, NodeAPICert, NodeAPIKey string
	KeepDatapath                         bool
	// AdoptChildren lets the OVS/OVN daemons outlive a crash of ovnhost
	// and be taken over by the next one (homes whose service manager
	// leaves them running: systemd with KillMode=process).
	AdoptChildren bool
	StartTimeout  time.Duration
	StopTimeout   time.Duration

	OVSSchema string // vswitch.ovsschema of the installed OVS
	OVNSchema string // directory holding ovn-nb/ovn-sb.ovsschema
	BinDirs   []string

	CNIBinDir      string
	CNIConfDir     string
	CNISocket      string
	CNISocketGroup string
	CNIVersion     string // cniVersion of the installed conflist
	MirrorOutput   string
	Kubeconfig     string
	// ControllerFieldManagers are the field managers whose pod annotations
	// the CNI server honours (cni/README.md, Trust).
	ControllerFieldManagers []string
	// ChildProbeInterval and ChildProbeMisses: each child is probed on its
	// own channel every interval and killed (then restarted) after that
	// many missed probes in a row.
	ChildProbeInterval time.Duration
	ChildProbeMisses   int
	LogLevel           string
	LogFormat          string
	// LogFileMaxSize rotates a child's log file past this many bytes (0:
	// never); checked every LogRotateInterval.
	LogFileMaxSize    int64
	LogRotateInterval time.Duration

	// File is the configuration file that was read, if any.
	File string
	// IgnoredEnv are OVNHOST_* variables shaped like Kubernetes service
	// links (OVNHOST_X_SERVICE_HOST, ...), ignored rather than refused.
	IgnoredEnv []string
}

// Owner is a uid/gid pair; -1 leaves it unchanged.
type Owner = nodeconfig.Owner

// Error is a configuration error: which key, from where, what is wrong, and
// what to do about it.
type Error struct {
	Key    string // the name as the user wrote it (flag, env var or file key)
	Source string // "flag", "environment", file path, or "" for cross-checks
	Value  string
	Reason string
	Fix    string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config: ")
	b.WriteString(e.Key)
	if e.Source != "" {
		fmt.Fprintf(&b, " (%s)", e.Source)
	}
	if e.Value != "" {
		fmt.Fprintf(&b, " = %q", e.Value)
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Errors collects every problem so the user fixes them all in one go.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)

// finish derives the mode and remotes and cross-checks settings.
func (c *Config) finish() Errors {
	var errs Errors
	if c.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			errs = append(errs, &Error{Key: "node-name", Reason: "not set and the hostname is unknown", Fix: "set NODE_NAME or --node-name"})
		}
		c.NodeName = strings.ToLower(h)
	}
	if c.NodeName != "" && (!dnsLabel.MatchString(c.NodeName) || len(c.NodeName) > 253) {
		errs = append(errs, &Error{Key: "node-name", Value: c.NodeName, Reason: "not a valid Kubernetes node name", Fix: "use lower-case letters, digits, '-' and '.' (NODE_NAME)"})
	}
	switch {
	case len(c.OVNDBIPs) > 0:
		c.Mode = Remote
		var sb string
		c.NBRemote, sb = ovsdbconn.ClusterRemotes(c.OVNDBIPs, c.EnableSSL)
		if c.SBRemote == "" {
			c.SBRemote = sb
		}
	case c.SBRemote != "":
		// Only the SB address: a node of an existing cluster; the node
		// itself never needs the NB database.
		c.Mode = Remote
	default:
		c.Mode = AllInOne
		l := layout.New(c.Paths)
		c.NBRemote, c.SBRemote = l.LocalNB(), l.LocalSB()
		// All-in-one talks to its own databases over unix sockets:
		// ENABLE_SSL (on in the manifests' ConfigMap) has nothing to
		// protect and needs no certificates here.
		if c.EnableSSL && !c.IsCentral() {
			c.EnableSSL, c.SSLUnused = false, true
		}
	}
	if c.Mode == Remote && c.NBAddr != "" {
		c.NBRemote = c.NBAddr
	}
	if c.EnableSSL {
		for _, f := range []struct{ key, val string }{{"ssl-key", c.SSLKey}, {"ssl-cert", c.SSLCert}, {"ssl-ca-cert", c.SSLCACert}} {
			if f.val == "" {
				errs = append(errs, &Error{Key: f.key, Reason: "required when ENABLE_SSL is true", Fix: "mount the OVN certificates and point " + f.key + " at them"})
			}
		}
	}
	if (c.NodeAPICert == "") != (c.NodeAPIKey == "") {
		errs = append(errs, &Error{Key: "node-api-cert", Reason: "--node-api-cert and --node-api-key go together", Fix: "give both, or neither for a self-signed certificate"})
	}
	errs = append(errs, c.finishCentral()...)
	errs = append(errs, c.checkProviderNetworks()...)
	errs = append(errs, c.checkStandaloneCIDRs()...)
	if c.TunnelType == "stt" && c.Datapath == nodeconfig.ChooseUserspace {
		errs = append(errs, &Error{Key: "tunnel-type", Value: c.TunnelType, Reason: "STT is not supported by the userspace (netdev) datapath", Fix: "use TUNNEL_TYPE=geneve or vxlan"})
	}
	return errs
}

// Remote reports whether the OVN databases are elsewhere.
func (c *Config) Remote() bool { return c.Mode == Remote }

// checkStandaloneCIDRs: the join subnet must have each IP family of
// ovn-default (ovn0 routes each family's pods through its join address),
// and the pod subnets are only the node's own to set when it is alone.
func (c *Config) checkStandaloneCIDRs() Errors {
	families := func(ps []netip.Prefix, def string) (v4, v6 bool) {
		if len(ps) == 0 {
			ps = []netip.Prefix{netip.MustParsePrefix(def)}
		}
		for _, p := range ps {
			v4, v6 = v4 || p.Addr().Is4(), v6 || p.Addr().Is6()
		}
		return v4, v6
	}
	d4, d6 := families(c.StandaloneCIDRs, "10.16.0.0/16")
	j4, j6 := families(c.StandaloneJoinCIDRs, "100.64.0.0/16")
	var errs Errors
	if (d4 && !j4) || (d6 && !j6) {
		errs = append(errs, &Error{Key: "node-switch-cidr", Value: fmt.Sprint(c.StandaloneJoinCIDRs),
			Reason: fmt.Sprintf("the join subnet lacks an IP family of --default-cidr %v", c.StandaloneCIDRs),
			Fix:    "give one join CIDR per family of --default-cidr, e.g. --node-switch-cidr=100.64.0.0/16,fd00:100:64::/112 with --default-cidr=10.16.0.0/16,fd00:10:16::/64"})
	}
	return errs
}

package nodeconfig

import (
	"net/netip"

	"github.com/ovnhost/ovnhost/internal/layout"
)

// HostSettings are what the node's settings ask of the host, as the host
// checks (internal/hostcheck) read them: preflight judges them before the
// host is looked at (the datapath asked for, the tunnel interface
// patterns...) and finds what resolves the NodeConfig (Findings); doctor
// reads them beside the NodeConfig for what it does not hold (CNI
// directories, SSL files, the health address). The settings table builds
// them (config.Config.HostSettings); the running daemon keeps the ones it
// started with.
type HostSettings struct {
	// Datapath is what the settings ask for; DisableModules forbids loading
	// the openvswitch module (DISABLE_MODULES_MANAGEMENT).
	Datapath       DatapathChoice
	DisableModules bool
	// TunnelType is TUNNEL_TYPE ("" is geneve).
	TunnelType string
	// Iface lists the tunnel interface's names or patterns (IFACE); EncapIP
	// is ENCAP_IP ("": the tunnel interface's address).
	Iface   []string
	EncapIP string
	// ServiceCIDRs are the cluster's Service ranges (SVC_CIDR): their
	// families say whether the cluster is IPv4, dual-stack or IPv6-only.
	ServiceCIDRs []netip.Prefix
	// UserspaceTunnel moves the tunnel interface into br-phy.
	UserspaceTunnel bool
	// ProviderNetworks are the underlay NICs the node bridges: each must
	// exist, and their addresses are on br-<name> while the node runs.
	ProviderNetworks []ProviderNetwork
	// AllInOne: local NB/SB databases and ovn-northd (no OVN_DB_IPS, no
	// OVN_SB_ADDR), so ovn-northd is one more binary to exec.
	AllInOne bool
	MLockAll bool
	// HealthAddr is the daemon's health endpoint (its port may need
	// CAP_NET_BIND_SERVICE; doctor reads the running build there).
	HealthAddr string
	// BinDirs are searched for the OVS/OVN programs and iptables.
	BinDirs []string
	Paths   layout.Paths
	// Dirs are the directories that must be writable, each with the setting
	// that moves it.
	Dirs []WritableDir

	CNIBinDir, CNIConfDir, CNISocket string
	// The key, certificate and CA of ssl: OVSDB remotes, used when EnableSSL.
	EnableSSL                  bool
	SSLKey, SSLCert, SSLCACert string
	// RunOwner is --run-owner as given ("" when the runtime dirs stay root's).
	RunOwner string
}

// WritableDir is a directory the daemon writes to and the setting that
// moves it.
type WritableDir struct {
	Setting string // flag / file key
	Env     string // environment variable, "" if none
	Path    string
	Suggest string // a relocation that works on read-only hosts
}

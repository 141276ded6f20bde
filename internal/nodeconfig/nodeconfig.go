// Package nodeconfig holds the node's resolved facts: what the settings and
// the host's findings come to once, at start-up. The supervisor's units, the
// CNI server and netctl doctor all read the same NodeConfig instead of each
// deriving the datapath, the tunnel endpoint, the pod MTU or the database
// remotes on its own (the idea of Antrea's agent NodeConfig).
package nodeconfig

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"time"

	"github.com/ovnhost/ovnhost/internal/layout"
)

// Datapath is the OVS datapath of the node's bridges, spelled as
// Bridge.datapath_type wants it.
type Datapath string

// The two datapaths OVS offers.
const (
	// Kernel is the openvswitch kernel module.
	Kernel Datapath = "system"
	// Userspace is ovs-vswitchd's own (netdev) datapath: no module needed,
	// bridges are tap devices.
	Userspace Datapath = "netdev"
)

// IsUserspace reports whether packets are switched by ovs-vswitchd itself.
func (d Datapath) IsUserspace() bool { return d == Userspace }

// PhysBridge is the OVS bridge whose internal port carries the underlay
// address once the tunnel interface is attached to OVS (userspace
// datapath): on a restart the address is found there, not on the interface.
const PhysBridge = "br-phy"

// ProviderNetwork is one underlay network on this node: its NIC goes into
// the OVS bridge br-<Name>, which takes over the NIC's IP configuration, and
// ovn-bridge-mappings maps Name to that bridge (Kube-OVN's ProviderNetwork,
// as one node sees it).
type ProviderNetwork struct {
	Name string
	NIC  string
}

// DefaultTunnelType is Kube-OVN's default encapsulation.
const DefaultTunnelType = "geneve"

// TunnelOverhead is the bytes of encapsulation taken from the underlay MTU
// (the values Kube-OVN uses: Geneve with OVN's options, VXLAN, STT), over
// an IPv6 underlay (encap6) 20 bytes more for VXLAN and STT, whose IPv4
// figures are exact; Geneve's 100 covers its 78 over IPv6 (IPv6 40, UDP
// 8, Geneve 8 and OVN's 8 bytes of options, the inner Ethernet 14).
func TunnelOverhead(tunnelType string, encap6 bool) int {
	v6 := 0
	if encap6 {
		v6 = 20
	}
	switch tunnelType {
	case "vxlan":
		return 50 + v6
	case "stt":
		return 78 + v6
	default:
		return 100
	}
}

// IsIPv6 reports whether addr (an encap IP) is an IPv6 address.
func IsIPv6(addr string) bool {
	ip, err := netip.ParseAddr(addr)
	return err == nil && ip.Is6() && !ip.Is4In6()
}

// FallbackPodMTU is the pod MTU when the underlay's is unknown: Geneve over
// a 1500-byte underlay.
const FallbackPodMTU = 1400

// PodMTU is the largest pod MTU whose encapsulated packets fit the
// underlay; configured wins, an unknown underlay gives FallbackPodMTU.
func PodMTU(configured, underlayMTU int, tunnelType string, encap6 bool) int {
	switch {
	case configured > 0:
		return configured
	case underlayMTU > 0:
		return underlayMTU - TunnelOverhead(tunnelType, encap6)
	}
	return FallbackPodMTU
}

// Remote is an OVSDB database address with the TLS it needs (nil for
// unix: and tcp: remotes).
type Remote struct {
	Endpoint string
	TLS      *tls.Config
}

func (r Remote) String() string { return r.Endpoint }

// Findings are what the host showed preflight; Resolve turns them and the
// settings into a NodeConfig.
type Findings struct {
	// KernelDatapath: the ovs_datapath generic netlink family exists.
	KernelDatapath bool
	// TunnelIface is the interface chosen by IFACE or the default route
	// ("" when none was found).
	TunnelIface string
	// UnderlayMTU is TunnelIface's MTU (0 when unknown).
	UnderlayMTU int
	// EncapIP is ENCAP_IP, else the first address of TunnelIface (or of
	// br-phy after a restart), "" when there is none.
	EncapIP string
}

// NodeConfig is everything the node's subsystems need to know about it.
type NodeConfig struct {
	Name     string
	AllInOne bool
	Datapath Datapath

	TunnelType  string
	TunnelIface string
	EncapIP     string
	UnderlayMTU int
	// PodMTU is the MTU of pod interfaces (a Subnet's mtu wins for its pods).
	PodMTU int
	// ServiceCIDRs are the cluster's Service ranges, routed via ovn0.
	ServiceCIDRs []netip.Prefix
	// StandaloneCIDRs and StandaloneJoinCIDRs: ovn-default's and join's
	// ranges on a standalone node (nil: 10.16.0.0/16 and 100.64.0.0/16).
	StandaloneCIDRs, StandaloneJoinCIDRs []netip.Prefix
	// UserspaceTunnel: TunnelIface is attached to PhysBridge and its
	// addresses live there while the node runs.
	UserspaceTunnel bool
	// ProviderNetworks are the underlay networks whose NIC the node
	// bridges (supervisor/underlay): from --provider-networks on a
	// standalone node.
	ProviderNetworks []ProviderNetwork

	// NB is empty on a remote node given only OVN_SB_ADDR.
	NB, SB Remote

	Layout layout.Layout

	// Daemons is how the OVS/OVN daemons are found, run and supervised.
	Daemons Daemons
	// NATBackend is how pod egress is masqueraded on the host.
	NATBackend NATBackend
	// HostGuardOff leaves out the host firewall guard (--host-guard=off).
	HostGuardOff bool
	// CNI is the embedded CNI server's socket, directories and trust.
	CNI CNI
	// Kubernetes says where the node's Kubernetes client comes from.
	Kubernetes Kubernetes
	// NodeAPI is the node API's listener and certificate.
	NodeAPI NodeAPI
	// Host are the settings as the host checks read them: the running
	// daemon's doctor judges these, not a fresh reading of the settings.
	Host HostSettings
}

// Daemons is how the supervised OVS/OVN daemons are found, run, probed
// and stopped, and what they are told.
type Daemons struct {
	// BinDirs are searched, in order, for the OVS/OVN programs.
	BinDirs []string
	// OVSSchema is the installed vswitch.ovsschema; OVNSchema the
	// directory of ovn-nb.ovsschema and ovn-sb.ovsschema.
	OVSSchema, OVNSchema string
	// StartTimeout bounds each readiness gate; StopTimeout each stop
	// before the child is killed.
	StartTimeout, StopTimeout time.Duration
	// ProbeInterval and ProbeMisses: a ready child is probed on its own
	// channel every interval and killed (then restarted) after that many
	// missed probes in a row; 0 disables the probes.
	ProbeInterval time.Duration
	ProbeMisses   int
	// AdoptChildren lets the daemons outlive a crash of ovnhost and be
	// taken over by the next one.
	AdoptChildren bool
	// KeepDatapath leaves the datapath and its ports in place at stop.
	KeepDatapath bool
	// RunOwner owns the runtime directories recreated at every start.
	RunOwner Owner
	// LogFileMaxSize rotates a child's log file past this many bytes (0:
	// never), checked every LogRotateInterval.
	LogFileMaxSize    int64
	LogRotateInterval time.Duration
	// TLS are the files behind ssl: remotes, given to ovn-controller
	// (and the central's members).
	TLS TLSFiles

	// MLockAll runs ovs-vswitchd with --mlockall.
	MLockAll bool
	// HWOffload sets Open_vSwitch other_config:hw-offload.
	HWOffload bool
	// RemoteProbeInterval is ovn-controller's SB probe interval
	// (ovn-remote-probe-interval), OpenflowProbeInterval its OpenFlow one.
	RemoteProbeInterval, OpenflowProbeInterval time.Duration
	// OfctrlWaitBeforeClear is how long a restarted ovn-controller keeps
	// the flows of an ovs-vswitchd that kept them before replacing them
	// (external_ids:ovn-ofctrl-wait-before-clear).
	OfctrlWaitBeforeClear time.Duration
}

// TLSFiles are the SSL key, certificate and CA of the OVN databases.
type TLSFiles struct {
	// Enabled is ENABLE_SSL: the remotes are ssl: and the files are used.
	Enabled           bool
	Key, Cert, CACert string
}

// Owner is a uid/gid pair; -1 leaves it unchanged.
type Owner struct {
	UID, GID int
	Spec     string
}

// NATBackend is how pod egress is masqueraded on the host.
type NATBackend string

// The NAT backends.
const (
	// NATAuto takes the one the host's iptables uses.
	NATAuto           NATBackend = "auto"
	NATNft            NATBackend = "nft"
	NATIptablesLegacy NATBackend = "iptables-legacy"
)

// CNI is the embedded CNI server's configuration.
type CNI struct {
	// Socket is the unix socket the plugin talks to; SocketGroup the
	// group allowed on it ("" root only).
	Socket, SocketGroup string
	// BinDir and ConfDir are where the plugin and the conflist go.
	BinDir, ConfDir string
	// ConfVersion is the installed conflist's cniVersion.
	ConfVersion string
	// MirrorOutput is the port mirrored pods' traffic is copied to.
	MirrorOutput string
	// ControllerFieldManagers are the field managers whose pod
	// annotations the node honours.
	ControllerFieldManagers []string
}

// NodeAPI is where the node API (supervisor/nodeapi) listens and the
// serving certificate it presents ("" files: a self-signed one).
type NodeAPI struct {
	// Addr is the listen address; "" turns the node API off.
	Addr              string
	CertFile, KeyFile string
}

// Kubernetes is where the node's Kubernetes client comes from.
type Kubernetes struct {
	// Kubeconfig is the kubeconfig file; "" takes the in-cluster
	// configuration in a pod, and none (a standalone node) elsewhere.
	Kubeconfig string
}

// DatapathChoice is what the settings ask for.
type DatapathChoice string

// Datapath settings.
const (
	ChooseAuto      DatapathChoice = "auto"
	ChooseKernel    DatapathChoice = "kernel"
	ChooseUserspace DatapathChoice = "netdev"
)

// PickDatapath resolves a choice against the host: auto takes the kernel
// datapath when the module is there and falls back to userspace.
func PickDatapath(choice DatapathChoice, kernelPresent bool) (Datapath, error) {
	switch choice {
	case ChooseUserspace:
		return Userspace, nil
	case ChooseKernel:
		if !kernelPresent {
			return "", fmt.Errorf("datapath=kernel but the openvswitch kernel datapath is not available")
		}
		return Kernel, nil
	}
	if kernelPresent {
		return Kernel, nil
	}
	return Userspace, nil
}

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

// DefaultTunnelType is Kube-OVN's default encapsulation.
const DefaultTunnelType = "geneve"

// TunnelOverhead is the bytes of encapsulation taken from the underlay MTU
// (the values Kube-OVN uses: Geneve with OVN's options, VXLAN, STT).
func TunnelOverhead(tunnelType string) int {
	switch tunnelType {
	case "vxlan":
		return 50
	case "stt":
		return 78
	default:
		return 100
	}
}

// FallbackPodMTU is the pod MTU when the underlay's is unknown: Geneve over
// a 1500-byte underlay.
const FallbackPodMTU = 1400

// PodMTU is the largest pod MTU whose encapsulated packets fit the
// underlay; configured wins, an unknown underlay gives FallbackPodMTU.
func PodMTU(configured, underlayMTU int, tunnelType string) int {
	switch {
	case configured > 0:
		return configured
	case underlayMTU > 0:
		return underlayMTU - TunnelOverhead(tunnelType)
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
	// UserspaceTunnel: TunnelIface is attached to PhysBridge and its
	// addresses live there while the node runs.
	UserspaceTunnel bool

	// NB is empty on a remote node given only OVN_SB_ADDR.
	NB, SB Remote

	Layout layout.Layout
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

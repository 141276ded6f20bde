package v1

import (
	"fmt"
	"net/netip"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovnhost/ovnhost/internal/providernet"
)

// The underlay CRDs: ProviderNetwork (provider-networks.kubeovn.io) names the
// host NIC each node bridges into OVS for a physical network; Vlan
// (vlans.kubeovn.io) is one 802.1Q tag on a ProviderNetwork that underlay
// Subnets point at with spec.vlan. Same group, names and fields as Kube-OVN
// (1.10 to 1.15, the deprecated Vlan fields included), so a Kube-OVN user's
// objects apply unchanged. The CRDs are packaging/kubernetes/base/
// crd-provider-networks.yaml and crd-vlans.yaml.
var (
	ProviderNetworkGVR = GroupVersion.WithResource("provider-networks")
	ProviderNetworkGVK = GroupVersion.WithKind("ProviderNetwork")
	VlanGVR            = GroupVersion.WithResource("vlans")
	VlanGVK            = GroupVersion.WithKind("Vlan")
)

// ProviderNetwork is a physical network reached through a NIC of each node
// it selects.
type ProviderNetwork struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ProviderNetworkSpec   `json:"spec"`
	Status            ProviderNetworkStatus `json:"status,omitempty"`
}

// ProviderNetworkSpec has every field of Kube-OVN's (internal/providernet:
// the node reads the same objects).
type ProviderNetworkSpec = providernet.Spec

// CustomInterface gives some nodes another NIC than the default.
type CustomInterface = providernet.CustomInterface

// ProviderNetworkStatus is written by the controller from what the nodes
// report.
type ProviderNetworkStatus struct {
	Ready         bool                       `json:"ready"`
	ReadyNodes    []string                   `json:"readyNodes,omitempty"`
	NotReadyNodes []string                   `json:"notReadyNodes,omitempty"`
	Vlans         []string                   `json:"vlans,omitempty"`
	Conditions    []ProviderNetworkCondition `json:"conditions,omitempty"`
}

// ProviderNetworkCondition is a condition of one node.
type ProviderNetworkCondition struct {
	Node      string `json:"node"`
	Condition `json:",inline"`
}

// Vlan is one VLAN tag on a provider network.
type Vlan struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VlanSpec   `json:"spec"`
	Status            VlanStatus `json:"status,omitempty"`
}

// VlanSpec has Kube-OVN's fields; VlanID and ProviderInterfaceName are the
// names releases before 1.9 stored, still read (Tag, ProviderName).
type VlanSpec struct {
	ID                    int    `json:"id"`
	Provider              string `json:"provider,omitempty"`
	VlanID                int    `json:"vlanId,omitempty"`
	ProviderInterfaceName string `json:"providerInterfaceName,omitempty"`
}

// VlanStatus lists the Subnets on the VLAN and whether another Vlan of the
// same provider has the same tag.
type VlanStatus struct {
	Subnets    []string    `json:"subnets,omitempty"`
	Conflict   bool        `json:"conflict,omitempty"`
	Conditions []Condition `json:"conditions,omitempty"`
}

// Tag is the VLAN tag: id, or the deprecated vlanId when id is unset. 0
// means untagged (Kube-OVN's "vlan 0": the provider network's native VLAN).
func (s VlanSpec) Tag() int {
	if s.ID == 0 && s.VlanID != 0 {
		return s.VlanID
	}
	return s.ID
}

// ProviderName is the provider network: provider, or the deprecated
// providerInterfaceName.
func (s VlanSpec) ProviderName() string {
	if s.Provider != "" {
		return s.Provider
	}
	return s.ProviderInterfaceName
}

// MaxProviderNetworkName: the node bridge is br-<name>, and a Linux interface
// name has at most 15 bytes (internal/providernet, shared with the node).
const MaxProviderNetworkName = providernet.MaxName

// BridgeName is the OVS bridge a provider network gets on its nodes
// (Kube-OVN's name, so its nodes' state is recognised).
func BridgeName(providerNetwork string) string { return providernet.BridgeName(providerNetwork) }

// The JSON names of every spec field, for the unknown-field check.
var (
	ProviderNetworkKnownFields = providernet.KnownFields
	VlanKnownFields            = []string{"id", "provider", "vlanId", "providerInterfaceName"}
)

func unknownFields(u *unstructured.Unstructured, known []string) *Problem {
	return problem(providernet.UnknownFields(u, known))
}

func problem(p *providernet.Problem) *Problem {
	if p == nil {
		return nil
	}
	return &Problem{Reason: p.Reason, Message: p.Message}
}

// ValidateProviderNetwork checks a ProviderNetwork as stored. A problem
// makes the whole object not ready: no node acts on it.
func ValidateProviderNetwork(u *unstructured.Unstructured) (*ProviderNetwork, *Problem) {
	spec, p := providernet.Validate(u)
	if spec == nil {
		return nil, problem(p)
	}
	var pn ProviderNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
		return nil, &Problem{"InvalidField", fmt.Sprintf("provider network %q: %v", u.GetName(), err)}
	}
	return &pn, problem(p)
}

// NodeInterface says whether the provider network selects the node and, if
// so, the NIC the node bridges (providernet.Spec.NodeInterface).
func (pn *ProviderNetwork) NodeInterface(node string, nodeLabels map[string]string) (nic string, selected bool, err error) {
	return pn.Spec.NodeInterface(pn.Name, node, nodeLabels)
}

// MaxVlanTag: 802.1Q reserves 4095. Kube-OVN's CRD admits it (so its objects
// apply here too); ovnhost refuses it with a condition.
const MaxVlanTag = providernet.MaxVlanTag

// ValidateVlan checks a Vlan as stored, alone; whether its provider exists
// and whether another Vlan has its tag are the controller's to judge.
func ValidateVlan(u *unstructured.Unstructured) (*Vlan, *Problem) {
	if p := unknownFields(u, VlanKnownFields); p != nil {
		return nil, p
	}
	var v Vlan
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, &Problem{"InvalidField", fmt.Sprintf("vlan %q: %v", u.GetName(), err)}
	}
	if v.Spec.ID != 0 && v.Spec.VlanID != 0 && v.Spec.ID != v.Spec.VlanID {
		return &v, &Problem{"InvalidField", fmt.Sprintf("spec.id %d and the deprecated spec.vlanId %d differ; remove vlanId", v.Spec.ID, v.Spec.VlanID)}
	}
	if t := v.Spec.Tag(); t < 0 || t > MaxVlanTag {
		return &v, &Problem{"InvalidField", fmt.Sprintf("VLAN id %d is outside 0..%d (0 is untagged, 4095 is reserved by 802.1Q); set spec.id to the tag the switch port carries", t, MaxVlanTag)}
	}
	if v.Spec.Provider != "" && v.Spec.ProviderInterfaceName != "" && v.Spec.Provider != v.Spec.ProviderInterfaceName {
		return &v, &Problem{"InvalidField", fmt.Sprintf("spec.provider %q and the deprecated spec.providerInterfaceName %q differ; remove providerInterfaceName", v.Spec.Provider, v.Spec.ProviderInterfaceName)}
	}
	if v.Spec.ProviderName() == "" {
		return &v, &Problem{"InvalidField", "spec.provider is empty; name the ProviderNetwork this VLAN is on"}
	}
	return &v, nil
}

// gatewayByFamily checks spec.gateway, when given, against cidrBlock's
// families and returns it in cidrBlock's order (Kube-OVN accepts a
// dual-stack gateway in either order). A dual-stack subnet's gateway must
// have an address of each family: for an underlay subnet the missing one
// is not guessed (Kube-OVN takes the first address of the CIDR), since
// its pods' default route of that family goes to the physical router and
// the CIDR's first address may be nobody's. Unparsable input is returned
// as it is, for ipam.ParseSubnet to name.
func gatewayByFamily(name string, spec SubnetSpec) (string, *Problem) {
	if strings.TrimSpace(spec.Gateway) == "" {
		return spec.Gateway, nil
	}
	var cidrs []netip.Prefix
	for _, c := range strings.Split(spec.CIDRBlock, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return spec.Gateway, nil
		}
		cidrs = append(cidrs, p.Masked())
	}
	var gws []netip.Addr
	for _, g := range strings.Split(spec.Gateway, ",") {
		a, err := netip.ParseAddr(strings.TrimSpace(g))
		if err != nil {
			return spec.Gateway, nil
		}
		gws = append(gws, a.Unmap())
	}
	if len(cidrs) < 2 || len(gws) > len(cidrs) {
		return spec.Gateway, nil
	}
	family := func(is4 bool) string {
		if is4 {
			return "IPv4"
		}
		return "IPv6"
	}
	ordered := make([]string, len(cidrs))
	var missing *netip.Prefix
	for i, c := range cidrs {
		for _, g := range gws {
			if g.Is4() == c.Addr().Is4() && ordered[i] == "" {
				ordered[i] = g.String()
			}
		}
		if ordered[i] == "" {
			ordered[i] = "<the " + family(c.Addr().Is4()) + " gateway in " + c.String() + ">"
			if missing == nil {
				missing = &cidrs[i]
			}
		}
	}
	if missing == nil {
		return strings.Join(ordered, ","), nil
	}
	fam := family(missing.Addr().Is4())
	why := fmt.Sprintf("its pods would get no %s default route", fam)
	if spec.Vlan != "" && !spec.LogicalGateway {
		why = fmt.Sprintf("the subnet is underlay (spec.vlan %q): its pods' %s default route goes to the physical router of %s, whose address ovnhost does not guess", spec.Vlan, fam, missing)
	}
	return "", &Problem{Reason: "InvalidField", Message: fmt.Sprintf("subnet %q: gateway %q has no %s address but cidrBlock %q is dual-stack; %s; give one gateway per family: gateway: %q",
		name, spec.Gateway, fam, spec.CIDRBlock, why, strings.Join(ordered, ","))}
}

package v1

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
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

// ProviderNetworkSpec has every field of Kube-OVN's.
type ProviderNetworkSpec struct {
	// DefaultInterface is the NIC of every selected node not listed in
	// CustomInterfaces.
	DefaultInterface string            `json:"defaultInterface"`
	CustomInterfaces []CustomInterface `json:"customInterfaces,omitempty"`
	// NodeSelector chooses the nodes; when set, ExcludeNodes is ignored
	// (Kube-OVN's rule).
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	ExcludeNodes []string              `json:"excludeNodes,omitempty"`
	// ExchangeLinkName: the bridge takes the NIC's name and the NIC is
	// renamed (Kube-OVN: so host tools keep finding "eth0").
	ExchangeLinkName            bool     `json:"exchangeLinkName,omitempty"`
	AutoCreateVlanSubinterfaces bool     `json:"autoCreateVlanSubinterfaces,omitempty"`
	PreserveVlanInterfaces      bool     `json:"preserveVlanInterfaces,omitempty"`
	VlanInterfaces              []string `json:"vlanInterfaces,omitempty"`
}

// CustomInterface gives some nodes another NIC than the default.
type CustomInterface struct {
	Interface string   `json:"interface"`
	Nodes     []string `json:"nodes"`
}

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
	ProviderNetworkKnownFields = []string{"defaultInterface", "customInterfaces", "nodeSelector", "excludeNodes",
		"exchangeLinkName", "autoCreateVlanSubinterfaces", "preserveVlanInterfaces", "vlanInterfaces"}
	VlanKnownFields = []string{"id", "provider", "vlanId", "providerInterfaceName"}
)

// vlanInterfacePattern is Kube-OVN's admission pattern for vlanInterfaces.
var vlanInterfacePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+\.[0-9]{1,4}$`)

// ifnameProblem says why name cannot be a Linux interface name, or "".
func ifnameProblem(name string) string { return providernet.IfnameProblem(name) }

func unknownFields(u *unstructured.Unstructured, known []string) *Problem {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	var unknown []string
	for k := range spec {
		if !slices.Contains(known, k) {
			unknown = append(unknown, "spec."+k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return &Problem{"UnknownField", fmt.Sprintf("unknown field(s) %s; remove them (supported: %s)", strings.Join(unknown, ", "), strings.Join(known, ", "))}
}

// ValidateProviderNetwork checks a ProviderNetwork as stored. A problem
// makes the whole object not ready: no node acts on it.
func ValidateProviderNetwork(u *unstructured.Unstructured) (*ProviderNetwork, *Problem) {
	if p := unknownFields(u, ProviderNetworkKnownFields); p != nil {
		return nil, p
	}
	var pn ProviderNetwork
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &pn); err != nil {
		return nil, &Problem{"InvalidField", fmt.Sprintf("provider network %q: %v", u.GetName(), err)}
	}
	invalid := func(format string, a ...any) (*ProviderNetwork, *Problem) {
		return &pn, &Problem{"InvalidField", fmt.Sprintf(format, a...)}
	}
	if n := len(pn.Name); n > MaxProviderNetworkName {
		return invalid("name %q is %d characters long; a provider network's name has at most %d, because its bridge %s must fit Linux's 15-byte interface names: recreate it with a shorter name", pn.Name, n, MaxProviderNetworkName, BridgeName(pn.Name))
	}
	if p := ifnameProblem(pn.Spec.DefaultInterface); p != "" {
		return invalid("spec.defaultInterface %q %s; name the NIC (or bond, team, VLAN interface) as `ip link` shows it", pn.Spec.DefaultInterface, p)
	}
	owner := map[string]int{}
	for i, ci := range pn.Spec.CustomInterfaces {
		if p := ifnameProblem(ci.Interface); p != "" {
			return invalid("spec.customInterfaces[%d].interface %q %s; name the NIC as `ip link` shows it", i, ci.Interface, p)
		}
		if len(ci.Nodes) == 0 {
			return invalid("spec.customInterfaces[%d] (%s) lists no nodes; list the nodes that use %s, or remove the entry", i, ci.Interface, ci.Interface)
		}
		for _, n := range ci.Nodes {
			if j, seen := owner[n]; seen && pn.Spec.CustomInterfaces[j].Interface != ci.Interface {
				return invalid("node %q is in spec.customInterfaces[%d] (%s) and [%d] (%s); a node bridges one NIC per provider network: keep it in one entry", n, j, pn.Spec.CustomInterfaces[j].Interface, i, ci.Interface)
			}
			owner[n] = i
		}
	}
	if pn.Spec.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(pn.Spec.NodeSelector); err != nil {
			return invalid("spec.nodeSelector: %v", err)
		}
	}
	for i, v := range pn.Spec.VlanInterfaces {
		if !vlanInterfacePattern.MatchString(v) || ifnameProblem(v) != "" {
			return invalid("spec.vlanInterfaces[%d] %q is not a VLAN interface name <parent>.<id> of at most 15 bytes (e.g. eth0.10, bond0.20)", i, v)
		}
		if id, _ := strconv.Atoi(v[strings.LastIndexByte(v, '.')+1:]); id < 1 || id > MaxVlanTag {
			return invalid("spec.vlanInterfaces[%d] %q has VLAN id %d; use 1 to %d", i, v, id, MaxVlanTag)
		}
	}
	return &pn, nil
}

// NodeInterface says whether the provider network selects the node and, if
// so, the NIC the node bridges. Kube-OVN's rules: with a nodeSelector,
// excludeNodes is ignored; a customInterfaces entry wins over the default.
func (pn *ProviderNetwork) NodeInterface(node string, nodeLabels map[string]string) (nic string, selected bool, err error) {
	if pn.Spec.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(pn.Spec.NodeSelector)
		if err != nil {
			return "", false, fmt.Errorf("provider network %s: spec.nodeSelector: %w", pn.Name, err)
		}
		if !sel.Matches(labels.Set(nodeLabels)) {
			return "", false, nil
		}
	} else if slices.Contains(pn.Spec.ExcludeNodes, node) {
		return "", false, nil
	}
	for _, ci := range pn.Spec.CustomInterfaces {
		if slices.Contains(ci.Nodes, node) {
			return ci.Interface, true, nil
		}
	}
	return pn.Spec.DefaultInterface, true, nil
}

// MaxVlanTag: 802.1Q reserves 4095. Kube-OVN's CRD admits it (so its objects
// apply here too); ovnhost refuses it with a condition.
const MaxVlanTag = 4094

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

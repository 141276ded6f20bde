package providernet

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
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The ProviderNetwork object's spec and its rules live here, not in the
// controller's CRD package: the node reads the same objects and must judge
// them as the controller does (an object the controller reports invalid is
// one no node acts on). controller/apis/kubeovn/v1 aliases these types.

// GVR is the ProviderNetwork resource (Kube-OVN's provider-networks.kubeovn.io).
var GVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "provider-networks"}

// Spec is a ProviderNetwork's spec, every field of Kube-OVN's.
type Spec struct {
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

// KnownFields are the JSON names of every spec field, for the
// unknown-field check.
var KnownFields = []string{"defaultInterface", "customInterfaces", "nodeSelector", "excludeNodes",
	"exchangeLinkName", "autoCreateVlanSubinterfaces", "preserveVlanInterfaces", "vlanInterfaces"}

// MaxVlanTag: 802.1Q reserves 4095.
const MaxVlanTag = 4094

// Problem is why a ProviderNetwork is not valid: a condition's reason
// (UnknownField, InvalidField) and a message with the fix.
type Problem struct {
	Reason  string
	Message string
}

// vlanInterfacePattern is Kube-OVN's admission pattern for vlanInterfaces.
var vlanInterfacePattern = regexp.MustCompile(`^[a-zA-Z0-9_-]+\.[0-9]{1,4}$`)

// UnknownFields reports the spec fields of u not in known, or nil.
func UnknownFields(u *unstructured.Unstructured, known []string) *Problem {
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

// Validate checks a stored ProviderNetwork. The spec is nil when it cannot
// be read at all (unknown fields, wrong types); a problem makes the whole
// object not ready: no node acts on it.
func Validate(u *unstructured.Unstructured) (*Spec, *Problem) {
	if p := UnknownFields(u, KnownFields); p != nil {
		return nil, p
	}
	var s Spec
	raw, _, _ := unstructured.NestedMap(u.Object, "spec")
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &s); err != nil {
		return nil, &Problem{"InvalidField", fmt.Sprintf("provider network %q: %v", u.GetName(), err)}
	}
	invalid := func(format string, a ...any) (*Spec, *Problem) {
		return &s, &Problem{"InvalidField", fmt.Sprintf(format, a...)}
	}
	if name := u.GetName(); len(name) > MaxName {
		return invalid("name %q is %d characters long; a provider network's name has at most %d, because its bridge %s must fit Linux's 15-byte interface names: recreate it with a shorter name", name, len(name), MaxName, BridgeName(name))
	}
	if p := IfnameProblem(s.DefaultInterface); p != "" {
		return invalid("spec.defaultInterface %q %s; name the NIC (or bond, team, VLAN interface) as `ip link` shows it", s.DefaultInterface, p)
	}
	owner := map[string]int{}
	for i, ci := range s.CustomInterfaces {
		if p := IfnameProblem(ci.Interface); p != "" {
			return invalid("spec.customInterfaces[%d].interface %q %s; name the NIC as `ip link` shows it", i, ci.Interface, p)
		}
		if len(ci.Nodes) == 0 {
			return invalid("spec.customInterfaces[%d] (%s) lists no nodes; list the nodes that use %s, or remove the entry", i, ci.Interface, ci.Interface)
		}
		for _, n := range ci.Nodes {
			if j, seen := owner[n]; seen && s.CustomInterfaces[j].Interface != ci.Interface {
				return invalid("node %q is in spec.customInterfaces[%d] (%s) and [%d] (%s); a node bridges one NIC per provider network: keep it in one entry", n, j, s.CustomInterfaces[j].Interface, i, ci.Interface)
			}
			owner[n] = i
		}
	}
	if s.NodeSelector != nil {
		if _, err := metav1.LabelSelectorAsSelector(s.NodeSelector); err != nil {
			return invalid("spec.nodeSelector: %v", err)
		}
	}
	for i, v := range s.VlanInterfaces {
		if !vlanInterfacePattern.MatchString(v) || IfnameProblem(v) != "" {
			return invalid("spec.vlanInterfaces[%d] %q is not a VLAN interface name <parent>.<id> of at most 15 bytes (e.g. eth0.10, bond0.20)", i, v)
		}
		if id, _ := strconv.Atoi(v[strings.LastIndexByte(v, '.')+1:]); id < 1 || id > MaxVlanTag {
			return invalid("spec.vlanInterfaces[%d] %q has VLAN id %d; use 1 to %d", i, v, id, MaxVlanTag)
		}
	}
	return &s, nil
}

// NodeInterface says whether the provider network network selects the
// node and, if so, the NIC the node bridges. Kube-OVN's rules: with a
// nodeSelector, excludeNodes is ignored; a customInterfaces entry wins
// over the default.
func (s *Spec) NodeInterface(network, node string, nodeLabels map[string]string) (nic string, selected bool, err error) {
	if s.NodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.NodeSelector)
		if err != nil {
			return "", false, fmt.Errorf("provider network %s: spec.nodeSelector: %w", network, err)
		}
		if !sel.Matches(labels.Set(nodeLabels)) {
			return "", false, nil
		}
	} else if slices.Contains(s.ExcludeNodes, node) {
		return "", false, nil
	}
	for _, ci := range s.CustomInterfaces {
		if slices.Contains(ci.Nodes, node) {
			return ci.Interface, true, nil
		}
	}
	return s.DefaultInterface, true, nil
}

// What a node reports per provider network on its Node, read by the
// controller: Kube-OVN's labels (<network> + suffix; its tools read them)
// and ovnhost's annotation with the reason a network is not ready there.
const (
	ReadyLabel      = ".provider-network.kubernetes.io/ready"
	InterfaceLabel  = ".provider-network.kubernetes.io/interface"
	MTULabel        = ".provider-network.kubernetes.io/mtu"
	ErrorAnnotation = ".provider-network.ovnhost.io/error"
)

// NotApplied says, one sentence per field, what a valid spec asks for that
// the node does not do ("": nothing). vlanInterfaces and
// preserveVlanInterfaces are not in it: a VLAN interface on the NIC keeps
// working while the NIC is bridged (docs/underlay.md).
func (s Spec) NotApplied() string {
	var out []string
	if s.ExchangeLinkName {
		out = append(out, "spec.exchangeLinkName: the bridge keeps the name br-<network> and the NIC its own; the NIC's whole configuration (addresses, routes, rules) moves to the bridge instead, and renaming the NIC would take it down")
	}
	if s.AutoCreateVlanSubinterfaces {
		out = append(out, "spec.autoCreateVlanSubinterfaces: a NIC <parent>.<id> that does not exist is not created; create the VLAN interface on the host (a node without it reports the NIC missing and is not ready for this network)")
	}
	return strings.Join(out, "; ")
}

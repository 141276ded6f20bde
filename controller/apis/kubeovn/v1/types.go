// Package v1 holds the Kube-OVN compatible Subnet type (subnets.kubeovn.io/v1)
// and its validation. The CRD itself is packaging/kubernetes/base/crd-subnets.yaml.
// Objects are read through the dynamic client and converted with FromUnstructured.
package v1

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/ovnhost/ovnhost/internal/ipam"
)

// Group, version and resource of the CRD.
var (
	GroupVersion = schema.GroupVersion{Group: "kubeovn.io", Version: "v1"}
	SubnetGVR    = GroupVersion.WithResource("subnets")
	SubnetGVK    = GroupVersion.WithKind("Subnet")
)

// Subnet is a Kube-OVN subnet.
type Subnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SubnetSpec   `json:"spec"`
	Status            SubnetStatus `json:"status,omitempty"`
}

// SubnetSpec has Kube-OVN's field names and meanings.
type SubnetSpec struct {
	Default             bool     `json:"default,omitempty"`
	Protocol            string   `json:"protocol,omitempty"` // IPv4, IPv6, Dual
	CIDRBlock           string   `json:"cidrBlock"`
	Gateway             string   `json:"gateway,omitempty"`
	ExcludeIps          []string `json:"excludeIps,omitempty"`
	Namespaces          []string `json:"namespaces,omitempty"`
	GatewayType         string   `json:"gatewayType,omitempty"` // distributed, centralized
	GatewayNode         string   `json:"gatewayNode,omitempty"`
	NatOutgoing         bool     `json:"natOutgoing,omitempty"`
	Private             bool     `json:"private,omitempty"`
	AllowSubnets        []string `json:"allowSubnets,omitempty"`
	Vlan                string   `json:"vlan,omitempty"`
	Provider            string   `json:"provider,omitempty"`
	MTU                 int      `json:"mtu,omitempty"`
	DisableGatewayCheck bool     `json:"disableGatewayCheck,omitempty"`
}

// Condition is a Kube-OVN subnet condition.
type Condition struct {
	Type               string `json:"type"`
	Status             string `json:"status"`
	Reason             string `json:"reason,omitempty"`
	Message            string `json:"message,omitempty"`
	ObservedGeneration int64  `json:"observedGeneration,omitempty"`
	LastUpdateTime     string `json:"lastUpdateTime,omitempty"`
	LastTransitionTime string `json:"lastTransitionTime,omitempty"`
}

// Condition types.
const (
	Ready     = "Ready"
	Validated = "Validated"
	Error     = "Error"
)

// AcceptedNotApplied is the Validated=True reason of a Subnet whose spec asks
// for something the controller records but does not program yet (see
// NotAppliedFields); ValidationSucceeded is the reason otherwise.
const (
	AcceptedNotApplied  = "AcceptedNotApplied"
	ValidationSucceeded = "ValidationSucceeded"
)

// notApplied is what each recorded-but-not-applied field means for the
// subnet's traffic, in spec order.
var notApplied = []struct {
	field       string
	asks        func(SubnetSpec) bool
	consequence string
}{
	// gatewayType centralized with gatewayNode is applied (ovnnet/gateway.go);
	// gatewayNode means nothing to a distributed subnet, as in Kube-OVN.
	{"gatewayNode", func(s SubnetSpec) bool {
		return s.GatewayType != "centralized" && strings.TrimSpace(s.GatewayNode) != ""
	},
		"gatewayNode is not applied to a distributed subnet: the node(s) it names do not act as this subnet's gateway; set gatewayType: centralized to use them."},
}

// NotAppliedFields lists, in spec order, the fields of spec that ask for
// something the controller records but does not apply: a gatewayNode on a
// distributed subnet. (natOutgoing and centralized gateways are applied.) Empty when there is none.
func NotAppliedFields(spec SubnetSpec) []string {
	var out []string
	for _, n := range notApplied {
		if n.asks(spec) {
			out = append(out, n.field)
		}
	}
	return out
}

// NotAppliedMessage is the Validated condition (and event) message for the
// fields NotAppliedFields returned: one sentence per field naming it and its
// consequence, in spec order whatever the order given; "" for none. The
// message depends only on the set of fields, so comparing messages compares sets.
func NotAppliedMessage(fields []string) string {
	var parts []string
	for _, n := range notApplied {
		if slices.Contains(fields, n.field) {
			parts = append(parts, n.consequence)
		}
	}
	return strings.Join(parts, " ")
}

// Condition returns the status condition of that type, or nil.
func (s *Subnet) Condition(typ string) *Condition {
	if s == nil {
		return nil
	}
	for i := range s.Status.Conditions {
		if s.Status.Conditions[i].Type == typ {
			return &s.Status.Conditions[i]
		}
	}
	return nil
}

// SubnetStatus is kept current by the controller.
type SubnetStatus struct {
	Conditions         []Condition `json:"conditions,omitempty"`
	V4AvailableIPs     float64     `json:"v4availableIPs"`
	V4UsingIPs         float64     `json:"v4usingIPs"`
	V4AvailableIPRange string      `json:"v4availableIPrange"`
	V4UsingIPRange     string      `json:"v4usingIPrange"`
	V6AvailableIPs     float64     `json:"v6availableIPs"`
	V6UsingIPs         float64     `json:"v6usingIPs"`
	V6AvailableIPRange string      `json:"v6availableIPrange"`
	V6UsingIPRange     string      `json:"v6usingIPrange"`

	// ActivateGateway is the gateway node a centralized subnet's traffic
	// leaves through now (Kube-OVN's name and spelling); the node daemon
	// that OVN made active writes it.
	ActivateGateway string `json:"activateGateway,omitempty"`
}

// FromUnstructured converts a dynamic-client object.
func FromUnstructured(u *unstructured.Unstructured) (*Subnet, error) {
	var s Subnet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		return nil, fmt.Errorf("subnet %q: %w", u.GetName(), err)
	}
	return &s, nil
}

var knownSpec = []string{"default", "protocol", "cidrBlock", "gateway", "excludeIps", "namespaces", "gatewayType",
	"gatewayNode", "natOutgoing", "private", "allowSubnets", "vlan", "provider", "mtu", "disableGatewayCheck"}

// Problem is why a subnet is not valid.
type Problem struct {
	Reason  string // UnknownField, UnsupportedField, InvalidField, ProtocolMismatch
	Message string
}

// Validate checks a Subnet (as stored, unknown fields included) and returns
// the IPAM config, or the problem with its reason and fix.
func Validate(u *unstructured.Unstructured) (ipam.SubnetConfig, *Subnet, *Problem) {
	spec, _, _ := unstructured.NestedMap(u.Object, "spec")
	var unknown []string
	for k := range spec {
		if !slices.Contains(knownSpec, k) {
			unknown = append(unknown, "spec."+k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return ipam.SubnetConfig{}, nil, &Problem{"UnknownField", fmt.Sprintf("unknown field(s) %s; remove them (supported: %s)", strings.Join(unknown, ", "), strings.Join(knownSpec, ", "))}
	}
	s, err := FromUnstructured(u)
	if err != nil {
		return ipam.SubnetConfig{}, nil, &Problem{"InvalidField", err.Error()}
	}
	var unsupported []string
	if s.Spec.Vlan != "" {
		unsupported = append(unsupported, "spec.vlan (underlay VLAN subnets)")
	}
	if s.Spec.Provider != "" && s.Spec.Provider != "ovn" {
		unsupported = append(unsupported, fmt.Sprintf("spec.provider %q (only ovn)", s.Spec.Provider))
	}
	if s.Spec.Private || len(s.Spec.AllowSubnets) > 0 {
		unsupported = append(unsupported, "spec.private/allowSubnets (subnet isolation ACLs)")
	}
	if len(unsupported) > 0 {
		return ipam.SubnetConfig{}, s, &Problem{"UnsupportedField", "ovnhost does not implement " + strings.Join(unsupported, ", ") + " yet; remove the field(s) to use this subnet"}
	}
	cfg, err := ipam.ParseSubnet(u.GetName(), s.Spec.CIDRBlock, s.Spec.Gateway, s.Spec.ExcludeIps)
	if err != nil {
		msg := err.Error()
		if ie, ok := err.(*ipam.Error); ok {
			msg = ie.Msg
		}
		return ipam.SubnetConfig{}, s, &Problem{"InvalidField", msg}
	}
	var v4, v6 bool
	for _, p := range cfg.CIDRs {
		if p.Addr().Is4() {
			v4 = true
		} else {
			v6 = true
		}
	}
	have := map[[2]bool]string{{true, false}: "IPv4", {false, true}: "IPv6", {true, true}: "Dual"}[[2]bool{v4, v6}]
	if s.Spec.Protocol != "" && s.Spec.Protocol != have {
		return ipam.SubnetConfig{}, s, &Problem{"ProtocolMismatch", fmt.Sprintf("protocol %s does not match cidrBlock %q (%s); set protocol to %s or fix cidrBlock", s.Spec.Protocol, s.Spec.CIDRBlock, have, have)}
	}
	return cfg, s, nil
}

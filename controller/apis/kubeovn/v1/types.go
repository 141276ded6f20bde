// Package v1 holds the Kube-OVN compatible Subnet type (subnets.kubeovn.io/v1)
// and its validation. The CRD itself is packaging/kubernetes/base/crd-subnets.yaml.
// Objects are read through the dynamic client and converted with FromUnstructured.
package v1

import (
	"fmt"
	"net/netip"
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
	IPGVR        = GroupVersion.WithResource("ips")
)

// Subnet is a Kube-OVN subnet.
type Subnet struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              SubnetSpec   `json:"spec"`
	Status            SubnetStatus `json:"status,omitempty"`
}

// SubnetSpec has every field of Kube-OVN's v1 Subnet spec, with its names
// and meanings (fields of Kube-OVN 1.10 to 1.15, the ones it dropped since
// included, so a Subnet any of them stored reads back). Which of them
// ovnhost applies, accepts without applying (and what that means), or
// refuses is the table in fields.go; controller/README.md lists it.
type SubnetSpec struct {
	Default    bool     `json:"default,omitempty"`
	Vpc        string   `json:"vpc,omitempty"`
	Protocol   string   `json:"protocol,omitempty"` // IPv4, IPv6, Dual
	Namespaces []string `json:"namespaces,omitempty"`
	CIDRBlock  string   `json:"cidrBlock"`
	Gateway    string   `json:"gateway,omitempty"`
	ExcludeIps []string `json:"excludeIps,omitempty"`
	Provider   string   `json:"provider,omitempty"`

	GatewayType          string                 `json:"gatewayType,omitempty"` // distributed, centralized
	GatewayNode          string                 `json:"gatewayNode,omitempty"`
	GatewayNodeSelectors []metav1.LabelSelector `json:"gatewayNodeSelectors,omitempty"`
	NatOutgoing          bool                   `json:"natOutgoing,omitempty"`

	ExternalEgressGateway string `json:"externalEgressGateway,omitempty"`
	PolicyRoutingPriority uint32 `json:"policyRoutingPriority,omitempty"`
	PolicyRoutingTableID  uint32 `json:"policyRoutingTableID,omitempty"`
	MTU                   int    `json:"mtu,omitempty"`

	Private      bool     `json:"private,omitempty"`
	AllowSubnets []string `json:"allowSubnets,omitempty"`

	Vlan string   `json:"vlan,omitempty"`
	Vips []string `json:"vips,omitempty"`

	LogicalGateway         bool `json:"logicalGateway,omitempty"`
	DisableGatewayCheck    bool `json:"disableGatewayCheck,omitempty"`
	DisableInterConnection bool `json:"disableInterConnection,omitempty"`

	EnableDHCP    bool   `json:"enableDHCP,omitempty"`
	DHCPv4Options string `json:"dhcpV4Options,omitempty"`
	DHCPv6Options string `json:"dhcpV6Options,omitempty"`

	EnableIPv6RA  bool   `json:"enableIPv6RA,omitempty"`
	IPv6RAConfigs string `json:"ipv6RAConfigs,omitempty"`

	Acls           []ACL `json:"acls,omitempty"`
	AllowEWTraffic bool  `json:"allowEWTraffic,omitempty"`

	NatOutgoingPolicyRules []NatOutgoingPolicyRule `json:"natOutgoingPolicyRules,omitempty"`

	U2OInterconnectionIP    string       `json:"u2oInterconnectionIP,omitempty"`
	U2OInterconnection      bool         `json:"u2oInterconnection,omitempty"`
	U2OFeatures             *U2OFeatures `json:"u2oFeatures,omitempty"`
	EnableLb                *bool        `json:"enableLb,omitempty"`
	EnableEcmp              bool         `json:"enableEcmp,omitempty"`
	EnableMulticastSnoop    bool         `json:"enableMulticastSnoop,omitempty"`
	EnableExternalLBAddress bool         `json:"enableExternalLBAddress,omitempty"`

	RouteTable         string                 `json:"routeTable,omitempty"`
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`
	NodeNetwork        string                 `json:"nodeNetwork,omitempty"`

	// Fields older Kube-OVN releases stored (1.9-1.12).
	HtbQos          string `json:"htbqos,omitempty"`
	U2ORouting      bool   `json:"u2oRouting,omitempty"`
	UnderlayGateway bool   `json:"underlayGateway,omitempty"`
}

// ACL is one entry of a Subnet's acls: an OVN ACL on the subnet's switch.
type ACL struct {
	Direction string `json:"direction,omitempty"` // from-lport, to-lport
	Priority  int    `json:"priority,omitempty"`
	Match     string `json:"match,omitempty"`
	Action    string `json:"action,omitempty"` // allow-related, allow-stateless, allow, drop, reject, pass
}

// NatOutgoingPolicyRule is one entry of natOutgoingPolicyRules.
type NatOutgoingPolicyRule struct {
	Match  NatOutgoingPolicyMatch `json:"match"`
	Action string                 `json:"action"`
}

// NatOutgoingPolicyMatch selects traffic for a NatOutgoingPolicyRule.
type NatOutgoingPolicyMatch struct {
	SrcIPs string `json:"srcIPs,omitempty"`
	DstIPs string `json:"dstIPs,omitempty"`
}

// U2OFeatures tunes underlay-to-overlay interconnection.
type U2OFeatures struct {
	OverlayOnlyRouting bool `json:"overlayOnlyRouting,omitempty"`
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

	// The underlay-to-overlay interconnection (u2oInterconnection): the
	// cluster router's address(es) and MAC on the subnet, and its router.
	// The node makes the address its pods' default gateway.
	U2OInterconnectionIP  string `json:"u2oInterconnectionIP,omitempty"`
	U2OInterconnectionMAC string `json:"u2oInterconnectionMAC,omitempty"`
	U2OInterconnectionVPC string `json:"u2oInterconnectionVPC,omitempty"`
}

// FromUnstructured converts a dynamic-client object.
func FromUnstructured(u *unstructured.Unstructured) (*Subnet, error) {
	var s Subnet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		return nil, fmt.Errorf("subnet %q: %w", u.GetName(), err)
	}
	return &s, nil
}

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
		if !slices.Contains(KnownFields, k) {
			unknown = append(unknown, "spec."+k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return ipam.SubnetConfig{}, nil, &Problem{"UnknownField", fmt.Sprintf("unknown field(s) %s; remove them (supported: %s)", strings.Join(unknown, ", "), strings.Join(KnownFields, ", "))}
	}
	s, err := FromUnstructured(u)
	if err != nil {
		return ipam.SubnetConfig{}, nil, &Problem{"InvalidField", err.Error()}
	}
	if unsupported := Unsupported(s.Spec); len(unsupported) > 0 {
		return ipam.SubnetConfig{}, s, &Problem{"UnsupportedField", "ovnhost does not implement " + strings.Join(unsupported, "; ") + "; remove the field(s) to use this subnet"}
	}
	gateway, p := gatewayByFamily(u.GetName(), s.Spec)
	if p != nil {
		return ipam.SubnetConfig{}, s, p
	}
	cfg, err := ipam.ParseSubnet(u.GetName(), s.Spec.CIDRBlock, gateway, s.Spec.ExcludeIps)
	if err != nil {
		msg := err.Error()
		if ie, ok := err.(*ipam.Error); ok {
			msg = ie.Msg
		}
		return ipam.SubnetConfig{}, s, &Problem{"InvalidField", msg}
	}
	for _, a := range s.Spec.AllowSubnets {
		if a = strings.TrimSpace(a); a == "" {
			continue
		}
		if _, err := netip.ParsePrefix(a); err != nil {
			return ipam.SubnetConfig{}, s, &Problem{"InvalidField", fmt.Sprintf("allowSubnets entry %q is not a CIDR; write it as 10.16.0.0/16", a)}
		}
	}
	for i, sel := range s.Spec.NamespaceSelectors {
		if _, err := metav1.LabelSelectorAsSelector(&sel); err != nil {
			return ipam.SubnetConfig{}, s, &Problem{"InvalidField", fmt.Sprintf("namespaceSelectors[%d]: %v", i, err)}
		}
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
	if IsCustomVpc(s.Spec.Vpc) {
		cfg.VPC = s.Spec.Vpc // its own address space: it may overlap other VPCs' subnets
	}
	return cfg, s, nil
}

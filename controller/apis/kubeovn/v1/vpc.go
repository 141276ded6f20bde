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
	"k8s.io/apimachinery/pkg/util/validation"
)

// Vpc GVR and kind (vpcs.kubeovn.io/v1, cluster-scoped; the CRD is
// packaging/kubernetes/base/crd-vpcs.yaml).
var (
	VpcGVR = GroupVersion.WithResource("vpcs")
	VpcGVK = GroupVersion.WithKind("Vpc")
)

// Vpc is a Kube-OVN VPC: one OVN logical router (named as the VPC) and the
// Subnets whose spec.vpc names it.
type Vpc struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              VpcSpec   `json:"spec"`
	Status            VpcStatus `json:"status,omitempty"`
}

// VpcSpec has the fields of Kube-OVN's v1 Vpc spec (1.15), same names.
// What ovnhost does with each is VpcNotApplied and controller/README.md.
type VpcSpec struct {
	DefaultSubnet        string         `json:"defaultSubnet,omitempty"`
	Namespaces           []string       `json:"namespaces,omitempty"`
	StaticRoutes         []*StaticRoute `json:"staticRoutes,omitempty"`
	PolicyRoutes         []*PolicyRoute `json:"policyRoutes,omitempty"`
	VpcPeerings          []*VpcPeering  `json:"vpcPeerings,omitempty"`
	EnableExternal       bool           `json:"enableExternal,omitempty"`
	ExtraExternalSubnets []string       `json:"extraExternalSubnets,omitempty"`
	EnableBfd            bool           `json:"enableBfd,omitempty"`
	BFDPort              *BFDPort       `json:"bfdPort,omitempty"`
	// DynamicRouting is newer than 1.15; read so such an object is not refused.
	DynamicRouting map[string]any `json:"dynamicRouting,omitempty"`
}

// Static route policies (Kube-OVN's spelling).
const (
	PolicySrc = "policySrc"
	PolicyDst = "policyDst"
)

// Policy route actions (OVN's).
const (
	PolicyActionAllow   = "allow"
	PolicyActionDrop    = "drop"
	PolicyActionReroute = "reroute"
)

// StaticRoute is one entry of spec.staticRoutes.
type StaticRoute struct {
	Policy     string `json:"policy,omitempty"`
	CIDR       string `json:"cidr"`
	NextHopIP  string `json:"nextHopIP"`
	ECMPMode   string `json:"ecmpMode,omitempty"`
	BfdID      string `json:"bfdId,omitempty"`
	RouteTable string `json:"routeTable,omitempty"`
}

// PolicyRoute is one entry of spec.policyRoutes.
type PolicyRoute struct {
	Priority  int    `json:"priority,omitempty"`
	Match     string `json:"match,omitempty"`
	Action    string `json:"action,omitempty"`
	NextHopIP string `json:"nextHopIP,omitempty"`
}

// VpcPeering is one entry of spec.vpcPeerings: a link to RemoteVpc's router
// on which this router's port has LocalConnectIP (a CIDR: address/len).
type VpcPeering struct {
	RemoteVpc      string `json:"remoteVpc,omitempty"`
	LocalConnectIP string `json:"localConnectIP,omitempty"`
}

// BFDPort is Kube-OVN's optional BFD router port of the VPC.
type BFDPort struct {
	Enabled      bool                  `json:"enabled"`
	IP           string                `json:"ip,omitempty"`
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
}

// BFDPortStatus is Kube-OVN's status of the BFD port.
type BFDPortStatus struct {
	Name  string   `json:"name,omitempty"`
	IP    string   `json:"ip,omitempty"`
	Nodes []string `json:"nodes,omitempty"`
}

// VpcStatus is Kube-OVN's Vpc status, kept by the controller.
type VpcStatus struct {
	Conditions              []Condition   `json:"conditions,omitempty"`
	Standby                 bool          `json:"standby"`
	Default                 bool          `json:"default"`
	DefaultLogicalSwitch    string        `json:"defaultLogicalSwitch"`
	Router                  string        `json:"router"`
	TCPLoadBalancer         string        `json:"tcpLoadBalancer"`
	UDPLoadBalancer         string        `json:"udpLoadBalancer"`
	SctpLoadBalancer        string        `json:"sctpLoadBalancer"`
	TCPSessionLoadBalancer  string        `json:"tcpSessionLoadBalancer"`
	UDPSessionLoadBalancer  string        `json:"udpSessionLoadBalancer"`
	SctpSessionLoadBalancer string        `json:"sctpSessionLoadBalancer"`
	Subnets                 []string      `json:"subnets"`
	VpcPeerings             []string      `json:"vpcPeerings"`
	EnableExternal          bool          `json:"enableExternal"`
	ExtraExternalSubnets    []string      `json:"extraExternalSubnets"`
	EnableBfd               bool          `json:"enableBfd"`
	BFDPort                 BFDPortStatus `json:"bfdPort"`
}

// VpcKnownFields are the JSON names of every Vpc spec field.
var VpcKnownFields = []string{"defaultSubnet", "namespaces", "staticRoutes", "policyRoutes", "vpcPeerings",
	"enableExternal", "extraExternalSubnets", "enableBfd", "bfdPort", "dynamicRouting"}

// VpcFromUnstructured converts a dynamic-client object.
func VpcFromUnstructured(u *unstructured.Unstructured) (*Vpc, error) {
	var v Vpc
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &v); err != nil {
		return nil, fmt.Errorf("vpc %q: %w", u.GetName(), err)
	}
	return &v, nil
}

// IsCustomVpc: name is a VPC other than the default one ("" is the default).
func IsCustomVpc(name string) bool { return name != "" && name != DefaultVpc }

// ValidateVpc checks a Vpc as stored (unknown fields included): each
// static route, policy route and peering on its own. It returns the
// Vpc and every problem found, each naming the entry, what is wrong and
// the fix. Only an object that cannot be read at all returns a nil Vpc.
// What depends on other objects (a next hop outside the VPC's Subnets, a
// peering to a missing VPC) is the reconciler's to judge.
func ValidateVpc(u *unstructured.Unstructured) (*Vpc, []string) {
	spec, _ := u.Object["spec"].(map[string]any) // read only: no deep copy
	var probs []string
	var unknown []string
	for k := range spec {
		if !slices.Contains(VpcKnownFields, k) {
			unknown = append(unknown, "spec."+k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		probs = append(probs, fmt.Sprintf("unknown field(s) %s; remove them (supported: %s)", strings.Join(unknown, ", "), strings.Join(VpcKnownFields, ", ")))
	}
	v, err := VpcFromUnstructured(u)
	if err != nil {
		return nil, append(probs, err.Error()+"; fix the field's type (see packaging/kubernetes/base/crd-vpcs.yaml)")
	}
	if msgs := validation.IsDNS1123Label(v.Name); len(msgs) > 0 && v.Name != DefaultVpc {
		probs = append(probs, fmt.Sprintf("name %q: %s; the router is named as the VPC, choose a DNS label", v.Name, strings.Join(msgs, ", ")))
	}
	for i, r := range v.Spec.StaticRoutes {
		if p := StaticRouteProblem(r); p != "" {
			probs = append(probs, fmt.Sprintf("spec.staticRoutes[%d]: %s", i, p))
		}
	}
	for i, r := range v.Spec.PolicyRoutes {
		if p := PolicyRouteProblem(r); p != "" {
			probs = append(probs, fmt.Sprintf("spec.policyRoutes[%d]: %s", i, p))
		}
	}
	seen := map[string]bool{}
	for i, pe := range v.Spec.VpcPeerings {
		if p := PeeringProblem(v.Name, pe); p != "" {
			probs = append(probs, fmt.Sprintf("spec.vpcPeerings[%d]: %s", i, p))
		} else if seen[pe.RemoteVpc] {
			probs = append(probs, fmt.Sprintf("spec.vpcPeerings[%d]: remoteVpc %q is peered twice; keep one entry per remote VPC", i, pe.RemoteVpc))
		}
		if pe != nil {
			seen[pe.RemoteVpc] = true
		}
	}
	return v, probs
}

// StaticRouteProblem is what is wrong with one static route ("" if nothing).
func StaticRouteProblem(r *StaticRoute) string {
	if r == nil {
		return "empty entry; remove it"
	}
	if r.Policy != "" && r.Policy != PolicySrc && r.Policy != PolicyDst {
		return fmt.Sprintf("policy %q is not policySrc or policyDst; use one of them (empty: policyDst)", r.Policy)
	}
	c, err := ParseRouteCIDR(r.CIDR)
	if err != nil {
		return fmt.Sprintf("cidr %q is not an address or CIDR; write it as 10.0.1.0/24 or 10.0.1.5", r.CIDR)
	}
	nh, err := netip.ParseAddr(strings.TrimSpace(r.NextHopIP))
	if err != nil {
		return fmt.Sprintf("nextHopIP %q is not an IP address; give the router's next hop, e.g. 10.0.1.254", r.NextHopIP)
	}
	if nh.Is4() != c.Addr().Is4() {
		return fmt.Sprintf("nextHopIP %s and cidr %s are of different IP families; give a next hop of the cidr's family", nh, c)
	}
	return ""
}

// ParseRouteCIDR reads a static route's cidr: a prefix, or one address.
func ParseRouteCIDR(s string) (netip.Prefix, error) {
	s = strings.TrimSpace(s)
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// PolicyRouteProblem is what is wrong with one policy route ("" if nothing).
func PolicyRouteProblem(r *PolicyRoute) string {
	if r == nil {
		return "empty entry; remove it"
	}
	if r.Priority < 0 || r.Priority > 32767 {
		return fmt.Sprintf("priority %d is outside 0..32767; choose a priority in that range", r.Priority)
	}
	if strings.TrimSpace(r.Match) == "" {
		return "match is empty; give an OVN match such as ip4.dst == 10.0.1.0/24"
	}
	switch r.Action {
	case PolicyActionAllow, PolicyActionDrop:
		if r.NextHopIP != "" {
			return fmt.Sprintf("nextHopIP %q is given with action %s; only reroute takes a next hop, remove it or use action reroute", r.NextHopIP, r.Action)
		}
	case PolicyActionReroute:
		for _, s := range strings.Split(r.NextHopIP, ",") {
			if _, err := netip.ParseAddr(strings.TrimSpace(s)); err != nil {
				return fmt.Sprintf("nextHopIP %q is not an IP address; action reroute needs the address to send the traffic to", r.NextHopIP)
			}
		}
	default:
		return fmt.Sprintf("action %q is not allow, drop or reroute; use one of them", r.Action)
	}
	return ""
}

// PeeringProblem is what is wrong with one peering of VPC local ("" if nothing).
func PeeringProblem(local string, p *VpcPeering) string {
	if p == nil {
		return "empty entry; remove it"
	}
	if p.RemoteVpc == "" {
		return "remoteVpc is empty; name the VPC to peer with"
	}
	if p.RemoteVpc == local {
		return fmt.Sprintf("remoteVpc %q is this VPC; name another VPC", p.RemoteVpc)
	}
	if !IsCustomVpc(p.RemoteVpc) {
		return fmt.Sprintf("remoteVpc %q is the default VPC; ovnhost peers custom VPCs only (the default VPC's router carries the cluster's egress), peer two custom VPCs", p.RemoteVpc)
	}
	pf, err := netip.ParsePrefix(strings.TrimSpace(p.LocalConnectIP))
	if err != nil || pf.Bits() == pf.Addr().BitLen() || pf.Addr() == pf.Masked().Addr() {
		return fmt.Sprintf("localConnectIP %q is not an address with its prefix length; write it as 169.254.0.1/30 (the same /30 on both VPCs, one address each)", p.LocalConnectIP)
	}
	return ""
}

// vpcNotApplied: Vpc fields ovnhost accepts but does not program, and
// what that means.
var vpcNotApplied = []struct {
	field       string
	asks        func(VpcSpec) bool
	consequence string
}{
	{"staticRoutes.ecmpMode", func(s VpcSpec) bool {
		return slices.ContainsFunc(s.StaticRoutes, func(r *StaticRoute) bool { return r != nil && r.ECMPMode != "" })
	}, "staticRoutes ecmpMode is not applied: each route is a plain static route (routes of one prefix with several next hops are ECMP as OVN makes them)."},
	{"staticRoutes.bfdId", func(s VpcSpec) bool {
		return slices.ContainsFunc(s.StaticRoutes, func(r *StaticRoute) bool { return r != nil && r.BfdID != "" })
	}, "staticRoutes bfdId is not applied: the route stays whether its next hop answers or not."},
	{"staticRoutes.routeTable", func(s VpcSpec) bool {
		return slices.ContainsFunc(s.StaticRoutes, func(r *StaticRoute) bool { return r != nil && r.RouteTable != "" })
	}, "staticRoutes routeTable is not applied: every route is in the router's main route table."},
	{"extraExternalSubnets", func(s VpcSpec) bool { return len(s.ExtraExternalSubnets) > 0 },
		"extraExternalSubnets is not applied: the VPC's router has no port on those Subnets."},
	{"enableBfd", func(s VpcSpec) bool { return s.EnableBfd },
		"enableBfd is not applied: no BFD sessions watch the VPC's next hops."},
	{"bfdPort", func(s VpcSpec) bool { return s.BFDPort != nil && s.BFDPort.Enabled },
		"bfdPort is not applied: the router gets no BFD port."},
	{"dynamicRouting", func(s VpcSpec) bool { return len(s.DynamicRouting) > 0 },
		"dynamicRouting is not applied: the VPC's routes are not advertised."},
}

// VpcNotAppliedMessage is one sentence per field of spec that ovnhost
// accepts without applying, in a fixed order ("" for none).
func VpcNotAppliedMessage(spec VpcSpec) string {
	var parts []string
	for _, n := range vpcNotApplied {
		if n.asks(spec) {
			parts = append(parts, n.consequence)
		}
	}
	return strings.Join(parts, " ")
}

// Condition returns the Vpc's status condition of that type, or nil.
func (v *Vpc) Condition(typ string) *Condition {
	if v == nil {
		return nil
	}
	for i := range v.Status.Conditions {
		if v.Status.Conditions[i].Type == typ {
			return &v.Status.Conditions[i]
		}
	}
	return nil
}

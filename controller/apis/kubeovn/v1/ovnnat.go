package v1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kube-OVN's OVN-native NAT of custom VPCs (v1.15 field names), all
// cluster-scoped: an OvnEip is an address on the external network, an
// OvnFip, OvnSnatRule or OvnDnatRule uses one on a VPC's router. The CRDs
// are packaging/kubernetes/base/crd-ovn-{eips,fips,snat-rules,dnat-rules}.yaml.
var (
	OvnEipGVR      = GroupVersion.WithResource("ovn-eips")
	OvnEipGVK      = GroupVersion.WithKind("OvnEip")
	OvnFipGVR      = GroupVersion.WithResource("ovn-fips")
	OvnFipGVK      = GroupVersion.WithKind("OvnFip")
	OvnSnatRuleGVR = GroupVersion.WithResource("ovn-snat-rules")
	OvnSnatRuleGVK = GroupVersion.WithKind("OvnSnatRule")
	OvnDnatRuleGVR = GroupVersion.WithResource("ovn-dnat-rules")
	OvnDnatRuleGVK = GroupVersion.WithKind("OvnDnatRule")
)

// OvnEip types (spec.type): an address for NAT rules, or a VPC's own
// gateway port address (lrp; Kube-OVN's "lsp" is a BFD next hop).
const (
	OvnEipTypeNAT = "nat"
	OvnEipTypeLRP = "lrp"
	OvnEipTypeLSP = "lsp"
)

// OvnEip is an address on an external network.
type OvnEip struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              OvnEipSpec   `json:"spec"`
	Status            OvnEipStatus `json:"status"`
}

type OvnEipSpec struct {
	ExternalSubnet string `json:"externalSubnet"`
	V4Ip           string `json:"v4Ip"`
	V6Ip           string `json:"v6Ip"`
	MacAddress     string `json:"macAddress"`
	Type           string `json:"type"`
}

type OvnEipStatus struct {
	Conditions []Condition `json:"conditions,omitempty"`
	Type       string      `json:"type"`
	Nat        string      `json:"nat"`
	Ready      bool        `json:"ready"`
	V4Ip       string      `json:"v4Ip"`
	V6Ip       string      `json:"v6Ip"`
	MacAddress string      `json:"macAddress"`
}

// OvnFip is a one-to-one NAT (dnat_and_snat) of an OvnEip to an address
// of a VPC: the IP object ipName's (ipType ip) or v4Ip in vpc.
type OvnFip struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              OvnFipSpec   `json:"spec"`
	Status            OvnFipStatus `json:"status"`
}

type OvnFipSpec struct {
	OvnEip string `json:"ovnEip"`
	IPType string `json:"ipType"`
	IPName string `json:"ipName"`
	Vpc    string `json:"vpc"`
	V4Ip   string `json:"v4Ip"`
	V6Ip   string `json:"v6Ip"`
	Type   string `json:"type"`
}

type OvnFipStatus struct {
	Vpc        string      `json:"vpc"`
	V4Eip      string      `json:"v4Eip"`
	V6Eip      string      `json:"v6Eip"`
	V4Ip       string      `json:"v4Ip"`
	V6Ip       string      `json:"v6Ip"`
	Ready      bool        `json:"ready"`
	Conditions []Condition `json:"conditions,omitempty"`
}

// OvnSnatRule makes a VPC Subnet (vpcSubnet), an IP object's address
// (ipName) or v4IpCidr in vpc leave from an OvnEip.
type OvnSnatRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              OvnSnatRuleSpec   `json:"spec"`
	Status            OvnSnatRuleStatus `json:"status"`
}

type OvnSnatRuleSpec struct {
	OvnEip    string `json:"ovnEip"`
	VpcSubnet string `json:"vpcSubnet"`
	IPName    string `json:"ipName"`
	Vpc       string `json:"vpc"`
	V4IpCidr  string `json:"v4IpCidr"`
}

type OvnSnatRuleStatus struct {
	Vpc        string      `json:"vpc"`
	V4Eip      string      `json:"v4Eip"`
	V4IpCidr   string      `json:"v4IpCidr"`
	Ready      bool        `json:"ready"`
	Conditions []Condition `json:"conditions,omitempty"`
}

// OvnDnatRule forwards a port of an OvnEip to a port of a VPC address.
type OvnDnatRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              OvnDnatRuleSpec   `json:"spec"`
	Status            OvnDnatRuleStatus `json:"status"`
}

type OvnDnatRuleSpec struct {
	OvnEip           string `json:"ovnEip"`
	IPType           string `json:"ipType"`
	IPName           string `json:"ipName"`
	InternalPort     string `json:"internalPort"`
	ExternalPort     string `json:"externalPort"`
	Protocol         string `json:"protocol,omitempty"`
	Vpc              string `json:"vpc"`
	V4Ip             string `json:"v4Ip"`
	V6Ip             string `json:"v6Ip"`
	ServiceName      string `json:"serviceName,omitempty"`
	ServiceNamespace string `json:"serviceNamespace,omitempty"`
}

type OvnDnatRuleStatus struct {
	Vpc          string      `json:"vpc"`
	V4Eip        string      `json:"v4Eip"`
	V6Eip        string      `json:"v6Eip"`
	ExternalPort string      `json:"externalPort"`
	V4Ip         string      `json:"v4Ip"`
	V6Ip         string      `json:"v6Ip"`
	InternalPort string      `json:"internalPort"`
	Protocol     string      `json:"protocol,omitempty"`
	IPName       string      `json:"ipName"`
	Ready        bool        `json:"ready"`
	Conditions   []Condition `json:"conditions,omitempty"`
}

// ConvertUnstructured reads a dynamic-client object into out (one of the
// types above).
func ConvertUnstructured(u *unstructured.Unstructured, out any) error {
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, out); err != nil {
		return fmt.Errorf("%s %q: %w", u.GetKind(), u.GetName(), err)
	}
	return nil
}

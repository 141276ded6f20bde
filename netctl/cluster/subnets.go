// Package cluster is the Kubernetes side of netctl's cluster commands:
// Subnets with their usage, pod addresses from the controller's
// annotations, one pod's wiring, and the cluster checks of `netctl
// diagnose`. It works on objects already read, so it is tested without an
// API server; netctl/cli does the reading.
package cluster

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
)

// SubnetInfo is one Subnet as netctl shows it.
type SubnetInfo struct {
	Name        string   `json:"name"`
	Default     bool     `json:"default"`
	Protocol    string   `json:"protocol"`
	CIDR        string   `json:"cidrBlock"`
	Gateway     string   `json:"gateway"`
	GatewayType string   `json:"gatewayType"`
	GatewayNode string   `json:"gatewayNode,omitempty"`
	ActiveGW    string   `json:"activateGateway,omitempty"`
	NatOutgoing bool     `json:"natOutgoing"`
	Namespaces  []string `json:"namespaces,omitempty"`
	// NamespaceSelectors are spec.namespaceSelectors as label selector strings.
	NamespaceSelectors []string `json:"namespaceSelectors,omitempty"`
	Private            bool     `json:"private,omitempty"`
	ExcludeIPs         []string `json:"excludeIps,omitempty"`
	MTU                int      `json:"mtu,omitempty"`
	Used               float64  `json:"usingIPs"`
	Available          float64  `json:"availableIPs"`
	UsedRange          string   `json:"usingIPrange,omitempty"`
	Usage              float64  `json:"usagePercent"` // used / (used + available) * 100
	// Underlay: spec.vlan, logicalGateway, and the interconnection
	// address the controller wrote (status.u2oInterconnectionIP).
	Vlan           string                `json:"vlan,omitempty"`
	LogicalGateway bool                  `json:"logicalGateway,omitempty"`
	U2OIP          string                `json:"u2oInterconnectionIP,omitempty"`
	Ready          string                `json:"ready"` // status of the Ready condition, "Unknown" without one
	Conditions     []kubeovnv1.Condition `json:"conditions,omitempty"`
}

// Subnet turns a stored Subnet into what netctl shows.
func Subnet(u *unstructured.Unstructured) (*SubnetInfo, error) {
	s, err := kubeovnv1.FromUnstructured(u)
	if err != nil {
		return nil, err
	}
	i := &SubnetInfo{Name: s.Name, Default: s.Spec.Default, Protocol: s.Spec.Protocol, CIDR: s.Spec.CIDRBlock,
		Gateway: s.Spec.Gateway, GatewayType: s.Spec.GatewayType, GatewayNode: s.Spec.GatewayNode,
		ActiveGW: s.Status.ActivateGateway, NatOutgoing: s.Spec.NatOutgoing, Namespaces: s.Spec.Namespaces,
		ExcludeIPs: s.Spec.ExcludeIps, MTU: s.Spec.MTU, Private: s.Spec.Private,
		Used:      s.Status.V4UsingIPs + s.Status.V6UsingIPs,
		Available: s.Status.V4AvailableIPs + s.Status.V6AvailableIPs,
		UsedRange: joinNonEmpty(",", s.Status.V4UsingIPRange, s.Status.V6UsingIPRange),
		Ready:     "Unknown", Conditions: s.Status.Conditions,
		Vlan: s.Spec.Vlan, LogicalGateway: s.Spec.LogicalGateway, U2OIP: s.Status.U2OInterconnectionIP}
	if !s.Spec.U2OInterconnection {
		i.U2OIP = ""
	}
	for j := range s.Spec.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&s.Spec.NamespaceSelectors[j])
		str := "(invalid selector)"
		if err == nil {
			str = sel.String()
		}
		i.NamespaceSelectors = append(i.NamespaceSelectors, str)
	}
	if i.Gateway == "" {
		i.Gateway = defaultGateway(i.CIDR)
	}
	if i.GatewayType == "" {
		i.GatewayType = "distributed"
	}
	if i.Protocol == "" {
		i.Protocol = "IPv4"
	}
	if total := i.Used + i.Available; total > 0 {
		i.Usage = 100 * i.Used / total
	}
	if c := s.Condition(kubeovnv1.Ready); c != nil {
		i.Ready = c.Status
	}
	return i, nil
}

// Subnets converts and sorts by name; an object that does not convert is
// named in the error.
func Subnets(items []unstructured.Unstructured) ([]*SubnetInfo, error) {
	var out []*SubnetInfo
	for i := range items {
		s, err := Subnet(&items[i])
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, nil
}

// Problem is the first unhealthy condition of the subnet ("" when none):
// Validated=False, Ready=False or Error=True, with its reason and message.
func (s *SubnetInfo) Problem() string {
	for _, c := range s.Conditions {
		bad := (c.Type == kubeovnv1.Validated || c.Type == kubeovnv1.Ready) && c.Status == "False" ||
			c.Type == kubeovnv1.Error && c.Status == "True"
		if bad && c.Reason != "ValidationFailed" {
			return fmt.Sprintf("%s=%s %s: %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	return ""
}

// UsageString is "used/total (pct%)".
func (s *SubnetInfo) UsageString() string {
	total := s.Used + s.Available
	return fmt.Sprintf("%s/%s (%.0f%%)", num(s.Used), num(total), s.Usage)
}

// defaultGateway is the first address of each CIDR, what the controller
// uses when spec.gateway is empty.
func defaultGateway(cidrs string) string {
	var gws []string
	for _, c := range strings.Split(cidrs, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			continue
		}
		gws = append(gws, p.Masked().Addr().Next().String())
	}
	return strings.Join(gws, ",")
}

func num(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}

// PodIP is one pod address as the controller annotated it.
type PodIP struct {
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	IP        string `json:"ip"`
	MAC       string `json:"mac"`
	Subnet    string `json:"subnet"`
	CIDR      string `json:"cidr"`
	Gateway   string `json:"gateway"`
	Node      string `json:"node"`
	Allocated bool   `json:"allocated"`
	Routed    bool   `json:"routed"`
}

// IPs lists the addresses of the pods that have one (allocated by the
// controller), sorted by namespace and pod. Host-network pods have none.
func IPs(pods []corev1.Pod) []PodIP {
	var out []PodIP
	for _, p := range pods {
		a := p.Annotations
		if p.Spec.HostNetwork || a[annotations.IPAddress] == "" || a[annotations.Allocated] != "true" {
			continue
		}
		for _, ip := range strings.Split(a[annotations.IPAddress], ",") {
			out = append(out, PodIP{Namespace: p.Namespace, Pod: p.Name, IP: strings.TrimSpace(ip), MAC: a[annotations.MACAddress],
				Subnet: a[annotations.LogicalSwitch], CIDR: a[annotations.CIDR], Gateway: a[annotations.Gateway],
				Node: p.Spec.NodeName, Allocated: true, Routed: a[annotations.Routed] == "true"})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		if out[i].Pod != out[j].Pod {
			return out[i].Pod < out[j].Pod
		}
		return out[i].IP < out[j].IP
	})
	return out
}

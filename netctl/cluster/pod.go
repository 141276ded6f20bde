package cluster

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// PodInfo is one pod's wiring: what Kubernetes knows (annotations, node)
// and, when its node answers, what OVS and OVN hold for it.
type PodInfo struct {
	Namespace   string `json:"namespace"`
	Name        string `json:"name"`
	Node        string `json:"node"`
	HostNetwork bool   `json:"hostNetwork,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Chassis     string `json:"chassis,omitempty"` // the node's OVS system-id (node annotation)
	LSP         string `json:"logicalSwitchPort"` // <pod>.<namespace>
	Subnet      string `json:"subnet,omitempty"`
	IP          string `json:"ip,omitempty"`
	MAC         string `json:"mac,omitempty"`
	CIDR        string `json:"cidr,omitempty"`
	Gateway     string `json:"gateway,omitempty"`
	Allocated   bool   `json:"allocated"`
	Routed      bool   `json:"routed"`
	// Vpc is the VPC of the pod's Subnet (filled where the Subnet was read).
	Vpc    string `json:"vpc,omitempty"`
	Router string `json:"logicalRouter,omitempty"` // the controller's logical_router annotation
	// Attachments are the pod's attachment networks (net1 ...).
	Attachments []*Attachment `json:"attachments,omitempty"`
	IngressRate string        `json:"ingressRate,omitempty"` // Mbit/s, from the pod annotation
	EgressRate  string        `json:"egressRate,omitempty"`

	// From the pod's node (its API), when it answered.
	OVS   *OVSPort `json:"ovsPort,omitempty"`
	Bound string   `json:"boundChassis,omitempty"` // SB Port_Binding chassis name
	// NodeError says why the node-side fields are missing.
	NodeError string `json:"nodeError,omitempty"`
}

// OVSPort is the pod's interface in the node's conf.db.
type OVSPort struct {
	Interface    string            `json:"interface"`
	OFPort       int               `json:"ofport"`
	OVNInstalled bool              `json:"ovnInstalled"`
	Ingress      int               `json:"ingressPolicingRateKbps,omitempty"`
	IngressBurst int               `json:"ingressPolicingBurstKb,omitempty"`
	QoS          map[string]string `json:"qos,omitempty"` // QoS row other_config (egress max-rate)
	ExternalIDs  map[string]string `json:"externalIDs,omitempty"`
	Error        string            `json:"error,omitempty"`
}

// Pod fills the Kubernetes side of a PodInfo from the pod and its node (nil
// when not scheduled or not found).
func Pod(p *corev1.Pod, n *corev1.Node) *PodInfo {
	a := p.Annotations
	i := &PodInfo{Namespace: p.Namespace, Name: p.Name, Node: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork,
		Phase: string(p.Status.Phase), LSP: p.Name + "." + p.Namespace, Subnet: a[annotations.LogicalSwitch],
		IP: a[annotations.IPAddress], MAC: a[annotations.MACAddress], CIDR: a[annotations.CIDR], Gateway: a[annotations.Gateway],
		Allocated: a[annotations.Allocated] == "true", Routed: a[annotations.Routed] == "true",
		IngressRate: a[annotations.IngressRate], EgressRate: a[annotations.EgressRate], Router: a[annotations.LogicalRouter]}
	if n != nil {
		i.Chassis = n.Annotations[annotations.Chassis]
	}
	return i
}

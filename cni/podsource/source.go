// Package podsource tells the CNI server a pod's network and the node's:
// from the controller's annotations through node-local informers
// (Kubernetes: Kube, with the trust rules of trust.go), or allocated
// in-process with the controller's IPAM and northbound libraries
// (standalone hosts: Standalone). It also publishes the node's view of the
// Subnets (subnets.go): the pod CIDRs ovn0 routes and the EgressPlan the
// host's NAT applies.
package podsource

import (
	"context"
	"net"
	"net/netip"
)

// PodRef names the pod of a CNI request.
type PodRef struct {
	Namespace, Name string
	ContainerID     string
	// Annotations are the user's requests in standalone mode (from CNI_ARGS
	// or the conflist's "args"); ignored in Kubernetes mode.
	Annotations map[string]string
}

// Key is "namespace/name".
func (r PodRef) Key() string { return r.Namespace + "/" + r.Name }

// LSP is the logical switch port name, "<pod>.<namespace>".
func (r PodRef) LSP() string { return r.Name + "." + r.Namespace }

// Source tells the server a pod's network.
type Source interface {
	// PodNetwork returns the pod's network, waiting (event-driven) until it
	// is known or ctx ends.
	PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error)
	// Release is called at DEL and after a failed ADD; standalone frees the
	// address and deletes the logical switch port.
	Release(ctx context.Context, ref PodRef) error
	// NodeNetwork returns the node port's network (ovn0), waiting for it.
	NodeNetwork(ctx context.Context) (*NodeNetwork, error)
	// Kubernetes says whether pods come from the API server (the runtime
	// must then name the pod: K8S_POD_NAMESPACE, K8S_POD_NAME).
	Kubernetes() bool
	Start(ctx context.Context) error
	Stop()
}

// NodeNetwork is ovn0's configuration and the pod CIDRs routed through it.
type NodeNetwork struct {
	PortName string // node-<name>
	Addr     netip.Prefix
	Gateway  netip.Addr
	MAC      net.HardwareAddr
	PodCIDRs []netip.Prefix
	// Egress is what the node masquerades (nil: this source does not say).
	Egress *EgressPlan
}

// EgressPlan is the host side of pod egress: traffic from NATOutgoing
// subnets to anything outside Cluster leaves masqueraded to the node.
type EgressPlan struct {
	NATOutgoing []netip.Prefix
	Cluster     []netip.Prefix
	// Gateways are the centralized subnets this node is a gateway of (subnets.go).
	Gateways []GatewayPlan
}

// AnnotationTimeout is returned when the controller did not annotate (or
// the API server did not answer) in time: the runtime tries again.
type AnnotationTimeout struct{ Msg string }

func (e *AnnotationTimeout) Error() string { return e.Msg }

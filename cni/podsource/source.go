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
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// PodRef names the pod of a CNI request.
type PodRef struct {
	Namespace, Name string
	ContainerID     string
	// Annotations are the user's requests in standalone mode (from CNI_ARGS
	// or the conflist's "args"); ignored in Kubernetes mode.
	Annotations map[string]string
	// Provider is the attachment network ("<nad>.<namespace>.ovn") the
	// interface is on; "" for the pod's default network.
	Provider string
}

// Key is "namespace/name".
func (r PodRef) Key() string { return r.Namespace + "/" + r.Name }

// LSP is the logical switch port name: "<pod>.<namespace>" for the
// default network, "<pod>.<namespace>.<provider>" for an attachment.
func (r PodRef) LSP() string {
	if r.Provider != "" {
		return ovnnet.AttachmentPortName(r.Namespace, r.Name, r.Provider)
	}
	return r.Name + "." + r.Namespace
}

// VMPort is the logical switch port of the virtual machine the pod runs
// (KubeVirt), from the annotation the controller confirmed: "<vm>.<namespace>",
// whichever pod runs the VM; "" for other pods and for attachment networks.
func (r PodRef) VMPort(ann map[string]string) (string, error) {
	vm := ann[annotations.VirtualMachine]
	if vm == "" || r.Provider != "" {
		return "", nil
	}
	if errs := validation.IsDNS1123Subdomain(vm); len(errs) > 0 {
		return "", &AnnotationError{annotations.VirtualMachine, vm, "not a virtual machine name: " + strings.Join(errs, "; ")}
	}
	return ovnnet.PortName(r.Namespace, vm), nil
}

// AnnotationKey is the pod annotation of key ("ip_address", ...) for the
// network of r: "ovn.kubernetes.io/<key>" or "<provider>.kubernetes.io/<key>".
func (r PodRef) AnnotationKey(key string) string {
	if r.Provider != "" {
		return annotations.ProviderKey(r.Provider, key)
	}
	return annotations.Prefix + key
}

// Network names the network for messages: "" for the default network,
// "attachment network <provider>" otherwise.
func (r PodRef) Network() string {
	if r.Provider != "" {
		return "attachment network " + r.Provider
	}
	return ""
}

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
	// Addrs are ovn0's addresses on the join subnet, one per family of a
	// dual-stack join subnet; Gateways the join gateways, in the same
	// order.
	Addrs    []netip.Prefix
	Gateways []netip.Addr
	MAC      net.HardwareAddr
	PodCIDRs []netip.Prefix
	// Egress is what the node masquerades (nil: this source does not say).
	Egress *EgressPlan
}

// Joins are the join subnet's CIDRs (ovn0's addresses, masked).
func (n *NodeNetwork) Joins() []netip.Prefix {
	out := make([]netip.Prefix, len(n.Addrs))
	for i, a := range n.Addrs {
		out[i] = a.Masked()
	}
	return out
}

// GatewayOf is the join gateway of the family of p (false: the join
// subnet has none in that family).
func (n *NodeNetwork) GatewayOf(p netip.Prefix) (netip.Addr, bool) {
	for _, g := range n.Gateways {
		if g.Is4() == p.Addr().Is4() {
			return g, true
		}
	}
	return netip.Addr{}, false
}

// nodeNetwork pairs ovn0's addresses, the join CIDRs and the gateways of
// the controller's (or standalone IPAM's) comma-separated lists, one
// entry per family, checking each triple is of one family.
func nodeNetwork(ips, cidrs, gateways string) ([]netip.Prefix, []netip.Addr, error) {
	is, cs, gs := strings.Split(ips, ","), strings.Split(cidrs, ","), strings.Split(gateways, ",")
	if len(is) != len(cs) || len(is) != len(gs) || len(is) > 2 {
		return nil, nil, fmt.Errorf("ip_address %q, cidr %q and gateway %q do not pair up (one entry per family, at most two)", ips, cidrs, gateways)
	}
	var addrs []netip.Prefix
	var gws []netip.Addr
	for i := range is {
		ip, err := netip.ParseAddr(strings.TrimSpace(is[i]))
		if err != nil {
			return nil, nil, err
		}
		c, err := netip.ParsePrefix(strings.TrimSpace(cs[i]))
		if err != nil {
			return nil, nil, err
		}
		gw, err := netip.ParseAddr(strings.TrimSpace(gs[i]))
		if err != nil {
			return nil, nil, err
		}
		if !c.Contains(ip) || !c.Contains(gw) {
			return nil, nil, fmt.Errorf("address %s or gateway %s is not in %s", ip, gw, c)
		}
		if slices.ContainsFunc(addrs, func(a netip.Prefix) bool { return a.Addr().Is4() == ip.Is4() }) {
			return nil, nil, fmt.Errorf("ip_address %q has two addresses of one family", ips)
		}
		addrs, gws = append(addrs, netip.PrefixFrom(ip, c.Bits())), append(gws, gw)
	}
	return addrs, gws, nil
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

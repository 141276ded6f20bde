package podsource

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// The node reads Subnets (kubeovn.io/v1) for the host side of egress: which
// CIDRs are the cluster's and which of them ask for natOutgoing. Only
// Subnets the controller has validated count: a Subnet's spec alone is
// not trusted to rewrite the node's NAT.
var SubnetGVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}

const subnetsKey = "subnets"

// startSubnets follows the Subnets: through the shared informer it was
// given (its owner runs it), else through one of its own built on dyn.
func (k *Kube) startSubnets() error {
	if k.subnets == nil {
		k.subnetFac = dynamicinformer.NewDynamicSharedInformerFactory(k.dyn, 0)
		k.subnets = k.subnetFac.ForResource(SubnetGVR).Informer()
	}
	reg, err := k.subnets.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.signal(subnetsKey) },
		UpdateFunc: func(any, any) { k.signal(subnetsKey) },
		DeleteFunc: func(any) { k.signal(subnetsKey) },
	})
	if err != nil {
		return err
	}
	k.subnetReg = reg
	if k.subnetFac != nil {
		k.subnetFac.Start(k.stop)
	}
	return nil
}

// egressPlan is what the host masquerades, from the validated Subnets
// (nil without a Subnet informer: the host's NAT is left alone).
func (k *Kube) egressPlan(join []netip.Prefix) *EgressPlan {
	if k.subnets == nil {
		return nil
	}
	plan := &EgressPlan{Cluster: slices.Concat(k.serviceCIDRs, join)}
	for _, obj := range k.subnets.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		cidrs, nat, ok := subnetEgress(u)
		if !ok {
			continue
		}
		plan.Cluster = append(plan.Cluster, cidrs...)
		if nat {
			plan.NATOutgoing = append(plan.NATOutgoing, cidrs...)
		}
		if g, ok := gatewayPlan(u, k.node, cidrs, nat); ok {
			plan.Gateways = append(plan.Gateways, g)
		}
	}
	sort.Slice(plan.Gateways, func(i, j int) bool { return plan.Gateways[i].Subnet < plan.Gateways[j].Subnet })
	sortPrefixes(plan.Cluster)
	sortPrefixes(plan.NATOutgoing)
	return plan
}

// subnetEgress reads a Subnet's CIDRs and natOutgoing; ok is false unless
// the controller marked it Validated.
func subnetEgress(u *unstructured.Unstructured) (cidrs []netip.Prefix, natOutgoing, ok bool) {
	if !subnetValidated(u) || physicalGateway(u) {
		// An underlay subnet with a physical gateway: its pods' traffic
		// never crosses the host, and overlay pods reach them as any
		// address outside the cluster (masqueraded by their node).
		return nil, false, false
	}
	if customVpc(u) {
		// Another VPC's address space (it may overlap the default VPC's):
		// its pods never leave through the host, and for the default
		// VPC's pods it is not the cluster's.
		return nil, false, false
	}
	cidrs = subnetCIDRs(u)
	// An interconnected underlay subnet's traffic out of the cluster
	// leaves on its physical network, never through the host.
	natOutgoing, _, _ = unstructured.NestedBool(u.Object, "spec", "natOutgoing")
	return cidrs, natOutgoing && !interconnected(u), len(cidrs) > 0
}

// GatewayPlan is the host side of a centralized subnet on one of its
// gateway nodes: the host end of the transit network (on the gateway
// bridge), routes back to the subnet through it, and the masquerade (to
// EgressIP when gatewayNode gives one for this node).
type GatewayPlan struct {
	Subnet string
	CIDRs  []netip.Prefix // those of a family Transit has
	// Transit is the router side of each family's transit network
	// (ovnnet.TransitAnnotation, TransitAnnotation6).
	Transit     ovnnet.Transit
	EgressIP    netip.Addr // invalid: the node's own address
	NATOutgoing bool
}

// gatewayPlan: ok when the controller has programmed u as a centralized
// subnet (its transit annotations) and its gatewayNode lists node.
func gatewayPlan(u *unstructured.Unstructured, node string, cidrs []netip.Prefix, nat bool) (GatewayPlan, bool) {
	typ, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayType")
	gw, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayNode")
	if typ != "centralized" {
		return GatewayPlan{}, false
	}
	var transit ovnnet.Transit
	if p, err := netip.ParsePrefix(u.GetAnnotations()[ovnnet.TransitAnnotation]); err == nil && p.Addr().Is4() {
		transit.V4 = p
	}
	if p, err := netip.ParsePrefix(u.GetAnnotations()[ovnnet.TransitAnnotation6]); err == nil && p.Addr().Is6() && !p.Addr().Is4In6() {
		transit.V6 = p
	}
	specs, err := ovnnet.ParseGatewayNode(gw)
	if err != nil {
		return GatewayPlan{}, false
	}
	for _, s := range specs {
		if s.Node != node {
			continue
		}
		g := GatewayPlan{Subnet: u.GetName(), Transit: transit, EgressIP: s.EgressIP, NATOutgoing: nat}
		for _, c := range cidrs {
			if (c.Addr().Is4() && transit.V4.IsValid()) || (c.Addr().Is6() && transit.V6.IsValid()) {
				g.CIDRs = append(g.CIDRs, c)
			}
		}
		return g, len(g.CIDRs) > 0
	}
	return GatewayPlan{}, false
}

func sortPrefixes(ps []netip.Prefix) {
	sort.Slice(ps, func(i, j int) bool { return ps[i].String() < ps[j].String() })
}

// routedCIDRs are what ovn0 routes through the join gateway: the CIDRs of
// every Subnet of the default VPC that the controller validated, read from
// the Subnet objects (never from pod annotations, never a built-in
// default), except join itself (ovn0 is on it), underlay (vlan) and
// non-OVN provider subnets, and anything as wide as a default route.
// Without a Subnet informer nothing is routed.
func (k *Kube) routedCIDRs(join []netip.Prefix) []netip.Prefix {
	if k.subnets == nil {
		return nil
	}
	seen := map[netip.Prefix]bool{}
	var out []netip.Prefix
	for _, obj := range k.subnets.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || !subnetValidated(u) || !routedThroughJoin(u) {
			continue
		}
		for _, c := range subnetCIDRs(u) {
			if c.Bits() == 0 || slices.ContainsFunc(join, c.Overlaps) || seen[c] {
				if c.Bits() == 0 {
					k.log.Warn("a validated Subnet covers the whole address space; not routing it through ovn0", "subnet", u.GetName(), "cidr", c)
				}
				continue
			}
			seen[c] = true
			out = append(out, c)
		}
	}
	sortPrefixes(out)
	return out
}

// routedThroughJoin: a Subnet of the default VPC on OVN's overlay.
func routedThroughJoin(u *unstructured.Unstructured) bool {
	if u.GetName() == ovnnet.JoinSubnet {
		return false
	}
	vlan, _, _ := unstructured.NestedString(u.Object, "spec", "vlan")
	provider, _, _ := unstructured.NestedString(u.Object, "spec", "provider")
	if customVpc(u) {
		return false
	}
	if provider != "" && provider != "ovn" && !strings.HasSuffix(provider, ".ovn") {
		return false
	}
	return vlan == ""
}

// customVpc: a Subnet of a VPC other than the default one.
func customVpc(u *unstructured.Unstructured) bool {
	vpc, _, _ := unstructured.NestedString(u.Object, "spec", "vpc")
	return vpc != "" && vpc != ovnnet.DefaultRouter
}

// physicalGateway: an underlay (vlan) Subnet whose gateway is a router of
// its physical network, not the cluster router (no logicalGateway), and
// not interconnected with the overlay either.
func physicalGateway(u *unstructured.Unstructured) bool {
	vlan, _, _ := unstructured.NestedString(u.Object, "spec", "vlan")
	logical, _, _ := unstructured.NestedBool(u.Object, "spec", "logicalGateway")
	return vlan != "" && !logical && !interconnected(u)
}

func subnetValidated(u *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Validated" && m["status"] == "True" {
			return true
		}
	}
	return false
}

func subnetCIDRs(u *unstructured.Unstructured) []netip.Prefix {
	block, _, _ := unstructured.NestedString(u.Object, "spec", "cidrBlock")
	var out []netip.Prefix
	for _, s := range strings.Split(block, ",") {
		if p, err := netip.ParsePrefix(strings.TrimSpace(s)); err == nil {
			out = append(out, p.Masked())
		}
	}
	return out
}

// checkAgainstSubnet compares a pod's cidr and gateway with the validated
// Subnet of its logical switch (OVN's, once matchOVN agreed with the
// annotation): the Subnet is admin-owned, the annotations are not. It
// returns what is awaited ("" when they agree or when the node has no
// Subnet informer) or the mismatch that refuses the pod.
func (k *Kube) checkAgainstSubnet(ref PodRef, ann map[string]string, n *PodNetwork) (string, *MismatchError) {
	if k.subnets == nil || n.Switch == "" {
		return "", nil
	}
	obj, ok, _ := k.subnets.GetStore().GetByKey(n.Switch)
	u, _ := obj.(*unstructured.Unstructured)
	if !ok || u == nil || !subnetValidated(u) {
		return fmt.Sprintf("Subnet %q (the pod's logical switch) is not known to this node as validated yet", n.Switch), nil
	}
	where := fmt.Sprintf("Subnet %s (the admin-owned Subnet of the pod's logical switch)", n.Switch)
	mm := func(field, want string) *MismatchError {
		return &MismatchError{Pod: ref.Key(), Field: field, Annotation: ann[field], OVN: want, Source: where}
	}
	// The Subnet is the network the interface asked for: an attachment's
	// has that provider, the default network's none of an attachment.
	provider, _, _ := unstructured.NestedString(u.Object, "spec", "provider")
	switch {
	case ref.Provider != "" && provider != ref.Provider:
		return "", mm(annotations.LogicalSwitch, fmt.Sprintf("a Subnet of provider %q, not of %s", provider, ref.Provider))
	case ref.Provider == "" && annotations.IsAttachmentProvider(provider):
		return "", mm(annotations.LogicalSwitch, fmt.Sprintf("the attachment network of provider %q, which is no pod's default network", provider))
	}
	block, _, _ := unstructured.NestedString(u.Object, "spec", "cidrBlock")
	cidrs := subnetCIDRs(u)
	for _, a := range n.Addrs {
		if !slices.Contains(cidrs, a.Masked()) {
			return "", mm(annotations.CIDR, "cidrBlock "+block)
		}
	}
	if gw, _, _ := unstructured.NestedString(u.Object, "spec", "gateway"); gw != "" {
		var want []netip.Addr
		for _, s := range strings.Split(gw, ",") {
			if g, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
				want = append(want, g.Unmap())
			}
		}
		for _, g := range n.Gateways {
			if !slices.Contains(want, g) {
				return "", mm(annotations.Gateway, "gateway "+gw)
			}
		}
	}
	if interconnected(u) {
		// The pod's default gateway is the cluster router's port on the
		// subnet, from the status the controller writes (Kube-OVN's
		// u2oInterconnectionIP): overlay and Services are reached through
		// it, the rest is passed on to the physical gateway.
		ip, _, _ := unstructured.NestedString(u.Object, "status", "u2oInterconnectionIP")
		var u2o []netip.Addr
		for _, s := range strings.Split(ip, ",") {
			if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil {
				u2o = append(u2o, a.Unmap())
			}
		}
		if len(u2o) == 0 {
			return fmt.Sprintf("Subnet %q asks for u2oInterconnection; its status has no u2oInterconnectionIP from the controller yet", n.Switch), nil
		}
		for i, g := range n.Gateways {
			for _, a := range u2o {
				if a.Is4() == g.Is4() {
					n.Gateways[i] = a
				}
			}
		}
	}
	return "", nil
}

// interconnected: an underlay Subnet with a physical gateway that asks
// for the underlay-to-overlay interconnection.
func interconnected(u *unstructured.Unstructured) bool {
	vlan, _, _ := unstructured.NestedString(u.Object, "spec", "vlan")
	logical, _, _ := unstructured.NestedBool(u.Object, "spec", "logicalGateway")
	u2o, _, _ := unstructured.NestedBool(u.Object, "spec", "u2oInterconnection")
	return vlan != "" && !logical && u2o
}

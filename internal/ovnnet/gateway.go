package ovnnet

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Centralized gateways (Kube-OVN's gatewayType: centralized): a subnet's
// traffic to outside the cluster leaves through one of its gateway nodes.
// OVN does the failover itself: each centralized subnet gets a distributed
// gateway port on the cluster router, on a small switch whose localnet port
// (network GatewayNetwork) reaches a bridge on each gateway node. The
// port's HA chassis group ranks the gateway nodes' chassis in gatewayNode
// order; ovn-controller runs BFD between them over the tunnels and moves the
// port's chassisredirect binding to the next chassis when the active one
// stops answering, with no controller involved. The gateway node's host
// holds the next hop (the transit address) on that bridge, with the same MAC
// on every gateway node so the router's learned MAC binding stays valid
// across a failover, and masquerades the traffic out of its uplink.

// CentralizedPriority sits between the cluster allow policy (31000: cluster
// destinations stay routed) and the per-node reroute (29000), so a
// centralized subnet's pods go to the gateway, not to their own node.
const CentralizedPriority = 29500

// GatewayNetwork is the localnet network name of gateway switches: gateway
// nodes map it to their gateway bridge in ovn-bridge-mappings.
const GatewayNetwork = "ovnhost-egw"

// GatewayMAC is the MAC of the host end of the transit link on every
// gateway node (locally administered).
const GatewayMAC = "0a:58:a9:fe:40:01"

// TransitRange holds one /30 per centralized subnet: .1 the router's
// gateway port, .2 the gateway node's host.
var TransitRange = netip.MustParsePrefix("169.254.64.0/18")

// TransitRange6 holds the IPv6 transit networks, one /126 per subnet at the
// same offset as its IPv4 /30 (169.254.64.4/30 <-> fd00:a9fe:4000::4/126),
// so one allocation serves both families and an IPv6-only subnet still
// takes its slot in TransitRange.
var TransitRange6 = netip.MustParsePrefix("fd00:a9fe:4000::/114")

// Transit is a centralized subnet's transit networks, router side, one per
// family the subnet has (an invalid prefix: none of that family).
type Transit struct {
	V4, V6 netip.Prefix
}

// Prefixes lists the valid ones, IPv4 first.
func (t Transit) Prefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{t.V4, t.V6} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

// transitSlot is the index of a transit network in its range (-1: in neither).
func transitSlot(p netip.Prefix) int {
	var base netip.Prefix
	switch {
	case p.Addr().Is4() && TransitRange.Contains(p.Addr()):
		base = TransitRange
	case p.Addr().Is6() && TransitRange6.Contains(p.Addr()):
		base = TransitRange6
	default:
		return -1
	}
	a, b := p.Masked().Addr().As16(), base.Addr().As16()
	// Both ranges are at most 16 bits wide, their base's low bits zero.
	off := int(a[14]^b[14])<<8 | int(a[15]^b[15])
	return off / 4
}

// transitOf is slot i's transit network (router side) in range r.
func transitOf(r netip.Prefix, i int) netip.Prefix {
	off := uint32(i * 4)
	if r.Addr().Is4() {
		b := r.Addr().As4()
		v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]) + off
		a := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
		return netip.PrefixFrom(a.Next(), 30)
	}
	b := r.Addr().As16()
	b[14] |= byte(off >> 8)
	b[15] |= byte(off)
	return netip.PrefixFrom(netip.AddrFrom16(b).Next(), 126)
}

// BFD timers (ms) for the tunnels between HA chassis: a dead gateway is
// noticed after mult*rx = 600 ms.
const (
	BFDMinRx = 200
	BFDMinTx = 200
	BFDMult  = 3
)

// GatewaySwitch is the gateway switch of a centralized subnet; its router
// port is ovnnb.RouterPortName(router, GatewaySwitch(subnet)) and OVN's
// chassisredirect port for it is "cr-" + that name.
func GatewaySwitch(subnet string) string { return "ovnhost-egw-" + subnet }

// GatewayRouterPort is the gateway port of a centralized subnet on router.
func GatewayRouterPort(router, subnet string) string {
	return ovnnb.RouterPortName(router, GatewaySwitch(subnet))
}

// SubnetOfRedirectPort returns the subnet whose gateway port's
// chassisredirect port is name (ok false for other ports).
func SubnetOfRedirectPort(router, name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "cr-"+router+"-ovnhost-egw-")
	return rest, ok && rest != ""
}

// TransitHost is the gateway node's end of a transit network given as the
// router port's address ("169.254.64.1/30" -> 169.254.64.2/30,
// "fd00:a9fe:4000::1/126" -> fd00:a9fe:4000::2/126).
func TransitHost(router netip.Prefix) netip.Prefix {
	return netip.PrefixFrom(router.Addr().Next(), router.Bits())
}

// GatewayNode is one gateway node of a subnet, in gatewayNode order.
type GatewayNode struct {
	Node    string
	Chassis string // its OVS system-id
}

const keySubnet = "subnet"

// EnsureCentralizedGateway programs subnet's gateway port, HA chassis group
// (priorities in nodes' order) and, per family of cidrs, the reroute of its
// traffic to outside the cluster. It returns the transit networks (router
// side).
func (n *Network) EnsureCentralizedGateway(ctx context.Context, subnet string, cidrs []netip.Prefix, nodes []GatewayNode) (Transit, error) {
	var v4, v6 []string
	for _, p := range cidrs {
		if p.Addr().Is4() {
			v4 = append(v4, p.Masked().String())
		} else {
			v6 = append(v6, p.Masked().String())
		}
	}
	if len(v4)+len(v6) == 0 {
		return Transit{}, fmt.Errorf("centralized gateway for subnet %q: the subnet has no CIDR", subnet)
	}
	slot, err := n.transitSlotFor(ctx, subnet)
	if err != nil {
		return Transit{}, err
	}
	var transit Transit
	if len(v4) > 0 {
		transit.V4 = transitOf(TransitRange, slot)
	}
	if len(v6) > 0 {
		transit.V6 = transitOf(TransitRange6, slot)
	}
	if err := n.NB.SetBFDOptions(ctx, BFDMinRx, BFDMinTx, BFDMult); err != nil {
		return Transit{}, err
	}
	var chassis []ovnnb.HAChassis
	for i, g := range nodes {
		// Highest first; spaced so an operator can slot one in by hand.
		chassis = append(chassis, ovnnb.HAChassis{Name: g.Chassis, Priority: 100 - 10*i})
	}
	ids := map[string]string{keyEgress: "gateway", keySubnet: subnet}
	if err := n.NB.EnsureGatewayPort(ctx, ovnnb.GatewayPort{Router: n.cfg.Router, Switch: GatewaySwitch(subnet), Network: GatewayNetwork,
		Addresses: transit.Prefixes(), Chassis: chassis, IDs: ids}); err != nil {
		return Transit{}, err
	}
	// The router learns the gateway node's MAC statically: it is GatewayMAC
	// on every gateway node, and OVN 23.03 cannot resolve an IPv6 next hop
	// of a reroute policy by itself (its neighbour solicitation goes to the
	// solicited-node group of the packet's destination, not of the next
	// hop, so the gateway node never hears it).
	hosts := map[netip.Addr]string{}
	for _, t := range transit.Prefixes() {
		hosts[TransitHost(t).Addr()] = GatewayMAC
	}
	if err := n.NB.SetStaticMACBindings(ctx, GatewayRouterPort(n.cfg.Router, subnet), hosts); err != nil {
		return Transit{}, err
	}
	policyIDs := map[string]string{keyEgress: "centralized", keySubnet: subnet}
	var want []string
	for _, f := range []struct {
		field   string
		cidrs   []string
		transit netip.Prefix
	}{{"ip4.src", v4, transit.V4}, {"ip6.src", v6, transit.V6}} {
		if len(f.cidrs) == 0 {
			continue
		}
		match := f.field + " == " + f.cidrs[0]
		if len(f.cidrs) > 1 {
			match = f.field + " == {" + strings.Join(f.cidrs, ", ") + "}"
		}
		want = append(want, match)
		if err := n.NB.EnsurePolicy(ctx, ovnnb.Policy{Router: n.cfg.Router, Priority: CentralizedPriority, Match: match,
			Nexthop: TransitHost(f.transit).Addr(), ExternalIDs: policyIDs}); err != nil {
			return Transit{}, err
		}
	}
	// A family or CIDR the subnet no longer has keeps no reroute.
	if err := n.NB.DeletePoliciesExcept(ctx, n.cfg.Router, policyIDs, want); err != nil {
		return Transit{}, err
	}
	return transit, nil
}

// transitSlotFor is the subnet's transit slot: the one its gateway port
// has, else the first free one of TransitRange.
func (n *Network) transitSlotFor(ctx context.Context, subnet string) (int, error) {
	ports, err := n.NB.GatewayPorts(ctx, map[string]string{keyEgress: "gateway"})
	if err != nil {
		return 0, err
	}
	slotOf := func(networks []netip.Prefix) int {
		for _, p := range networks {
			if i := transitSlot(p); i >= 0 {
				return i
			}
		}
		return -1
	}
	if nets, ok := ports[GatewayRouterPort(n.cfg.Router, subnet)]; ok {
		if i := slotOf(nets); i >= 0 {
			return i, nil
		}
	}
	used := map[int]bool{}
	for _, nets := range ports {
		used[slotOf(nets)] = true
	}
	slots := (1 << (32 - TransitRange.Bits())) / 4
	for i := 0; i < slots; i++ {
		if !used[i] {
			return i, nil
		}
	}
	return 0, fmt.Errorf("centralized gateway for subnet %q: all %d transit networks of %s are in use; remove centralized subnets", subnet, slots, TransitRange)
}

// RemoveCentralizedGateway removes what EnsureCentralizedGateway made for
// subnet; absent parts are fine.
func (n *Network) RemoveCentralizedGateway(ctx context.Context, subnet string) error {
	if err := n.NB.DeletePolicies(ctx, n.cfg.Router, map[string]string{keyEgress: "centralized", keySubnet: subnet}); err != nil {
		return err
	}
	if err := n.NB.SetStaticMACBindings(ctx, GatewayRouterPort(n.cfg.Router, subnet), nil); err != nil {
		return err
	}
	return n.NB.DeleteGatewayPort(ctx, n.cfg.Router, GatewaySwitch(subnet))
}

// CentralizedSubnets lists the subnets that have a gateway port now.
func (n *Network) CentralizedSubnets(ctx context.Context) ([]string, error) {
	ports, err := n.NB.GatewayPorts(ctx, map[string]string{keyEgress: "gateway"})
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range ports {
		if s, ok := strings.CutPrefix(name, n.cfg.Router+"-ovnhost-egw-"); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// ParseGatewayNode parses Kube-OVN's gatewayNode: "n1,n2" or
// "n1:ip1,n2:ip2" (the egress address on that node), in order.
func ParseGatewayNode(s string) ([]GatewaySpec, error) {
	var out []GatewaySpec
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		g := GatewaySpec{Node: f}
		if name, ip, ok := strings.Cut(f, ":"); ok {
			a, err := netip.ParseAddr(strings.TrimSpace(ip))
			if err != nil || !a.Is4() {
				return nil, fmt.Errorf("gatewayNode entry %q: %q is not an IPv4 address; write node or node:IPv4", f, ip)
			}
			g.Node, g.EgressIP = strings.TrimSpace(name), a
		}
		if g.Node == "" {
			return nil, fmt.Errorf("gatewayNode entry %q has no node name; write node or node:IPv4", f)
		}
		if seen[g.Node] {
			return nil, fmt.Errorf("gatewayNode names node %q twice; list each gateway node once", g.Node)
		}
		seen[g.Node] = true
		out = append(out, g)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("gatewayNode %q names no node; list gateway nodes as \"n1,n2\" or \"n1:ip1,n2:ip2\"", s)
	}
	return out, nil
}

// GatewaySpec is one gatewayNode entry.
type GatewaySpec struct {
	Node     string
	EgressIP netip.Addr // invalid: masquerade to the node's own address
}

// GatewayHardwareAddr is GatewayMAC parsed.
func GatewayHardwareAddr() net.HardwareAddr {
	m, _ := net.ParseMAC(GatewayMAC)
	return m
}

// TransitAnnotation on a Subnet records its IPv4 transit network (router
// side, "169.254.64.1/30"): the controller writes it once the gateway port
// exists, and gateway nodes configure the host end from it.
const TransitAnnotation = "ovnhost.io/gateway-transit"

// TransitAnnotation6 is the same for the IPv6 transit network
// ("fd00:a9fe:4000::1/126"), in an annotation of its own so that a node of
// an older version, which parses TransitAnnotation as one IPv4 prefix,
// keeps serving the IPv4 side of a dual-stack subnet during an upgrade.
const TransitAnnotation6 = "ovnhost.io/gateway-transit-ip6"

// GatewayFailbackAnnotation on a centralized Subnet, "true", keeps its
// traffic on the first ready node of gatewayNode: a gateway node that comes
// back takes the traffic back. Without it the subnet stays on the gateway
// that is active while that one is ready, as Kube-OVN does (its
// status.activateGateway is kept as long as that node is ready).
const GatewayFailbackAnnotation = "ovnhost.io/gateway-failback"

// RankGateways orders nodes for a subnet's HA chassis group: gatewayNode
// order, except that the active gateway (status.activateGateway) goes first
// unless failback is asked for, so that OVN, which always binds the
// highest-priority live chassis, does not move traffic back by itself.
func RankGateways(nodes []GatewayNode, active string, failback bool) []GatewayNode {
	i := slices.IndexFunc(nodes, func(g GatewayNode) bool { return g.Node == active })
	if failback || i <= 0 {
		return nodes
	}
	out := make([]GatewayNode, 0, len(nodes))
	out = append(out, nodes[i])
	out = append(out, nodes[:i]...)
	return append(out, nodes[i+1:]...)
}

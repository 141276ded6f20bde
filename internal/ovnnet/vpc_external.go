package ovnnet

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// A custom VPC's external gateway (Kube-OVN's enableExternal with the
// OVN-native OvnEip/OvnFip/OvnSnatRule): the VPC's router gets a
// distributed gateway port "<vpc>-ovn-external" on the default VPC's
// external switch ovn-external (so the same localnet port and br-external
// on the gateway nodes), its own HA chassis group "<vpc>-ovn-external"
// ranking the same gateway nodes, a default route through the external
// network's gateway, and the NAT rows of its FIPs and SNAT rules on that
// port. The rows carry external_ids:vpc-nat=<vpc>; the VPC reconciler's
// own routes (external_ids:vpc) are not touched, nor it these.

// KeyVPCExternal marks the rows of a VPC's external gateway.
const KeyVPCExternal = "vpc-nat"

// VPCExternal is what a custom VPC's external gateway is.
type VPCExternal struct {
	VPC     string
	Address netip.Prefix // the router's address on ovn-external
	MAC     string       // "" = derived from the port's name
	// GatewayIP is the external network's gateway: the VPC's default
	// route goes there unless DefaultRoute is false (the VPC's own
	// staticRoutes have one).
	GatewayIP    netip.Addr
	DefaultRoute bool
	Nodes        []GatewayNode // highest priority first
	NATs         []ovnnb.NAT
	// Forwards are the VPC's port forwards (OvnDnatRule): OVN's NAT rows
	// carry no ports, so they are load balancers on the VPC's router,
	// one per protocol, which OVN applies on the gateway chassis.
	Forwards []PortForward
}

// PortForward sends ExternalIP:ExternalPort to InternalIP:InternalPort.
type PortForward struct {
	Protocol     string // tcp, udp or sctp
	ExternalIP   netip.Addr
	ExternalPort uint16
	InternalIP   netip.Addr
	InternalPort uint16
}

// forwardProtocols are the protocols of a VPC's port-forward load
// balancers: every name is set on each sync, so a protocol's last forward
// removed deletes its row.
var forwardProtocols = []string{"tcp", "udp", "sctp"}

// VPCForwardLB is the name of a VPC's port-forward load balancer for proto.
func VPCForwardLB(vpc, proto string) string { return "vpc-dnat-" + vpc + "-" + proto }

func vpcForwardNames(vpc string) []string {
	var names []string
	for _, p := range forwardProtocols {
		names = append(names, VPCForwardLB(vpc, p))
	}
	return names
}

// vpcForwardLBs groups forwards into one load balancer per protocol.
func vpcForwardLBs(vpc string, fs []PortForward) ([]ovnnb.LoadBalancer, error) {
	byProto := map[string]map[string]string{}
	for _, f := range fs {
		if !slices.Contains(forwardProtocols, f.Protocol) {
			return nil, fmt.Errorf("ovnnet: port forward %s:%d of VPC %s: protocol %q is not tcp, udp or sctp", f.ExternalIP, f.ExternalPort, vpc, f.Protocol)
		}
		if byProto[f.Protocol] == nil {
			byProto[f.Protocol] = map[string]string{}
		}
		vip := netip.AddrPortFrom(f.ExternalIP, f.ExternalPort).String()
		backend := netip.AddrPortFrom(f.InternalIP, f.InternalPort).String()
		if cur, ok := byProto[f.Protocol][vip]; ok && cur != backend {
			return nil, fmt.Errorf("ovnnet: port forward %s/%s of VPC %s goes to both %s and %s", vip, f.Protocol, vpc, cur, backend)
		}
		byProto[f.Protocol][vip] = backend
	}
	var out []ovnnb.LoadBalancer
	for _, p := range forwardProtocols {
		if vips := byProto[p]; len(vips) > 0 {
			out = append(out, ovnnb.LoadBalancer{Name: VPCForwardLB(vpc, p), Protocol: p, VIPs: vips, ExternalIDs: vpcExternalIDs(vpc)})
		}
	}
	return out, nil
}

// VPCExternalGroup is the HA chassis group of a VPC's gateway port.
func VPCExternalGroup(vpc string) string { return ExternalRouterPort(vpc) }

func vpcExternalIDs(vpc string) map[string]string { return map[string]string{KeyVPCExternal: vpc} }

// EnsureVPCExternal programs a custom VPC's external gateway: port, route,
// NAT rows (each step idempotent, so a retry after a failure finishes it).
// The external switch must be programmed (EnsureExternalGateway).
func (n *Network) EnsureVPCExternal(ctx context.Context, v VPCExternal) error {
	if len(v.Nodes) == 0 {
		return fmt.Errorf("ovnnet: external gateway of VPC %s: no gateway node", v.VPC)
	}
	var chassis []ovnnb.HAChassis
	for i, g := range v.Nodes {
		chassis = append(chassis, ovnnb.HAChassis{Name: g.Chassis, Priority: haPriority(i, len(v.Nodes))})
	}
	if err := n.NB.EnsureGatewayAttachment(ctx, ovnnb.GatewayAttachment{Router: v.VPC, Switch: ExternalSwitch, Group: VPCExternalGroup(v.VPC),
		Address: v.Address, MAC: v.MAC, Chassis: chassis, IDs: vpcExternalIDs(v.VPC)}); err != nil {
		return err
	}
	var routes []ovnnb.VPCRoute
	if v.DefaultRoute {
		routes = append(routes, ovnnb.VPCRoute{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Nexthop: v.GatewayIP})
	}
	if err := n.NB.SetRouterRoutesAndPolicies(ctx, v.VPC, vpcExternalIDs(v.VPC), routes, nil); err != nil {
		return err
	}
	if err := n.NB.SetRouterNAT(ctx, v.VPC, vpcExternalIDs(v.VPC), v.NATs, nil); err != nil {
		return err
	}
	lbs, err := vpcForwardLBs(v.VPC, v.Forwards)
	if err != nil {
		return err
	}
	return n.NB.SetRouterLoadBalancers(ctx, v.VPC, vpcForwardNames(v.VPC), lbs)
}

// RemoveVPCExternal removes a VPC's NAT rows, default route and gateway
// port (in that order: the rows name the port); absent parts, and an
// absent router, are fine.
func (n *Network) RemoveVPCExternal(ctx context.Context, vpc string) error {
	if err := n.NB.SetRouterNAT(ctx, vpc, vpcExternalIDs(vpc), nil, nil); err != nil {
		return err
	}
	routers, err := n.NB.VPCRouters(ctx)
	if err != nil {
		return err
	}
	holder := "" // the router is gone: its port forwards' rows are only deleted
	if containsString(routers, vpc) {
		holder = vpc
		if err := n.NB.SetRouterRoutesAndPolicies(ctx, vpc, vpcExternalIDs(vpc), nil, nil); err != nil {
			return err
		}
	}
	if err := n.NB.SetRouterLoadBalancers(ctx, holder, vpcForwardNames(vpc), nil); err != nil {
		return err
	}
	return n.NB.DeleteGatewayAttachment(ctx, vpc, ExternalSwitch, VPCExternalGroup(vpc))
}

// VPCExternals are the VPCs with a gateway port on ovn-external.
func (n *Network) VPCExternals(ctx context.Context) ([]string, error) {
	return n.NB.GatewayAttachments(ctx, ExternalSwitch, KeyVPCExternal)
}

// VPCForwards are the port forwards of a VPC's external gateway, as its
// load balancers hold them.
func (n *Network) VPCForwards(ctx context.Context, vpc string) ([]PortForward, error) {
	lbs, err := n.NB.LoadBalancers(ctx, vpcExternalIDs(vpc))
	if err != nil {
		return nil, err
	}
	var out []PortForward
	for _, lb := range lbs {
		if !slices.Contains(vpcForwardNames(vpc), lb.Name) {
			continue
		}
		for vip, backend := range lb.VIPs {
			e, err1 := netip.ParseAddrPort(vip)
			i, err2 := netip.ParseAddrPort(backend)
			if err1 != nil || err2 != nil {
				continue // not a forward ovnhost wrote (one backend)
			}
			out = append(out, PortForward{Protocol: lb.Protocol, ExternalIP: e.Addr(), ExternalPort: e.Port(), InternalIP: i.Addr(), InternalPort: i.Port()})
		}
	}
	slices.SortFunc(out, func(a, b PortForward) int {
		if c := strings.Compare(a.Protocol, b.Protocol); c != 0 {
			return c
		}
		if c := a.ExternalIP.Compare(b.ExternalIP); c != 0 {
			return c
		}
		return int(a.ExternalPort) - int(b.ExternalPort)
	})
	return out, nil
}

// VPCNATs are the NAT rows of a VPC's external gateway.
func (n *Network) VPCNATs(ctx context.Context, vpc string) ([]ovnnb.NAT, error) {
	return n.NB.NATs(ctx, vpc, vpcExternalIDs(vpc))
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

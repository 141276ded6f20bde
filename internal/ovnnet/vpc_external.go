package ovnnet

import (
	"context"
	"fmt"
	"net/netip"

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
	return n.NB.SetRouterNAT(ctx, v.VPC, vpcExternalIDs(v.VPC), v.NATs, nil)
}

// RemoveVPCExternal removes a VPC's NAT rows, default route and gateway
// port (in that order: the rows name the port); absent parts, and an
// absent router, are fine.
func (n *Network) RemoveVPCExternal(ctx context.Context, vpc string) error {
	if err := n.NB.SetRouterNAT(ctx, vpc, vpcExternalIDs(vpc), nil, nil); err != nil {
		return err
	}
	if routers, err := n.NB.VPCRouters(ctx); err != nil {
		return err
	} else if containsString(routers, vpc) {
		if err := n.NB.SetRouterRoutesAndPolicies(ctx, vpc, vpcExternalIDs(vpc), nil, nil); err != nil {
			return err
		}
	}
	return n.NB.DeleteGatewayAttachment(ctx, vpc, ExternalSwitch, VPCExternalGroup(vpc))
}

// VPCExternals are the VPCs with a gateway port on ovn-external.
func (n *Network) VPCExternals(ctx context.Context) ([]string, error) {
	return n.NB.GatewayAttachments(ctx, ExternalSwitch, KeyVPCExternal)
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

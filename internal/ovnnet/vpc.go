package ovnnet

import (
	"context"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// VPC is a custom VPC's router as programmed: Kube-OVN names the router
// as the VPC; its static routes, policies and peering ports are exactly
// these (the Subnets attach themselves through AddSubnet with cfg.VPC).
type VPC struct {
	Name     string
	Routes   []ovnnb.VPCRoute
	Policies []ovnnb.RouterPolicy
	Peers    []ovnnb.PeerPort
}

// VPCPeerPortName is the router port of vpc's peering with remote
// (Kube-OVN's name): "<vpc>-<remote>", its peer "<remote>-<vpc>".
func VPCPeerPortName(vpc, remote string) string { return vpc + "-" + remote }

// vpcIDs own a VPC's routes, policies and peering ports.
func vpcIDs(vpc string) map[string]string { return map[string]string{ovnnb.KeyVPC: vpc} }

// EnsureVPC creates the VPC's router if absent and makes its routes,
// policies and peering ports exactly v's.
func (n *Network) EnsureVPC(ctx context.Context, v VPC) error {
	if err := n.NB.EnsureVPCRouter(ctx, v.Name); err != nil {
		return err
	}
	if err := n.NB.SetPeerPorts(ctx, v.Name, vpcIDs(v.Name), v.Peers); err != nil {
		return err
	}
	return n.NB.SetRouterRoutesAndPolicies(ctx, v.Name, vpcIDs(v.Name), v.Routes, v.Policies)
}

// EnsureVPCRouter creates the VPC's router if absent (routes, policies
// and ports of an existing one untouched).
func (n *Network) EnsureVPCRouter(ctx context.Context, name string) error {
	return n.NB.EnsureVPCRouter(ctx, name)
}

// RemoveVPC deletes the VPC's router with its routes, policies and ports.
func (n *Network) RemoveVPC(ctx context.Context, name string) error {
	return n.NB.DeleteVPCRouter(ctx, name)
}

// VPCRouters are the custom VPCs' routers in the NB.
func (n *Network) VPCRouters(ctx context.Context) ([]string, error) { return n.NB.VPCRouters(ctx) }

// PodVPC is the custom VPC of the pod's address (owner "ns/name"), ""
// for the default VPC or no address.
func (n *Network) PodVPC(owner string) string {
	a, ok := n.IPAM.Lookup(owner)
	if !ok {
		return ""
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vpcOf[a.Subnet]
}

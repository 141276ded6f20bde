package vpcs

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Translate is what a custom Vpc's router gets, from its spec, the CIDRs
// of its programmed Subnets, and which other VPCs exist: the peering
// ports (Kube-OVN's "<vpc>-<remote>", peer "<remote>-<vpc>", with
// localConnectIP as its network), the static routes and the policies.
// Entries that cannot be programmed are left out and returned as
// problems, each naming the entry, what is wrong and the fix (entries
// ValidateVpc refuses are left out silently: it names them).
func Translate(v *kubeovnv1.Vpc, subnets map[string][]netip.Prefix, exists func(string) bool) (ovnnet.VPC, []string) {
	out := ovnnet.VPC{Name: v.Name}
	var problems []string
	var reach []netip.Prefix // where a next hop may be: the Subnets and the peering links
	names := make([]string, 0, len(subnets))
	for n, cidrs := range subnets {
		names = append(names, n)
		reach = append(reach, cidrs...)
	}
	sort.Strings(names)
	for i, p := range v.Spec.VpcPeerings {
		if kubeovnv1.PeeringProblem(v.Name, p) != "" || slices.ContainsFunc(v.Spec.VpcPeerings[:i], func(q *kubeovnv1.VpcPeering) bool { return q != nil && q.RemoteVpc == p.RemoteVpc }) {
			continue
		}
		if !exists(p.RemoteVpc) {
			problems = append(problems, fmt.Sprintf("spec.vpcPeerings[%d]: remoteVpc %q does not exist; create that Vpc (with a peering back to %q) or remove the entry", i, p.RemoteVpc, v.Name))
			continue
		}
		link := netip.MustParsePrefix(strings.TrimSpace(p.LocalConnectIP))
		out.Peers = append(out.Peers, ovnnb.PeerPort{Name: ovnnet.VPCPeerPortName(v.Name, p.RemoteVpc), Peer: ovnnet.VPCPeerPortName(p.RemoteVpc, v.Name), Network: link})
		reach = append(reach, link.Masked())
	}
	where := fmt.Sprintf("VPC %q (its Subnets %s and peering links)", v.Name, describe(names, subnets))
	inside := func(a netip.Addr) bool {
		return slices.ContainsFunc(reach, func(p netip.Prefix) bool { return p.Contains(a) })
	}
	for i, rt := range v.Spec.StaticRoutes {
		if kubeovnv1.StaticRouteProblem(rt) != "" {
			continue
		}
		cidr, _ := kubeovnv1.ParseRouteCIDR(rt.CIDR)
		nh := netip.MustParseAddr(strings.TrimSpace(rt.NextHopIP))
		if !inside(nh) {
			problems = append(problems, fmt.Sprintf("spec.staticRoutes[%d]: nextHopIP %s is outside every Subnet of %s; give a next hop inside one of them, or create the Subnet or peering that holds it", i, nh, where))
			continue
		}
		out.Routes = append(out.Routes, ovnnb.VPCRoute{Prefix: cidr, Nexthop: nh, SrcIP: rt.Policy == kubeovnv1.PolicySrc})
	}
	for i, pr := range v.Spec.PolicyRoutes {
		if kubeovnv1.PolicyRouteProblem(pr) != "" {
			continue
		}
		pol := ovnnb.RouterPolicy{Priority: pr.Priority, Match: strings.TrimSpace(pr.Match), Action: pr.Action}
		ok := true
		if pr.Action == kubeovnv1.PolicyActionReroute {
			for _, s := range strings.Split(pr.NextHopIP, ",") {
				nh := netip.MustParseAddr(strings.TrimSpace(s))
				if !inside(nh) {
					problems = append(problems, fmt.Sprintf("spec.policyRoutes[%d]: nextHopIP %s is outside every Subnet of %s; give a next hop inside one of them", i, nh, where))
					ok = false
					break
				}
				pol.Nexthops = append(pol.Nexthops, nh)
			}
		}
		if ok {
			out.Policies = append(out.Policies, pol)
		}
	}
	return out, problems
}

// describe lists Subnets with their CIDRs: "[a 10.0.0.0/24, b ...]".
func describe(names []string, subnets map[string][]netip.Prefix) string {
	if len(names) == 0 {
		return "[none programmed]"
	}
	var parts []string
	for _, n := range names {
		var cs []string
		for _, c := range subnets[n] {
			cs = append(cs, c.String())
		}
		parts = append(parts, n+" "+strings.Join(cs, ","))
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

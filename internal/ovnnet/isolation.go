package ovnnet

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Subnet isolation as Kube-OVN does it, with ACLs on the subnet's own
// switch (the ACL machinery NetworkPolicy uses, ovnnb.ACL). A private
// subnet drops every packet delivered to one of its ports (pods and the
// router port, so traffic leaving the subnet too) unless it stays inside
// the subnet, comes from the node (join) subnet, or goes between the subnet
// and one of its allowSubnets; replies of allowed connections pass
// (allow-related). The priorities are Kube-OVN's: below NetworkPolicy's
// (2000-3000), so a NetworkPolicy can still allow or deny more finely.
const (
	privateDropPriority  = 1000 // Kube-OVN DefaultDropPriority
	privateAllowPriority = 1001 // SubnetAllowPriority: same subnet
	privateCrossPriority = 1002 // allowSubnets
	privateNodePriority  = 3000 // NodeAllowPriority: kubelet probes, host traffic via ovn0
)

// keyIsolation tags the ACLs of a subnet's isolation; keyACLs its spec.acls.
const (
	keyIsolation = "isolation"
)

// Isolation is what a subnet asks of its switch's ACLs.
type Isolation struct {
	Private      bool
	AllowSubnets []netip.Prefix
	// ACLs are the Subnet's own acls (direction, priority, match, action),
	// programmed as written: the match is not parsed by ovnhost.
	ACLs []ovnnb.ACL
}

// ParseAllowSubnets reads Kube-OVN allowSubnets entries (CIDRs).
func ParseAllowSubnets(subnet string, entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("subnet %q: allowSubnets entry %q is not a CIDR; write it as 10.16.0.0/16", subnet, e)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// IsolationACLs are the ACLs a private subnet with these CIDRs gets (none
// when not private). join are the node subnet's CIDRs.
func IsolationACLs(cidrs, join []netip.Prefix, iso Isolation) []ovnnb.ACL {
	if !iso.Private {
		return nil
	}
	ip := func(p netip.Prefix) string {
		if p.Addr().Is4() {
			return "ip4"
		}
		return "ip6"
	}
	acls := []ovnnb.ACL{{Direction: "to-lport", Priority: privateDropPriority, Match: "ip", Action: "drop"}}
	for _, c := range cidrs {
		f := ip(c)
		acls = append(acls, ovnnb.ACL{Direction: "to-lport", Priority: privateAllowPriority, Action: "allow-related",
			Match: fmt.Sprintf("%s.src == %s && %s.dst == %s", f, c, f, c)})
		for _, j := range join {
			if j.Addr().Is4() == c.Addr().Is4() {
				acls = append(acls, ovnnb.ACL{Direction: "to-lport", Priority: privateNodePriority, Action: "allow-related",
					Match: fmt.Sprintf("%s.src == %s", f, j)})
			}
		}
		for _, a := range iso.AllowSubnets {
			if a.Addr().Is4() != c.Addr().Is4() {
				continue
			}
			acls = append(acls, ovnnb.ACL{Direction: "to-lport", Priority: privateCrossPriority, Action: "allow-related",
				Match: fmt.Sprintf("(%s.src == %s && %s.dst == %s) || (%s.src == %s && %s.dst == %s)", f, c, f, a, f, a, f, c)})
		}
	}
	return acls
}

// SetIsolation programs a subnet's isolation and its own ACLs on its switch
// (replacing what an earlier call programmed; an empty Isolation removes it).
func (n *Network) SetIsolation(ctx context.Context, subnet string, iso Isolation) error {
	cfg, ok := n.IPAM.Subnet(subnet)
	if !ok {
		return fmt.Errorf("ovnnet: isolation of subnet %q: unknown subnet; add it first", subnet)
	}
	var join []netip.Prefix
	if j, ok := n.IPAM.Subnet(n.cfg.JoinSubnet); ok {
		join = j.CIDRs
	}
	acls := IsolationACLs(cfg.CIDRs, join, iso)
	if err := n.NB.EnsureSwitchACLs(ctx, subnet, map[string]string{keyIsolation: subnet}, acls); err != nil {
		return err
	}
	return n.NB.EnsureSwitchACLs(ctx, subnet, map[string]string{"subnet-acls": subnet}, iso.ACLs)
}

package ovnnb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// NAT is a logical router NAT rule. On a router with a distributed gateway
// port OVN applies it on the chassis where that port is active;
// GatewayPort names the port when the router has more than one (northd
// ignores rules it cannot place otherwise). A dnat_and_snat rule with
// LogicalPort and ExternalMAC is distributed instead: OVN applies it on the
// chassis where LogicalPort is bound, and the packets use that chassis's
// localnet port with ExternalMAC as their MAC on the external switch.
type NAT struct {
	Type        string // nbdb.NATTypeSNAT, nbdb.NATTypeDNATAndSNAT
	ExternalIP  string
	LogicalIP   string
	GatewayPort string // router port name; "" = none
	LogicalPort string // logical switch port of LogicalIP; "" = centralized
	ExternalMAC string // with LogicalPort: the address's MAC on the external switch
	ExternalIDs map[string]string
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func derefString(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

// SetRouterNAT makes the router's ovnhost NAT rules and policies whose
// external IDs contain match exactly nats and policies, in one
// transaction: a pod's EIP, its SNAT and the policy that sends its traffic
// to the gateway change together or not at all. Both nil removes them.
func (c *Client) SetRouterNAT(ctx context.Context, router string, match map[string]string, nats []NAT, policies []Policy) error {
	r, err := c.router(ctx, router)
	if err != nil {
		return err
	}
	if r == nil {
		if len(nats)+len(policies) == 0 {
			return nil
		}
		return fmt.Errorf("ovnnb: NAT on router %q: the router does not exist", router)
	}
	natSet, err := c.natChildren(ctx, r, match, nats)
	if err != nil {
		return err
	}
	polSet, err := c.policyChildren(ctx, r, match, policies)
	if err != nil {
		return err
	}
	plan, err := c.planChildren(natSet, polSet)
	if err != nil {
		return err
	}
	ops, err := c.applyChildren(r, plan)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, fmt.Sprintf("set NAT rules %v on %s", match, router), ops)
	return err
}

// natChildren are the router's NAT rules owned by match and the wanted
// ones (named newnat0, newnat1, ...), keyed by everything a rule does.
func (c *Client) natChildren(ctx context.Context, r *nbdb.LogicalRouter, match map[string]string, nats []NAT) (childSet, error) {
	var cur []*nbdb.NAT
	if err := c.cl.WhereCache(func(x *nbdb.NAT) bool { return slices.Contains(r.Nat, x.UUID) && owned(x.ExternalIDs, match) }).List(ctx, &cur); err != nil {
		return childSet{}, err
	}
	set := childSet{field: &r.Nat}
	for _, x := range cur {
		set.have = append(set.have, child{key: natKey(x), value: x.UUID})
	}
	for i, want := range nats {
		var gwp *string
		if want.GatewayPort != "" {
			lrp := &nbdb.LogicalRouterPort{Name: want.GatewayPort}
			if err := c.cl.Get(ctx, lrp); err != nil {
				return childSet{}, fmt.Errorf("ovnnb: NAT %s %s: gateway port %s: %w", want.Type, want.ExternalIP, want.GatewayPort, err)
			}
			gwp = &lrp.UUID
		}
		row := &nbdb.NAT{UUID: "newnat" + strconv.Itoa(i), Type: want.Type, ExternalIP: want.ExternalIP, LogicalIP: want.LogicalIP,
			GatewayPort: gwp, LogicalPort: optString(want.LogicalPort), ExternalMAC: optString(want.ExternalMAC), ExternalIDs: vendorIDs(want.ExternalIDs)}
		set.want = append(set.want, child{key: natKey(row), row: row})
	}
	return set, nil
}

// natKey is everything a NAT row does.
func natKey(x *nbdb.NAT) string {
	return strings.Join([]string{x.Type, x.ExternalIP, x.LogicalIP, derefString(x.GatewayPort), derefString(x.LogicalPort),
		derefString(x.ExternalMAC), mapKey(x.ExternalIDs)}, "\x00")
}

// policyChildren are the router's policies owned by match and the wanted
// ones (named newnatpolicy0, ...), keyed by everything a policy does.
func (c *Client) policyChildren(ctx context.Context, r *nbdb.LogicalRouter, match map[string]string, policies []Policy) (childSet, error) {
	cur, err := c.policies(ctx, r, func(x *nbdb.LogicalRouterPolicy) bool { return owned(x.ExternalIDs, match) })
	if err != nil {
		return childSet{}, err
	}
	set := childSet{field: &r.Policies}
	for _, x := range cur {
		set.have = append(set.have, child{key: policyKey(x), value: x.UUID})
	}
	for i, p := range policies {
		action, nexthops := nbdb.LogicalRouterPolicyActionAllow, []string(nil)
		if p.Nexthop.IsValid() {
			action, nexthops = nbdb.LogicalRouterPolicyActionReroute, []string{p.Nexthop.String()}
		}
		row := &nbdb.LogicalRouterPolicy{UUID: "newnatpolicy" + strconv.Itoa(i), Priority: p.Priority, Match: p.Match, Action: action,
			Nexthops: nexthops, ExternalIDs: vendorIDs(p.ExternalIDs)}
		set.want = append(set.want, child{key: policyKey(row), row: row})
	}
	return set, nil
}

// policyKey is everything a router policy written by SetRouterNAT does.
func policyKey(x *nbdb.LogicalRouterPolicy) string {
	return strings.Join([]string{strconv.Itoa(x.Priority), x.Match, x.Action, strings.Join(x.Nexthops, ","), mapKey(x.ExternalIDs)}, "\x00")
}

// NATs lists the router's ovnhost NAT rules whose external IDs contain match.
func (c *Client) NATs(ctx context.Context, router string, match map[string]string) ([]NAT, error) {
	r, err := c.router(ctx, router)
	if err != nil || r == nil {
		return nil, err
	}
	var cur []nbdb.NAT
	if err := c.cl.WhereCache(func(x *nbdb.NAT) bool { return slices.Contains(r.Nat, x.UUID) && owned(x.ExternalIDs, match) }).List(ctx, &cur); err != nil {
		return nil, err
	}
	out := make([]NAT, 0, len(cur))
	for _, x := range cur {
		n := NAT{Type: x.Type, ExternalIP: x.ExternalIP, LogicalIP: x.LogicalIP, LogicalPort: derefString(x.LogicalPort),
			ExternalMAC: derefString(x.ExternalMAC), ExternalIDs: x.ExternalIDs}
		if x.GatewayPort != nil {
			lrp := &nbdb.LogicalRouterPort{UUID: *x.GatewayPort}
			if c.cl.Get(ctx, lrp) == nil {
				n.GatewayPort = lrp.Name
			}
		}
		out = append(out, n)
	}
	return out, nil
}

// SetGatewayPortAddressing gives a gateway port its MAC (the router side)
// and makes the switch side announce the router's NAT addresses: the
// active chassis then sends gratuitous ARPs for them out of the localnet
// port, so the outside network learns where the addresses are after a
// failover. mac "" keeps the port's MAC.
func (c *Client) SetGatewayPortAddressing(ctx context.Context, router, sw, mac string) error {
	var ops []ovsdb.Operation
	lrp := &nbdb.LogicalRouterPort{Name: RouterPortName(router, sw)}
	if err := c.cl.Get(ctx, lrp); err != nil {
		return fmt.Errorf("ovnnb: gateway router port %s: %w", lrp.Name, err)
	}
	if mac != "" && lrp.MAC != mac {
		lrp.MAC = mac
		o, err := c.cl.Where(lrp).Update(lrp, &lrp.MAC)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	lsp := &nbdb.LogicalSwitchPort{Name: SwitchRouterPortName(router, sw)}
	if err := c.cl.Get(ctx, lsp); err != nil {
		return fmt.Errorf("ovnnb: gateway switch port %s: %w", lsp.Name, err)
	}
	if lsp.Options["nat-addresses"] != "router" {
		opts := maps.Clone(lsp.Options)
		if opts == nil {
			opts = map[string]string{}
		}
		opts["nat-addresses"] = "router"
		lsp.Options = opts
		o, err := c.cl.Where(lsp).Update(lsp, &lsp.Options)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	_, err := c.transact(ctx, "address gateway port "+lrp.Name, ops)
	return err
}

package ovnnb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/model"
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

func natKey(typ, ext, logical string) string { return typ + " " + ext + " " + logical }

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
	var curNAT []*nbdb.NAT
	if err := c.cl.WhereCache(func(x *nbdb.NAT) bool { return slices.Contains(r.Nat, x.UUID) && owned(x.ExternalIDs, match) }).List(ctx, &curNAT); err != nil {
		return err
	}
	curPol, err := c.policies(ctx, r, func(x *nbdb.LogicalRouterPolicy) bool { return owned(x.ExternalIDs, match) })
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	var drop, add []string

	have := map[string]*nbdb.NAT{}
	for _, x := range curNAT {
		have[natKey(x.Type, x.ExternalIP, x.LogicalIP)] = x
	}
	keep := map[string]bool{}
	for i, want := range nats {
		var gwp *string
		if want.GatewayPort != "" {
			lrp := &nbdb.LogicalRouterPort{Name: want.GatewayPort}
			if err := c.cl.Get(ctx, lrp); err != nil {
				return fmt.Errorf("ovnnb: NAT %s %s: gateway port %s: %w", want.Type, want.ExternalIP, want.GatewayPort, err)
			}
			gwp = &lrp.UUID
		}
		ids := vendorIDs(want.ExternalIDs)
		k := natKey(want.Type, want.ExternalIP, want.LogicalIP)
		if x, ok := have[k]; ok && !keep[k] && maps.Equal(x.ExternalIDs, ids) && equalRef(x.GatewayPort, gwp) &&
			derefString(x.LogicalPort) == want.LogicalPort && derefString(x.ExternalMAC) == want.ExternalMAC {
			keep[k] = true
			continue
		}
		row := &nbdb.NAT{UUID: "newnat" + strconv.Itoa(i), Type: want.Type, ExternalIP: want.ExternalIP, LogicalIP: want.LogicalIP,
			GatewayPort: gwp, LogicalPort: optString(want.LogicalPort), ExternalMAC: optString(want.ExternalMAC), ExternalIDs: ids}
		o, err := c.cl.Create(row)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		add = append(add, row.UUID)
	}
	for k, x := range have {
		if !keep[k] {
			drop = append(drop, x.UUID)
		}
	}

	type polKey struct {
		prio  int
		match string
	}
	havePol := map[polKey]*nbdb.LogicalRouterPolicy{}
	for _, x := range curPol {
		havePol[polKey{x.Priority, x.Match}] = x
	}
	keepPol := map[polKey]bool{}
	var dropPol, addPol []string
	for i, p := range policies {
		action, nexthops := nbdb.LogicalRouterPolicyActionAllow, []string(nil)
		if p.Nexthop.IsValid() {
			action, nexthops = nbdb.LogicalRouterPolicyActionReroute, []string{p.Nexthop.String()}
		}
		ids := vendorIDs(p.ExternalIDs)
		k := polKey{p.Priority, p.Match}
		if x, ok := havePol[k]; ok && !keepPol[k] && x.Action == action && slices.Equal(x.Nexthops, nexthops) && maps.Equal(x.ExternalIDs, ids) {
			keepPol[k] = true
			continue
		}
		row := &nbdb.LogicalRouterPolicy{UUID: "newnatpolicy" + strconv.Itoa(i), Priority: p.Priority, Match: p.Match, Action: action, Nexthops: nexthops, ExternalIDs: ids}
		o, err := c.cl.Create(row)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		addPol = append(addPol, row.UUID)
	}
	for k, x := range havePol {
		if !keepPol[k] {
			dropPol = append(dropPol, x.UUID)
		}
	}
	// Removing the router's references deletes the rows (neither table is a root).
	mut := func(field any, op ovsdb.Mutator, uuids []string) error {
		if len(uuids) == 0 {
			return nil
		}
		o, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: field, Mutator: op, Value: uuids})
		ops = append(ops, o...)
		return err
	}
	if err := mut(&r.Nat, ovsdb.MutateOperationDelete, drop); err != nil {
		return err
	}
	if err := mut(&r.Nat, ovsdb.MutateOperationInsert, add); err != nil {
		return err
	}
	if err := mut(&r.Policies, ovsdb.MutateOperationDelete, dropPol); err != nil {
		return err
	}
	if err := mut(&r.Policies, ovsdb.MutateOperationInsert, addPol); err != nil {
		return err
	}
	_, err = c.transact(ctx, fmt.Sprintf("set NAT rules %v on %s", match, router), ops)
	return err
}

func equalRef(a, b *string) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
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

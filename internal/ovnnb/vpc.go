package ovnnb

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// A custom VPC is a router of its own (named as the VPC, external_ids:vpc)
// with no load balancer group: the cluster's Services are the default
// VPC's. Its static routes, policies and peering ports are rows ovnhost
// owns by external IDs and sets as a whole.

// EnsureVPCRouter creates the router of custom VPC name if absent.
func (c *Client) EnsureVPCRouter(ctx context.Context, name string) error {
	r, err := c.router(ctx, name)
	if err != nil || r != nil {
		return err
	}
	ops, err := c.cl.Create(&nbdb.LogicalRouter{Name: name, ExternalIDs: vendorIDs(map[string]string{KeyVPC: name})})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "create router "+name, ops)
	return err
}

// VPCRouters are the routers EnsureVPCRouter created.
func (c *Client) VPCRouters(ctx context.Context) ([]string, error) {
	var rs []nbdb.LogicalRouter
	if err := c.cl.WhereCache(func(r *nbdb.LogicalRouter) bool {
		return r.ExternalIDs[KeyVendor] == Vendor && r.ExternalIDs[KeyVPC] != ""
	}).List(ctx, &rs); err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rs {
		out = append(out, r.Name)
	}
	slices.Sort(out)
	return out, nil
}

// DeleteVPCRouter deletes a router EnsureVPCRouter created, with its
// ports, routes, policies and NAT rules (rows only it references); a
// router of that name ovnhost did not create for a VPC is left alone.
func (c *Client) DeleteVPCRouter(ctx context.Context, name string) error {
	r, err := c.router(ctx, name)
	if err != nil || r == nil || r.ExternalIDs[KeyVendor] != Vendor || r.ExternalIDs[KeyVPC] != name {
		return err
	}
	ops, err := c.cl.Where(r).Delete()
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "delete router "+name, ops)
	return err
}

// VPCRoute is a static route of a VPC's router: to Prefix (by source
// address when SrcIP) through Nexthop.
type VPCRoute struct {
	Prefix      netip.Prefix
	Nexthop     netip.Addr
	SrcIP       bool
	ExternalIDs map[string]string
}

// RouterPolicy is a router policy with any action: allow, drop, or
// reroute to Nexthops.
type RouterPolicy struct {
	Priority    int
	Match       string
	Action      string
	Nexthops    []netip.Addr
	ExternalIDs map[string]string
}

func routePrefix(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.Masked().String()
}

// routeKey is everything a static route row written here does.
func routeKey(x *nbdb.LogicalRouterStaticRoute) string {
	pol := ""
	if x.Policy != nil {
		pol = *x.Policy
	}
	return strings.Join([]string{x.IPPrefix, x.Nexthop, pol, x.RouteTable, mapKey(x.ExternalIDs)}, "\x00")
}

// SetRouterRoutesAndPolicies makes the router's routes and policies owned
// by match exactly routes and policies (each carries match in its
// external IDs), in one transaction.
func (c *Client) SetRouterRoutesAndPolicies(ctx context.Context, router string, match map[string]string, routes []VPCRoute, policies []RouterPolicy) error {
	r, err := c.router(ctx, router)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("ovnnb: routes on router %q: the router does not exist", router)
	}
	var cur []*nbdb.LogicalRouterStaticRoute
	if err := c.cl.WhereCache(func(s *nbdb.LogicalRouterStaticRoute) bool {
		return slices.Contains(r.StaticRoutes, s.UUID) && owned(s.ExternalIDs, match)
	}).List(ctx, &cur); err != nil {
		return err
	}
	rset := childSet{field: &r.StaticRoutes}
	for _, x := range cur {
		rset.have = append(rset.have, child{key: routeKey(x), value: x.UUID})
	}
	for i, w := range routes {
		pol := nbdb.LogicalRouterStaticRoutePolicyDstIP
		if w.SrcIP {
			pol = nbdb.LogicalRouterStaticRoutePolicySrcIP
		}
		ids := vendorIDs(w.ExternalIDs)
		maps.Copy(ids, match)
		row := &nbdb.LogicalRouterStaticRoute{UUID: "newvpcroute" + strconv.Itoa(i), IPPrefix: routePrefix(w.Prefix), Nexthop: w.Nexthop.String(),
			Policy: &pol, ExternalIDs: ids}
		rset.want = append(rset.want, child{key: routeKey(row), row: row})
	}
	pcur, err := c.policies(ctx, r, func(x *nbdb.LogicalRouterPolicy) bool { return owned(x.ExternalIDs, match) })
	if err != nil {
		return err
	}
	pset := childSet{field: &r.Policies}
	for _, x := range pcur {
		pset.have = append(pset.have, child{key: policyKey(x), value: x.UUID})
	}
	for i, p := range policies {
		var nh []string
		for _, a := range p.Nexthops {
			nh = append(nh, a.String())
		}
		ids := vendorIDs(p.ExternalIDs)
		maps.Copy(ids, match)
		row := &nbdb.LogicalRouterPolicy{UUID: "newvpcpolicy" + strconv.Itoa(i), Priority: p.Priority, Match: p.Match, Action: p.Action,
			Nexthops: nh, ExternalIDs: ids}
		pset.want = append(pset.want, child{key: policyKey(row), row: row})
	}
	plan, err := c.planChildren(rset, pset)
	if err != nil || plan.empty() {
		return err
	}
	ops, err := c.applyChildren(r, plan)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, fmt.Sprintf("set routes and policies %v on %s", match, router), ops)
	return err
}

// PeerPort is a router port linked directly to another router's port
// (OVN's peer): a VPC peering.
type PeerPort struct {
	Name    string
	Peer    string       // the remote router's port
	Network netip.Prefix // this side's address and prefix length
}

// SetPeerPorts makes router's peering ports owned by match exactly want
// (created, updated in place, removed), in one transaction.
func (c *Client) SetPeerPorts(ctx context.Context, router string, match map[string]string, want []PeerPort) error {
	r, err := c.router(ctx, router)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("ovnnb: peering ports of router %q: the router does not exist", router)
	}
	var cur []*nbdb.LogicalRouterPort
	if err := c.cl.WhereCache(func(p *nbdb.LogicalRouterPort) bool {
		return slices.Contains(r.Ports, p.UUID) && owned(p.ExternalIDs, match)
	}).List(ctx, &cur); err != nil {
		return err
	}
	var ops []ovsdb.Operation
	var add, del []string
	for _, w := range want {
		ids := vendorIDs(match)
		nets := []string{w.Network.String()}
		i := slices.IndexFunc(cur, func(p *nbdb.LogicalRouterPort) bool { return p.Name == w.Name })
		if i < 0 {
			lrp := &nbdb.LogicalRouterPort{UUID: "newpeer" + strconv.Itoa(len(add)), Name: w.Name, MAC: RouterPortMAC(w.Name), Networks: nets,
				Peer: &w.Peer, ExternalIDs: ids}
			o, err := c.cl.Create(lrp)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
			add = append(add, lrp.UUID)
			continue
		}
		p := cur[i]
		if !slices.Equal(p.Networks, nets) || p.Peer == nil || *p.Peer != w.Peer {
			p.Networks, p.Peer = nets, &w.Peer
			o, err := c.cl.Where(p).Update(p, &p.Networks, &p.Peer)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
	}
	for _, p := range cur {
		if !slices.ContainsFunc(want, func(w PeerPort) bool { return w.Name == p.Name }) {
			del = append(del, p.UUID)
		}
	}
	for _, m := range []struct {
		op ovsdb.Mutator
		v  []string
	}{{ovsdb.MutateOperationDelete, del}, {ovsdb.MutateOperationInsert, add}} {
		if len(m.v) == 0 {
			continue
		}
		o, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: m.op, Value: m.v})
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err = c.transact(ctx, "set peering ports on "+router, ops)
	return err
}

// RouterPorts are the names of router's ports.
func (c *Client) RouterPorts(ctx context.Context, router string) ([]string, error) {
	r, err := c.router(ctx, router)
	if err != nil || r == nil {
		return nil, err
	}
	var cur []*nbdb.LogicalRouterPort
	if err := c.cl.WhereCache(func(p *nbdb.LogicalRouterPort) bool { return slices.Contains(r.Ports, p.UUID) }).List(ctx, &cur); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range cur {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out, nil
}

// DetachSwitch removes the router port pair between switch sw and router
// (a subnet that moved to another VPC), if there is one.
func (c *Client) DetachSwitch(ctx context.Context, sw, router string) error {
	ops, err := c.detachOps(ctx, sw, router)
	if err != nil || len(ops) == 0 {
		return err
	}
	_, err = c.transact(ctx, "detach switch "+sw+" from "+router, ops)
	return err
}

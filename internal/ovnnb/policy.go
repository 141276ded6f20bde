package ovnnb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// AddressSet is a named set of addresses or CIDRs that matches refer to as
// $Name. Names must match [a-zA-Z_.][a-zA-Z_.0-9]* (OVN's rule).
type AddressSet struct {
	Name        string
	Addresses   []string
	ExternalIDs map[string]string
}

// addressSet reads the set called name through the schema's name index
// (a predicate would visit, and List clone, every set: milliseconds per
// lookup with thousands of NetworkPolicy sets).
func (c *Client) addressSet(ctx context.Context, name string) (*nbdb.AddressSet, error) {
	a := &nbdb.AddressSet{Name: name}
	if err := c.cl.Get(ctx, a); errors.Is(err, client.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return a, nil
}

// EnsureAddressSet creates the set or sets its addresses to exactly these.
func (c *Client) EnsureAddressSet(ctx context.Context, s AddressSet) error {
	addrs := slices.Clone(s.Addresses)
	slices.Sort(addrs)
	addrs = slices.Compact(addrs)
	ids := vendorIDs(s.ExternalIDs)
	cur, err := c.addressSet(ctx, s.Name)
	if err != nil {
		return err
	}
	if cur == nil {
		if err := c.CreateAddressSetIfMissing(ctx, AddressSet{Name: s.Name, Addresses: addrs, ExternalIDs: s.ExternalIDs}); err != nil {
			return err
		}
	} else {
		have := slices.Clone(cur.Addresses)
		slices.Sort(have)
		if slices.Equal(have, addrs) && maps.Equal(cur.ExternalIDs, ids) {
			return nil
		}
	}
	// By name: it may have been created a moment ago (here or elsewhere).
	upd := &nbdb.AddressSet{Addresses: addrs, ExternalIDs: ids}
	ops, err := c.cl.WhereAll(upd, model.Condition{Field: &upd.Name, Function: ovsdb.ConditionEqual, Value: s.Name}).
		Update(upd, &upd.Addresses, &upd.ExternalIDs)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "ensure address set "+s.Name, ops)
	return err
}

// AddressSetDelete removes addresses from a set; a missing set is fine.
func (c *Client) AddressSetDelete(ctx context.Context, name string, addrs ...string) error {
	return c.mutateAddressSet(ctx, name, ovsdb.MutateOperationDelete, addrs)
}

func (c *Client) mutateAddressSet(ctx context.Context, name string, op ovsdb.Mutator, addrs []string) error {
	if len(addrs) == 0 {
		return nil
	}
	if cur, err := c.addressSet(ctx, name); err == nil && cur != nil {
		if op == ovsdb.MutateOperationInsert && !slices.ContainsFunc(addrs, func(a string) bool { return !slices.Contains(cur.Addresses, a) }) {
			return nil
		}
		if op == ovsdb.MutateOperationDelete && !slices.ContainsFunc(addrs, func(a string) bool { return slices.Contains(cur.Addresses, a) }) {
			return nil
		}
	}
	// By name, not by the cached UUID: a set created a moment ago may not
	// be in the cache yet.
	as := &nbdb.AddressSet{}
	ops, err := c.cl.WhereAll(as, model.Condition{Field: &as.Name, Function: ovsdb.ConditionEqual, Value: name}).
		Mutate(as, model.Mutation{Field: &as.Addresses, Mutator: op, Value: addrs})
	if err != nil {
		return err
	}
	res, err := c.transact(ctx, fmt.Sprintf("%s %v in address set %s", op, addrs, name), ops)
	if err != nil {
		return err
	}
	if op == ovsdb.MutateOperationInsert && len(res) > 0 && res[0].Count == 0 {
		return fmt.Errorf("ovnnb: address set %q does not exist", name)
	}
	return nil
}

// FamilySets names one address set per IP family: an OVN match compares
// addresses of one family (ip4.src or ip6.src), so each family has its own
// set. "" is no set for that family.
type FamilySets struct{ V4, V6 string }

// addressSetInsertOps are the operations that add ips to sets (IPv4 ones
// to V4, IPv6 ones to V6), none for a set whose addresses the cache shows
// there already.
func (c *Client) addressSetInsertOps(ctx context.Context, sets FamilySets, ips []netip.Addr) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	for _, f := range []struct {
		name string
		is   func(netip.Addr) bool
	}{{sets.V4, netip.Addr.Is4}, {sets.V6, netip.Addr.Is6}} {
		var addrs []string
		for _, ip := range ips {
			if f.is(ip) {
				addrs = append(addrs, ip.String())
			}
		}
		if f.name == "" || len(addrs) == 0 {
			continue
		}
		if cur, err := c.addressSet(ctx, f.name); err == nil && cur != nil &&
			!slices.ContainsFunc(addrs, func(a string) bool { return !slices.Contains(cur.Addresses, a) }) {
			continue
		}
		as := &nbdb.AddressSet{}
		o, err := c.cl.WhereAll(as, model.Condition{Field: &as.Name, Function: ovsdb.ConditionEqual, Value: f.name}).
			Mutate(as, model.Mutation{Field: &as.Addresses, Mutator: ovsdb.MutateOperationInsert, Value: addrs})
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// DeleteAddressSet removes the set if it exists.
func (c *Client) DeleteAddressSet(ctx context.Context, name string) error {
	cur, err := c.addressSet(ctx, name)
	if err != nil || cur == nil {
		return err
	}
	ops, err := c.cl.Where(cur).Delete()
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "delete address set "+name, ops)
	return err
}

// Policy is a logical router policy: packets matching Match at Priority are
// rerouted to Nexthop (or allowed when Nexthop is invalid).
type Policy struct {
	Router      string
	Priority    int
	Match       string
	Nexthop     netip.Addr
	ExternalIDs map[string]string
}

func (c *Client) policies(ctx context.Context, r *nbdb.LogicalRouter, keep func(*nbdb.LogicalRouterPolicy) bool) ([]*nbdb.LogicalRouterPolicy, error) {
	var cur []*nbdb.LogicalRouterPolicy
	err := c.cl.WhereCache(func(p *nbdb.LogicalRouterPolicy) bool {
		return slices.Contains(r.Policies, p.UUID) && keep(p)
	}).List(ctx, &cur)
	return cur, err
}

// EnsurePolicy creates or updates the router's policy of that priority and
// match (OVN's own key for a policy).
func (c *Client) EnsurePolicy(ctx context.Context, p Policy) error {
	r, err := c.router(ctx, p.Router)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("ovnnb: policy %q: router %q does not exist", p.Match, p.Router)
	}
	// nexthops, not the deprecated nexthop column, which northd 23.03 ignores.
	action, nexthops := nbdb.LogicalRouterPolicyActionAllow, []string(nil)
	if p.Nexthop.IsValid() {
		action, nexthops = nbdb.LogicalRouterPolicyActionReroute, []string{p.Nexthop.String()}
	}
	ids := vendorIDs(p.ExternalIDs)
	cur, err := c.policies(ctx, r, func(x *nbdb.LogicalRouterPolicy) bool { return x.Priority == p.Priority && x.Match == p.Match })
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	if len(cur) > 0 {
		x := cur[0]
		if x.Action == action && slices.Equal(x.Nexthops, nexthops) && x.Nexthop == nil && maps.Equal(x.ExternalIDs, ids) {
			return nil
		}
		x.Action, x.Nexthops, x.Nexthop, x.ExternalIDs = action, nexthops, nil, ids
		ops, err = c.cl.Where(x).Update(x, &x.Action, &x.Nexthops, &x.Nexthop, &x.ExternalIDs)
		if err != nil {
			return err
		}
	} else {
		x := &nbdb.LogicalRouterPolicy{UUID: "newpolicy", Priority: p.Priority, Match: p.Match, Action: action, Nexthops: nexthops, ExternalIDs: ids}
		o, err := c.cl.Create(x)
		if err != nil {
			return err
		}
		m, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Policies, Mutator: ovsdb.MutateOperationInsert, Value: []string{x.UUID}})
		if err != nil {
			return err
		}
		ops = append(o, m...)
	}
	_, err = c.transact(ctx, fmt.Sprintf("ensure policy %d %q on %s", p.Priority, p.Match, p.Router), ops)
	return err
}

// DeletePolicies removes the ovnhost policies of a router whose external IDs
// contain match.
func (c *Client) DeletePolicies(ctx context.Context, router string, match map[string]string) error {
	return c.DeletePoliciesExcept(ctx, router, match, nil)
}

// DeletePoliciesExcept removes the ovnhost policies of a router whose
// external IDs contain match, except those whose match is in keep.
func (c *Client) DeletePoliciesExcept(ctx context.Context, router string, match map[string]string, keep []string) error {
	r, err := c.router(ctx, router)
	if err != nil || r == nil {
		return err
	}
	cur, err := c.policies(ctx, r, func(x *nbdb.LogicalRouterPolicy) bool {
		return owned(x.ExternalIDs, match) && !slices.Contains(keep, x.Match)
	})
	if err != nil || len(cur) == 0 {
		return err
	}
	var uuids []string
	for _, x := range cur {
		uuids = append(uuids, x.UUID)
	}
	ops, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Policies, Mutator: ovsdb.MutateOperationDelete, Value: uuids})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "delete policies on "+router, ops)
	return err
}

// owned: ours (vendor) and carrying every key of match.
func owned(ids, match map[string]string) bool {
	if ids[KeyVendor] != Vendor {
		return false
	}
	for k, v := range match {
		if ids[k] != v {
			return false
		}
	}
	return true
}

// CreateAddressSetIfMissing creates the set (with s.Addresses) unless one of
// that name exists; an existing set keeps its addresses. Atomic in the
// server: the insert is guarded by a wait for no row of that name, so
// concurrent callers create it once.
func (c *Client) CreateAddressSetIfMissing(ctx context.Context, s AddressSet) error {
	if cur, err := c.addressSet(ctx, s.Name); err != nil || cur != nil {
		return err
	}
	zero := 0
	wait := ovsdb.Operation{Op: ovsdb.OperationWait, Table: nbdb.AddressSetTable, Timeout: &zero,
		Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: s.Name}},
		// "until the rows of that name are not [that name]": OVSDB requires
		// a non-empty rows member here (an empty one is dropped by encoding).
		Columns: []string{"name"}, Until: string(ovsdb.WaitConditionNotEqual), Rows: []ovsdb.Row{{"name": s.Name}}}
	ins, err := c.cl.Create(&nbdb.AddressSet{Name: s.Name, Addresses: s.Addresses, ExternalIDs: vendorIDs(s.ExternalIDs)})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "create address set "+s.Name, append([]ovsdb.Operation{wait}, ins...))
	var tx *ovsdbconn.TxError
	if errors.As(err, &tx) && tx.TimedOut() {
		return nil // created by someone else meanwhile
	}
	return err
}

// AddressSets lists the ovnhost address sets whose external IDs contain match.
// A policy's sets (match with KeyPolicy) come from the client index, not a
// visit of every set.
func (c *Client) AddressSets(_ context.Context, match map[string]string) ([]AddressSet, error) {
	rows, err := c.policyRows(nbdb.AddressSetTable, &nbdb.AddressSet{ExternalIDs: map[string]string{KeyPolicy: match[KeyPolicy]}}, match)
	if err != nil {
		return nil, err
	}
	var out []AddressSet
	for _, m := range rows {
		if a, ok := m.(*nbdb.AddressSet); ok && owned(a.ExternalIDs, match) {
			out = append(out, AddressSet{Name: a.Name, Addresses: slices.Clone(a.Addresses), ExternalIDs: maps.Clone(a.ExternalIDs)})
		}
	}
	slices.SortFunc(out, func(a, b AddressSet) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

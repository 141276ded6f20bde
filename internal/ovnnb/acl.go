package ovnnb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// ACL is one access control list entry of a port group.
type ACL struct {
	Direction string // "to-lport" or "from-lport"
	Priority  int
	Match     string
	Action    string // "allow-related", "drop", ...
	Log       bool
	Name      string // logged name ("" = none)
	Severity  string // log severity ("" = none)
	Options   map[string]string
}

// key identifies an ACL by everything it does, so unchanged ACLs stay put.
func (a ACL) key() string {
	opts := make([]string, 0, len(a.Options))
	for k, v := range a.Options {
		opts = append(opts, k+"="+v)
	}
	sort.Strings(opts)
	return strings.Join([]string{a.Direction, strconv.Itoa(a.Priority), a.Action, a.Match, strconv.FormatBool(a.Log), a.Name, a.Severity, strings.Join(opts, ",")}, "\x00")
}

func aclKey(x *nbdb.ACL) string {
	a := ACL{Direction: string(x.Direction), Priority: x.Priority, Match: x.Match, Action: string(x.Action), Log: x.Log, Options: x.Options}
	if x.Name != nil {
		a.Name = *x.Name
	}
	if x.Severity != nil {
		a.Severity = string(*x.Severity)
	}
	return a.key()
}

func (a ACL) row(uuid string, ids map[string]string) *nbdb.ACL {
	r := &nbdb.ACL{UUID: uuid, Direction: nbdb.ACLDirection(a.Direction), Priority: a.Priority, Match: a.Match,
		Action: nbdb.ACLAction(a.Action), Log: a.Log, Options: a.Options, ExternalIDs: ids}
	if a.Name != "" {
		n := a.Name
		r.Name = &n
	}
	if a.Severity != "" {
		s := nbdb.ACLSeverity(a.Severity)
		r.Severity = &s
	}
	return r
}

// PortGroup is a port group with its ACLs and the address sets they use,
// all owned by ExternalIDs (every row carries them).
type PortGroup struct {
	Name        string
	ExternalIDs map[string]string
	Ports       []string // logical switch port names
	ACLs        []ACL
	AddressSets []AddressSet
}

func portGroupTables(on bool) []ovsdbconn.Table {
	if !on {
		return nil
	}
	// The model's columns by name (ovsdbconn.Dial's default): a newer NB's
	// extra columns (ACL.tier, which Kube-OVN writes) would otherwise break
	// the cache on update.
	return []ovsdbconn.Table{{Model: &nbdb.PortGroup{}}, {Model: &nbdb.ACL{}}}
}

// MonitorsPortGroups says whether the connection caches Port_Group and ACL
// (Options.PortGroups); the port group calls need them.
func (c *Client) MonitorsPortGroups() bool { return c.portGroups }

func (c *Client) portGroup(ctx context.Context, name string) (*nbdb.PortGroup, error) {
	var pgs []nbdb.PortGroup
	if err := c.cl.WhereCache(func(p *nbdb.PortGroup) bool { return p.Name == name }).List(ctx, &pgs); err != nil {
		return nil, err
	}
	if len(pgs) == 0 {
		return nil, nil
	}
	return &pgs[0], nil
}

// EnsurePortGroup brings the port group, its ACLs and its address sets to
// exactly pg in one transaction: only differences are written, as
// mutations (ports and addresses in and out, ACLs added or removed), so
// pods coming and going leave unchanged ACLs alone. Each existing row
// written is guarded by a wait for the contents the cache showed: a cache
// that lags an earlier write fails the transaction (retry) rather than
// computing a wrong difference. Address sets carrying pg.ExternalIDs that
// pg no longer lists are deleted. missing lists the ports not (yet) in the
// NB; they are left out.
func (c *Client) EnsurePortGroup(ctx context.Context, pg PortGroup) (missing []string, err error) {
	ids := vendorIDs(pg.ExternalIDs)
	var ops []ovsdb.Operation
	zero := 0

	// Address sets first: the ACLs below may refer to new ones.
	want := map[string]bool{}
	for _, s := range pg.AddressSets {
		want[s.Name] = true
		addrs := slices.Clone(s.Addresses)
		slices.Sort(addrs)
		addrs = slices.Compact(addrs)
		cur, err := c.addressSet(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		if cur == nil {
			o, err := c.cl.Create(&nbdb.AddressSet{Name: s.Name, Addresses: addrs, ExternalIDs: ids})
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
			continue
		}
		add, del := diff(cur.Addresses, addrs)
		if len(add) == 0 && len(del) == 0 {
			continue
		}
		as := &nbdb.AddressSet{UUID: cur.UUID, Addresses: cur.Addresses}
		o, err := c.cl.Where(as).Wait(ovsdb.WaitConditionEqual, &zero, as, &as.Addresses)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
		var muts []model.Mutation
		if len(del) > 0 {
			muts = append(muts, model.Mutation{Field: &as.Addresses, Mutator: ovsdb.MutateOperationDelete, Value: del})
		}
		if len(add) > 0 {
			muts = append(muts, model.Mutation{Field: &as.Addresses, Mutator: ovsdb.MutateOperationInsert, Value: add})
		}
		for _, m := range muts {
			o, err := c.cl.Where(as).Mutate(as, m)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
	}

	var ports []string
	for _, n := range pg.Ports {
		lsp := &nbdb.LogicalSwitchPort{Name: n}
		if err := c.cl.Get(ctx, lsp); errors.Is(err, client.ErrNotFound) {
			missing = append(missing, n)
			continue
		} else if err != nil {
			return nil, err
		}
		ports = append(ports, lsp.UUID)
	}
	cur, err := c.portGroup(ctx, pg.Name)
	if err != nil {
		return nil, err
	}
	if cur == nil {
		row := &nbdb.PortGroup{UUID: "newpg", Name: pg.Name, Ports: ports, ExternalIDs: ids}
		for i, a := range pg.ACLs {
			r := a.row(fmt.Sprintf("newacl%d", i), ids)
			o, err := c.cl.Create(r)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
			row.ACLs = append(row.ACLs, r.UUID)
		}
		o, err := c.cl.Create(row)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	} else {
		have := map[string][]string{} // ACL key -> uuids
		for _, u := range cur.ACLs {
			x := &nbdb.ACL{UUID: u}
			if err := c.cl.Get(ctx, x); err != nil {
				// An ACL the cache does not show yet: drop it and recreate.
				have["?"+u] = append(have["?"+u], u)
				continue
			}
			k := aclKey(x)
			have[k] = append(have[k], u)
		}
		var addACL []ovsdb.Operation
		var newACLs, delACLs []string
		for i, a := range pg.ACLs {
			k := a.key()
			if len(have[k]) > 0 {
				have[k] = have[k][1:]
				continue
			}
			r := a.row(fmt.Sprintf("newacl%d", i), ids)
			o, err := c.cl.Create(r)
			if err != nil {
				return nil, err
			}
			addACL = append(addACL, o...)
			newACLs = append(newACLs, r.UUID)
		}
		for _, us := range have {
			delACLs = append(delACLs, us...)
		}
		addP, delP := diff(cur.Ports, ports)
		if len(addACL)+len(delACLs)+len(addP)+len(delP) > 0 || !maps.Equal(cur.ExternalIDs, ids) {
			g := &nbdb.PortGroup{UUID: cur.UUID, Ports: cur.Ports, ACLs: cur.ACLs}
			o, err := c.cl.Where(g).Wait(ovsdb.WaitConditionEqual, &zero, g, &g.Ports, &g.ACLs)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
			ops = append(ops, addACL...)
			var muts []model.Mutation
			if len(delACLs) > 0 {
				muts = append(muts, model.Mutation{Field: &g.ACLs, Mutator: ovsdb.MutateOperationDelete, Value: delACLs})
			}
			if len(newACLs) > 0 {
				muts = append(muts, model.Mutation{Field: &g.ACLs, Mutator: ovsdb.MutateOperationInsert, Value: newACLs})
			}
			if len(delP) > 0 {
				muts = append(muts, model.Mutation{Field: &g.Ports, Mutator: ovsdb.MutateOperationDelete, Value: delP})
			}
			if len(addP) > 0 {
				muts = append(muts, model.Mutation{Field: &g.Ports, Mutator: ovsdb.MutateOperationInsert, Value: addP})
			}
			for _, m := range muts {
				o, err := c.cl.Where(g).Mutate(g, m)
				if err != nil {
					return nil, err
				}
				ops = append(ops, o...)
			}
			if !maps.Equal(cur.ExternalIDs, ids) {
				g.ExternalIDs = ids
				o, err := c.cl.Where(g).Update(g, &g.ExternalIDs)
				if err != nil {
					return nil, err
				}
				ops = append(ops, o...)
			}
		}
	}

	// Sets no longer used, after the ACLs that used them are gone.
	stale, err := c.AddressSets(ctx, pg.ExternalIDs)
	if err != nil {
		return nil, err
	}
	for _, s := range stale {
		if want[s.Name] {
			continue
		}
		as := &nbdb.AddressSet{}
		o, err := c.cl.WhereAll(as, model.Condition{Field: &as.Name, Function: ovsdb.ConditionEqual, Value: s.Name}).Delete()
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	_, err = c.transact(ctx, "ensure port group "+pg.Name, ops)
	return missing, err
}

// diff: what to add to have to get want, and what to remove.
func diff(have, want []string) (add, del []string) {
	h := make(map[string]bool, len(have))
	for _, x := range have {
		h[x] = true
	}
	w := make(map[string]bool, len(want))
	for _, x := range want {
		w[x] = true
		if !h[x] {
			add = append(add, x)
		}
	}
	for _, x := range have {
		if !w[x] {
			del = append(del, x)
		}
	}
	return add, del
}

// DeletePortGroups removes the ovnhost port groups (their ACLs go with
// them) and address sets whose external IDs contain match and for which
// keep is false (nil keep: all of them), in one transaction.
func (c *Client) DeletePortGroups(ctx context.Context, match map[string]string, keep func(ids map[string]string) bool) error {
	var pgs []nbdb.PortGroup
	if err := c.cl.WhereCache(func(p *nbdb.PortGroup) bool {
		return owned(p.ExternalIDs, match) && (keep == nil || !keep(p.ExternalIDs))
	}).List(ctx, &pgs); err != nil {
		return err
	}
	var sets []nbdb.AddressSet
	if err := c.cl.WhereCache(func(a *nbdb.AddressSet) bool {
		return owned(a.ExternalIDs, match) && (keep == nil || !keep(a.ExternalIDs))
	}).List(ctx, &sets); err != nil {
		return err
	}
	var ops []ovsdb.Operation
	for i := range pgs {
		o, err := c.cl.Where(&pgs[i]).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	for i := range sets {
		o, err := c.cl.Where(&sets[i]).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	_, err := c.transact(ctx, fmt.Sprintf("delete %d port groups and %d address sets", len(pgs), len(sets)), ops)
	return err
}

// PortGroupsOwned lists the external IDs of the ovnhost port groups whose
// external IDs contain match.
func (c *Client) PortGroupsOwned(ctx context.Context, match map[string]string) ([]map[string]string, error) {
	var pgs []nbdb.PortGroup
	if err := c.cl.WhereCache(func(p *nbdb.PortGroup) bool { return owned(p.ExternalIDs, match) }).List(ctx, &pgs); err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(pgs))
	for i := range pgs {
		out[i] = pgs[i].ExternalIDs
	}
	return out, nil
}

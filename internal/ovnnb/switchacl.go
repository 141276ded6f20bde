package ovnnb

import (
	"context"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// EnsureSwitchACLs brings the ACLs of switch sw that carry ids (with
// vendor=ovnhost) to exactly acls, in one transaction: unchanged ACLs stay,
// the others are added or removed by mutating the switch's acls column,
// guarded by a wait for the column the cache showed. ACLs on the switch that
// do not carry ids (another owner's, another tool's) are left alone. The same
// ACL type and comparison serve NetworkPolicy port groups (EnsurePortGroup).
func (c *Client) EnsureSwitchACLs(ctx context.Context, sw string, ids map[string]string, acls []ACL) error {
	if !c.portGroups {
		if len(acls) == 0 {
			return nil // nothing asked; without the ACL table none of ours can be seen either
		}
		return fmt.Errorf("ovnnb: ACLs of switch %q: the ACL table is not monitored; connect with Options.PortGroups", sw)
	}
	ls, err := c.lswitch(ctx, sw)
	if err != nil {
		return err
	}
	if ls == nil {
		if len(acls) == 0 {
			return nil
		}
		return fmt.Errorf("ovnnb: ACLs of switch %q: %w", sw, ErrNoSwitch)
	}
	full := vendorIDs(ids)
	have := map[string][]string{} // key -> uuids of our ACLs
	for _, u := range ls.ACLs {
		x := &nbdb.ACL{UUID: u}
		if err := c.cl.Get(ctx, x); err != nil || !owned(x.ExternalIDs, ids) {
			continue
		}
		k := aclKey(x)
		have[k] = append(have[k], u)
	}
	var ops []ovsdb.Operation
	var add, del []string
	for i, a := range acls {
		if k := a.key(); len(have[k]) > 0 {
			have[k] = have[k][1:]
			continue
		}
		r := a.row(fmt.Sprintf("newswacl%d", i), full)
		o, err := c.cl.Create(r)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		add = append(add, r.UUID)
	}
	for _, us := range have {
		del = append(del, us...)
	}
	if len(add) == 0 && len(del) == 0 {
		return nil
	}
	zero := 0
	g := &nbdb.LogicalSwitch{UUID: ls.UUID, ACLs: ls.ACLs}
	w, err := c.cl.Where(g).Wait(ovsdb.WaitConditionEqual, &zero, g, &g.ACLs)
	if err != nil {
		return err
	}
	ops = append(w, ops...)
	if len(del) > 0 {
		o, err := c.cl.Where(g).Mutate(g, model.Mutation{Field: &g.ACLs, Mutator: ovsdb.MutateOperationDelete, Value: del})
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if len(add) > 0 {
		o, err := c.cl.Where(g).Mutate(g, model.Mutation{Field: &g.ACLs, Mutator: ovsdb.MutateOperationInsert, Value: add})
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	_, err = c.transact(ctx, fmt.Sprintf("set %d ACLs of switch %s (%d added, %d removed)", len(acls), sw, len(add), len(del)), ops)
	return err
}

// SwitchACLs lists the ACLs of switch sw that carry ids.
func (c *Client) SwitchACLs(ctx context.Context, sw string, ids map[string]string) ([]ACL, error) {
	if !c.portGroups {
		return nil, fmt.Errorf("ovnnb: ACLs of switch %q: the ACL table is not monitored; connect with Options.PortGroups", sw)
	}
	ls, err := c.lswitch(ctx, sw)
	if err != nil || ls == nil {
		return nil, err
	}
	var out []ACL
	for _, u := range ls.ACLs {
		x := &nbdb.ACL{UUID: u}
		if err := c.cl.Get(ctx, x); err != nil || !owned(x.ExternalIDs, ids) {
			continue
		}
		a := ACL{Direction: string(x.Direction), Priority: x.Priority, Match: x.Match, Action: string(x.Action), Log: x.Log, Options: x.Options}
		out = append(out, a)
	}
	return out, nil
}

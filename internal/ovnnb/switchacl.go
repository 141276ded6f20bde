package ovnnb

import (
	"context"
	"fmt"

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
	g := &nbdb.LogicalSwitch{UUID: ls.UUID, ACLs: ls.ACLs}
	ops, plan, err := c.guardedChildren(g, []any{&g.ACLs},
		childSet{field: &g.ACLs, have: c.existingACLs(ctx, ls.ACLs, ids), want: aclChildren(acls, "newswacl", vendorIDs(ids))})
	if err != nil || len(ops) == 0 {
		return err
	}
	_, err = c.transact(ctx, fmt.Sprintf("set %d ACLs of switch %s (%d added, %d removed)", len(acls), sw, len(plan.added[0]), len(plan.removed[0])), ops)
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

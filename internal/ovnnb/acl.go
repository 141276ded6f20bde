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
	// Meter names the OVN meter that rate-limits this ACL's log (ACLLogMeter); "" = none.
	Meter   string
	Options map[string]string
}

// key identifies an ACL by everything it does, so unchanged ACLs stay put.
func (a ACL) key() string {
	opts := make([]string, 0, len(a.Options))
	for k, v := range a.Options {
		opts = append(opts, k+"="+v)
	}
	sort.Strings(opts)
	return strings.Join([]string{a.Direction, strconv.Itoa(a.Priority), a.Action, a.Match, strconv.FormatBool(a.Log), a.Name, a.Severity, a.Meter, strings.Join(opts, ",")}, "\x00")
}

func aclKey(x *nbdb.ACL) string {
	a := ACL{Direction: string(x.Direction), Priority: x.Priority, Match: x.Match, Action: string(x.Action), Log: x.Log, Options: x.Options}
	if x.Name != nil {
		a.Name = *x.Name
	}
	if x.Severity != nil {
		a.Severity = string(*x.Severity)
	}
	if x.Meter != nil {
		a.Meter = *x.Meter
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
	if a.Meter != "" {
		m := a.Meter
		r.Meter = &m
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
	// Meter and Meter_Band: the logging ACLs' rate limit (meter.go).
	return []ovsdbconn.Table{{Model: &nbdb.PortGroup{}}, {Model: &nbdb.ACL{}}, {Model: &nbdb.Meter{}}, {Model: &nbdb.MeterBand{}}}
}

// MonitorsPortGroups says whether the connection caches Port_Group and ACL
// (Options.PortGroups); the port group calls need them.
func (c *Client) MonitorsPortGroups() bool { return c.portGroups }

// portGroup reads the group called name through the schema's name index.
func (c *Client) portGroup(ctx context.Context, name string) (*nbdb.PortGroup, error) {
	pg := &nbdb.PortGroup{Name: name}
	if err := c.cl.Get(ctx, pg); errors.Is(err, client.ErrNotFound) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	return pg, nil
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
	// Address sets first: the ACLs below may refer to new ones.
	ops, err := c.addressSetOps(ctx, pg.AddressSets, ids)
	if err != nil {
		return nil, err
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
	pgOps, err := c.portGroupOps(ctx, pg, ids, ports)
	if err != nil {
		return nil, err
	}
	ops = append(ops, pgOps...)
	// Sets no longer used, after the ACLs that used them are gone.
	stale, err := c.AddressSets(ctx, pg.ExternalIDs)
	if err != nil {
		return nil, err
	}
	for _, s := range stale {
		if slices.ContainsFunc(pg.AddressSets, func(w AddressSet) bool { return w.Name == s.Name }) {
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

// addressSetOps create the port group's address sets or bring their
// addresses in line, each existing one guarded by a wait for the addresses
// the cache showed.
func (c *Client) addressSetOps(ctx context.Context, sets []AddressSet, ids map[string]string) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	for _, s := range sets {
		cur, err := c.addressSet(ctx, s.Name)
		if err != nil {
			return nil, err
		}
		want := uniqueValues(s.Addresses)
		if cur == nil {
			addrs := make([]string, len(want))
			for i, w := range want {
				addrs[i] = w.value
			}
			o, err := c.cl.Create(&nbdb.AddressSet{Name: s.Name, Addresses: addrs, ExternalIDs: ids})
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
			continue
		}
		as := &nbdb.AddressSet{UUID: cur.UUID, Addresses: cur.Addresses}
		o, _, err := c.guardedChildren(as, []any{&as.Addresses}, childSet{field: &as.Addresses, have: values(cur.Addresses), want: want})
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// portGroupOps create the port group with its ACLs, or bring an existing
// one's ACLs, ports (UUIDs) and external IDs in line, guarded by a wait for
// the ports and ACLs the cache showed.
func (c *Client) portGroupOps(ctx context.Context, pg PortGroup, ids map[string]string, ports []string) ([]ovsdb.Operation, error) {
	cur, err := c.portGroup(ctx, pg.Name)
	if err != nil {
		return nil, err
	}
	if cur != nil {
		// A port group of this name owned by someone else (another
		// policy whose name maps to the same one) is never taken over:
		// its ports and ACLs are another tenant's isolation.
		for k, v := range pg.ExternalIDs {
			if have, ok := cur.ExternalIDs[k]; ok && have != v {
				return nil, fmt.Errorf("port group %s belongs to %s=%s, not %s=%s: a name collision; it is left as it is (rename the policy)", pg.Name, k, have, k, v)
			}
		}
	}
	// The owner's port groups under another name (a naming change across
	// an upgrade) go: their ACLs would apply beside the new ones.
	var renamed []*nbdb.PortGroup
	if len(pg.ExternalIDs) > 0 {
		owners, err := c.ownedPortGroups(pg.ExternalIDs)
		if err != nil {
			return nil, err
		}
		for _, p := range owners {
			if p.Name != pg.Name {
				renamed = append(renamed, p)
			}
		}
	}
	var dropOld []ovsdb.Operation
	for _, p := range renamed {
		o, err := c.cl.Where(&nbdb.PortGroup{UUID: p.UUID}).Delete()
		if err != nil {
			return nil, err
		}
		dropOld = append(dropOld, o...)
	}
	ops, err := c.portGroupUpsertOps(ctx, pg, ids, ports, cur)
	if err != nil {
		return nil, err
	}
	return append(dropOld, ops...), nil
}

func (c *Client) portGroupUpsertOps(ctx context.Context, pg PortGroup, ids map[string]string, ports []string, cur *nbdb.PortGroup) ([]ovsdb.Operation, error) {
	if cur == nil {
		row := &nbdb.PortGroup{UUID: "newpg", Name: pg.Name, Ports: ports, ExternalIDs: ids}
		plan, err := c.planChildren(childSet{field: &row.ACLs, want: aclChildren(pg.ACLs, "newacl", ids)})
		if err != nil {
			return nil, err
		}
		row.ACLs = plan.added[0]
		o, err := c.cl.Create(row)
		if err != nil {
			return nil, err
		}
		return append(plan.creates, o...), nil
	}
	g := &nbdb.PortGroup{UUID: cur.UUID, Ports: cur.Ports, ACLs: cur.ACLs}
	plan, err := c.planChildren(
		childSet{field: &g.ACLs, have: c.existingACLs(ctx, cur.ACLs, nil), want: aclChildren(pg.ACLs, "newacl", ids)},
		childSet{field: &g.Ports, have: values(cur.Ports), want: uniqueValues(ports)},
	)
	if err != nil {
		return nil, err
	}
	sameIDs := maps.Equal(cur.ExternalIDs, ids)
	if plan.empty() && sameIDs {
		return nil, nil
	}
	ops, err := c.guard(g, &g.Ports, &g.ACLs)
	if err != nil {
		return nil, err
	}
	o, err := c.applyChildren(g, plan)
	if err != nil {
		return nil, err
	}
	ops = append(ops, o...)
	if !sameIDs {
		g.ExternalIDs = ids
		o, err := c.cl.Where(g).Update(g, &g.ExternalIDs)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// guard is a wait that aborts the transaction unless the parent row's
// fields still hold what the cache showed (the values in parent).
func (c *Client) guard(parent model.Model, fields ...any) ([]ovsdb.Operation, error) {
	zero := 0
	return c.cl.Where(parent).Wait(ovsdb.WaitConditionEqual, &zero, parent, fields...)
}

// guardedChildren is the plan for cols as operations on parent behind a
// guard on fields (none when nothing changes).
func (c *Client) guardedChildren(parent model.Model, fields []any, cols ...childSet) ([]ovsdb.Operation, childPlan, error) {
	plan, err := c.planChildren(cols...)
	if err != nil || plan.empty() {
		return nil, plan, err
	}
	ops, err := c.guard(parent, fields...)
	if err != nil {
		return nil, plan, err
	}
	o, err := c.applyChildren(parent, plan)
	return append(ops, o...), plan, err
}

// aclChildren are the wanted ACL rows, named prefix0, prefix1, ...
func aclChildren(acls []ACL, prefix string, ids map[string]string) []child {
	out := make([]child, len(acls))
	for i, a := range acls {
		out[i] = child{key: a.key(), row: a.row(prefix+strconv.Itoa(i), ids)}
	}
	return out
}

// existingACLs are the ACLs of uuids as children; with match, only those
// whose external IDs carry it (others are not the caller's and stay out of
// the diff). An ACL the cache does not show yet gets a key nothing wants:
// it is dropped and recreated.
func (c *Client) existingACLs(ctx context.Context, uuids []string, match map[string]string) []child {
	var out []child
	for _, u := range uuids {
		x := &nbdb.ACL{UUID: u}
		if err := c.cl.Get(ctx, x); err != nil {
			if match == nil {
				out = append(out, child{key: "?" + u, value: u})
			}
			continue
		}
		if match != nil && !owned(x.ExternalIDs, match) {
			continue
		}
		out = append(out, child{key: aclKey(x), value: u})
	}
	return out
}

// DeletePortGroups removes the ovnhost port groups (their ACLs go with
// them) and address sets whose external IDs contain match and for which
// keep is false (nil keep: all of them), in one transaction.
func (c *Client) DeletePortGroups(ctx context.Context, match map[string]string, keep func(ids map[string]string) bool) error {
	owners, err := c.ownedPortGroups(match)
	if err != nil {
		return err
	}
	var pgs []*nbdb.PortGroup
	for _, p := range owners {
		if keep == nil || !keep(p.ExternalIDs) {
			pgs = append(pgs, p)
		}
	}
	all, err := c.AddressSets(ctx, match)
	if err != nil {
		return err
	}
	var sets []AddressSet
	for _, a := range all {
		if keep == nil || !keep(a.ExternalIDs) {
			sets = append(sets, a)
		}
	}
	var ops []ovsdb.Operation
	for _, p := range pgs {
		o, err := c.cl.Where(&nbdb.PortGroup{UUID: p.UUID}).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	for _, a := range sets {
		o, err := c.cl.Where(&nbdb.AddressSet{Name: a.Name}).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	_, err = c.transact(ctx, fmt.Sprintf("delete %d port groups and %d address sets", len(pgs), len(sets)), ops)
	return err
}

// PortGroupsOwned lists the external IDs of the ovnhost port groups whose
// external IDs contain match.
func (c *Client) PortGroupsOwned(_ context.Context, match map[string]string) ([]map[string]string, error) {
	pgs, err := c.ownedPortGroups(match)
	if err != nil {
		return nil, err
	}
	out := make([]map[string]string, len(pgs))
	for i := range pgs {
		out[i] = maps.Clone(pgs[i].ExternalIDs)
	}
	return out, nil
}

// ownedPortGroups are the ovnhost port groups whose external IDs contain
// match, as read-only cache rows: a policy's (match with KeyPolicy) from
// the client index, others by visiting every group.
func (c *Client) ownedPortGroups(match map[string]string) ([]*nbdb.PortGroup, error) {
	rows, err := c.policyRows(nbdb.PortGroupTable, &nbdb.PortGroup{ExternalIDs: map[string]string{KeyPolicy: match[KeyPolicy]}}, match)
	if err != nil {
		return nil, err
	}
	var out []*nbdb.PortGroup
	for _, m := range rows {
		if p, ok := m.(*nbdb.PortGroup); ok && owned(p.ExternalIDs, match) {
			out = append(out, p)
		}
	}
	slices.SortFunc(out, func(a, b *nbdb.PortGroup) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// policyRows are the read-only cache rows of table that may match: those
// of the client index on external_ids:np when match names a policy
// (probe: a row of table with that key), else every row.
func (c *Client) policyRows(table string, probe model.Model, match map[string]string) (map[string]model.Model, error) {
	t := c.cl.Cache().Table(table)
	if t == nil {
		return nil, fmt.Errorf("ovnnb: %s is not monitored", table)
	}
	if v := match[KeyPolicy]; v != "" {
		rows, err := t.RowsByModels([]model.Model{probe})
		if err != nil {
			return nil, fmt.Errorf("ovnnb: %s with external_ids:%s=%s: %w", table, KeyPolicy, v, err)
		}
		return rows, nil
	}
	return t.RowsShallow(), nil
}

package ovnnb

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// SetTemplateVars makes the variables whose names start with prefix what
// vars says (variable -> chassis -> value), in one transaction: each chassis
// of chassis gets every variable, "" where vars gives it no value, and
// variables with that prefix that vars no longer has are removed from every
// chassis. Variables of other prefixes are left alone, so that each owner
// (a Service) writes only its own. A Chassis_Template_Var row is created for
// a chassis that has none.
func (c *Client) SetTemplateVars(ctx context.Context, prefix string, chassis []string, vars map[string]map[string]string) error {
	if prefix == "" {
		return fmt.Errorf("ovnnb: template variables need an owner prefix")
	}
	for v := range vars {
		if !strings.HasPrefix(v, prefix) {
			return fmt.Errorf("ovnnb: template variable %q does not start with its owner's prefix %q", v, prefix)
		}
	}
	var rows []nbdb.ChassisTemplateVar
	if err := c.cl.List(ctx, &rows); err != nil {
		return err
	}
	want := func(ch string) map[string]string {
		m := map[string]string{}
		if !slices.Contains(chassis, ch) {
			return m
		}
		for v, per := range vars {
			m[v] = per[ch]
		}
		return m
	}
	var ops []ovsdb.Operation
	seen := map[string]bool{}
	for _, r := range rows {
		seen[r.Chassis] = true
		cur := map[string]string{}
		for k, v := range r.Variables {
			if strings.HasPrefix(k, prefix) {
				cur[k] = v
			}
		}
		w := want(r.Chassis)
		if maps.Equal(cur, w) {
			continue
		}
		where := []ovsdb.Condition{{Column: "chassis", Function: ovsdb.ConditionEqual, Value: r.Chassis}}
		var del []any
		for k, v := range cur {
			if nv, ok := w[k]; !ok || nv != v {
				del = append(del, k)
			}
		}
		ins := map[any]any{}
		for k, v := range w {
			if ov, ok := cur[k]; !ok || ov != v {
				ins[k] = v
			}
		}
		if len(del) > 0 {
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: nbdb.ChassisTemplateVarTable, Where: where,
				Mutations: []ovsdb.Mutation{{Column: "variables", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: del}}}})
		}
		if len(ins) > 0 {
			// An insert does not overwrite a key: changed ones were deleted above.
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: nbdb.ChassisTemplateVarTable, Where: where,
				Mutations: []ovsdb.Mutation{{Column: "variables", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: ins}}}})
		}
	}
	for _, ch := range chassis {
		if seen[ch] || len(vars) == 0 {
			continue
		}
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.ChassisTemplateVarTable,
			Row: ovsdb.Row{"chassis": ch, "variables": ovsdb.OvsMap{GoMap: anyMap(want(ch))},
				"external_ids": ovsdb.OvsMap{GoMap: anyMap(vendorIDs(nil))}}})
	}
	_, err := c.transact(ctx, fmt.Sprintf("set template variables %s* on %d chassis", prefix, len(chassis)), ops)
	return err
}

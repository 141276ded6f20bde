package ovnnb

import (
	"maps"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// child is one value of a parent row's set column: a row the parent
// references (an ACL of a port group, a NAT rule of a router), or a plain
// value (a port's UUID, an address). key says everything the child stands
// for, so a wanted child whose key an existing one has is that child, kept
// as it is; anything else about it is replaced by a new row.
type child struct {
	key   string
	value string      // existing: its UUID or value; wanted: the value to insert when row is nil
	row   model.Model // wanted: the row to create (its UUID a named UUID), inserted by reference
}

// childSet is one set column of the parent and the children it should hold.
type childSet struct {
	field      any // pointer to the column in the parent model (&pg.ACLs)
	have, want []child
}

// childPlan is what makes each column hold exactly its wanted children:
// the rows to create, then per column the values to remove and to insert.
type childPlan struct {
	creates []ovsdb.Operation
	muts    []model.Mutation
	added   [][]string // per column, the values inserted (named UUIDs of created rows)
	removed [][]string // per column, the values removed
}

// empty says whether every column holds its wanted children already.
func (p childPlan) empty() bool { return len(p.creates) == 0 && len(p.muts) == 0 }

// planChildren diffs each column: a wanted child matches one existing child
// of the same key (duplicates match one each), unmatched wanted children
// are created (or, without a row, their value inserted), unmatched
// existing ones removed. Removing the parent's reference deletes a child
// row of a non-root table (ACL, NAT, Logical_Router_Policy) in the database.
func (c *Client) planChildren(cols ...childSet) (childPlan, error) {
	var p childPlan
	for _, col := range cols {
		have := map[string][]string{} // key -> values
		for _, h := range col.have {
			have[h.key] = append(have[h.key], h.value)
		}
		var add, del []string
		for _, w := range col.want {
			if len(have[w.key]) > 0 {
				have[w.key] = have[w.key][1:]
				continue
			}
			if w.row == nil {
				add = append(add, w.value)
				continue
			}
			o, err := c.cl.Create(w.row)
			if err != nil {
				return childPlan{}, err
			}
			p.creates = append(p.creates, o...)
			add = append(add, o[0].UUIDName)
		}
		for _, h := range col.have { // in column order: a stable transaction
			if vs := have[h.key]; len(vs) > 0 && slices.Contains(vs, h.value) {
				del = append(del, h.value)
			}
		}
		if len(del) > 0 {
			p.muts = append(p.muts, model.Mutation{Field: col.field, Mutator: ovsdb.MutateOperationDelete, Value: del})
		}
		if len(add) > 0 {
			p.muts = append(p.muts, model.Mutation{Field: col.field, Mutator: ovsdb.MutateOperationInsert, Value: add})
		}
		p.added = append(p.added, add)
		p.removed = append(p.removed, del)
	}
	return p, nil
}

// apply is the plan as operations on parent (a model carrying its UUID):
// the created rows, then one mutation operation per column change.
func (c *Client) applyChildren(parent model.Model, p childPlan) ([]ovsdb.Operation, error) {
	ops := slices.Clone(p.creates)
	for _, m := range p.muts {
		o, err := c.cl.Where(parent).Mutate(parent, m)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// values are plain children (UUIDs of referenced rows, addresses), keyed by themselves.
func values(vs []string) []child {
	out := make([]child, len(vs))
	for i, v := range vs {
		out[i] = child{key: v, value: v}
	}
	return out
}

// uniqueValues are values without repeats: a set holds each once.
func uniqueValues(vs []string) []child {
	vs = slices.Clone(vs)
	slices.Sort(vs)
	return values(slices.Compact(vs))
}

// mapKey is a map as part of a child's key.
func mapKey(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(m[k])
		b.WriteByte(',')
	}
	return b.String()
}

package nbtest

import (
	"fmt"
	"slices"

	"github.com/google/uuid"
	"github.com/ovn-kubernetes/libovsdb/database"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// setWaits is the in-memory database with one difference: a wait
// operation's set columns compare as sets, as ovsdb-server compares them.
// libovsdb's in-memory server compares them as ordered lists, and its
// updates do not keep the order, so a client's guard (a wait for the set
// its cache shows, as ovnnb writes before mutating a port group) would
// time out at random. A wait row holding the same elements as the row in
// the database is given the database's order before the wait runs.
type setWaits struct {
	database.Database
	model model.DatabaseModel
}

func (d setWaits) NewTransaction(db string) database.Transaction {
	return setWaitsTx{d: d, db: db, Transaction: d.Database.NewTransaction(db)}
}

type setWaitsTx struct {
	database.Transaction
	d  setWaits
	db string
}

func (t setWaitsTx) Transact(ops ...ovsdb.Operation) ([]*ovsdb.OperationResult, database.Update) {
	for i := range ops {
		if ops[i].Op == ovsdb.OperationWait && ops[i].Until == string(ovsdb.WaitConditionEqual) && len(ops[i].Rows) == 1 {
			t.reorder(&ops[i])
		}
	}
	return t.Transaction.Transact(ops...)
}

// reorder gives the wait's row the database's order of each set column
// that holds the same elements in the one row the wait is about.
func (t setWaitsTx) reorder(op *ovsdb.Operation) {
	rows, err := t.d.List(t.db, op.Table, op.Where...)
	if err != nil || len(rows) != 1 {
		return
	}
	for _, m := range rows {
		info, err := t.d.model.NewModelInfo(m)
		if err != nil {
			return
		}
		cur, err := t.d.model.Mapper.NewRow(info)
		if err != nil {
			return
		}
		for _, col := range op.Columns {
			want, have := op.Rows[0][col], cur[col]
			if _, isSet := have.(ovsdb.OvsSet); isSet && sameElements(want, have) {
				op.Rows[0][col] = have
			}
		}
	}
}

func sameElements(a, b any) bool {
	return slices.Equal(elements(a), elements(b))
}

// elements are a column value's elements, printed and sorted (a set of
// one may come as the bare element).
func elements(v any) []string {
	var es []any
	if s, ok := v.(ovsdb.OvsSet); ok {
		es = s.GoSet
	} else {
		es = []any{v}
	}
	out := make([]string, len(es))
	for i, e := range es {
		out[i] = fmt.Sprint(e)
	}
	slices.Sort(out)
	return out
}

// nbGlobal inserts the NB_Global row ovn-northd's start-up leaves (options
// such as BFD's are written there).
func nbGlobal(db database.Database, name string) error {
	ops := []ovsdb.Operation{{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"nb_cfg": 0}}}
	res, upd := db.NewTransaction(name).Transact(ops...)
	if _, err := ovsdb.CheckOperationResults(derefResults(res), ops); err != nil {
		return err
	}
	return db.Commit(name, uuid.New(), upd)
}

func derefResults(rs []*ovsdb.OperationResult) []ovsdb.OperationResult {
	out := make([]ovsdb.OperationResult, 0, len(rs))
	for _, r := range rs {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

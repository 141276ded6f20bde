package central_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// syncHypervisors is `ovn-nbctl --wait=hv sync`: bump NB_Global.nb_cfg and
// wait until northd reports every chassis caught up (hv_cfg). It proves
// the whole chain: NB, northd, SB, the nodes' ovn-controller and back.
func syncHypervisors(ctx context.Context, nb *ovsdbconn.Conn) error {
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationMutate, Table: "NB_Global", Where: everyRow, Mutations: []ovsdb.Mutation{{Column: "nb_cfg", Mutator: ovsdb.MutateOperationAdd, Value: 1}}},
		{Op: ovsdb.OperationSelect, Table: "NB_Global", Where: everyRow, Columns: []string{"nb_cfg"}},
	}
	res, err := ovsdbconn.Transact(ctx, nb, "bump NB_Global.nb_cfg", ops...)
	if err != nil {
		return err
	}
	if len(res) < 2 || len(res[1].Rows) != 1 {
		return fmt.Errorf("NB_Global: expected one row, got %+v", res)
	}
	target := int(res[1].Rows[0]["nb_cfg"].(float64))
	return nb.WaitUntil(ctx, fmt.Sprintf("NB_Global.hv_cfg to reach %d (every chassis applied it)", target), func() bool {
		var gs []nbdb.NBGlobal
		_ = nb.List(ctx, &gs)
		return len(gs) == 1 && gs[0].HvCfg >= target
	}, nil)
}

var everyRow = []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionNotEqual, Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}}

// writer inserts Logical_Switch rows one after the other, as the controller
// does, and records the ones the cluster acknowledged and the outages seen.
type writer struct {
	nb      *ovsdbconn.Conn
	prefix  string
	mu      sync.Mutex
	acked   []string
	failed  int
	outages []time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func startWriter(nb *ovsdbconn.Conn, prefix string) *writer {
	w := &writer{nb: nb, prefix: prefix, stop: make(chan struct{}), done: make(chan struct{})}
	go w.run()
	return w
}

func (w *writer) run() {
	defer close(w.done)
	var firstFail time.Time
	for i := 0; ; i++ {
		select {
		case <-w.stop:
			return
		default:
		}
		name := fmt.Sprintf("%s-%05d", w.prefix, i)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		err := insertSwitch(ctx, w.nb, name)
		cancel()
		w.mu.Lock()
		if err != nil {
			w.failed++
			if firstFail.IsZero() {
				firstFail = time.Now()
			}
		} else {
			w.acked = append(w.acked, name)
			if !firstFail.IsZero() {
				w.outages = append(w.outages, time.Since(firstFail))
				firstFail = time.Time{}
			}
		}
		w.mu.Unlock()
	}
}

func (w *writer) finish() (acked []string, failed int, outages []time.Duration) {
	close(w.stop)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.acked, w.failed, w.outages
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.acked)
}

func insertSwitch(ctx context.Context, nb *ovsdbconn.Conn, name string) error {
	ops, err := nb.Create(&nbdb.LogicalSwitch{Name: name, ExternalIDs: map[string]string{"vendor": "ovnhost-test"}})
	if err != nil {
		return err
	}
	_, err = ovsdbconn.Transact(ctx, nb, "insert Logical_Switch "+name, ops...)
	return err
}

// switchNames reads every Logical_Switch name straight from one member's
// database over its unix socket (a fresh connection, no cache of ours).
func switchNames(t testing.TB, m *member) map[string]bool {
	t.Helper()
	nb := dial(t, nbdb.FullDatabaseModel, "unix:"+m.Path("run", "ovnnb_db.sock"))
	defer nb.Close()
	var ls []nbdb.LogicalSwitch
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nb.List(ctx, &ls); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, s := range ls {
		out[s.Name] = true
	}
	return out
}

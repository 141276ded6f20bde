package central_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovncluster"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
)

// A database whose file passes --db-compact-size is compacted: the Raft
// log is folded into a snapshot, the file shrinks, the rows stay, and the
// compaction is counted in /metrics.
func TestDatabaseIsCompactedPastItsSizeThreshold(t *testing.T) {
	c := centralcluster.New(t, 1)
	m := c.Members[0]
	m.StartNoWait(c.IPs(), "--db-compact-size=256Ki", "--db-compact-interval=0")
	m.WaitReady(60 * time.Second)
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Each row is rewritten many times: the log grows, the data does not.
	for i := 0; i < 20; i++ {
		if err := insertSwitch(ctx, nb, fmt.Sprintf("sw-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	big := strings.Repeat("x", 2000)
	for round := 0; ; round++ {
		if strings.Contains(m.LogText(), "compacted database") {
			break
		}
		if round > 2000 {
			fi, _ := os.Stat(m.Path("db", "ovnnb_db.db"))
			t.Fatalf("no compaction after %d updates; file %d bytes\n%s", round, fi.Size(), m.LogTail())
		}
		ls := &nbdb.LogicalSwitch{Name: fmt.Sprintf("sw-%02d", round%20),
			ExternalIDs: map[string]string{"vendor": "ovnhost-test", "round": fmt.Sprint(round), "pad": big}}
		ops, err := nb.WhereAny(ls, model.Condition{Field: &ls.Name, Function: ovsdb.ConditionEqual, Value: ls.Name}).Update(ls, &ls.ExternalIDs)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := nb.Transact(ctx, ops...); err != nil {
			t.Fatal(err)
		}
	}
	st := m.WaitStatus(nbName, "a short log after the snapshot", 10*time.Second, func(s *ovncluster.Status) bool { return s.LogEnd-s.LogStart < 50 })
	if fi, err := os.Stat(m.Path("db", "ovnnb_db.db")); err != nil || fi.Size() >= 256<<10 {
		t.Fatalf("file not smaller than the threshold after compaction: %v %v", fi.Size(), err)
	}
	_, metrics, _ := httpGet(m.NS, "/metrics")
	if !strings.Contains(metrics, `ovnhost_raft_compactions_total{db="OVN_Northbound"} 1`) && !strings.Contains(metrics, `ovnhost_raft_compactions_total{db="OVN_Northbound"} 2`) {
		t.Fatalf("compaction not counted:\n%s", grepLines(metrics, "compactions"))
	}
	for i := 0; i < 20; i++ {
		if !waitSwitch(t, m, fmt.Sprintf("sw-%02d", i)) {
			t.Fatalf("row sw-%02d lost in the compaction", i)
		}
	}
	t.Logf("log after compaction [%d, %d]", st.LogStart, st.LogEnd)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// With only the time threshold, a database that has new log entries is
// compacted once --db-compact-interval has passed since the last snapshot.
func TestDatabaseIsCompactedPastItsTimeThreshold(t *testing.T) {
	c := centralcluster.New(t, 1)
	m := c.Members[0]
	m.StartNoWait(c.IPs(), "--db-compact-size=0", "--db-compact-interval=2s")
	m.WaitReady(60 * time.Second)
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 10; i++ {
		if err := insertSwitch(ctx, nb, fmt.Sprintf("t-%02d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := waitLog(m.Path("ovnhost.log"), "no snapshot for", 20*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, m.LogTail())
	}
	m.WaitStatus(nbName, "the log folded into a snapshot", 10*time.Second, func(s *ovncluster.Status) bool { return s.LogEnd-s.LogStart <= 2 })
	if !waitSwitch(t, m, "t-09") {
		t.Fatal("row lost in the compaction")
	}
}

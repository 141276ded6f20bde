package central_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/harness/debschema"
)

// An OVN upgrade under a running cluster: the members run the installed
// OVN's schemas (Debian bookworm, OVN 23.03: NB 7.0.0), rows are written,
// then each member restarts with a newer OVN's schemas (trixie's
// ovn-central, OVN 25.03 as Kube-OVN 1.15 ships: NB 7.11.0; fetched by
// tests/harness/debschema). The first to
// restart backs the databases up and converts them online; every row is
// still there, the backup holds them too, the others see the new schema
// and the cluster keeps taking writes. (Bullseye's ovn-common is only a
// virtual package of openvswitch-common 2.15 and ships no OVN schema.)
func TestOVNUpgradeConvertsTheClusterOnline(t *testing.T) {
	old, trixie := debschema.Bookworm(t), debschema.Fetch(t, "trixie")
	newer := filepath.Dir(trixie.NB) // ovn-nb and ovn-sb.ovsschema side by side
	oldNB, newNB := schemaVersion(t, old.NB), schemaVersion(t, trixie.NB)
	if oldNB == newNB {
		t.Fatalf("trixie's NB schema %s is the installed one: nothing to upgrade", newNB)
	}
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var names []string
	for i := 0; i < 50; i++ {
		name := fmt.Sprintf("pre-upgrade-%02d", i)
		if err := insertSwitch(ctx, nb, name); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	nb.Close()

	first := c.Members[0]
	for i, m := range c.Members {
		if code := m.Stop(); code != 0 {
			t.Fatalf("%s exit %d\n%s", m.Name, code, m.LogTail())
		}
		m.StartNoWait(c.IPs(), "--ovn-schema-dir="+newer)
		m.WaitReady(90 * time.Second)
		if i == 0 {
			if !strings.Contains(m.LogText(), "converted the clustered database to the installed schema") {
				t.Fatalf("%s did not convert\n%s", m.Name, m.LogTail())
			}
		}
		for _, o := range c.Members {
			if got := servedVersion(t, o, nbName); got != newNB {
				t.Fatalf("after %s restarted, %s serves NB schema %s, want %s", m.Name, o.Name, got, newNB)
			}
		}
	}
	for _, m := range c.Members[1:] {
		if strings.Contains(m.LogText(), "converted the clustered database") {
			t.Fatalf("%s converted again", m.Name)
		}
	}
	// Every row survived, on every member, read with ovsdb-client (the
	// models of this build are the older schema's).
	for _, m := range c.Members {
		got := dumpSwitchNames(t, "unix:"+m.Path("run", "ovnnb_db.sock"))
		for _, n := range names {
			if !got[n] {
				t.Fatalf("%s lost %s in the conversion", m.Name, n)
			}
		}
	}
	// The backup is a standalone database of the old schema with the rows.
	backups, _ := filepath.Glob(first.Path("db", "ovnnb_db.db.backup-"+oldNB+"-*"))
	if len(backups) != 1 {
		t.Fatalf("backups %v, want one ovnnb_db.db.backup-%s-*", backups, oldNB)
	}
	if v, err := exec.Command("ovsdb-tool", "db-version", backups[0]).Output(); err != nil || strings.TrimSpace(string(v)) != oldNB {
		t.Fatalf("backup version %q, %v", v, err)
	}
	q, err := exec.Command("ovsdb-tool", "query", backups[0], `["OVN_Northbound",{"op":"select","table":"Logical_Switch","where":[],"columns":["name"]}]`).Output()
	if err != nil || !strings.Contains(string(q), names[len(names)-1]) {
		t.Fatalf("backup lacks the rows: %v %.300s", err, q)
	}
	// And it keeps taking writes (raw transact: our models are older).
	out, err := exec.Command("ovsdb-client", "transact", c.NBRemote(), `["OVN_Northbound",{"op":"insert","table":"Logical_Switch","row":{"name":"post-upgrade"}}]`).CombinedOutput()
	if err != nil || strings.Contains(string(out), "error") {
		t.Fatalf("write after the upgrade: %v %s", err, out)
	}
}

func schemaVersion(t testing.TB, path string) string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s struct{ Version string }
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	return s.Version
}

func servedVersion(t testing.TB, m *member, db string) string {
	t.Helper()
	out, err := exec.Command("ovsdb-client", "get-schema-version", "unix:"+m.Path("run", "ovnnb_db.sock"), db).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v %s", m.Name, err, out)
	}
	return strings.TrimSpace(string(out))
}

func dumpSwitchNames(t testing.TB, remote string) map[string]bool {
	t.Helper()
	out, err := exec.Command("ovsdb-client", "--format=csv", "--no-headings", "dump", remote, "OVN_Northbound", "Logical_Switch", "name").CombinedOutput()
	if err != nil {
		t.Fatalf("dump: %v %s", err, out)
	}
	got := map[string]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		got[strings.Trim(strings.TrimSpace(l), `"`)] = true
	}
	return got
}

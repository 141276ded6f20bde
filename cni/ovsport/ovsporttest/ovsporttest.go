// Package ovsporttest runs a local conf.db (a real ovsdb-server, no
// ovs-vswitchd) for tests of the CNI side's OVS rows.
package ovsporttest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// ConfDB starts an ovsdb-server on a fresh conf.db with the installed
// vswitch schema and returns a client of it; with a bridge, the
// Open_vSwitch row holds it. Both go at the end of the test.
func ConfDB(t testing.TB, bridge string) client.Client {
	t.Helper()
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool")
	const schema = "/usr/share/openvswitch/vswitch.ovsschema"
	if _, err := os.Stat(schema); err != nil {
		if testenv.Strict() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	db, sock := filepath.Join(dir, "conf.db"), filepath.Join(dir, "db.sock")
	tool, _ := testenv.LookPath("ovsdb-tool")
	if out, err := exec.Command(tool, "create", db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create: %v %s", err, out)
	}
	srv, _ := testenv.LookPath("ovsdb-server")
	cmd := exec.Command(srv, db, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "ctl"),
		"--log-file="+filepath.Join(dir, "ovsdb-server.log"), "-vconsole:off", "--no-chdir")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	dbm, err := vswitch.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// ovsdbconn retries a refused connection until the deadline.
	conn, err := ovsdbconn.Dial(ctx, dbm, "unix:"+sock, ovsdbconn.Options{Name: "conf.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	root := ovsdb.Row{"next_cfg": 0}
	ops := []ovsdb.Operation{}
	if bridge != "" {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Bridge", UUIDName: "br",
			Row: ovsdb.Row{"name": bridge, "datapath_type": "netdev"}})
		root["bridges"] = ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: "br"}}}
	}
	ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Open_vSwitch", Row: root})
	if _, err := ovsdbconn.Transact(ctx, conn.Client, "set up", ops...); err != nil {
		t.Fatal(err)
	}
	return conn.Client
}

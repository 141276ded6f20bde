package nbtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// StartOVSDB serves the northbound schema ovnhost's models come from
// (internal/ovsdb/nbdb/ovn-nb.ovsschema) with a real ovsdb-server, for what
// the in-memory server does differently: it checks referential integrity
// against each operation instead of the transaction's end (a row of a root
// table replaced and re-pointed to in one transaction, as EnsureGatewayPort
// does with an HA chassis group, fails there). Without ovsdb-server and
// ovsdb-tool the test is skipped, or fails under OVNHOST_TEST_STRICT=1.
func StartOVSDB(t testing.TB) *Server {
	t.Helper()
	server, tool := lookPath(t, "ovsdb-server"), lookPath(t, "ovsdb-tool")
	_, self, _, _ := runtime.Caller(0)
	schemaFile := filepath.Join(filepath.Dir(self), "..", "..", "ovsdb", "nbdb", "ovn-nb.ovsschema")
	dir, err := os.MkdirTemp("", "nbtest")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	db := filepath.Join(dir, "nb.db")
	if out, err := exec.Command(tool, "create", db, schemaFile).CombinedOutput(); err != nil {
		t.Fatalf("nbtest: ovsdb-tool create: %v: %s", err, out)
	}
	sock := filepath.Join(dir, "nb.sock")
	cmd := exec.Command(server, db, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "ctl"),
		"--no-chdir", "--log-file="+filepath.Join(dir, "ovsdb-server.log"), "--pidfile="+filepath.Join(dir, "pid"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("nbtest: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	cm, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	dm, errs := model.NewDatabaseModel(nbdb.Schema(), cm)
	if len(errs) > 0 {
		t.Fatalf("nbtest: NB model: %v", errs)
	}
	s := &Server{Endpoint: "unix:" + sock, model: dm}
	nb := s.Connect(t, ovnnb.Options{}) // waits for the socket
	Transact(t, nb, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.NBGlobalTable, Row: ovsdb.Row{"nb_cfg": 0}})
	nb.Close()
	return s
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	for _, p := range []string{name, "/usr/sbin/" + name} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("OVNHOST_TEST_STRICT") == "1" || os.Getenv("CI") == "true" {
		t.Fatalf("prerequisite missing: %s (Debian's openvswitch-switch)", name)
	}
	t.Skipf("prerequisite missing: %s", name)
	return ""
}

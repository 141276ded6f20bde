// Package nbtest runs an OVN northbound database for unit tests: libovsdb's
// in-memory OVSDB server with the NB schema ovnhost's models were generated
// from, served on a unix socket, and ovnnb clients connected to it. Tests
// of internal/ovnnb and of the controller's reconcilers use it instead of
// an ovsdb-server; the integration tests (tests/controller, tests/node)
// run the real one.
package nbtest

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/ovn-kubernetes/libovsdb/database/inmemory"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/ovn-kubernetes/libovsdb/server"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// Server is one in-memory northbound database.
type Server struct {
	// Endpoint is what ovnnb.Options.Endpoints takes ("unix:<path>").
	Endpoint string
	model    model.DatabaseModel
}

// Start serves an empty northbound database (with its NB_Global row, as
// ovn-northd's start-up leaves it) until the test ends (under the race
// detector, a real ovsdb-server: race.go).
func Start(t testing.TB) *Server {
	t.Helper()
	if raceDetector {
		return StartOVSDB(t)
	}
	cm, err := nbdb.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	schema := nbdb.Schema()
	dm, errs := model.NewDatabaseModel(schema, cm)
	if len(errs) > 0 {
		t.Fatalf("nbtest: NB model: %v", errs)
	}
	log := logr.Discard()
	db := inmemory.NewDatabase(map[string]model.ClientDBModel{schema.Name: cm}, &log)
	srv, err := server.NewOvsdbServer(setWaits{Database: db, model: dm}, &log, dm)
	if err != nil {
		t.Fatal(err)
	}
	if err := nbGlobal(db, schema.Name); err != nil {
		t.Fatalf("nbtest: NB_Global: %v", err)
	}
	// A short directory: a unix socket path has at most 107 bytes.
	dir, err := os.MkdirTemp("", "nbtest")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "nb.sock")
	served := make(chan error, 1)
	go func() { served <- srv.Serve("unix", sock) }()
	t.Cleanup(func() {
		srv.Close()
		<-served
		_ = os.RemoveAll(dir)
	})
	return &Server{Endpoint: "unix:" + sock, model: dm}
}

func ovsdbTransact(nb *ovnnb.Client, ops []ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return ovsdbconn.Transact(ctx, nb.Raw(), "nbtest", ops...)
}

// Connect is ovnnb.Connect to this server, closed when the test ends.
func (s *Server) Connect(t testing.TB, o ovnnb.Options) *ovnnb.Client {
	t.Helper()
	o.Endpoints = s.Endpoint
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nb, err := ovnnb.Connect(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nb.Close)
	return nb
}

// Client starts a server and connects a client that caches port groups
// and ACLs too (as the controller's does).
func Client(t testing.TB) (*Server, *ovnnb.Client) {
	t.Helper()
	s := Start(t)
	return s, s.Connect(t, ovnnb.Options{PortGroups: true})
}

// Rows lists the rows of table as the server holds them now (a select
// through nb, not nb's cache, which lacks unmonitored columns), as the
// models of internal/ovsdb/nbdb (T is e.g. *nbdb.ACL).
func Rows[T model.Model](t testing.TB, s *Server, nb *ovnnb.Client, table string) []T {
	t.Helper()
	res, err := ovsdbTransact(nb, []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: table, Where: []ovsdb.Condition{}}})
	if err != nil {
		t.Fatalf("nbtest: select %s: %v", table, err)
	}
	var out []T
	for _, r := range res[0].Rows {
		u, _ := r["_uuid"].(ovsdb.UUID)
		m, err := model.CreateModel(s.model, table, &r, u.GoUUID)
		if err != nil {
			t.Fatalf("nbtest: %s row: %v", table, err)
		}
		x, ok := m.(T)
		if !ok {
			t.Fatalf("nbtest: %s row is a %T", table, m)
		}
		out = append(out, x)
	}
	return out
}

// Transact runs raw operations (a test's own set-up or damage) and fails
// the test on an error.
func Transact(t testing.TB, nb *ovnnb.Client, ops ...ovsdb.Operation) []ovsdb.OperationResult {
	t.Helper()
	res, err := ovsdbTransact(nb, ops)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// Insert is the operation that creates row (a model of internal/ovsdb/nbdb).
func Insert(t testing.TB, nb *ovnnb.Client, row model.Model) []ovsdb.Operation {
	t.Helper()
	ops, err := nb.Raw().Create(row)
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

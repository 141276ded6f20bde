// Package ovsconftest serves an in-memory conf.db (libovsdb's OVSDB
// server with the vswitch schema) for the unit tests of the node's
// features that write bridges into it.
package ovsconftest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/database/inmemory"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/server"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// ConfDB serves an empty conf.db but for its Open_vSwitch row (with
// external_ids) and returns a connection to it, monitoring every table.
// Both end with the test.
func ConfDB(t testing.TB, externalIDs map[string]string) *ovsdbconn.Conn {
	t.Helper()
	cm, err := vswitch.FullDatabaseModel()
	if err != nil {
		t.Fatal(err)
	}
	schema := vswitch.Schema()
	dbm, errs := model.NewDatabaseModel(schema, cm)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	srv, err := server.NewOvsdbServer(inmemory.NewDatabase(map[string]model.ClientDBModel{schema.Name: cm}, nil), nil, dbm)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "db.sock")
	served := make(chan error, 1)
	go func() { served <- srv.Serve("unix", sock) }()
	t.Cleanup(func() { srv.Close(); <-served })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := ovsdbconn.Dial(ctx, cm, "unix:"+sock, ovsdbconn.Options{Name: "in-memory conf.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	ops, err := conn.Create(&vswitch.OpenvSwitch{UUID: "root", ExternalIDs: externalIDs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ovsdbconn.Transact(ctx, conn, "insert the Open_vSwitch row", ops...); err != nil {
		t.Fatal(err)
	}
	if err := conn.WaitUntil(ctx, "the Open_vSwitch row in the cache", func() bool {
		var roots []vswitch.OpenvSwitch
		return conn.List(ctx, &roots) == nil && len(roots) == 1
	}, nil); err != nil {
		t.Fatal(err)
	}
	return conn
}

package ovsdbconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

func testOps() []ovsdb.Operation {
	return []ovsdb.Operation{
		{Op: ovsdb.OperationMutate, Table: "Bridge"},
		{Op: ovsdb.OperationInsert, Table: "Port"},
		{Op: ovsdb.OperationInsert, Table: "Interface"},
		{Op: ovsdb.OperationWait, Table: "Interface"},
	}
}

func TestCheckResultsOK(t *testing.T) {
	res := []ovsdb.OperationResult{{Count: 1}, {}, {}, {}}
	if err := checkResults("create port p1", testOps(), res); err != nil {
		t.Fatal(err)
	}
}

func TestCheckResultsNamesTheFailingOperation(t *testing.T) {
	res := []ovsdb.OperationResult{{Count: 1}, {}, {Error: "constraint violation", Details: "Transaction causes multiple rows in \"Interface\" table to have identical values (p1) for index on column \"name\"."}, {}}
	err := checkResults("create port p1", testOps(), res)
	want := `create port p1: operation 2 (insert into Interface) failed: constraint violation: Transaction causes multiple rows in "Interface" table to have identical values (p1) for index on column "name".`
	if err == nil || err.Error() != want {
		t.Fatalf("got  %v\nwant %s", err, want)
	}
	var te *TxError
	if !errors.As(err, &te) || te.Index != 2 || te.Op != "insert" || te.Table != "Interface" || te.TimedOut() {
		t.Fatalf("TxError: %+v", te)
	}
	var cv *ovsdb.ConstraintViolation
	if !errors.As(err, &cv) {
		t.Fatalf("%v does not unwrap to *ovsdb.ConstraintViolation", err)
	}
	if got := te.Reason(); !strings.HasPrefix(got, "operation 2 (insert into Interface): constraint violation: ") {
		t.Fatalf("Reason: %q", got)
	}
}

func TestCheckResultsTimedOutWait(t *testing.T) {
	res := []ovsdb.OperationResult{{Count: 1}, {}, {}, {Error: "timed out"}}
	err := checkResults("wait for ovn-installed on p1", testOps(), res)
	if err == nil || err.Error() != "wait for ovn-installed on p1: operation 3 (wait on Interface) failed: timed out" {
		t.Fatalf("got %v", err)
	}
	var te *TxError
	if !errors.As(err, &te) || !te.TimedOut() {
		t.Fatalf("not a timed out TxError: %#v", err)
	}
	var to *ovsdb.TimedOut
	if !errors.As(err, &to) {
		t.Fatal("does not unwrap to *ovsdb.TimedOut")
	}
}

func TestCheckResultsCommitFailure(t *testing.T) {
	// All operations succeeded but the commit did not: one extra result.
	res := []ovsdb.OperationResult{{Count: 1}, {}, {}, {}, {Error: "referential integrity violation", Details: "cannot delete Port row"}}
	err := checkResults("delete port p1", testOps(), res)
	if err == nil || err.Error() != "delete port p1: commit failed: referential integrity violation: cannot delete Port row" {
		t.Fatalf("got %v", err)
	}
	var te *TxError
	if !errors.As(err, &te) || te.Index != 4 || te.Op != "commit" {
		t.Fatalf("TxError: %+v", te)
	}
	var riv *ovsdb.ReferentialIntegrityViolation
	if !errors.As(err, &riv) {
		t.Fatal("does not unwrap to *ovsdb.ReferentialIntegrityViolation")
	}
}

func TestCheckResultsShortAndUnnamed(t *testing.T) {
	err := checkResults("ensure x", testOps(), []ovsdb.OperationResult{{}})
	if err == nil || !strings.HasPrefix(err.Error(), "ensure x: ") || !strings.Contains(err.Error(), "4 operations submitted but only 1 results") {
		t.Fatalf("short results: %v", err)
	}
	// No description: the error starts with the operation.
	err = checkResults("", testOps()[:1], []ovsdb.OperationResult{{Error: "domain error", Details: "bad"}})
	if err == nil || err.Error() != "operation 0 (mutate Bridge) failed: domain error: bad" {
		t.Fatalf("unnamed: %v", err)
	}
}

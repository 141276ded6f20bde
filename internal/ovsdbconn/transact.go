package ovsdbconn

import (
	"context"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
)

// Transact runs ops as one transaction and checks every result. what says
// what the transaction does ("create port p1"); every error starts with it.
// When the server refuses the transaction the error is a *TxError naming
// the failing operation, and the results are returned with it (callers may
// read which operation failed). No operations: nothing is sent.
func Transact(ctx context.Context, c client.Client, what string, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	res, err := c.Transact(ctx, ops...)
	if err != nil {
		return nil, prefix(what, err)
	}
	if err := checkResults(what, ops, res); err != nil {
		return res, err
	}
	return res, nil
}

// TxError is a transaction the server refused.
type TxError struct {
	What    string // the caller's description of the transaction
	Index   int    // the failing operation; len(ops) when the commit failed
	Op      string // its op ("insert"), or "commit"
	Table   string
	Err     string // the server's error ("constraint violation")
	Details string // the server's details
	// Failed is how many operations failed (OVSDB stops at the first, so 1).
	Failed int

	cause error // libovsdb's typed error (*ovsdb.ConstraintViolation, *ovsdb.TimedOut, ...)
}

// Error is "what: operation 2 (insert into Interface) failed: constraint violation: details".
func (e *TxError) Error() string {
	s := e.operation() + " failed: " + e.reason()
	if e.What != "" {
		s = e.What + ": " + s
	}
	return s
}

// Reason is the error without What: "operation 2 (insert into Interface):
// constraint violation: details", for callers that print What themselves.
func (e *TxError) Reason() string { return e.operation() + ": " + e.reason() }

// Unwrap returns libovsdb's typed error, so errors.As(err, new(*ovsdb.TimedOut)) works.
func (e *TxError) Unwrap() error { return e.cause }

// TimedOut reports whether the failing operation was a wait that timed out.
func (e *TxError) TimedOut() bool { return e.Err == "timed out" }

func (e *TxError) operation() string {
	if e.Op == "commit" {
		return "commit"
	}
	return fmt.Sprintf("operation %d (%s)", e.Index, describe(e.Op, e.Table))
}

func (e *TxError) reason() string {
	s := e.Err
	if e.Details != "" {
		s += ": " + e.Details
	}
	if e.Failed > 1 {
		s += fmt.Sprintf(" (and %d more failed operations)", e.Failed-1)
	}
	return s
}

// describe names an operation in words: "insert into Interface".
func describe(op, table string) string {
	if table == "" {
		return op
	}
	switch op {
	case ovsdb.OperationInsert:
		return op + " into " + table
	case ovsdb.OperationSelect, ovsdb.OperationDelete:
		return op + " from " + table
	case ovsdb.OperationWait:
		return op + " on " + table
	default:
		return op + " " + table
	}
}

// checkResults turns the results of ops into nil or an error naming what,
// the failing operation and the server's words.
func checkResults(what string, ops []ovsdb.Operation, res []ovsdb.OperationResult) error {
	opErrs, err := ovsdb.CheckOperationResults(res, ops)
	if err == nil {
		return nil
	}
	if len(res) < len(ops) {
		return prefix(what, err)
	}
	var e *TxError
	for i, r := range res {
		if r.Error == "" {
			continue
		}
		if e != nil {
			e.Failed++
			continue
		}
		e = &TxError{What: what, Index: i, Err: r.Error, Details: r.Details, Failed: 1, cause: err}
		if i < len(ops) {
			e.Op, e.Table = ops[i].Op, ops[i].Table
			if len(opErrs) > 0 {
				e.cause = opErrs[0]
			}
		} else {
			e.Op = "commit"
		}
	}
	if e == nil {
		return prefix(what, err)
	}
	return e
}

func prefix(what string, err error) error {
	if what == "" {
		return err
	}
	return fmt.Errorf("%s: %w", what, err)
}

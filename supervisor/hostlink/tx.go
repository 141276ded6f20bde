package hostlink

import (
	"fmt"
	"strings"
	"time"
)

// fault, when set, is called before each step of Move and of its rollback
// with the step's kind (stepAddrAdd, stepUndo+stepAddrDel, ...) and makes
// that step fail with the error it returns. It exists so tests can break a
// move half-way on a real kernel and check that the host is put back; it is
// nil in production.
var fault func(step string) error

// Step kinds, as fault sees them.
const (
	stepJournal = "journal"
	stepSetMTU  = "set-mtu"
	stepSetMAC  = "set-mac"
	stepSetUp   = "set-up"
	stepAddrDel = "addr-del"
	stepAddrAdd = "addr-add"
	// The prefix route of an IPv6 address with a lifetime, left behind.
	stepPrefixDel = "prefix-del"
	stepDAD       = "dad-wait"
	stepRouteAdd  = "route-add"
	// from loses a route: the kernel drops it with an address, or the
	// replace that moves it takes it away. Only its undo is a step.
	stepRouteDel = "route-del"
	stepRuleAdd  = "rule-add"
	stepRuleDel  = "rule-del"
	stepNeighAdd = "neigh-add"
	stepNeighDel = "neigh-del"
	stepUndo     = "undo "
)

func injectFault(step string) error {
	if fault == nil {
		return nil
	}
	return fault(step)
}

// tx runs the steps of a move and remembers how to undo each one that
// completed.
type tx struct {
	undo       []undoStep
	dadTimeout time.Duration
	// beforeChange runs once, before the first step that changes the host
	// (writes the journal).
	beforeChange func() error
	changed      bool
}

type undoStep struct {
	kind   string       // the step it undoes, for fault
	what   string       // for the error: "remove address 10.0.0.2/24 from br-phy"
	manual string       // the same by hand: "ip address del 10.0.0.2/24 dev br-phy"; "" when nothing is left to do by hand
	do     func() error // idempotent
	// ifClean: run only when every undo before it succeeded (the
	// journal goes back to what it was only if the host did).
	ifClean bool
	// holds, when set, reports whether what the undo does is true of the
	// host anyway: a later undo may do it (a link set down loses its
	// routes and neighbours, a primary address takes its secondaries
	// along), and then nothing is left to do by hand.
	holds func() bool
}

// change runs beforeChange once.
func (t *tx) change() error {
	if t.changed {
		return nil
	}
	t.changed = true
	if t.beforeChange == nil {
		return nil
	}
	return t.beforeChange()
}

// step runs do; the error names the step.
func (t *tx) step(kind, what string, do func() error) error {
	if err := t.change(); err != nil {
		return err
	}
	err := injectFault(kind)
	if err == nil {
		err = do()
	}
	if err != nil {
		return fmt.Errorf("%s failed: %w", what, err)
	}
	return nil
}

func (t *tx) onUndo(kind, what, manual string, do func() error) {
	t.undo = append(t.undo, undoStep{kind: kind, what: what, manual: manual, do: do})
}

// onUndoUnless records an undo whose effect holds may find done anyway.
func (t *tx) onUndoUnless(kind, what, manual string, do func() error, holds func() bool) {
	t.undo = append(t.undo, undoStep{kind: kind, what: what, manual: manual, do: do, holds: holds})
}

// rollback runs the recorded undo steps, last first, and returns the error
// to report for cause: restored, or what is left to do by hand.
func (t *tx) rollback(cause error, from, to string) error {
	if len(t.undo) == 0 {
		return fmt.Errorf("%w; nothing was changed", cause)
	}
	type failure struct {
		u   undoStep
		err error
	}
	var failures []failure
	var kept []string
	for i := len(t.undo) - 1; i >= 0; i-- {
		u := t.undo[i]
		if u.ifClean && len(failures) > 0 {
			kept = append(kept, u.what)
			continue
		}
		err := injectFault(stepUndo + u.kind)
		if err == nil {
			err = u.do()
		}
		if err != nil {
			failures = append(failures, failure{u, err})
		}
	}
	t.undo = nil
	var failed, manual []string
	for _, f := range failures {
		if f.u.holds != nil && f.u.holds() {
			continue
		}
		failed = append(failed, fmt.Sprintf("%s: %v", f.u.what, f.err))
		if f.u.manual != "" {
			manual = append(manual, f.u.manual)
		}
	}
	if len(failed) == 0 {
		return fmt.Errorf("%w; rolled back: %s has all its addresses, routes, rules and neighbours again and %s is as it was", cause, from, to)
	}
	note := ""
	if len(kept) > 0 {
		note = " (" + strings.Join(kept, "; ") + ")"
	}
	return fmt.Errorf("%w; rolling back failed too, so %s and %s are not quite as they were: %s; to finish by hand, run: %s%s",
		cause, from, to, strings.Join(failed, "; "), strings.Join(manual, "; "), note)
}

// Package notify lets a test wait on "something changed" from informers
// and OVSDB caches instead of polling: every change pokes the waiters,
// which re-evaluate their condition until it holds or their deadline
// passes.
package notify

import (
	"sync"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"k8s.io/client-go/tools/cache"
)

// Notifier wakes the waiters of WaitFor on every Poke.
type Notifier struct {
	mu   sync.Mutex
	subs map[chan struct{}]bool
}

// Poke wakes every waiter (a change happened somewhere).
func (n *Notifier) Poke() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for ch := range n.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// Informer is an informer event handler that pokes on add, update and delete.
func (n *Notifier) Informer() cache.ResourceEventHandlerFuncs {
	return cache.ResourceEventHandlerFuncs{AddFunc: func(any) { n.Poke() }, UpdateFunc: func(any, any) { n.Poke() }, DeleteFunc: func(any) { n.Poke() }}
}

// OVSDB is a libovsdb cache event handler that pokes on every row change.
func (n *Notifier) OVSDB() ovsdbHandler { return ovsdbHandler{n} }

type ovsdbHandler struct{ n *Notifier }

func (h ovsdbHandler) OnAdd(string, model.Model)                 { h.n.Poke() }
func (h ovsdbHandler) OnUpdate(string, model.Model, model.Model) { h.n.Poke() }
func (h ovsdbHandler) OnDelete(string, model.Model)              { h.n.Poke() }

// WaitFor re-evaluates cond after every poke until it holds or d passes;
// then it fails t naming what was awaited and the last state cond gave.
func (n *Notifier) WaitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	ch := make(chan struct{}, 1)
	n.mu.Lock()
	if n.subs == nil {
		n.subs = map[chan struct{}]bool{}
	}
	n.subs[ch] = true
	n.mu.Unlock()
	defer func() { n.mu.Lock(); delete(n.subs, ch); n.mu.Unlock() }()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		ok, state := cond()
		if ok {
			return
		}
		select {
		case <-ch:
		case <-timer.C:
			if ok, state = cond(); ok {
				return
			}
			t.Fatalf("timed out after %s waiting for %s; last state: %s", d, what, state)
		}
	}
}

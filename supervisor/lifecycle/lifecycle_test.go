package lifecycle

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

type rec struct {
	mu  sync.Mutex
	log []string
}

func (r *rec) add(s string) { r.mu.Lock(); r.log = append(r.log, s); r.mu.Unlock() }
func (r *rec) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.log, " ")
}

type unit struct {
	name    string
	r       *rec
	fail    bool
	wait    chan struct{} // Start blocks on it when set
	entered chan struct{} // closed when Start begins, when set
	after   func()        // called at the end of a successful Start
}

func (u *unit) Name() string { return u.name }
func (u *unit) Start(ctx context.Context) error {
	if u.entered != nil {
		close(u.entered)
	}
	if u.wait != nil {
		select {
		case <-u.wait:
		case <-ctx.Done():
			u.r.add("cancelled:" + u.name)
			return ctx.Err()
		}
	}
	if u.fail {
		return errors.New("boom")
	}
	u.r.add("start:" + u.name)
	if u.after != nil {
		u.after()
	}
	return nil
}
func (u *unit) Stop(context.Context) error { u.r.add("stop:" + u.name); return nil }

func TestGroupStartsInOrderAndStopsInReverse(t *testing.T) {
	r := &rec{}
	g := &Group{Units: []Unit{&unit{name: "a", r: r}, &unit{name: "b", r: r}}}
	if err := g.Start(context.Background(), time.Second); err != nil {
		t.Fatal(err)
	}
	if err := g.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := r.String(); got != "start:a start:b stop:b stop:a" {
		t.Fatalf("got %q", got)
	}
}

func TestGroupRollsBackWhatStartedWhenAUnitFails(t *testing.T) {
	r := &rec{}
	g := &Group{Units: []Unit{&unit{name: "a", r: r}, &unit{name: "b", r: r, fail: true}, &unit{name: "c", r: r}}}
	err := g.Start(context.Background(), time.Second)
	if err == nil || !strings.Contains(err.Error(), "start b: boom") {
		t.Fatalf("err = %v, want it to name unit b", err)
	}
	// b is stopped too: a failed Start may have left half of itself.
	if got := r.String(); got != "start:a stop:b stop:a" {
		t.Fatalf("got %q", got)
	}
}

func TestParallelRunsChainsConcurrentlyAndCancelsOnFailure(t *testing.T) {
	r := &rec{}
	gate := make(chan struct{})
	// Chain 1 can only finish once chain 2 has started: proves concurrency.
	c2 := &unit{name: "c2", r: r}
	p := &Parallel{Label: "p", Chains: [][]Unit{{&unit{name: "c1", r: r, wait: gate}}, {c2, &unit{name: "open", r: r, after: func() { close(gate) }}}}}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"start:c1", "start:c2", "stop:c1", "stop:c2", "stop:open"} {
		if !strings.Contains(r.String(), w) {
			t.Fatalf("%q missing from %q", w, r)
		}
	}

	r2 := &rec{}
	entered := make(chan struct{})
	blocked := &unit{name: "slow", r: r2, wait: make(chan struct{}), entered: entered}
	// bad fails only once slow is running, so there is something to cancel.
	p2 := &Parallel{Label: "p2", Chains: [][]Unit{{blocked}, {&unit{name: "bad", r: r2, fail: true, wait: entered}}}}
	err := p2.Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "start bad: boom") || strings.Contains(err.Error(), "canceled") {
		t.Fatalf("err = %v, want only the failing unit's error", err)
	}
	if !strings.Contains(r2.String(), "cancelled:slow") {
		t.Fatalf("the other chain was not cancelled: %q", r2)
	}
}

func TestDescribeNamesChains(t *testing.T) {
	u := func(n string) Unit { return &unit{name: n} }
	got := Describe([]Unit{u("a"), &Parallel{Label: "p", Chains: [][]Unit{{u("b"), u("c")}, {u("d")}}}, u("e")})
	if want := "a p(b c | d) e"; got != want {
		t.Fatalf("Describe = %q, want %q", got, want)
	}
}

package process

import (
	"testing"
	"time"
)

func TestBackoffFirstRestartImmediateThenDoubles(t *testing.T) {
	b := &Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Window: time.Minute, Limit: 4}
	t0 := time.Unix(1000, 0)
	want := []struct {
		d    time.Duration
		loop bool
	}{{0, false}, {100 * time.Millisecond, false}, {200 * time.Millisecond, false}, {400 * time.Millisecond, true}, {800 * time.Millisecond, true}, {time.Second, true}, {time.Second, true}}
	for i, w := range want {
		d, loop := b.Died(t0.Add(time.Duration(i) * time.Second))
		if d != w.d || loop != w.loop {
			t.Fatalf("death %d: got (%v, %v), want (%v, %v)", i+1, d, loop, w.d, w.loop)
		}
	}
}

func TestBackoffForgetsOldDeaths(t *testing.T) {
	b := &Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Window: 10 * time.Second, Limit: 3}
	t0 := time.Unix(1000, 0)
	b.Died(t0)
	b.Died(t0.Add(time.Second))
	// Well outside the window: a fresh first death, restarted at once.
	if d, loop := b.Died(t0.Add(time.Minute)); d != 0 || loop {
		t.Fatalf("after a quiet minute got (%v, %v), want immediate restart and no crash loop", d, loop)
	}
	if n := b.Recent(t0.Add(time.Minute)); n != 1 {
		t.Fatalf("Recent = %d, want 1", n)
	}
}

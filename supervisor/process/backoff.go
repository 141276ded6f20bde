package process

import "time"

// Backoff decides how long to wait before restarting a child that died. The
// first restart is immediate: an outage of the datapath is what we are
// minimising. Repeated deaths within Window double the delay up to Max, and
// Limit deaths within Window count as a crash loop.
type Backoff struct {
	Initial time.Duration
	Max     time.Duration
	Window  time.Duration
	Limit   int

	deaths []time.Time
}

// DefaultBackoff is what the node daemon uses for its children.
func DefaultBackoff() *Backoff {
	return &Backoff{Initial: 200 * time.Millisecond, Max: 30 * time.Second, Window: 60 * time.Second, Limit: 5}
}

// Died records a death at now and returns the delay before the next start
// and whether the child is crash-looping.
func (b *Backoff) Died(now time.Time) (time.Duration, bool) {
	kept := b.deaths[:0]
	for _, t := range b.deaths {
		if now.Sub(t) < b.Window {
			kept = append(kept, t)
		}
	}
	b.deaths = append(kept, now)
	n := len(b.deaths)
	loop := n >= b.Limit
	if n == 1 {
		return 0, loop
	}
	d := b.Initial
	for i := 2; i < n && d < b.Max; i++ {
		d *= 2
	}
	return min(d, b.Max), loop
}

// Recent is the number of deaths within the window before now.
func (b *Backoff) Recent(now time.Time) int {
	n := 0
	for _, t := range b.deaths {
		if now.Sub(t) < b.Window {
			n++
		}
	}
	return n
}

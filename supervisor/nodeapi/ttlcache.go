package nodeapi

import (
	"sync"
	"time"
)

// ttlCache is a bounded map whose entries expire: when full, expired
// entries go first, then the one expiring soonest, so a flood of new keys
// (bogus tokens) cannot grow it nor flush it all at once.
type ttlCache[K comparable, V any] struct {
	mu  sync.Mutex
	max int
	m   map[K]ttlEntry[V]
}

type ttlEntry[V any] struct {
	v       V
	expires time.Time
}

func newTTLCache[K comparable, V any](max int) *ttlCache[K, V] {
	return &ttlCache[K, V]{max: max, m: make(map[K]ttlEntry[V])}
}

func (c *ttlCache[K, V]) get(k K, now time.Time) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[k]
	if !ok || !now.Before(e.expires) {
		var zero V
		return zero, false
	}
	return e.v, true
}

func (c *ttlCache[K, V]) put(k K, v V, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		now := time.Now()
		for key, e := range c.m {
			if !now.Before(e.expires) {
				delete(c.m, key)
			}
		}
		for len(c.m) >= c.max {
			var victim K
			first := true
			var at time.Time
			for key, e := range c.m {
				if first || e.expires.Before(at) {
					victim, at, first = key, e.expires, false
				}
			}
			delete(c.m, victim)
		}
	}
	c.m[k] = ttlEntry[V]{v: v, expires: expires}
}

func (c *ttlCache[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m)
}

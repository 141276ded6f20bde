package nodeapi

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/time/rate"
)

// Limits bound what one client, or all of them, can hold of the node API:
// connections, time, bytes, requests. Anyone who reaches the port gets
// this far without credentials, so every limit acts before the
// TokenReview.
type Limits struct {
	// MaxConns is how many connections are served at once; further ones
	// wait in the kernel's accept queue until one closes.
	MaxConns int
	// MaxConnsPerSource is how many of them one source address (an IPv6
	// /64) may hold; its further connections are closed at once.
	MaxConnsPerSource int
	// ReadHeaderTimeout cuts a client that sends its request line and
	// headers too slowly (also the TLS handshake's bound).
	ReadHeaderTimeout time.Duration
	// ReadTimeout cuts a client that sends its whole request (the body
	// too) too slowly.
	ReadTimeout time.Duration
	// WriteTimeout bounds an answer; a capture's stream instead gets
	// StreamIdle per write, for as long as the capture runs.
	WriteTimeout time.Duration
	// IdleTimeout closes a kept-alive connection with no next request.
	IdleTimeout time.Duration
	// StreamIdle cuts a capture whose client takes no data this long.
	StreamIdle time.Duration
	// MaxHeaderBytes bounds the request line and headers.
	MaxHeaderBytes int
	// MaxBody bounds a request's body (413 past it).
	MaxBody int64
	// PerSourceRate and PerSourceBurst limit the requests of one source
	// address (429 past them); MaxSources bounds how many are tracked.
	PerSourceRate  rate.Limit
	PerSourceBurst int
	MaxSources     int
}

// DefaultLimits are the node API's limits: enough for netctl against a
// node (a few requests at once, captures up to an hour) and a Prometheus
// scrape, far below what would starve the daemon or the API server.
func DefaultLimits() Limits {
	return Limits{
		MaxConns: 64, MaxConnsPerSource: 16,
		ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
		WriteTimeout: 2 * time.Minute, IdleTimeout: 60 * time.Second, StreamIdle: 30 * time.Second,
		MaxHeaderBytes: 64 << 10, MaxBody: 1 << 20,
		PerSourceRate: 20, PerSourceBurst: 100, MaxSources: 4096,
	}
}

// orDefault fills the zero fields of l from DefaultLimits.
func (l Limits) orDefault() Limits {
	d := DefaultLimits()
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxConnsPerSource <= 0 {
		l.MaxConnsPerSource = d.MaxConnsPerSource
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.WriteTimeout <= 0 {
		l.WriteTimeout = d.WriteTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	if l.StreamIdle <= 0 {
		l.StreamIdle = d.StreamIdle
	}
	if l.MaxHeaderBytes <= 0 {
		l.MaxHeaderBytes = d.MaxHeaderBytes
	}
	if l.MaxBody <= 0 {
		l.MaxBody = d.MaxBody
	}
	if l.PerSourceRate <= 0 {
		l.PerSourceRate = d.PerSourceRate
	}
	if l.PerSourceBurst <= 0 {
		l.PerSourceBurst = d.PerSourceBurst
	}
	if l.MaxSources <= 0 {
		l.MaxSources = d.MaxSources
	}
	return l
}

// NewServer is the node API's HTTP server for h under lim, and the
// listener to serve it on (l with the connection limits). The caller
// serves it (ServeTLS in Start, Serve in tests).
func NewServer(l net.Listener, h http.Handler, lim Limits) (*http.Server, net.Listener) {
	lim = lim.orDefault()
	srv := &http.Server{
		Handler:           rateLimited(h, newSourceLimiter(lim.PerSourceRate, lim.PerSourceBurst, lim.MaxSources)),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
		// HTTP/1.1 only: every limit above is per connection and request;
		// HTTP/2 would multiplex up to 250 streams on one connection with
		// timeouts of its own. netctl and Prometheus speak HTTP/1.1.
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
	}
	return srv, netutil.LimitListener(&perSourceListener{Listener: l, max: lim.MaxConnsPerSource, open: map[string]int{}}, lim.MaxConns)
}

// sourceKey is what limits count per client: the IPv4 address, or the
// IPv6 /64 (one host has a whole /64 to pick addresses from).
func sourceKey(remote string) string {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

// perSourceListener closes a source's connections past max.
type perSourceListener struct {
	net.Listener
	max  int
	mu   sync.Mutex
	open map[string]int
}

func (l *perSourceListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key := sourceKey(c.RemoteAddr().String())
		l.mu.Lock()
		if l.open[key] >= l.max {
			l.mu.Unlock()
			_ = c.Close()
			continue
		}
		l.open[key]++
		l.mu.Unlock()
		return &countedConn{Conn: c, release: func() {
			l.mu.Lock()
			if l.open[key]--; l.open[key] <= 0 {
				delete(l.open, key)
			}
			l.mu.Unlock()
		}}, nil
	}
}

type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// sourceLimiter is a token bucket per source address, at most max of them:
// a bucket that is full again is forgotten first (nothing is lost), then
// the one seen longest ago.
type sourceLimiter struct {
	limit rate.Limit
	burst int
	max   int
	mu    sync.Mutex
	m     map[string]*sourceBucket
}

type sourceBucket struct {
	l    *rate.Limiter
	seen time.Time
}

func newSourceLimiter(limit rate.Limit, burst, max int) *sourceLimiter {
	return &sourceLimiter{limit: limit, burst: burst, max: max, m: map[string]*sourceBucket{}}
}

func (s *sourceLimiter) allow(key string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.m[key]
	if b == nil {
		if len(s.m) >= s.max {
			s.evict(now)
		}
		b = &sourceBucket{l: rate.NewLimiter(s.limit, s.burst)}
		s.m[key] = b
	}
	b.seen = now
	return b.l.AllowN(now, 1)
}

func (s *sourceLimiter) evict(now time.Time) {
	for k, b := range s.m {
		if b.l.TokensAt(now) >= float64(s.burst) {
			delete(s.m, k)
		}
	}
	for len(s.m) >= s.max {
		oldest, at := "", now
		for k, b := range s.m {
			if !b.seen.After(at) {
				oldest, at = k, b.seen
			}
		}
		delete(s.m, oldest)
	}
}

func (s *sourceLimiter) size() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// rateLimited answers 429 to a source past its rate, before anything else
// (the TokenReview included) is done for it.
func rateLimited(h http.Handler, s *sourceLimiter) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		key := sourceKey(req.RemoteAddr)
		if !s.allow(key, time.Now()) {
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusTooManyRequests, fmt.Errorf("too many requests from %s: the node API takes %g per second from one address (bursts of %d); slow down and retry", key, float64(s.limit), s.burst))
			return
		}
		h.ServeHTTP(w, req)
	})
}

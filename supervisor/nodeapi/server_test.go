package nodeapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// serve runs the node API's server (NewServer, as Start builds it, without
// TLS) for h under lim on a loopback port.
func serve(t *testing.T, h http.Handler, lim Limits) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, limited := NewServer(l, h, lim)
	go func() { _ = srv.Serve(limited) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// closedWithin reads c until the server closes it; it fails when that
// takes longer than limit (the server kept the connection).
func closedWithin(t *testing.T, c net.Conn, limit time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still holds the connection after %v", limit)
	}
	return time.Since(start)
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })

// Slowloris: a client that sends a request line and one header, then
// nothing, is cut after ReadHeaderTimeout; one that sends its headers
// but trickles the body is cut after ReadTimeout (before: no read
// timeout, the body was awaited forever); a kept-alive idle connection
// after IdleTimeout (before: forever).
func TestServerCutsSlowClients(t *testing.T) {
	lim := Limits{ReadHeaderTimeout: 200 * time.Millisecond, ReadTimeout: 400 * time.Millisecond, IdleTimeout: 300 * time.Millisecond}
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}), lim)

	headers := dial(t, addr)
	_, _ = io.WriteString(headers, "POST /v1/appctl HTTP/1.1\r\nHost: n1\r\n")
	if d := closedWithin(t, headers, 5*time.Second); d < 150*time.Millisecond {
		t.Fatalf("cut after %v, before the header timeout", d)
	}

	body := dial(t, addr)
	_, _ = io.WriteString(body, "POST /v1/appctl HTTP/1.1\r\nHost: n1\r\nContent-Length: 100000\r\n\r\n{")
	closedWithin(t, body, 5*time.Second)

	// Idle: a read timeout longer than the test, so only IdleTimeout cuts.
	addr = serve(t, okHandler, Limits{ReadTimeout: time.Minute, IdleTimeout: 300 * time.Millisecond})
	idle := dial(t, addr)
	_, _ = io.WriteString(idle, "GET /v1/status HTTP/1.1\r\nHost: n1\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(idle), nil)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("first request: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	closedWithin(t, idle, 5*time.Second)
}

// Past MaxConns, a connection waits unserved until another closes; past
// MaxConnsPerSource, a source's connection is closed at once.
func TestServerCapsConnections(t *testing.T) {
	addr := serve(t, okHandler, Limits{MaxConns: 2, MaxConnsPerSource: 2, ReadHeaderTimeout: time.Minute})
	a, b := dial(t, addr), dial(t, addr)
	// Both are accepted: each is answered.
	for _, c := range []net.Conn{a, b} {
		_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: n1\r\n\r\n")
		if resp, err := http.ReadResponse(bufio.NewReader(c), nil); err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("one of the first two connections: %v %v", resp, err)
		}
	}
	third := dial(t, addr)
	_, _ = io.WriteString(third, "GET / HTTP/1.1\r\nHost: n1\r\n\r\n")
	r := bufio.NewReader(third)
	_ = third.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if _, err := r.Peek(1); err == nil {
		t.Fatal("the third connection was served while two were open (MaxConns 2)")
	}
	_ = a.Close()
	_ = third.SetReadDeadline(time.Now().Add(5 * time.Second))
	if resp, err := http.ReadResponse(r, nil); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the third connection once one closed: %v %v", resp, err)
	}

	// Per source: with 1 allowed, the second connection is closed unserved.
	addr = serve(t, okHandler, Limits{MaxConns: 10, MaxConnsPerSource: 1, ReadHeaderTimeout: time.Minute})
	first := dial(t, addr)
	_, _ = io.WriteString(first, "GET / HTTP/1.1\r\nHost: n1\r\n\r\n")
	if _, err := http.ReadResponse(bufio.NewReader(first), nil); err != nil {
		t.Fatal(err)
	}
	second := dial(t, addr)
	_, _ = io.WriteString(second, "GET / HTTP/1.1\r\nHost: n1\r\n\r\n")
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
		t.Fatalf("the source's second connection: read %d, %v; want it closed", n, err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// One source past its rate gets 429 before any review is asked; another
// source is not affected.
func TestServerRateLimitsASourceBeforeReviewing(t *testing.T) {
	auth := &allow{}
	h := Handler(health.New(), Backend{Node: "n1"}, auth, nil)
	s := newSourceLimiter(1, 3, 16)
	rl := rateLimited(h, s)
	codes := map[int]int{}
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequest(http.MethodGet, api.PathStatus, nil)
		req.RemoteAddr = "192.0.2.7:40000"
		req.Header.Set("Authorization", "Bearer bogus")
		w := &recorder{h: http.Header{}}
		rl.ServeHTTP(w, req)
		codes[w.code]++
		if w.code == http.StatusTooManyRequests && !strings.Contains(w.body.String(), "too many requests from 192.0.2.7") {
			t.Fatalf("429 body %q does not name the source", w.body.String())
		}
	}
	if codes[http.StatusTooManyRequests] < 6 || len(auth.asked) > 4 {
		t.Fatalf("codes %v, %d reviews asked; want the burst of 3 (+1 refilled at most) then 429s", codes, len(auth.asked))
	}
	req, _ := http.NewRequest(http.MethodGet, api.PathStatus, nil)
	req.RemoteAddr = "[2001:db8::1]:1"
	w := &recorder{h: http.Header{}}
	rl.ServeHTTP(w, req)
	if w.code != http.StatusOK {
		t.Fatalf("another source: %d", w.code)
	}
}

// The per-source map stays bounded whatever number of sources pass.
func TestSourceLimiterIsBounded(t *testing.T) {
	s := newSourceLimiter(1, 1, 100)
	now := time.Now()
	for i := 0; i < 10000; i++ {
		s.allow(fmt.Sprintf("198.51.%d.%d", i/256, i%256), now)
	}
	if n := s.size(); n > 100 {
		t.Fatalf("%d sources tracked, want at most 100", n)
	}
	// IPv6 sources count per /64.
	if sourceKey("[2001:db8::1]:1") != sourceKey("[2001:db8::ffff:1]:2") || sourceKey("[2001:db8:0:1::1]:1") == sourceKey("[2001:db8::1]:1") {
		t.Fatal("IPv6 sources are not keyed by /64")
	}
}

// A capture streams longer than the server's read and write timeouts
// (which would cancel or cut it) as long as the client reads.
func TestCaptureOutlivesServerTimeouts(t *testing.T) {
	b := Backend{Node: "n1", Capture: func(ctx context.Context, _ api.CaptureRequest, w io.Writer, started func()) error {
		started()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 20; i++ { // 1 s, past both timeouts
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
			if _, err := w.Write([]byte("p")); err != nil {
				return err
			}
		}
		return nil
	}}
	lim := Limits{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond, StreamIdle: 5 * time.Second}
	addr := serve(t, HandlerWith(health.New(), b, &allow{}, nil, lim), lim)
	resp, err := http.Get("http://" + addr + api.PathCapture + "?pod=p&namespace=ns")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil || string(got) != strings.Repeat("p", 20) {
		t.Fatalf("capture stream: %q %v; want 20 packets", got, err)
	}
}

// recorder is a minimal ResponseWriter.
type recorder struct {
	h    http.Header
	code int
	body strings.Builder
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) WriteHeader(c int)   { r.code = c }
func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	return r.body.Write(p)
}

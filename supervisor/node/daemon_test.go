package node

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// The supervision logic with plain shell children standing in for the OVS
// daemons (the real ones are exercised in tests/node).

func testNode(t *testing.T) (*Node, *health.Reporter, *notes) {
	t.Helper()
	h := health.New()
	rec := &notes{}
	h.SetNotifier(rec.add)
	n := &Node{cfg: &config.Config{StartTimeout: 5 * time.Second, StopTimeout: 2 * time.Second}, log: slog.New(slog.NewTextHandler(io.Discard, nil)), health: h, daemons: map[string]*daemon{}}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	t.Cleanup(n.cancel)
	return n, h, rec
}

type notes struct {
	mu   sync.Mutex
	msgs []string
	ch   chan struct{}
}

func (r *notes) add(s string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, s)
	if r.ch != nil {
		close(r.ch)
	}
	r.ch = make(chan struct{})
	return nil
}

func (r *notes) mark() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.msgs)
}

// waitFor blocks until a notification containing sub arrives.
func (r *notes) waitFor(t *testing.T, sub string) { t.Helper(); r.waitFrom(t, 0, sub) }

// waitFrom is waitFor ignoring the first from notifications.
func (r *notes) waitFrom(t *testing.T, from int, sub string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		r.mu.Lock()
		for _, m := range r.msgs[from:] {
			if strings.Contains(m, sub) {
				r.mu.Unlock()
				return
			}
		}
		if r.ch == nil {
			r.ch = make(chan struct{})
		}
		ch := r.ch
		r.mu.Unlock()
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("no notification containing %q; got %q", sub, r.msgs)
		}
	}
}

// shDaemon runs script; its gate waits for the line "up".
func shDaemon(n *Node, name, script string, starts *int) *daemon {
	d := n.newDaemon(name)
	up := make(chan struct{}, 100)
	d.spec = func() (process.Spec, error) {
		*starts++
		return process.Spec{Name: name, Path: "/bin/sh", Args: []string{"-c", script}, OnLine: func(l string) {
			if l == "up" {
				up <- struct{}{}
			}
		}}, nil
	}
	d.gate = func(ctx context.Context, c *process.Child) error {
		select {
		case <-up:
			return nil
		case <-c.Exited():
			return context.Canceled
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return d
}

func TestDeadChildIsRestartedAndItsDependantToo(t *testing.T) {
	n, h, rec := testNode(t)
	var upStarts, depStarts int
	up := shDaemon(n, "upstream", "echo up; exec sleep 60", &upStarts)
	dep := shDaemon(n, "dependant", "echo up; exec sleep 60", &depStarts)
	up.dependants = []*daemon{dep}
	dep.restarts = up.restarts
	ctx := context.Background()
	for _, d := range []*daemon{up, dep} {
		if err := d.Start(ctx); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { _ = dep.Stop(ctx); _ = up.Stop(ctx) })
	rec.waitFor(t, "READY=1")
	firstDep := dep.Child().Pid()
	mark := rec.mark()
	if err := up.Child().Signal(9); err != nil {
		t.Fatal(err)
	}
	rec.waitFrom(t, mark, "upstream died")
	rec.waitFrom(t, mark, "STATUS=ready")
	if ok, msg := h.Status(); !ok {
		t.Fatalf("not ready after recovery: %s", msg)
	}
	if upStarts != 2 || depStarts != 2 || dep.Child().Pid() == firstDep {
		t.Fatalf("starts: upstream %d dependant %d (want 2 each, dependant restarted with its upstream)", upStarts, depStarts)
	}
	if got := h.Children()[1].Restarts; got != 1 {
		t.Fatalf("dependant restarts = %d, want 1", got)
	}
}

func TestCrashLoopTurnsReadinessFalseWithTheReason(t *testing.T) {
	n, h, rec := testNode(t)
	dir := t.TempDir()
	flag := filepath.Join(dir, "broken")
	// Runs fine once, then dies at once on every later start while the
	// flag file exists, saying why.
	var starts int
	d := shDaemon(n, "flaky", `if [ -e `+flag+` ]; then echo "cannot open /dev/net/tun" >&2; exit 1; fi; touch `+flag+`; echo up; exec sleep 60`, &starts)
	d.backoff = &process.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Window: time.Minute, Limit: 3}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.cancel(); _ = d.Stop(context.Background()) })
	if err := d.Child().Signal(9); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "flaky is crash-looping")
	mark := rec.mark()
	ok, msg := h.Status()
	if ok || !strings.Contains(msg, "flaky is crash-looping") || !strings.Contains(msg, "cannot open /dev/net/tun") {
		t.Fatalf("Status() = %v %q; want not ready, naming the child and its last words", ok, msg)
	}
	if h.Healthy() {
		t.Fatal("a crash-looping child must stop the watchdog and fail /healthz")
	}
	// Fixed: the next attempt succeeds and readiness comes back.
	if err := os.Remove(flag); err != nil {
		t.Fatal(err)
	}
	rec.waitFrom(t, mark, "STATUS=ready")
	if ok, msg := h.Status(); !ok {
		t.Fatalf("not ready after the cause was fixed: %s", msg)
	}
}

package daemon

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

	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// The supervision logic with plain shell children standing in for the OVS
// daemons (the real ones are exercised in tests/node).

func testSet(t *testing.T) (*Set, *health.Reporter, *notes) {
	t.Helper()
	h := health.New()
	rec := &notes{}
	h.SetNotifier(rec.add)
	s := &Set{Settings: Settings{StartTimeout: 5 * time.Second, StopTimeout: 2 * time.Second}, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: h}
	s.Start(context.Background())
	t.Cleanup(s.cancel)
	return s, h, rec
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
func shDaemon(s *Set, name, script string, starts *int) *Daemon {
	d := s.New(name)
	up := make(chan struct{}, 100)
	d.Spec = func() (process.Spec, error) {
		*starts++
		return process.Spec{Name: name, Path: "/bin/sh", Args: []string{"-c", script}, OnLine: func(l string) {
			if l == "up" {
				up <- struct{}{}
			}
		}}, nil
	}
	d.Gate = func(ctx context.Context, c *process.Child) error {
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
	s, h, rec := testSet(t)
	var upStarts, depStarts int
	up := shDaemon(s, "upstream", "echo up; exec sleep 60", &upStarts)
	dep := shDaemon(s, "dependant", "echo up; exec sleep 60", &depStarts)
	up.SetDependants(dep)
	ctx := context.Background()
	for _, d := range []*Daemon{up, dep} {
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
	s, h, rec := testSet(t)
	dir := t.TempDir()
	flag := filepath.Join(dir, "broken")
	// Runs fine once, then dies at once on every later start while the
	// flag file exists, saying why.
	var starts int
	d := shDaemon(s, "flaky", `if [ -e `+flag+` ]; then echo "cannot open /dev/net/tun" >&2; exit 1; fi; touch `+flag+`; echo up; exec sleep 60`, &starts)
	d.Backoff = &process.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Window: time.Minute, Limit: 3}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.cancel(); _ = d.Stop(context.Background()) })
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

// Ready is the process only once it passed its gate; a restart in
// progress that is stuck in its gate is cancelled by Stop, which then
// stops what that restart started (the central's databases wait for a
// quorum without a deadline).
func TestStopCancelsARecoveryStuckInItsGate(t *testing.T) {
	s, _, rec := testSet(t)
	var starts int
	d := shDaemon(s, "db", "echo up; exec sleep 60", &starts)
	d.Untimed = true
	d.Backoff = &process.Backoff{Initial: time.Millisecond, Max: time.Millisecond, Window: time.Minute, Limit: 100}
	gate := d.Gate
	entered := make(chan struct{}, 10)
	d.Gate = func(ctx context.Context, c *process.Child) error {
		if starts > 1 {
			// The restart never becomes ready: only ctx ends it.
			entered <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		}
		return gate(ctx, c)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	first := d.Ready()
	if first == nil || first != d.Child() {
		t.Fatal("Ready() is not the started child")
	}
	if err := first.Signal(9); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "db died")
	<-entered
	if d.Ready() != nil {
		t.Fatal("Ready() during a restart")
	}
	restarted := d.Child()
	stopped := make(chan error, 1)
	go func() { stopped <- d.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Stop waited for an untimed gate")
	}
	select {
	case <-restarted.Exited():
	default:
		t.Fatal("the process the restart started is still running")
	}
}

// With a hand-over, Stop leaves the child running.
func TestHandOverLeavesTheChildRunning(t *testing.T) {
	s, _, _ := testSet(t)
	var starts int
	d := shDaemon(s, "vswitchd", "echo up; exec sleep 60", &starts)
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	c := d.Child()
	t.Cleanup(func() { _ = c.Signal(9) })
	s.HandOver()
	if err := s.Stop(context.Background(), d.Stop); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
		t.Fatal("handed-over child stopped")
	default:
	}
}

func TestFindPrograms(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	for _, f := range []struct{ dir, name string }{{a, "x"}, {b, "x"}, {b, "y"}} {
		if err := os.WriteFile(filepath.Join(f.dir, f.name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(a, "y"), nil, 0o644); err != nil { // not executable
		t.Fatal(err)
	}
	found, missing := FindPrograms([]string{a, b}, "x", "y", "z")
	if found["x"] != filepath.Join(a, "x") || found["y"] != filepath.Join(b, "y") || len(missing) != 1 || missing[0] != "z" {
		t.Fatalf("found %v missing %v", found, missing)
	}
}

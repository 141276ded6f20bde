package process

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestOutputIsLoggedPerLineWithChildNameAndOVSLevel(t *testing.T) {
	var buf syncBuf
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	c, err := Start(Spec{Name: "demo", Path: "/bin/sh", Args: []string{"-c", `echo plain; echo "2026-01-01T00:00:00Z|00001|bridge|WARN|port gone" >&2; exit 3`}}, log)
	if err != nil {
		t.Fatal(err)
	}
	<-c.Exited()
	out := buf.String()
	if !strings.Contains(out, "child=demo") || !strings.Contains(out, "msg=plain") {
		t.Fatalf("stdout line not logged with the child's name:\n%s", out)
	}
	if !strings.Contains(out, `level=WARN msg="port gone"`) || !strings.Contains(out, "module=bridge") {
		t.Fatalf("OVS console line not parsed into level and module:\n%s", out)
	}
	if got := c.ExitReason(); !strings.Contains(got, "exit status 3") || !strings.Contains(got, "port gone") {
		t.Fatalf("ExitReason = %q, want status and last line", got)
	}
}

func TestStopKillsAChildThatIgnoresSIGTERM(t *testing.T) {
	log := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	up := make(chan struct{})
	var once sync.Once
	onLine := func(l string) {
		if l == "up" {
			once.Do(func() { close(up) })
		}
	}
	c, err := Start(Spec{Name: "stubborn", Path: "/bin/sh", Args: []string{"-c", `trap "" TERM; echo up; while :; do sleep 1; done`}, OnLine: onLine}, log)
	if err != nil {
		t.Fatal(err)
	}
	<-up // the trap is in place
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	err = c.Stop(ctx, nil)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Fatalf("Stop = %v, want an error saying it was killed", err)
	}
	if syscall.Kill(c.Pid(), 0) == nil {
		t.Fatalf("pid %d still exists after Stop", c.Pid())
	}
}

func TestExecFailureIsAnExecError(t *testing.T) {
	_, err := Start(Spec{Name: "missing", Path: "/nonexistent/prog"}, slog.Default())
	var ee *ExecError
	if !errors.As(err, &ee) || !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("got %v, want ExecError wrapping ENOENT", err)
	}
}

// Children are forked from a thread that never exits, so a discarded OS
// thread (a goroutine ending while locked, as namespace helpers do) does not
// deliver the parent-death signal to them. Without the spawner thread a
// child forked from one of the discarded threads gets SIGTERM.
func TestChildSurvivesDiscardedThreads(t *testing.T) {
	var children []*Child
	for i := 0; i < 8; i++ {
		// Start from goroutines on threads that are then discarded.
		done := make(chan *Child)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			c, err := Start(Spec{Name: "sleep", Path: "/bin/sleep", Args: []string{"30"}}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Error(err)
			}
			done <- c
		}()
		if c := <-done; c != nil {
			children = append(children, c)
		}
	}
	defer func() {
		for _, c := range children {
			_ = c.Signal(syscall.SIGKILL)
		}
	}()
	for _, c := range children {
		select {
		case <-c.Exited():
			t.Fatalf("child %d died when a thread of the supervisor ended: %s", c.Pid(), c.ExitReason())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

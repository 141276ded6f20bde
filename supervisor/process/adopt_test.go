package process

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lines collects a child's output lines for a test.
type lines chan string

func (l lines) wait(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case got := <-l:
			if strings.Contains(got, want) {
				return
			}
		case <-deadline:
			t.Fatalf("no output line %q within 10s", want)
		}
	}
}

// An orphaned child (its supervisor gone) keeps running while nobody
// reads its FIFO, and a new supervisor adopts it: it reads the child's
// output on, sees its exit and stops it. The same again without a pidfd,
// as on kernels before 5.3 (CentOS 7): the exit is seen in /proc.
func TestAdoptAfterTheSupervisorIsGone(t *testing.T) {
	t.Run("pidfd", func(t *testing.T) { testAdopt(t, false) })
	t.Run("no-pidfd", func(t *testing.T) {
		t.Setenv(noPidfdEnv, "1")
		testAdopt(t, true)
	})
}

func testAdopt(t *testing.T, withoutPidfd bool) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "child.output")
	r, w, err := createFIFO(fifo)
	if err != nil {
		t.Fatal(err)
	}
	// The first supervisor: a child started as Start does with an output
	// FIFO (its stdin is the test's way to make it print). It ignores
	// SIGPIPE, as OVS programs do, so writes while nobody reads fail
	// instead of killing it.
	cmd := exec.Command("/bin/sh", "-c", `trap '' PIPE; echo started; while read l; do echo "got $l"; done`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	buf := make([]byte, 64)
	if n, _ := io.ReadAtLeast(r, buf, len("started\n")); !strings.Contains(string(buf[:n]), "started") {
		t.Fatalf("first reader got %q", buf[:n])
	}
	// The supervisor dies: its reader is gone; the child writes on.
	r.Close()
	io.WriteString(stdin, "while-orphaned\n")

	got := make(lines, 16)
	spec := Spec{Name: "sh", Path: "/bin/sh", OutputFIFO: fifo, OnLine: func(l string) { got <- l }}
	if _, err := Adopt(Spec{Name: "sh", Path: "/bin/sleep", OutputFIFO: fifo}, cmd.Process.Pid, slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "is not a running sleep") {
		t.Fatalf("adopting pid %d as sleep: %v, want a refusal naming the program", cmd.Process.Pid, err)
	}
	var logged syncBuffer
	c, err := Adopt(spec, cmd.Process.Pid, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if !c.Adopted() || c.Pid() != cmd.Process.Pid {
		t.Fatalf("adopted child: adopted=%v pid=%d, want true and %d", c.Adopted(), c.Pid(), cmd.Process.Pid)
	}
	const fallback = "its exit is checked in /proc"
	if got := strings.Contains(logged.String(), fallback); got != withoutPidfd {
		t.Fatalf("log says %q: %v, want %v; log:\n%s", fallback, got, withoutPidfd, logged.String())
	}
	io.WriteString(stdin, "after-adoption\n")
	got.wait(t, "got after-adoption")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// sh ignores nothing but PIPE: SIGTERM ends it; Stop returns once the
	// pidfd (or /proc) says it is gone.
	if err := c.Stop(ctx, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.Exited():
	default:
		t.Fatal("Stop returned before the adopted child exited")
	}
	if c.ExitErr() == nil || !strings.Contains(c.ExitErr().Error(), "status is unknown") {
		t.Fatalf("exit of an adopted child: %v", c.ExitErr())
	}
}

// syncBuffer is a log sink read while the adopted child's goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A child started with an output FIFO survives its starter and logs
// through the FIFO; without one it does not need a FIFO at all.
func TestStartWithOutputFIFO(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "x.output")
	got := make(lines, 16)
	c, err := Start(Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", "echo to-stdout; echo to-stderr >&2; exec sleep 30"}, OutputFIFO: fifo,
		OnLine: func(l string) { got <- l }}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background(), nil)
	got.wait(t, "to-stdout")
	got.wait(t, "to-stderr")
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("%s: %v %v, want a named pipe", fifo, fi, err)
	}
	if c.LastLine() != "to-stderr" {
		t.Fatalf("LastLine %q", c.LastLine())
	}
}

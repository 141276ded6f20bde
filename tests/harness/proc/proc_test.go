package proc

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sh(script string) Spec {
	return Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", script}, Env: []string{"PATH=/usr/bin:/bin"}}
}

func TestLinesAndExitCode(t *testing.T) {
	s := sh(`echo first; echo "second line" >&2; exec sleep 1000`)
	s.Lines = true
	var seen []string
	s.OnLine = func(l string) { seen = append(seen, l) }
	p := MustStart(t, s)
	t.Cleanup(p.Kill)
	if l, err := p.WaitLine("second", 10*time.Second); err != nil || l != "second line" {
		t.Fatalf("WaitLine: %q %v", l, err)
	}
	if !p.Running() {
		t.Fatal("not running")
	}
	code, err := p.Stop(10 * time.Second)
	if err != nil || code != -1 {
		t.Fatalf("Stop: code %d %v, want -1 (SIGTERM)", code, err)
	}
	if _, err := p.WaitLine("never printed", time.Second); err == nil || !strings.Contains(err.Error(), "exited before printing") {
		t.Fatalf("WaitLine after the exit: %v", err)
	}
	if len(seen) != 2 || len(p.Output()) != 2 {
		t.Fatalf("lines %q, output %q", seen, p.Output())
	}
}

func TestTerminateKillsWhatIgnoresSIGTERM(t *testing.T) {
	log := filepath.Join(t.TempDir(), "log")
	s := sh(`trap '' TERM; echo ready; exec sleep 1000`)
	s.Log = log
	p := MustStart(t, s)
	if err := p.WaitLog("ready", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	p.Terminate(300 * time.Millisecond)
	if p.Running() || p.ExitCode() != -1 || time.Since(t0) < 300*time.Millisecond {
		t.Fatalf("after Terminate: running %v, exit %d after %s", p.Running(), p.ExitCode(), time.Since(t0))
	}
	if !strings.Contains(p.LogTail(5), "ready") {
		t.Fatalf("log tail %q", p.LogTail(5))
	}
	if _, err := p.Wait(time.Second); err != nil {
		t.Fatal(err)
	}
}

func TestWaitReportsADeadline(t *testing.T) {
	p := MustStart(t, sh(`exec sleep 1000`))
	t.Cleanup(p.Kill)
	if _, err := p.Wait(50 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "did not exit within") {
		t.Fatalf("Wait: %v", err)
	}
	_ = p.Signal(syscall.SIGKILL)
	if code, err := p.Wait(10 * time.Second); err != nil || code != -1 {
		t.Fatalf("Wait after SIGKILL: %d %v", code, err)
	}
}

func TestWaitFileAndCond(t *testing.T) {
	dir := t.TempDir()
	sub := filepath.Join(dir, "sub")
	f := filepath.Join(sub, "file")
	done := make(chan error, 1)
	go func() {
		done <- WaitCond("the file", 10*time.Second, []string{sub}, func() bool { _, err := os.Stat(f); return err == nil })
	}()
	if err := WaitFile(sub, 10*time.Second, func() error { return os.Mkdir(sub, 0o755) }); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := WaitCond("nothing", 50*time.Millisecond, []string{dir}, func() bool { return false }); err == nil {
		t.Fatal("WaitCond of a false condition returned nil")
	}
}

func TestPollNamesWhatItWaitedFor(t *testing.T) {
	n := 0
	if err := Poll("three calls", 10*time.Second, time.Millisecond, nil, func() (bool, error) { n++; return n == 3, nil }); err != nil || n != 3 {
		t.Fatalf("Poll: %v after %d calls", err, n)
	}
	err := Poll("the impossible", 20*time.Millisecond, time.Millisecond, nil, func() (bool, error) { return false, os.ErrNotExist })
	if err == nil || !strings.Contains(err.Error(), "the impossible") || !strings.Contains(err.Error(), "file does not exist") {
		t.Fatalf("Poll: %v", err)
	}
}

func TestMentioningFindsAChild(t *testing.T) {
	marker := "proc-test-marker-" + filepath.Base(t.TempDir())
	p := MustStart(t, Spec{Path: "/bin/sh", Args: []string{"-c", "while :; do sleep 1; done", marker}, Env: []string{"PATH=/usr/bin:/bin"}})
	t.Cleanup(p.Kill)
	// The shell forks for each sleep, and a forked child carries the
	// marker until it execs: Mentioning may list it too, so the test
	// looks for the shell's own pid rather than counting.
	if err := Poll("the child in /proc", 10*time.Second, 10*time.Millisecond, nil, func() (bool, error) {
		return slices.Contains(Mentioning(marker), p.PID()), nil
	}); err != nil {
		t.Fatal(err)
	}
	if d := Describe([]int{p.PID()}); len(d) != 1 || !strings.Contains(d[0], marker) || !strings.HasPrefix(d[0], strconv.Itoa(p.PID())+" ") {
		t.Fatalf("Describe: %q", d)
	}
	KillMentioning(marker)
	if code, err := p.Wait(10 * time.Second); err != nil || code != -1 {
		t.Fatalf("after KillMentioning: %d %v", code, err)
	}
}

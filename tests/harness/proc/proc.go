// Package proc is the one process runner of the test harnesses: it starts a
// program (a built ovnhost, containerd, kubelet, an OVS daemon...) with its
// arguments and environment, in a network namespace or not, sends its output
// to a log file (or keeps its lines), and lets a test wait for it: a log line,
// an sd_notify message (tests/testenv's listener), its exit, each with a
// deadline and an error naming what did not come. Stopping is SIGTERM with a
// deadline, then SIGKILL.
package proc

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Spec is what to run.
type Spec struct {
	// Name names the process in errors ("ovnhost", "containerd").
	Name string
	Path string
	Args []string
	// Env is the whole environment of the process (nil: none at all).
	Env []string
	// NetNS runs the program through `ip netns exec NetNS` (its network
	// namespace, and a mount namespace whose /sys matches it). With
	// HostMounts, through `nsenter --net=/run/netns/NetNS` instead: the
	// network namespace only, the host's mount namespace kept.
	NetNS      string
	HostMounts bool
	// Log is the file the output is appended to (created if absent).
	// Without it, Output receives it; with neither, Lines decides.
	Log    string
	Output io.Writer
	// Lines keeps every line of the output (stdout and stderr) for
	// WaitLine; OnLine, if set, sees each as it comes.
	Lines  bool
	OnLine func(string)
	// Notify is the sd_notify listener the process reports to: its path
	// is put in NOTIFY_SOCKET, and WaitNotify waits for messages sent
	// after this start.
	Notify *testenv.NotifyListener
	// Pdeathsig kills the process (SIGKILL) when the thread that started
	// it dies, e.g. when the test binary exits without cleaning up.
	Pdeathsig bool
}

// Process is one started program.
type Process struct {
	spec   Spec
	cmd    *exec.Cmd
	mark   int // Notify messages before this start
	exited chan struct{}
	err    error // Wait's

	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced on every line
}

// Start starts the program described by s.
func Start(s Spec) (*Process, error) {
	path, args := s.Path, s.Args
	if s.NetNS != "" {
		if s.HostMounts {
			nsenter, err := testenv.LookPath("nsenter")
			if err != nil {
				return nil, err
			}
			path, args = nsenter, append([]string{"--net=/run/netns/" + s.NetNS, path}, args...)
		} else {
			path, args = "ip", append([]string{"netns", "exec", s.NetNS, path}, args...)
		}
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append([]string{}, s.Env...)
	p := &Process{spec: s, cmd: cmd, exited: make(chan struct{}), more: make(chan struct{})}
	if s.Notify != nil {
		cmd.Env = append(cmd.Env, "NOTIFY_SOCKET="+s.Notify.Path())
		p.mark = s.Notify.Mark()
	}
	if s.Pdeathsig {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	var closeAfterStart, closeAfterWait []io.Closer
	var scan *os.File
	switch {
	case s.Log != "":
		f, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = f, f
		closeAfterWait = append(closeAfterWait, f)
	case s.Output != nil:
		cmd.Stdout, cmd.Stderr = s.Output, s.Output
	case s.Lines:
		// A pipe of our own rather than cmd.StderrPipe: Wait must not
		// depend on the reader.
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = w, w
		closeAfterStart = append(closeAfterStart, w)
		scan = r
	}
	if err := cmd.Start(); err != nil {
		for _, c := range append(closeAfterStart, closeAfterWait...) {
			c.Close()
		}
		if scan != nil {
			scan.Close()
		}
		return nil, fmt.Errorf("start %s: %w", p.Name(), err)
	}
	for _, c := range closeAfterStart {
		c.Close()
	}
	scanned := make(chan struct{})
	if scan != nil {
		go p.scan(scan, scanned)
	} else {
		close(scanned)
	}
	go func() {
		p.err = cmd.Wait()
		for _, c := range closeAfterWait {
			c.Close()
		}
		// The last lines before the exit are read before it is reported.
		<-scanned
		close(p.exited)
	}()
	return p, nil
}

// MustStart is Start, failing t on error.
func MustStart(t testing.TB, s Spec) *Process {
	t.Helper()
	p, err := Start(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *Process) scan(r *os.File, done chan struct{}) {
	defer close(done)
	defer r.Close()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.lines = append(p.lines, line)
		close(p.more)
		p.more = make(chan struct{})
		p.mu.Unlock()
		if p.spec.OnLine != nil {
			p.spec.OnLine(line)
		}
	}
}

// Name is the Spec's Name, else the program's base name.
func (p *Process) Name() string {
	if p.spec.Name != "" {
		return p.spec.Name
	}
	return p.spec.Path
}

// PID is the process id (of `ip netns exec`, which execs the program).
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited (nil on a nil Process: never).
func (p *Process) Exited() <-chan struct{} {
	if p == nil {
		return nil
	}
	return p.exited
}

// Running reports whether the process was started and has not exited.
func (p *Process) Running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) error { return p.cmd.Process.Signal(sig) }

// Err is what waiting for the exited process returned (nil: exit 0).
func (p *Process) Err() error {
	<-p.exited
	return p.err
}

// ExitCode is the exit code of the exited process (-1: killed by a signal).
func (p *Process) ExitCode() int {
	<-p.exited
	return p.cmd.ProcessState.ExitCode()
}

// Wait waits up to d for the process to exit and returns its exit code.
func (p *Process) Wait(d time.Duration) (int, error) {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode(), nil
	case <-time.After(d):
		return 0, fmt.Errorf("%s (pid %d) did not exit within %v", p.Name(), p.PID(), d)
	}
}

// Stop sends SIGTERM and waits up to d for the exit code.
func (p *Process) Stop(d time.Duration) (int, error) {
	_ = p.Signal(syscall.SIGTERM)
	code, err := p.Wait(d)
	if err != nil {
		return 0, fmt.Errorf("%w of SIGTERM", err)
	}
	return code, nil
}

// Terminate ends a process whatever its state, for cleanups: SIGTERM, and
// SIGKILL if it has not exited after grace. It returns once it has exited;
// a nil or exited Process is left alone.
func (p *Process) Terminate(grace time.Duration) {
	if !p.Running() {
		return
	}
	_ = p.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.Kill()
	}
}

// Kill sends SIGKILL and waits for the exit.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// WaitNotify waits for the first sd_notify message starting with prefix
// sent since this start, failing if the process exits first.
func (p *Process) WaitNotify(prefix string, timeout time.Duration) (string, error) {
	if p.spec.Notify == nil {
		return "", fmt.Errorf("%s has no sd_notify listener", p.Name())
	}
	m, err := p.spec.Notify.WaitFor(p.mark, prefix, timeout, p.exited)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p.Name(), err)
	}
	return m, nil
}

// WaitLine waits for an output line containing s (Spec.Lines), already
// printed or to come, and returns it.
func (p *Process) WaitLine(s string, d time.Duration) (string, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	seen := 0
	for {
		p.mu.Lock()
		for ; seen < len(p.lines); seen++ {
			if strings.Contains(p.lines[seen], s) {
				l := p.lines[seen]
				p.mu.Unlock()
				return l, nil
			}
		}
		more := p.more
		p.mu.Unlock()
		select {
		case <-more:
		case <-p.exited:
			p.mu.Lock()
			n := len(p.lines)
			p.mu.Unlock()
			if seen == n {
				return "", fmt.Errorf("%s exited before printing %q", p.Name(), s)
			}
		case <-timer.C:
			return "", fmt.Errorf("%s did not print %q within %s", p.Name(), s, d)
		}
	}
}

// Output is every line kept so far (Spec.Lines).
func (p *Process) Output() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.lines...)
}

// LogTail is the last n lines of the log file, headed by its name.
func (p *Process) LogTail(n int) string {
	raw, _ := os.ReadFile(p.spec.Log)
	return "--- " + p.Name() + " log tail ---\n" + LastLines(string(raw), n)
}

// WaitLog waits until the log file contains sub.
func (p *Process) WaitLog(sub string, timeout time.Duration) error {
	return WaitFileContains(p.spec.Log, sub, timeout)
}

// LastLines is the last n lines of s.
func LastLines(s string, n int) string {
	l := strings.Split(s, "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// WaitFileContains returns once file contains sub, re-reading it on every
// write to it (inotify), or an error naming both after timeout.
func WaitFileContains(file, sub string, timeout time.Duration) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(file); err != nil {
		return err
	}
	deadline := time.After(timeout)
	for {
		raw, _ := os.ReadFile(file)
		if bytes.Contains(raw, []byte(sub)) {
			return nil
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("%q not in %s within %v", sub, file, timeout)
		}
	}
}

// WaitFile runs start and waits (inotify on the directory) until path
// exists, or returns an error naming it after timeout.
func WaitFile(path string, timeout time.Duration, start func() error) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(dirOf(path)); err != nil {
		return err
	}
	if start != nil {
		if err := start(); err != nil {
			return err
		}
	}
	deadline := time.After(timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		select {
		case <-w.Events:
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("%s did not appear within %v", path, timeout)
		}
	}
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i > 0 {
		return path[:i]
	}
	return "."
}

// ReadPidfile reads a daemon's pidfile.
func ReadPidfile(pidfile string) (int, error) {
	raw, err := os.ReadFile(pidfile)
	if err != nil {
		return 0, err
	}
	p, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		return 0, fmt.Errorf("%s: %w", pidfile, err)
	}
	return p, nil
}

// Mentioning lists the live processes (not this one, not zombies awaiting a
// lazy reaper) whose command line mentions s, e.g. a test's directory that
// every daemon it started names in its arguments.
func Mentioning(s string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, d := range entries {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		raw, err := os.ReadFile("/proc/" + d.Name() + "/cmdline")
		if err != nil || !bytes.Contains(raw, []byte(s)) {
			continue
		}
		if Zombie(pid) {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// Zombie reports whether pid has exited and awaits its reaper (or is gone).
func Zombie(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(stat, ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// Describe is "pid command line" of each process, one a line.
func Describe(pids []int) []string {
	var out []string
	for _, p := range pids {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		out = append(out, fmt.Sprintf("%d %s", p, bytes.ReplaceAll(raw, []byte{0}, []byte{' '})))
	}
	return out
}

// KillMentioning SIGKILLs every process whose command line mentions s.
func KillMentioning(s string) {
	for _, p := range Mentioning(s) {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// WaitCond re-checks cond on every change in dirs (inotify; a directory
// created later is watched from when it appears under a watched parent)
// until it holds, or returns an error naming what after timeout.
func WaitCond(what string, timeout time.Duration, dirs []string, cond func() bool) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	watch := func() {
		for _, d := range dirs {
			if w.Add(d) != nil {
				_ = w.Add(dirOf(d))
				// d created between the two Adds: no Create event will
				// say so, and what happens inside it would go unseen.
				_ = w.Add(d)
			}
		}
	}
	watch()
	deadline := time.After(timeout)
	for {
		if cond() {
			return nil
		}
		select {
		case ev := <-w.Events:
			if ev.Op&fsnotify.Create != 0 {
				watch()
			}
		case err := <-w.Errors:
			return err
		case <-deadline:
			return fmt.Errorf("no %s within %v", what, timeout)
		}
	}
}

// Poll re-checks cond every interval until it holds, for states no event
// announces (a CRI status, a cgroup emptying); it returns an error naming
// what, with cond's last error, after timeout, or as soon as exited (if
// not nil) is closed.
func Poll(what string, timeout, interval time.Duration, exited <-chan struct{}, cond func() (bool, error)) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		select {
		case <-tick.C: // paces re-checking; the deadline bounds it
		case <-exited:
			return fmt.Errorf("exited while waiting for %s (last: %v)", what, err)
		case <-deadline:
			return fmt.Errorf("no %s within %v (last: %v)", what, timeout, err)
		}
	}
}

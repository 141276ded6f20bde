// Package process starts one child program in the foreground, captures its
// output line by line into the structured log, and stops it within a
// deadline. It knows nothing about OVS; the node package decides what to run
// and when it is ready.
package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes one program run.
type Spec struct {
	Name string   // the child's name in logs and metrics
	Path string   // absolute path of the program
	Args []string // arguments, without argv[0]
	Env  []string // added to a minimal environment
	Dir  string
	// OnLine, when set, sees every output line (after logging).
	OnLine func(line string)
	// OutputFIFO, when set, makes the child able to outlive the daemon
	// (no PR_SET_PDEATHSIG) so that a later daemon can Adopt it: its output
	// goes to this named pipe instead of an anonymous one, and whoever
	// opens the pipe next reads on where the last reader stopped.
	OutputFIFO string
}

// Child is one running instance of a Spec.
type Child struct {
	Spec    Spec
	cmd     *exec.Cmd // nil for an adopted child
	pid     int
	adopted bool
	pidfd   int // an adopted child's pidfd (0: none)
	started time.Time
	exited  chan struct{}
	err     error // the exit status, valid once exited is closed
	outDone sync.WaitGroup

	mu         sync.Mutex
	lastLine   string
	lastStderr string
}

// ExecError wraps a failure to start the program at all (as opposed to the
// program exiting); preflight turns an EPERM here into the capability story.
type ExecError struct {
	Path string
	Err  error
}

func (e *ExecError) Error() string { return fmt.Sprintf("exec %s: %v", e.Path, e.Err) }
func (e *ExecError) Unwrap() error { return e.Err }

// Start runs spec. Unless spec.OutputFIFO is set, the child dies with the
// daemon (PR_SET_PDEATHSIG) so a killed supervisor never leaves orphans for
// a slow PID 1 to reap.
func Start(spec Spec, log *slog.Logger) (*Child, error) {
	cmd := exec.Command(spec.Path, spec.Args...)
	cmd.Env = append(baseEnv(), spec.Env...)
	cmd.Dir = spec.Dir
	c := &Child{Spec: spec, cmd: cmd, exited: make(chan struct{})}
	var outputs []io.Reader
	if spec.OutputFIFO != "" {
		// Its own process group keeps it out of a terminal's Ctrl-C and
		// out of a kill of ours.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		r, w, err := createFIFO(spec.OutputFIFO)
		if err != nil {
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = w, w
		defer w.Close() // the child has its own copy once started
		outputs = []io.Reader{r}
		c.outDone.Add(1)
		defer func() {
			if c.pid == 0 {
				r.Close()
			}
		}()
	} else {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM, Setpgid: true}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		outputs = []io.Reader{stdout, stderr}
		c.outDone.Add(2)
	}
	if err := startOnSpawner(cmd); err != nil {
		return nil, &ExecError{Path: spec.Path, Err: unwrapExec(err)}
	}
	c.pid = cmd.Process.Pid
	c.started = time.Now()
	l := log.With("child", spec.Name, "pid", c.pid)
	for i, r := range outputs {
		// One FIFO carries both streams: treat it as standard error,
		// where OVS programs write their log.
		go c.pump(r, l, i == 1 || spec.OutputFIFO != "")
	}
	go func() {
		// Drain output before Wait so the last lines (often the reason of
		// a crash) are logged and remembered.
		c.outDone.Wait()
		c.err = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

func unwrapExec(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// baseEnv passes through only what programs legitimately need; the rest of
// the daemon's environment (tokens, unrelated settings) stays with us.
func baseEnv() []string {
	var env []string
	for _, k := range []string{"PATH", "LANG", "LC_ALL", "TZ", "HOME"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	if _, ok := os.LookupEnv("PATH"); !ok {
		env = append(env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin")
	}
	return env
}

// pump logs each line of r. OVS/OVN console lines look like
// "2024-01-01T00:00:00Z|00001|vlog|INFO|text": the level is lifted into the
// record's level and the module into an attribute.
func (c *Child) pump(r io.Reader, log *slog.Logger, isStderr bool) {
	defer c.outDone.Done()
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		level, module, msg := parseOVSLine(line)
		c.mu.Lock()
		c.lastLine = msg
		if isStderr {
			c.lastStderr = msg
		}
		c.mu.Unlock()
		if module != "" {
			log.Log(context.Background(), level, msg, "module", module)
		} else {
			log.Log(context.Background(), level, msg)
		}
		if c.Spec.OnLine != nil {
			c.Spec.OnLine(line)
		}
	}
}

func parseOVSLine(line string) (slog.Level, string, string) {
	parts := strings.SplitN(line, "|", 5)
	if len(parts) != 5 {
		return slog.LevelInfo, "", line
	}
	var lvl slog.Level
	switch parts[3] {
	case "EMER", "ERR":
		lvl = slog.LevelError
	case "WARN":
		lvl = slog.LevelWarn
	case "INFO":
		lvl = slog.LevelInfo
	case "DBG":
		lvl = slog.LevelDebug
	default:
		return slog.LevelInfo, "", line
	}
	return lvl, parts[2], parts[4]
}

// Pid of the child.
func (c *Child) Pid() int { return c.pid }

// Adopted reports whether the child was started by an earlier daemon.
func (c *Child) Adopted() bool { return c.adopted }

// Started is when the child was started.
func (c *Child) Started() time.Time { return c.started }

// Exited is closed when the child has exited and been reaped.
func (c *Child) Exited() <-chan struct{} { return c.exited }

// ExitErr is how the child ended (nil: status 0); valid after Exited.
func (c *Child) ExitErr() error { return c.err }

// LastLine is the last line the child printed, preferring standard error:
// usually why it died.
func (c *Child) LastLine() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lastStderr != "" {
		return c.lastStderr
	}
	return c.lastLine
}

// ExitReason describes how the child ended, with its last words.
func (c *Child) ExitReason() string {
	r := "exited with status 0"
	if c.err != nil {
		r = c.err.Error()
	}
	if l := c.LastLine(); l != "" {
		r += fmt.Sprintf(" (last output: %q)", l)
	}
	return r
}

// Signal sends sig to the child if it is still running.
func (c *Child) Signal(sig syscall.Signal) error {
	select {
	case <-c.exited:
		return nil
	default:
	}
	if c.cmd == nil {
		return c.signalAdopted(sig)
	}
	return c.cmd.Process.Signal(sig)
}

// Stop asks the child to leave, first with graceful (nil means SIGTERM),
// and kills it when ctx ends. It returns once the child is reaped.
func (c *Child) Stop(ctx context.Context, graceful func() error) error {
	select {
	case <-c.exited:
		return nil
	default:
	}
	if graceful == nil || graceful() != nil {
		_ = c.Signal(syscall.SIGTERM)
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
	}
	// The whole process group: a helper the child forked would otherwise
	// keep its output pipes open and the child unreaped.
	_ = syscall.Kill(-c.Pid(), syscall.SIGKILL)
	<-c.exited
	return fmt.Errorf("%s (pid %d) did not stop in time and was killed", c.Spec.Name, c.Pid())
}

// The kernel sends PR_SET_PDEATHSIG when the *thread* that forked the child
// exits, not the process. Go discards a thread whose goroutine ends locked
// to it (namespace helpers do on failure, tests on purpose), which would
// SIGTERM every daemon forked from it. So children are forked from one
// thread that stays locked for the life of the process.
var spawnRequests = make(chan spawnRequest)

type spawnRequest struct {
	cmd  *exec.Cmd
	done chan error
}

func init() {
	go func() {
		runtime.LockOSThread() // never unlocked: this thread lives as long as the process
		for r := range spawnRequests {
			r.done <- r.cmd.Start()
		}
	}()
}

func startOnSpawner(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	spawnRequests <- spawnRequest{cmd: cmd, done: done}
	return <-done
}

// Command vmagent runs inside a test VM booted by tests/harness/qemuvm. It
// opens the virtio-serial control port, says hello, and runs the commands
// the host asks for (see package wire), reporting exit status and output.
//
// It is PID 1 in the plain VM (then it also reaps orphans) or a service
// under systemd (then it is a child subreaper). Either way every child is
// reaped by one wait4(-1) loop, so exit statuses are never stolen.
package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm/wire"
)

const maxOutput = 16 << 20 // per stream; more is cut (a test reads logs with tail)

func main() {
	if os.Getpid() != 1 {
		// Orphans of the commands we run come back to us, not to systemd.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	os.Setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	if os.Getenv("HOME") == "" {
		os.Setenv("HOME", "/root")
	}
	port, err := openPort(30 * time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "vmagent:", err)
		halt()
	}
	a := &agent{out: json.NewEncoder(port), r: newReaper()}
	var uts unix.Utsname
	_ = unix.Uname(&uts)
	a.send(wire.Response{ID: 0, Hello: unix.ByteSliceToString(uts.Release[:])})
	dec := json.NewDecoder(bufio.NewReaderSize(port, 1<<20))
	for {
		var req wire.Request
		if err := dec.Decode(&req); err != nil {
			fmt.Fprintln(os.Stderr, "vmagent: control port:", err)
			halt()
		}
		go a.handle(req)
	}
}

// halt powers the VM off when the agent cannot go on (the host sees qemu exit).
func halt() {
	if os.Getpid() == 1 {
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}
	os.Exit(1)
}

// openPort finds the virtio-serial port named wire.PortName and opens its
// device node, waiting (inotify on /dev) for devtmpfs to create it.
func openPort(timeout time.Duration) (*os.File, error) {
	deadline := time.Now().Add(timeout)
	fd, ierr := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if ierr == nil {
		defer unix.Close(fd)
		_, ierr = unix.InotifyAddWatch(fd, "/dev", unix.IN_CREATE|unix.IN_ATTRIB)
	}
	for {
		if dev := findPort(); dev != "" {
			f, err := os.OpenFile(dev, os.O_RDWR, 0)
			if err == nil {
				return f, nil
			}
			if !errors.Is(err, os.ErrNotExist) {
				return nil, err
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return nil, fmt.Errorf("no virtio-serial port named %s in /sys/class/virtio-ports after %s (is virtio_console loaded and -device virtserialport,name=%s given?)", wire.PortName, timeout, wire.PortName)
		}
		if ierr != nil {
			return nil, fmt.Errorf("inotify on /dev: %v", ierr)
		}
		// Wake on any change in /dev, or after 200 ms for the sysfs side
		// (sysfs has no inotify).
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		ms := int(min(left, 200*time.Millisecond) / time.Millisecond)
		if _, err := unix.Poll(pfd, ms); err == nil && pfd[0].Revents&unix.POLLIN != 0 {
			buf := make([]byte, 4096)
			_, _ = unix.Read(fd, buf)
		}
	}
}

func findPort() string {
	names, _ := filepath.Glob("/sys/class/virtio-ports/*/name")
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err == nil && strings.TrimSpace(string(b)) == wire.PortName {
			return "/dev/" + filepath.Base(filepath.Dir(n))
		}
	}
	return ""
}

type agent struct {
	mu  sync.Mutex
	out *json.Encoder
	r   *reaper
}

func (a *agent) send(r wire.Response) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.out.Encode(r); err != nil {
		fmt.Fprintln(os.Stderr, "vmagent: writing response:", err)
	}
}

func (a *agent) handle(req wire.Request) {
	resp := wire.Response{ID: req.ID}
	switch req.Op {
	case wire.OpRun:
		a.run(req, &resp)
	case wire.OpSpawn:
		a.spawn(req, &resp)
	case wire.OpWait:
		ws, ok := a.r.wait(req.Pid, time.Duration(req.TimeoutMS)*time.Millisecond)
		switch {
		case !ok && ws == nil:
			resp.Err = fmt.Sprintf("pid %d was not spawned by the agent", req.Pid)
		case !ok:
			resp.TimedOut = true
			resp.Err = fmt.Sprintf("pid %d still running after %d ms", req.Pid, req.TimeoutMS)
		default:
			setStatus(&resp, *ws)
		}
	case wire.OpSignal:
		pid := req.Pid
		if req.Group {
			pid = -pid
		}
		if err := unix.Kill(pid, syscall.Signal(req.Signal)); err != nil {
			resp.Err = fmt.Sprintf("kill(%d, %d): %v", pid, req.Signal, err)
		}
	case wire.OpWatch:
		a.watch(req, &resp)
	default:
		resp.Err = fmt.Sprintf("unknown op %q", req.Op)
	}
	a.send(resp)
}

func setStatus(resp *wire.Response, ws syscall.WaitStatus) {
	switch {
	case ws.Exited():
		resp.Exit = ws.ExitStatus()
	case ws.Signaled():
		resp.Exit, resp.Signal = -1, int(ws.Signal())
	}
}

func procAttr(req wire.Request, files []*os.File) *os.ProcAttr {
	env := append(os.Environ(), req.Env...)
	return &os.ProcAttr{Dir: req.Dir, Env: env, Files: files,
		Sys: &syscall.SysProcAttr{Setpgid: true}}
}

func lookArgv(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("empty argv")
	}
	if strings.Contains(argv[0], "/") {
		return argv[0], nil
	}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(d, argv[0])
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: not found in PATH %s", argv[0], os.Getenv("PATH"))
}

func (a *agent) run(req wire.Request, resp *wire.Response) {
	path, err := lookArgv(req.Argv)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	stdinR, stdinW, err := os.Pipe()
	if err != nil {
		resp.Err = err.Error()
		return
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		resp.Err = err.Error()
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		resp.Err = err.Error()
		return
	}
	pid, err := a.r.start(path, req.Argv, procAttr(req, []*os.File{stdinR, outW, errW}))
	stdinR.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		stdinW.Close()
		outR.Close()
		errR.Close()
		resp.Err = err.Error()
		return
	}
	go func() {
		_, _ = stdinW.Write(req.Stdin)
		stdinW.Close()
	}()
	var stdout, stderr bytes.Buffer
	var copies sync.WaitGroup
	copies.Add(2)
	go func() { defer copies.Done(); readCapped(&stdout, outR) }()
	go func() { defer copies.Done(); readCapped(&stderr, errR) }()
	eof := make(chan struct{})
	go func() { copies.Wait(); close(eof) }()

	var deadline <-chan time.Time
	if req.TimeoutMS > 0 {
		tm := time.NewTimer(time.Duration(req.TimeoutMS) * time.Millisecond)
		defer tm.Stop()
		deadline = tm.C
	}
	exited := a.r.channel(pid)
	var ws syscall.WaitStatus
	done := false
	for !done {
		select {
		case ws = <-exited:
			done = true
		case <-deadline:
			resp.TimedOut = true
			_ = unix.Kill(-pid, unix.SIGKILL)
			deadline = nil
		}
	}
	setStatus(resp, ws)
	// The output ends when every holder of the pipes is gone; a background
	// child of the command may keep it open, so do not wait forever.
	select {
	case <-eof:
	case <-time.After(5 * time.Second):
		resp.Err = "the command exited but its stdout/stderr stayed open for 5 s (a background child holds them; redirect its output)"
	}
	outR.Close()
	errR.Close()
	<-eof
	resp.Stdout, resp.Stderr = stdout.Bytes(), stderr.Bytes()
}

func readCapped(dst *bytes.Buffer, r io.Reader) {
	_, _ = io.Copy(dst, io.LimitReader(r, maxOutput))
	_, _ = io.Copy(io.Discard, r)
}

func (a *agent) spawn(req wire.Request, resp *wire.Response) {
	path, err := lookArgv(req.Argv)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	logPath := req.LogFile
	if logPath == "" {
		logPath = "/dev/null"
	}
	if dir := filepath.Dir(logPath); dir != "" {
		_ = os.MkdirAll(dir, 0o755)
	}
	log, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		resp.Err = err.Error()
		return
	}
	defer log.Close()
	null, err := os.Open("/dev/null")
	if err != nil {
		resp.Err = err.Error()
		return
	}
	defer null.Close()
	pid, err := a.r.start(path, req.Argv, procAttr(req, []*os.File{null, log, log}))
	if err != nil {
		resp.Err = err.Error()
		return
	}
	resp.Pid = pid
}

// reaper owns wait4: it records the status of every child the agent
// started and drops those of orphans handed to it.
type reaper struct {
	mu      sync.Mutex
	started map[int]bool
	status  map[int]syscall.WaitStatus
	waiters map[int][]chan syscall.WaitStatus
}

func newReaper() *reaper {
	r := &reaper{started: map[int]bool{}, status: map[int]syscall.WaitStatus{}, waiters: map[int][]chan syscall.WaitStatus{}}
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, unix.SIGCHLD)
	go func() {
		for range sig {
			r.reap()
		}
	}()
	return r
}

// start forks with the lock held, so the child is known before the
// reaper can see it exit.
func (r *reaper) start(path string, argv []string, attr *os.ProcAttr) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := os.StartProcess(path, argv, attr)
	if err != nil {
		return 0, err
	}
	pid := p.Pid
	_ = p.Release()
	r.started[pid] = true
	return pid, nil
}

func (r *reaper) reap() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
		r.mu.Lock()
		if r.started[pid] {
			delete(r.started, pid)
			if ch := r.waiters[pid]; len(ch) > 0 {
				for _, c := range ch {
					c <- ws
				}
				delete(r.waiters, pid)
			}
			r.status[pid] = ws
		}
		r.mu.Unlock()
	}
}

// channel delivers pid's exit status once (at once if it already exited).
func (r *reaper) channel(pid int) <-chan syscall.WaitStatus {
	c := make(chan syscall.WaitStatus, 1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if ws, ok := r.status[pid]; ok {
		c <- ws
		return c
	}
	r.waiters[pid] = append(r.waiters[pid], c)
	return c
}

// wait returns pid's status; ok false with a nil status means pid is not
// ours, with a status pointer means it is still running after timeout.
func (r *reaper) wait(pid int, timeout time.Duration) (*syscall.WaitStatus, bool) {
	r.mu.Lock()
	_, known := r.started[pid]
	_, done := r.status[pid]
	r.mu.Unlock()
	if !known && !done {
		return nil, false
	}
	var zero syscall.WaitStatus
	if timeout <= 0 {
		timeout = time.Hour
	}
	select {
	case ws := <-r.channel(pid):
		return &ws, true
	case <-time.After(timeout):
		return &zero, false
	}
}

// watch waits for req.Pattern to appear in req.LogFile, woken by inotify
// on the file's directory, and gives up when req.Pid exits or the
// deadline passes. The file's tail comes back either way.
func (a *agent) watch(req wire.Request, resp *wire.Response) {
	deadline := time.Now().Add(time.Duration(req.TimeoutMS) * time.Millisecond)
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		resp.Err = "inotify: " + err.Error()
		return
	}
	defer unix.Close(fd)
	if _, err := unix.InotifyAddWatch(fd, filepath.Dir(req.LogFile), unix.IN_MODIFY|unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		resp.Err = fmt.Sprintf("inotify on %s: %v", filepath.Dir(req.LogFile), err)
		return
	}
	var exited <-chan syscall.WaitStatus
	if req.Pid > 0 {
		exited = a.r.channel(req.Pid)
	}
	buf := make([]byte, 4096)
	want := max(req.Count, 1)
	found := func(data []byte) bool { return bytes.Count(data, []byte(req.Pattern)) >= want }
	for {
		data, _ := os.ReadFile(req.LogFile)
		if found(data) {
			resp.Stdout = tailBytes(data, 8192)
			return
		}
		select {
		case ws := <-exited:
			data, _ = os.ReadFile(req.LogFile)
			resp.Stdout = tailBytes(data, 8192)
			if found(data) {
				return
			}
			setStatus(resp, ws)
			resp.Err = fmt.Sprintf("pid %d exited (status %d, signal %d) before %s contained %q", req.Pid, resp.Exit, resp.Signal, req.LogFile, req.Pattern)
			return
		default:
		}
		left := time.Until(deadline)
		if left <= 0 {
			resp.TimedOut = true
			resp.Stdout = tailBytes(data, 8192)
			resp.Err = fmt.Sprintf("%s did not contain %q %d time(s) within %d ms", req.LogFile, req.Pattern, want, req.TimeoutMS)
			return
		}
		// Wake on a write to the directory; every 100 ms to notice the
		// process exit (the reaper's channel cannot be polled with fds).
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, _ := unix.Poll(pfd, int(min(left, 100*time.Millisecond)/time.Millisecond)); n > 0 {
			for {
				if _, err := unix.Read(fd, buf); err != nil {
					break
				}
			}
		}
	}
}

func tailBytes(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

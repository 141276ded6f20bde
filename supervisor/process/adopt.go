package process

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// errAdoptedExit is the exit status of an adopted child: only its parent
// (PID 1 or a subreaper, since our predecessor died) can reap it and learn
// the status.
var errAdoptedExit = errors.New("exited (adopted from an earlier ovnhost, so its exit status is unknown)")

// Alive reports whether pid is running prog (matched on the basename of
// argv[0] in /proc/PID/cmdline): PIDs are reused fast, so a pidfile alone
// proves nothing. A zombie counts as gone.
func Alive(pid int, prog string) bool {
	if pid <= 0 {
		return false
	}
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil || len(raw) == 0 {
		return false
	}
	stat, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err == nil {
		if i := strings.LastIndexByte(string(stat), ')'); i > 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	argv0 := strings.SplitN(string(raw), "\x00", 2)[0]
	return filepath.Base(argv0) == prog
}

// noPidfdEnv, set to 1 in ovnhost's environment, makes Adopt take the
// path of kernels without pidfd_open (before 5.3, such as CentOS 7's
// 3.10) on any kernel, so that tests run it. It is not a setting (no
// OVNHOST_ prefix): the fallback only costs up to 200 ms to see an exit.
const noPidfdEnv = "TEST_ADOPT_WITHOUT_PIDFD"

// pidfdOpen is pidfd_open(2), or ENOSYS as an old kernel answers when
// noPidfdEnv is set.
func pidfdOpen(pid int) (int, error) {
	if os.Getenv(noPidfdEnv) == "1" {
		return -1, fmt.Errorf("%w (forced by %s=1)", unix.ENOSYS, noPidfdEnv)
	}
	return unix.PidfdOpen(pid, 0)
}

// noPidfd reports whether pidfd_open failed because the kernel lacks it
// (ENOSYS) or a seccomp filter that does not know it refuses it (EPERM:
// older container runtimes' default profiles); pidfd_open itself needs no
// permission.
func noPidfd(err error) bool { return errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) }

// Adopt takes over a child that an earlier daemon started with
// spec.OutputFIFO and that outlived it. It checks that pid still runs
// spec.Path's program, reads the child's output from the FIFO again, and
// learns of its exit through a pidfd (Linux 5.3 and later) or, on older
// kernels (CentOS 7's 3.10), by checking /proc every 200 ms.
func Adopt(spec Spec, pid int, log *slog.Logger) (*Child, error) {
	prog := filepath.Base(spec.Path)
	if spec.OutputFIFO == "" {
		return nil, fmt.Errorf("adopting %s (pid %d): it was not started to outlive its supervisor (no output FIFO)", spec.Name, pid)
	}
	if !Alive(pid, prog) {
		return nil, fmt.Errorf("adopting %s: pid %d is not a running %s", spec.Name, pid, prog)
	}
	r, err := openFIFOReader(spec.OutputFIFO)
	if err != nil {
		return nil, fmt.Errorf("adopting %s (pid %d): %w", spec.Name, pid, err)
	}
	c := &Child{Spec: spec, pid: pid, adopted: true, exited: make(chan struct{}), started: processStart(pid)}
	l := log.With("child", spec.Name, "pid", pid)
	pidfd, perr := pidfdOpen(pid)
	if perr != nil && !noPidfd(perr) {
		r.Close()
		return nil, fmt.Errorf("adopting %s: pidfd_open(%d): %w", spec.Name, pid, perr)
	}
	if perr == nil && !Alive(pid, prog) {
		// The pid was reused between the check and pidfd_open.
		unix.Close(pidfd)
		r.Close()
		return nil, fmt.Errorf("adopting %s: pid %d exited while being adopted", spec.Name, pid)
	}
	if perr == nil {
		c.pidfd = pidfd
	} else {
		l.Info("no pidfd for the adopted child: its exit is checked in /proc every 200ms", "reason", perr.Error())
	}
	c.outDone.Add(1)
	go c.pump(r, l, true)
	go func() {
		if c.pidfd > 0 {
			waitPidfd(c.pidfd)
		} else {
			// No pidfd: a non-child's exit has no other event to wait on.
			t := time.NewTicker(200 * time.Millisecond)
			for Alive(pid, prog) {
				<-t.C
			}
			t.Stop()
		}
		c.err = errAdoptedExit
		// The FIFO's writer is gone with the process: output ends.
		c.outDone.Wait()
		close(c.exited)
		if c.pidfd > 0 {
			unix.Close(c.pidfd)
		}
	}()
	return c, nil
}

// waitPidfd blocks until the process behind fd has exited.
func waitPidfd(fd int) {
	for {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, -1)
		if err == nil && n > 0 {
			return
		}
		if err != nil && !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

func (c *Child) signalAdopted(sig syscall.Signal) error {
	if c.pidfd > 0 {
		return unix.PidfdSendSignal(c.pidfd, sig, nil, 0)
	}
	return syscall.Kill(c.pid, sig)
}

// processStart is when pid started, from /proc (the supervisor that started
// it is gone); now if unknown.
func processStart(pid int) time.Time {
	fi, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid)))
	if err != nil {
		return time.Now()
	}
	return fi.ModTime()
}

// createFIFO makes a fresh named pipe at path and opens both ends: the
// reader first and non-blocking (so opening it does not wait for a
// writer), then the writer, blocking, for the child to inherit.
func createFIFO(path string) (r, w *os.File, err error) {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("removing old output FIFO: %w", err)
	}
	if err := unix.Mkfifo(path, 0o600); err != nil {
		return nil, nil, fmt.Errorf("creating output FIFO %s: %w", path, err)
	}
	r, err = openFIFOReader(path)
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		r.Close()
		return nil, nil, fmt.Errorf("opening output FIFO %s for the child: %w", path, err)
	}
	return r, os.NewFile(uintptr(fd), path), nil
}

func openFIFOReader(path string) (*os.File, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, fmt.Errorf("output FIFO: %w", err)
	}
	if fi.Mode()&os.ModeNamedPipe == 0 {
		return nil, fmt.Errorf("output FIFO %s is not a named pipe", path)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening output FIFO %s: %w", path, err)
	}
	// Non-blocking: os.NewFile hands it to the runtime poller.
	return os.NewFile(uintptr(fd), path), nil
}

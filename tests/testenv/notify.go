package testenv

import (
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// NotifyListener is the systemd side of sd_notify for a daemon under test:
// a unix datagram socket (dir/notify.sock, the daemon's NOTIFY_SOCKET)
// whose messages are kept one line each, in order.
type NotifyListener struct {
	path string
	conn *net.UnixConn
	mu   sync.Mutex
	msgs []string
	cond chan struct{} // closed and replaced on every datagram
}

// ListenNotify opens dir/notify.sock; it is closed when the test ends.
func ListenNotify(t testing.TB, dir string) *NotifyListener {
	t.Helper()
	p := filepath.Join(dir, "notify.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: p, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	l := &NotifyListener{path: p, conn: c, cond: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			l.mu.Lock()
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if line != "" {
					l.msgs = append(l.msgs, line)
				}
			}
			close(l.cond)
			l.cond = make(chan struct{})
			l.mu.Unlock()
		}
	}()
	t.Cleanup(func() { c.Close() })
	return l
}

// Close closes the socket (before a second listener takes its path).
func (l *NotifyListener) Close() { l.conn.Close() }

// Path is the socket's path, for NOTIFY_SOCKET.
func (l *NotifyListener) Path() string { return l.path }

// Mark returns the number of messages so far, to wait for later ones.
func (l *NotifyListener) Mark() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.msgs)
}

// All returns every message so far.
func (l *NotifyListener) All() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.msgs...)
}

// WaitFor returns the first message at or after index from that starts
// with prefix, failing when exited is closed first or timeout passes.
func (l *NotifyListener) WaitFor(from int, prefix string, timeout time.Duration, exited <-chan struct{}) (string, error) {
	deadline := time.After(timeout)
	for {
		l.mu.Lock()
		for _, m := range l.msgs[min(from, len(l.msgs)):] {
			if strings.HasPrefix(m, prefix) {
				l.mu.Unlock()
				return m, nil
			}
		}
		ch := l.cond
		l.mu.Unlock()
		select {
		case <-ch:
		case <-exited:
			return "", fmt.Errorf("the daemon exited while waiting for sd_notify %q", prefix)
		case <-deadline:
			return "", fmt.Errorf("no sd_notify %q within %v; got %q", prefix, timeout, l.All())
		}
	}
}

// Package netns gives the test harnesses named network namespaces (as `ip
// netns add` makes them, under /run/netns) and lets the test process open
// sockets inside them: a daemon under test listens in its own namespace, the
// test dials it there.
package netns

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

var seq atomic.Int32

// New creates a network namespace named prefix<pid>-<n> with lo up,
// removed at cleanup.
func New(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s%d-%d", prefix, os.Getpid()%10000, seq.Add(1))
	Add(t, name)
	return name
}

// Add creates the network namespace name with lo up, removed at cleanup.
func Add(t testing.TB, name string) {
	t.Helper()
	Run(t, "ip", "netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	Run(t, "ip", "-n", name, "link", "set", "lo", "up")
}

// Run runs a command (in the test's namespace) and returns its output,
// failing t with the output on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Do runs f on this goroutine's thread switched into network namespace
// name, and switches the thread back before unlocking it: sockets f opens
// belong to that namespace and stay there afterwards. The thread must not
// die locked: children forked from it earlier would get their Pdeathsig
// (the process harnesses use it) when it exits.
func Do(name string, f func() error) error {
	runtime.LockOSThread()
	orig, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(orig)
	fd, err := unix.Open("/run/netns/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer unix.Close(fd)
	if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer func() {
		if unix.Setns(orig, unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the thread stays locked and in ns: better than a wrong namespace elsewhere
	}()
	return f()
}

// Dial opens a TCP connection from inside namespace name.
func Dial(name, addr string, timeout time.Duration) (c net.Conn, err error) {
	err = Do(name, func() error {
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// Listen opens a TCP listener inside namespace name.
func Listen(name, addr string) (l net.Listener, err error) {
	err = Do(name, func() error {
		l, err = net.Listen("tcp", addr)
		return err
	})
	return l, err
}

// HTTPGet fetches http://addr+path from inside namespace name (the
// connection dialed there, the request written on it).
func HTTPGet(name, addr, path string) (int, string, error) {
	conn, err := Dial(name, addr, 5*time.Second)
	if err != nil {
		return 0, "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+addr+path, nil)
	if err := req.Write(conn); err != nil {
		return 0, "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return resp.StatusCode, b.String(), nil
}

// ServeTCP listens on addr inside namespace ns and runs handle on each
// connection, in a goroutine of its own, until cleanup closes the listener.
func ServeTCP(t testing.TB, ns, addr string, handle func(net.Conn)) {
	t.Helper()
	l, err := Listen(ns, addr)
	if err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
}

// ServeUDP listens on addr inside namespace ns (network "udp" or "udp4")
// and sends back, to each datagram's source, what reply returns for it,
// until cleanup.
func ServeUDP(t testing.TB, ns, network, addr string, reply func([]byte) []byte) {
	t.Helper()
	var pc net.PacketConn
	if err := Do(ns, func() (err error) { pc, err = net.ListenPacket(network, addr); return err }); err != nil {
		t.Fatalf("listen on udp %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { pc.Close() })
	go func() {
		b := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(reply(b[:n]), from)
		}
	}()
}

// ProxyInto makes a TCP service of the test's namespace (e.g. the API
// server on its loopback) answer on the same address inside namespace ns:
// a listener created there, each connection forwarded from the test's own
// namespace. It stops at cleanup.
func ProxyInto(t testing.TB, ns, addr string) {
	t.Helper()
	ServeTCP(t, ns, addr, func(c net.Conn) {
		defer c.Close()
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { _, _ = io.Copy(up, c) }()
		_, _ = io.Copy(c, up)
	})
}

// FreePort is a TCP port free on 127.0.0.1 inside namespace ns.
func FreePort(t testing.TB, ns string) int {
	t.Helper()
	var port int
	if err := Do(ns, func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		port = l.Addr().(*net.TCPAddr).Port
		return l.Close()
	}); err != nil {
		t.Fatal(err)
	}
	return port
}

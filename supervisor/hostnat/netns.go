package hostnat

import (
	"fmt"
	"runtime"

	"github.com/vishvananda/netns"
)

// nsHandle is the network namespace a Manager programs: the one of the
// thread that called New (the host's for the daemon, a throwaway one in
// the tests). Whatever goroutine later works for the Manager (Run), its
// netlink sockets are opened in that namespace (nftables.WithNetNSFd) and
// the iptables programs are run from a throwaway thread moved into it.
type nsHandle struct {
	h netns.NsHandle
}

func currentNS() (*nsHandle, error) {
	h, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("hostnat: open the current network namespace: %w", err)
	}
	return &nsHandle{h: h}, nil
}

func (n *nsHandle) close() {
	if n != nil && n.h.IsOpen() {
		n.h.Close()
	}
}

// fd is the namespace for nftables.WithNetNSFd, or 0 (the caller's).
func (n *nsHandle) fd() int {
	if n == nil {
		return 0
	}
	return int(n.h)
}

// do runs fn in the namespace: on a new
// locked thread that is moved there and never moved back: the goroutine
// ends locked, so the runtime discards the thread.
func (n *nsHandle) do(fn func() error) error {
	if n == nil {
		return fn()
	}
	// Already there (the daemon, in the host's namespace): run here. A
	// discarded thread must be the exception: children started with
	// Pdeathsig from it (the supervisor's daemons) get SIGTERM when it ends.
	runtime.LockOSThread()
	if cur, err := netns.Get(); err == nil {
		same := cur.Equal(n.h)
		cur.Close()
		if same {
			defer runtime.UnlockOSThread()
			return fn()
		}
	}
	runtime.UnlockOSThread()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(n.h); err != nil {
			errc <- fmt.Errorf("hostnat: enter the network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

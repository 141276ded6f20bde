package netns

import (
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// InFresh runs fn on a locked OS thread inside a new, unnamed network
// namespace with lo up, then puts the thread back in its namespace; the new
// one goes away with its last reference. Programs fn starts (ip) run in it.
// For unit tests of netlink code: no name under /run/netns, nothing left.
func InFresh(t testing.TB, fn func(ns vns.NsHandle)) {
	t.Helper()
	testenv.RequireRoot(t)
	runtime.LockOSThread()
	orig, err := vns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("current netns: %v", err)
	}
	ns, err := vns.New()
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		t.Fatalf("new netns: %v", err)
	}
	defer func() {
		ns.Close()
		if err := vns.Set(orig); err != nil {
			// The thread stays locked: the runtime ends it rather than
			// run anything else in the test namespace.
			orig.Close()
			t.Errorf("back to the original netns: %v", err)
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
	}()
	if lo, err := netlink.LinkByName("lo"); err == nil {
		_ = netlink.LinkSetUp(lo)
	}
	fn(ns)
}

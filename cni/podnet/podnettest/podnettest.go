// Package podnettest creates real network namespaces for tests and removes
// them (and everything in them) when the test ends.
package podnettest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netns"
)

var seq atomic.Int64

// NewNetNS creates a named network namespace (/run/netns/NAME) with lo up
// and returns its path; it is deleted at the end of the test.
func NewNetNS(t testing.TB, prefix string) string {
	t.Helper()
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), seq.Add(1))
	path, err := Create(name)
	if err != nil {
		t.Fatalf("create netns %s: %v", name, err)
	}
	t.Cleanup(func() {
		if err := netns.DeleteNamed(name); err != nil && !os.IsNotExist(err) {
			t.Errorf("delete netns %s: %v", name, err)
		}
	})
	return path
}

// Create makes the named netns and returns its path; the caller deletes it
// with netns.DeleteNamed(name).
func Create(name string) (string, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return "", err
	}
	defer orig.Close()
	ns, err := netns.NewNamed(name)
	if err != nil {
		_ = netns.Set(orig)
		return "", err
	}
	ns.Close()
	if err := netns.Set(orig); err != nil {
		panic("cannot return to the original netns: " + err.Error())
	}
	return filepath.Join("/run/netns", name), nil
}

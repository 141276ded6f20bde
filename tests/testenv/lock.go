package testenv

import (
	"os"
	"path/filepath"
	"syscall"
)

// LockDir creates dir and takes an exclusive flock on dir/.lock, so that
// test binaries running at once (go test -p N, CI beside a developer)
// build or fetch into a shared cache one at a time. The returned func
// releases the lock.
func LockDir(dir string) (unlock func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

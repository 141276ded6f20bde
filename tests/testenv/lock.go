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

// Cached returns dir/name, a program a build produced earlier into the
// shared cache directory dir, or builds it now: build writes tmpdir/name,
// which is renamed into place, and a stamp file records want (the
// recipe: version, flags) so that a changed recipe builds again. The
// directory's lock serialises test binaries building the same program; a
// half-built program is never found.
func Cached(dir, name, want string, build func(tmpdir string) error) (string, error) {
	return CachedStamp(dir, name, ".stamp", want, build)
}

// CachedStamp is Cached with the stamp file's name (several programs in
// one directory keep a stamp each).
func CachedStamp(dir, name, stampName, want string, build func(tmpdir string) error) (string, error) {
	bin, stamp := filepath.Join(dir, name), filepath.Join(dir, stampName)
	ok := func() bool {
		b, err := os.ReadFile(stamp)
		_, serr := os.Stat(bin)
		return err == nil && string(b) == want && serr == nil
	}
	if ok() {
		return bin, nil
	}
	unlock, err := LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if ok() {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(dir, ".build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := build(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		return "", err
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return "", err
	}
	return bin, nil
}

// CacheRoot is the directory the harnesses build and fetch into, shared by
// every test binary and kept across runs: $OVNHOST_KUBE_CACHE, else
// $XDG_CACHE_HOME/ovnhost (~/.cache/ovnhost), else /var/cache/ovnhost (no
// HOME and no XDG_CACHE_HOME, as on some CI runners).
func CacheRoot() string {
	if d := os.Getenv("OVNHOST_KUBE_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ovnhost")
	}
	return "/var/cache/ovnhost"
}

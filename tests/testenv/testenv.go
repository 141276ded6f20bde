// Package testenv decides what a test does when a prerequisite (root, a
// Debian package, a built binary) is missing: it skips on a developer's laptop
// and fails loudly under `make test` and CI, where OVNHOST_TEST_STRICT=1.
package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Strict reports whether missing prerequisites must fail the test.
func Strict() bool {
	return os.Getenv("OVNHOST_TEST_STRICT") == "1" || os.Getenv("CI") == "true"
}

// missing fails or skips t with reason, depending on Strict.
func missing(t testing.TB, reason string) {
	t.Helper()
	if Strict() {
		t.Fatalf("prerequisite missing: %s (run the suite with `make test`, which installs it)", reason)
	}
	t.Skipf("prerequisite missing: %s", reason)
}

// RequireRoot needs uid 0 (network namespaces, OVS daemons, netlink).
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		missing(t, "root privileges")
	}
}

// RequireCommands needs each named program on PATH (or in /usr/sbin).
func RequireCommands(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := LookPath(n); err != nil {
			missing(t, "program "+n+" (Debian packages openvswitch-switch, ovn-central, ovn-host)")
		}
	}
}

// LookPath finds a program on PATH or in the sbin directories Debian uses,
// which a non-login root shell may not have on PATH.
func LookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return exec.LookPath(name)
}

// RepoRoot returns the module root, found from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Binary returns the path of a program built by `make build` (OVNHOST_BIN,
// else <repo>/bin), failing or skipping when it is absent.
func Binary(t testing.TB, name string) string {
	t.Helper()
	dir := os.Getenv("OVNHOST_BIN")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin")
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		missing(t, "built binary "+p+" (run `make build`)")
	}
	return p
}

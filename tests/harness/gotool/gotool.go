// Package gotool builds a program from the Go module proxy with
// `go install PKG@VERSION` into a cache directory outside the repository
// (the kubeapi harness's: $OVNHOST_KUBE_CACHE, else ~/.cache/ovnhost), keyed
// by program, version, Go version and platform, once per machine (a file
// lock serialises concurrent test binaries). Used for promtool
// (github.com/prometheus/prometheus) and helm (helm.sh/helm).
package gotool

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

var (
	mu    sync.Mutex
	built = map[string]string{}
)

// HelmVersion is the helm.sh/helm/v3 module version helm is built from.
const HelmVersion = "v3.22.0"

// Helm returns the path of helm, built on first use.
func Helm(t testing.TB) string { return Install(t, "helm.sh/helm/v3/cmd/helm", HelmVersion) }

// Install returns the path of program name (the last element of pkg),
// building pkg@version (with the build tags, if any) on first use. It
// fails under OVNHOST_TEST_STRICT, else skips, when the build is impossible.
func Install(t testing.TB, pkg, version string, tags ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := pkg + "@" + version + " " + strings.Join(tags, ",")
	if p, ok := built[key]; ok {
		return p
	}
	p, err := install(pkg, version, tags)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("building %s: %v", key, err)
		}
		t.Skipf("cannot build %s: %v", key, err)
	}
	built[key] = p
	return p
}

func install(pkg, version string, tags []string) (string, error) {
	name := filepath.Base(pkg)
	variant := version
	if len(tags) > 0 {
		variant += "-" + strings.Join(tags, "-")
	}
	dir := filepath.Join(testenv.CacheRoot(), fmt.Sprintf("%s-%s-%s-%s-%s", name, variant, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	goBin := filepath.Join(runtime.GOROOT(), "bin", "go")
	tmp, err := os.MkdirTemp(dir, "gobin-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	args := []string{"install", "-trimpath"}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command(goBin, append(args, pkg+"@"+version)...)
	cmd.Dir = os.TempDir() // outside any module
	cmd.Env = append(os.Environ(), "GOBIN="+tmp, "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) > 20 {
			lines = lines[len(lines)-20:]
		}
		return "", fmt.Errorf("go install %s@%s: %v\n%s", pkg, version, err, strings.Join(lines, "\n"))
	}
	// Renamed into place last, so a half-built binary is never found.
	if err := os.Rename(filepath.Join(tmp, name), bin); err != nil {
		return "", err
	}
	return bin, nil
}

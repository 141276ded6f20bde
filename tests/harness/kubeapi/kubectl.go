package kubeapi

import (
	"bytes"
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
	kubectlOnce sync.Once
	kubectlPath string
	kubectlErr  error
)

// Kubectl returns a kubectl of the harness's Kubernetes version, built from
// the Go module proxy with the harness's module graph and cached beside its
// binaries (instant when cached; about a minute with a warm Go build cache).
func Kubectl(t testing.TB) string {
	t.Helper()
	bin := Binaries(t)
	if p := filepath.Join(bin, "kubectl"); fileExists(p) {
		return p
	}
	kubectlOnce.Do(func() { kubectlPath, kubectlErr = buildKubectl(bin) })
	if kubectlErr != nil {
		if testenv.Strict() {
			t.Fatalf("building kubectl: %v", kubectlErr)
		}
		t.Skipf("cannot build kubectl: %v", kubectlErr)
	}
	return kubectlPath
}

func buildKubectl(kubeBin string) (string, error) {
	v := Version
	if e := os.Getenv("OVNHOST_KUBE_VERSION"); e != "" {
		v = strings.TrimPrefix(e, "v")
	}
	dir := filepath.Join(filepath.Dir(kubeBin), fmt.Sprintf("kubectl-v%s-%s-%s-%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	out := filepath.Join(dir, "kubectl")
	if fileExists(out) {
		return out, nil
	}
	if err := os.MkdirAll(filepath.Join(dir, "mod"), 0o755); err != nil {
		return "", err
	}
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if fileExists(out) {
		return out, nil
	}
	// The harness's go.mod pins Kubernetes' staging modules to the proxy's
	// tags; kubectl lives in the same k8s.io/kubernetes module.
	for _, f := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(kubeBin, "mod", f))
		if err != nil {
			return "", fmt.Errorf("harness module files: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "mod", f), b, 0o644); err != nil {
			return "", err
		}
	}
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	minor := strings.Split(v, ".")[1]
	vpkg := "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-s -w -X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
		vpkg, v, vpkg, strings.Split(v, ".")[0], vpkg, minor, vpkg)
	fmt.Fprintf(os.Stderr, "kubeapi harness: building kubectl v%s into %s\n", v, dir)
	cmd := exec.Command(gobin, "build", "-mod=mod", "-ldflags", ldflags, "-o", out+".tmp", "k8s.io/kubernetes/cmd/kubectl")
	cmd.Dir = filepath.Join(dir, "mod")
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false -modcacherw", "CGO_ENABLED=0")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build kubectl: %v\n%s", err, stderr.String())
	}
	return out, os.Rename(out+".tmp", out)
}

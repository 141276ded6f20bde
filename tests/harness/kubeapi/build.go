// Package kubeapi runs a real kube-apiserver and etcd for tests.
//
// The binaries are built from the Go module proxy (k8s.io/kubernetes with its
// staging modules pinned to the matching v0.X.Y tags, etcd from
// go.etcd.io/etcd/server/v3 at the version Kubernetes itself pins) into a
// cache directory outside the repository, keyed by Kubernetes version, Go
// version and platform: $OVNHOST_KUBE_CACHE, else $XDG_CACHE_HOME/ovnhost
// (~/.cache/ovnhost), else /var/cache/ovnhost. A cached build is reused instantly; a cold one takes a
// few minutes on 2 cores, a warm Go build cache about 15 s.
//
//	srv := kubeapi.Start(t)             // etcd + kube-apiserver on 127.0.0.1, stopped by t.Cleanup
//	cs := kubernetes.NewForConfigOrDie(srv.Config)
//	srv.ApplyFile(t, "packaging/kubernetes/base/crd-subnets.yaml")
//
// ControllerManager builds kube-controller-manager (same version, same module
// directory, its own stamp so a cached kube-apiserver/etcd stays valid) and
// Server.StartControllerManager runs it with the endpointslice, namespace and
// garbage-collector controllers.
//
// Traps handled: 1.37 refuses a loopback advertise address with the lease
// endpoint reconciler (--endpoint-reconciler-type=none); without a
// controller-manager there is no "default" ServiceAccount, so the
// ServiceAccount admission plugin is disabled; there is no scheduler or
// kubelet: tests set spec.nodeName themselves.
package kubeapi

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Version is the Kubernetes release the harness builds; OVNHOST_KUBE_VERSION overrides it.
const Version = "1.37.2"

func version() string {
	if v := os.Getenv("OVNHOST_KUBE_VERSION"); v != "" {
		return strings.TrimPrefix(v, "v")
	}
	return Version
}

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// Binaries returns the directory holding kube-apiserver and etcd, building
// them on first use (cached across runs). It fails or skips t when Go or the
// module proxy is unavailable.
func Binaries(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() { buildDir, buildErr = build() })
	if buildErr != nil {
		if testenv.Strict() {
			t.Fatalf("building kube-apiserver/etcd: %v", buildErr)
		}
		t.Skipf("cannot build kube-apiserver/etcd: %v", buildErr)
	}
	return buildDir
}

func goTool() (string, error) {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	return exec.LookPath("go")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func build() (string, error) {
	gobin, err := goTool()
	if err != nil {
		return "", fmt.Errorf("go toolchain not found: %w", err)
	}
	root := testenv.CacheRoot()
	v := version()
	dir := filepath.Join(root, fmt.Sprintf("kube-v%s-%s-%s-%s", v, runtime.Version(), runtime.GOOS, runtime.GOARCH))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	stamp := filepath.Join(dir, ".stamp")
	want := "k8s=v" + v + " recipe=1"
	ok := func() bool {
		b, err := os.ReadFile(stamp)
		return err == nil && string(b) == want && fileExists(filepath.Join(dir, "kube-apiserver")) && fileExists(filepath.Join(dir, "etcd"))
	}
	if ok() {
		return dir, nil
	}
	// Serialise concurrent test binaries building the same cache.
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if ok() {
		return dir, nil
	}
	t0 := time.Now()
	fmt.Fprintf(os.Stderr, "kubeapi: building kube-apiserver and etcd v%s into %s (cold: minutes; cached afterwards)\n", v, dir)
	moddir := filepath.Join(dir, "mod")
	if err := os.MkdirAll(moddir, 0o755); err != nil {
		return "", err
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false -modcacherw", "CGO_ENABLED=0")
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(gobin, args...)
		cmd.Dir = moddir
		cmd.Env = env
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, lastLines(stderr.String(), 20))
		}
		return out, nil
	}
	if !fileExists(filepath.Join(moddir, "go.mod")) {
		if err := os.WriteFile(filepath.Join(moddir, "go.mod"), []byte("module ovnhost.local/kubebins\n"), 0o644); err != nil {
			return "", err
		}
		out, err := run("mod", "download", "-json", "k8s.io/kubernetes@v"+v)
		if err != nil {
			os.Remove(filepath.Join(moddir, "go.mod"))
			return "", err
		}
		var info struct{ GoMod string }
		if err := json.Unmarshal(out, &info); err != nil || info.GoMod == "" {
			os.Remove(filepath.Join(moddir, "go.mod"))
			return "", fmt.Errorf("go mod download k8s.io/kubernetes@v%s: no go.mod in %q", v, out)
		}
		gomod, err := generateGoMod(info.GoMod, v)
		if err != nil {
			os.Remove(filepath.Join(moddir, "go.mod"))
			return "", err
		}
		if err := os.WriteFile(filepath.Join(moddir, "go.mod"), []byte(gomod.text), 0o644); err != nil {
			return "", err
		}
		if _, err := run("get", "-tool", "k8s.io/kubernetes/cmd/kube-apiserver@v"+v, "go.etcd.io/etcd/server/v3@"+gomod.etcd); err != nil {
			os.Remove(filepath.Join(moddir, "go.mod"))
			return "", err
		}
	}
	minor := strings.Split(v, ".")[1]
	vpkg := "k8s.io/component-base/version"
	ldflags := fmt.Sprintf("-s -w -X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
		vpkg, v, vpkg, strings.Split(v, ".")[0], vpkg, minor, vpkg)
	tmp, err := os.MkdirTemp(dir, ".build")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if _, err := run("build", "-ldflags", ldflags, "-o", tmp+"/", "k8s.io/kubernetes/cmd/kube-apiserver", "go.etcd.io/etcd/server/v3"); err != nil {
		return "", err
	}
	// go names the binary of module root go.etcd.io/etcd/server/v3 "server".
	if err := os.Rename(filepath.Join(tmp, "server"), filepath.Join(dir, "etcd")); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(tmp, "kube-apiserver"), filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", err
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "kubeapi: built in %s\n", time.Since(t0).Round(time.Second))
	return dir, nil
}

type genMod struct{ text, etcd string }

// generateGoMod pins k8s.io/kubernetes' staging modules (v0.0.0 + ./staging
// replace upstream) to the v0.MINOR.PATCH tags on the proxy.
func generateGoMod(kmodPath, v string) (genMod, error) {
	b, err := os.ReadFile(kmodPath)
	if err != nil {
		return genMod{}, err
	}
	parts := strings.Split(v, ".")
	staging := "v0." + parts[1] + "." + parts[2]
	var godir, etcd string
	seen := map[string]bool{}
	var replaces []string
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == "go" && godir == "" {
			godir = f[1]
		}
		if len(f) >= 2 && f[0] == "require" {
			f = f[1:]
		}
		if len(f) >= 2 && f[0] == "go.etcd.io/etcd/server/v3" && etcd == "" {
			etcd = f[1]
		}
		if len(f) >= 2 && strings.HasPrefix(f[0], "k8s.io/") && f[1] == "v0.0.0" && !seen[f[0]] {
			seen[f[0]] = true
			replaces = append(replaces, fmt.Sprintf("\t%s => %s %s\n", f[0], f[0], staging))
		}
	}
	if godir == "" || etcd == "" || len(replaces) == 0 {
		return genMod{}, fmt.Errorf("%s: unexpected k8s.io/kubernetes go.mod (go %q, etcd %q, %d staging modules)", kmodPath, godir, etcd, len(replaces))
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "module ovnhost.local/kubebins\n\ngo %s\n\nrequire k8s.io/kubernetes v%s\n\nreplace (\n", godir, v)
	for _, r := range sortedUnique(replaces) {
		sb.WriteString(r)
	}
	sb.WriteString(")\n")
	return genMod{text: sb.String(), etcd: etcd}, nil
}

func sortedUnique(s []string) []string {
	m := map[string]bool{}
	var out []string
	for _, x := range s {
		if !m[x] {
			m[x] = true
			out = append(out, x)
		}
	}
	// simple insertion sort keeps imports minimal
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// extraTools are the Kubernetes programs built on demand next to
// kube-apiserver, each once per test binary.
var extraTools sync.Map // name -> *toolBuild

type toolBuild struct {
	once sync.Once
	path string
	err  error
}

// ControllerManager returns the path of kube-controller-manager, building it
// on first use next to kube-apiserver (cached across runs).
func ControllerManager(t testing.TB) string { return Tool(t, "kube-controller-manager") }

// KubeProxy returns the path of kube-proxy, built like ControllerManager.
func KubeProxy(t testing.TB) string { return Tool(t, "kube-proxy") }

// Kubelet returns the path of a kubelet of the same version as the
// kube-apiserver, built like ControllerManager (tests/runtime runs it
// against containerd).
func Kubelet(t testing.TB) string { return Tool(t, "kubelet") }

// Tool returns the path of k8s.io/kubernetes/cmd/<name> at the harness's
// version, building it on first use into the kube-apiserver directory with a
// stamp of its own: adding a tool must not invalidate (and rebuild) the
// kube-apiserver and etcd other tests are using.
func Tool(t testing.TB, name string) string {
	t.Helper()
	dir := Binaries(t)
	v, _ := extraTools.LoadOrStore(name, &toolBuild{})
	b := v.(*toolBuild)
	b.once.Do(func() { b.path, b.err = buildTool(dir, name) })
	if b.err != nil {
		if testenv.Strict() {
			t.Fatalf("building %s: %v", name, b.err)
		}
		t.Skipf("cannot build %s: %v", name, b.err)
	}
	return b.path
}

func buildTool(dir, name string) (string, error) {
	gobin, err := goTool()
	if err != nil {
		return "", fmt.Errorf("go toolchain not found: %w", err)
	}
	v := version()
	return testenv.CachedStamp(dir, name, ".stamp-"+name, "k8s=v"+v+" recipe=1", func(tmp string) error {
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "kubeapi: building %s v%s into %s\n", name, v, dir)
		moddir := filepath.Join(dir, "mod")
		env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false -modcacherw", "CGO_ENABLED=0")
		run := func(args ...string) error {
			cmd := exec.Command(gobin, args...)
			cmd.Dir = moddir
			cmd.Env = env
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("go %s (in %s): %v: %s", strings.Join(args, " "), moddir, err, lastLines(stderr.String(), 20))
			}
			return nil
		}
		pkg := "k8s.io/kubernetes/cmd/" + name
		if err := run("get", "-tool", pkg+"@v"+v); err != nil {
			return err
		}
		vpkg := "k8s.io/component-base/version"
		parts := strings.Split(v, ".")
		ldflags := fmt.Sprintf("-s -w -X %s.gitVersion=v%s -X %s.gitMajor=%s -X %s.gitMinor=%s -X %s.gitTreeState=clean",
			vpkg, v, vpkg, parts[0], vpkg, parts[1], vpkg)
		if err := run("build", "-ldflags", ldflags, "-o", tmp+"/", pkg); err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "kubeapi: built %s in %s\n", name, time.Since(t0).Round(time.Second))
		return nil
	})
}

package criruntime

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/packaging/ociimage"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// ---------------------------------------------------------------- builds

func goTool() (string, error) {
	if p := filepath.Join(goruntime.GOROOT(), "bin", "go"); fileExists(p) {
		return p, nil
	}
	return exec.LookPath("go")
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// goTools are the programs the harness builds from the Go module proxy
// with `go install <pkg>@<version>` (outside any module), each cached in
// its own directory of testenv.CacheRoot() keyed by version, Go version and
// platform, and built at most once per test binary.
var (
	goToolsMu sync.Mutex
	goTools   = map[string]*goToolBuild{}
)

type goToolBuild struct {
	once sync.Once
	path string
	err  error
}

// Crictl returns the cached crictl binary, building it on first use with
// `go install sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0`.
func Crictl(t testing.TB) string {
	t.Helper()
	return GoInstalled(t, "crictl", "", CrictlModule, CrictlVersion)
}

// GoInstalled returns the path of program name (package pkg of module at
// version; module "" = `go install pkg@version`; pins, "module version"
// requirements added to the build module), building it on first use; it
// fails (strict) or skips t if it cannot.
func GoInstalled(t testing.TB, name, module, pkg, version string, pins ...string) string {
	t.Helper()
	goToolsMu.Lock()
	b := goTools[name]
	if b == nil {
		b = &goToolBuild{}
		goTools[name] = b
	}
	goToolsMu.Unlock()
	b.once.Do(func() { b.path, b.err = buildGoTool(t, name, module, pkg, version, pins) })
	if b.err != nil {
		if testenv.Strict() {
			t.Fatalf("building %s: %v", name, b.err)
		}
		t.Skipf("cannot build %s: %v", name, b.err)
	}
	return b.path
}

func buildGoTool(t testing.TB, name, module, pkg, version string, pins []string) (string, error) {
	gobin, err := goTool()
	if err != nil {
		return "", fmt.Errorf("go toolchain not found: %w", err)
	}
	dir := filepath.Join(testenv.CacheRoot(), fmt.Sprintf("%s-%s-%s-%s-%s", name, version, goruntime.Version(), goruntime.GOOS, goruntime.GOARCH))
	want := pkg + "@" + version + " recipe=1"
	if module != "" {
		want = pkg + "@" + version + " recipe=module-2 " + strings.Join(pins, ",")
	}
	return testenv.Cached(dir, name, want, func(tmp string) error {
		t0 := time.Now()
		var cmd *exec.Cmd
		if module == "" {
			cmd = exec.Command(gobin, "install", "-trimpath", "-ldflags=-s -w", pkg+"@"+version)
			cmd.Dir = tmp // outside any module: `go install pkg@version` mode
			cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOWORK=off", "GOFLAGS=-modcacherw", "CGO_ENABLED=0")
		} else {
			// A throwaway module requiring module@version, built with
			// -mod=mod: no @v/list query, which `go install pkg@version` makes
			// for its deprecation check (and which the proxy refuses for some
			// gopkg.in modules: "403 Forbidden").
			// Extra requirements raise shared dependencies to the versions
			// the harness's other builds use (kube-apiserver's, built the same
			// way: CGO off, no -trimpath), so their compiled packages are reused.
			gomod := fmt.Sprintf("module ovnhost.local/%s\n\ngo 1.24\n\nrequire %s %s\n", name, module, version)
			for _, p := range pins {
				gomod += "require " + p + "\n"
			}
			if err := os.WriteFile(filepath.Join(tmp, "go.mod"), []byte(gomod), 0o644); err != nil {
				return err
			}
			cmd = exec.Command(gobin, "build", "-ldflags=-s -w", "-o", filepath.Join(tmp, filepath.Base(pkg)), pkg)
			cmd.Dir = tmp
			cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-modcacherw -mod=mod", "CGO_ENABLED=0")
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go %s: %v\n%s", strings.Join(cmd.Args[1:], " "), err, lastLines(string(out), 20))
		}
		if base := filepath.Base(pkg); base != name {
			if err := os.Rename(filepath.Join(tmp, base), filepath.Join(tmp, name)); err != nil {
				return err
			}
		}
		t.Logf("timing: %s %s built in %s (cold; cached in %s)", name, version, time.Since(t0).Round(100*time.Millisecond), dir)
		return nil
	})
}

// Multus (the thin plugin) from the Go module proxy.
const (
	MultusModule  = "gopkg.in/k8snetworkplumbingwg/multus-cni.v4"
	MultusPkg     = MultusModule + "/cmd/multus"
	MultusVersion = "v4.2.3"
)

// Multus returns the cached multus binary, building it on first use.
// Built against this repository's Kubernetes client libraries (v0.37.2,
// not the 0.32.5 it pins): it then reuses the packages kube-apiserver's
// build compiled (cold: seconds of CPU instead of about 5 minutes).
// k8s.io/kubelet stays at Multus's own version (0.37 renamed
// ClaimResource.CDIDevices, which Multus uses).
func Multus(t testing.TB) string {
	t.Helper()
	return GoInstalled(t, "multus", MultusModule, MultusPkg, MultusVersion,
		"k8s.io/api v0.37.2", "k8s.io/apimachinery v0.37.2", "k8s.io/client-go v0.37.2")
}

var (
	pauseOnce sync.Once
	pausePath string
	pauseErr  error
)

// Pause returns the pause program (testdata/pause, static), built on first
// use into the harness cache, keyed by its source, Go version and platform.
func Pause(t testing.TB) string {
	t.Helper()
	pauseOnce.Do(func() { pausePath, pauseErr = buildPause() })
	if pauseErr != nil {
		t.Fatalf("building pause: %v", pauseErr)
	}
	return pausePath
}

func buildPause() (string, error) {
	gobin, err := goTool()
	if err != nil {
		return "", err
	}
	src := filepath.Join(testenv.RepoRoot(), "tests", "harness", "criruntime", "testdata", "pause")
	code, err := os.ReadFile(filepath.Join(src, "main.go"))
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(code)
	dir := filepath.Join(testenv.CacheRoot(), fmt.Sprintf("pause-%x-%s-%s-%s", sum[:6], goruntime.Version(), goruntime.GOOS, goruntime.GOARCH))
	return testenv.Cached(dir, "pause", "recipe=1", func(tmp string) error {
		cmd := exec.Command(gobin, "build", "-trimpath", "-ldflags=-s -w", "-o", filepath.Join(tmp, "pause"), ".")
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build: %v\n%s", err, out)
		}
		return nil
	})
}

func lastLines(s string, n int) string {
	l := strings.Split(strings.TrimSpace(s), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}

// ---------------------------------------------------------------- images

// BuildImages writes the pause and busybox images as OCI archives into dir.
func BuildImages(t testing.TB, dir string) (pause, busybox string) {
	t.Helper()
	work := filepath.Join(dir, "images")
	if err := os.MkdirAll(filepath.Join(work, "bb", "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	// pause: a static Go program, alone in its image.
	data, err := os.ReadFile(Pause(t))
	if err != nil {
		t.Fatal(err)
	}
	pause = filepath.Join(work, "pause.oci.tar")
	writeImage(t, work, pause, PauseRef, []ociimage.Entry{{Data: data, Mode: 0o755, Path: "/pause"}}, ociimage.Config{Entrypoint: []string{"/pause"}})

	// busybox: Debian's static busybox and the applets the tests call.
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(work, "bb")
	if err := os.WriteFile(filepath.Join(root, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "ping", "nc", "httpd", "wget", "sleep", "ip", "cat", "echo", "mkdir", "printf", "hostname", "ls"} {
		if err := os.Symlink("busybox", filepath.Join(root, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"tmp", "www", "proc", "sys", "dev", "etc"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	busybox = filepath.Join(work, "busybox.oci.tar")
	writeImage(t, work, busybox, BusyboxRef, []ociimage.Entry{{Dir: root, Path: "/"}},
		ociimage.Config{Cmd: []string{"/bin/sh"}, Env: []string{"PATH=/bin"}})
	return pause, busybox
}

func writeImage(t testing.TB, work, path, ref string, entries []ociimage.Entry, cfg ociimage.Config) {
	t.Helper()
	layer, err := ociimage.Layer(work, entries)
	if err != nil {
		t.Fatal(err)
	}
	img, err := ociimage.Image(layer, cfg, goruntime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteOCIArchive(path, img, ref); err != nil {
		t.Fatal(err)
	}
}

// Package packaging checks every release artefact with the software that
// consumes it: the bundle by running its programs chrooted into it, the
// systemd unit with systemd-analyze and an allow-list of systemd 219, the
// RPM with rpm itself, the Talos extension with Talos's own machinery code,
// the images by reading them back with go-containerregistry, and the
// Kubernetes manifests with a real kube-apiserver (kubectl --dry-run=server).
//
// The artefacts are built once per test run, from the programs of `make
// build` (OVNHOST_BIN, default <repo>/bin), into one temporary directory that
// TestMain removes.
package packaging

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ovnhost/ovnhost/packaging/build"
	"github.com/ovnhost/ovnhost/packaging/bundle"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

var workDir string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "ovnhost-pkgtest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = d
	code := m.Run()
	os.RemoveAll(d)
	os.Exit(code)
}

const testVersion = "0.1.0-test"

// binDir is the directory of the programs of `make build`.
func binDir(t *testing.T) string {
	t.Helper()
	var dir string
	for _, p := range bundle.OVNHostPrograms {
		dir = filepath.Dir(testenv.Binary(t, p))
	}
	return dir
}

// once caches one artefact per test run; a failed build fails every test
// that needs it, with the same error.
type once struct {
	sync.Once
	path string
	err  error
}

func (o *once) get(t *testing.T, f func() (string, error)) string {
	t.Helper()
	o.Do(func() { o.path, o.err = f() })
	if o.err != nil {
		t.Fatalf("building the artefact: %v", o.err)
	}
	return o.path
}

var (
	bundleOnce   once
	bundleMan    *bundle.Manifest
	imageOnce    once
	talosOnce    once
	rpmOnce      once
	ovsPrograms  = []string{"ovsdb-server", "ovs-vswitchd", "ovn-controller", "ovn-northd", "ovsdb-tool", "ovs-appctl", "ovn-appctl"}
	requireBuild = func(t *testing.T) string {
		testenv.RequireCommands(t, ovsPrograms...)
		return binDir(t)
	}
)

// bundleDir builds the bundle once.
func bundleDir(t *testing.T) string {
	t.Helper()
	bin := requireBuild(t)
	return bundleOnce.get(t, func() (string, error) {
		dir := filepath.Join(workDir, "bundle")
		m, err := build.Bundle(bin, dir, testVersion)
		bundleMan = m
		return dir, err
	})
}

func imageFile(t *testing.T) string {
	t.Helper()
	b := bundleDir(t)
	return imageOnce.get(t, func() (string, error) {
		p := filepath.Join(workDir, "ovnhost-image.tar")
		return p, build.Image(b, p, "ovnhost:"+build.Tag(testVersion), testVersion)
	})
}

func talosFile(t *testing.T) string {
	t.Helper()
	b := bundleDir(t)
	return talosOnce.get(t, func() (string, error) {
		p := filepath.Join(workDir, "ovnhost-talos-extension.tar")
		return p, build.TalosExtension(b, p, "ovnhost-talos-extension:"+build.Tag(testVersion), testVersion)
	})
}

func rpmFile(t *testing.T) string {
	t.Helper()
	testenv.RequireCommands(t, "rpmbuild", "rpm")
	bin := binDir(t)
	return rpmOnce.get(t, func() (string, error) {
		return build.RPM(bin, filepath.Join(workDir, "rpm"), testVersion)
	})
}

package packaging

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blang/semver/v4"
	"github.com/siderolabs/talos/pkg/machinery/extensions"
	"github.com/siderolabs/talos/pkg/machinery/extensions/services"
	"go.yaml.in/yaml/v4"

	"github.com/ovnhost/ovnhost/packaging/build"
	"github.com/ovnhost/ovnhost/packaging/ociimage"
)

// layerEntries reads back the single layer of an OCI archive and calls f
// for each tar entry.
func layerEntries(t *testing.T, archive string, f func(h *tar.Header, r io.Reader)) {
	t.Helper()
	img, err := ociimage.ReadOCIArchive(archive, t.TempDir())
	if err != nil {
		t.Fatalf("reading %s: %v", archive, err)
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 1 {
		t.Fatalf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		f(h, tr)
	}
}

// extract writes a layer entry under dir (regular files, directories,
// symlinks; the owner is whoever runs the test).
func extract(t *testing.T, dir string, h *tar.Header, r io.Reader) {
	t.Helper()
	dst := filepath.Join(dir, filepath.Clean("/"+h.Name))
	switch h.Typeflag {
	case tar.TypeDir:
		if err := os.MkdirAll(dst, os.FileMode(h.Mode).Perm()); err != nil {
			t.Fatal(err)
		}
	case tar.TypeReg:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, r); err != nil {
			t.Fatal(err)
		}
		out.Close()
	case tar.TypeSymlink:
		if err := os.Symlink(h.Linkname, dst); err != nil {
			t.Fatal(err)
		}
	case tar.TypeLink:
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Link(filepath.Join(dir, filepath.Clean("/"+h.Linkname)), dst); err != nil {
			t.Fatal(err)
		}
	default:
		t.Fatalf("unexpected entry type %c for %s", h.Typeflag, h.Name)
	}
}

// checkHeader holds every entry of an image to what Talos and a careful
// operator expect: owned by root, nothing writable by group or others.
func checkHeader(t *testing.T, h *tar.Header) {
	t.Helper()
	if h.Uid != 0 || h.Gid != 0 {
		t.Errorf("%s owned by %d:%d, want root", h.Name, h.Uid, h.Gid)
	}
	if h.Typeflag != tar.TypeSymlink && h.Mode&0o022 != 0 {
		t.Errorf("%s is writable by group or others (%o)", h.Name, h.Mode)
	}
}

// unpackTalos extracts the extension image into a directory the way Talos's
// installer lays out an extension: manifest.yaml and rootfs/.
func unpackTalos(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "ovnhost")
	layerEntries(t, talosFile(t), func(h *tar.Header, r io.Reader) {
		checkHeader(t, h)
		top, _, _ := strings.Cut(strings.TrimPrefix(h.Name, "./"), "/")
		if top != "manifest.yaml" && top != "rootfs" {
			t.Errorf("image has %s: a Talos extension holds only /manifest.yaml and /rootfs", h.Name)
		}
		extract(t, dir, h, r)
	})
	return dir
}

var talos112 = semver.MustParse("1.12.0")

// TestTalosExtensionValidates loads the extension with Talos's own code and
// validates its version constraint and its contents (allowed paths only).
func TestTalosExtensionValidates(t *testing.T) {
	dir := unpackTalos(t)
	ext, err := extensions.Load(dir)
	if err != nil {
		t.Fatalf("extensions.Load: %v", err)
	}
	if ext.Manifest.Metadata.Name != "ovnhost" || ext.Manifest.Metadata.Version != testVersion {
		t.Errorf("manifest name/version = %q/%q", ext.Manifest.Metadata.Name, ext.Manifest.Metadata.Version)
	}
	if err := ext.Validate(extensions.WithValidateConstraints(), extensions.WithValidateContents(), extensions.WithTalosVersion(&talos112)); err != nil {
		t.Fatalf("Talos 1.12 rejects the extension: %v", err)
	}
	// The constraint is real: a Talos older than it refuses the extension.
	old := semver.MustParse("1.7.0")
	if err := ext.Validate(extensions.WithValidateConstraints(), extensions.WithTalosVersion(&old)); err == nil {
		t.Error("Talos 1.7 accepted the extension despite its >= v1.8.0 constraint")
	}
	// The contents check is real: a file outside /usr/local is refused.
	if err := os.MkdirAll(filepath.Join(dir, "rootfs/etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rootfs/etc/ovnhost.conf"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ext.Validate(extensions.WithValidateContents(), extensions.WithTalosVersion(&talos112)); err == nil {
		t.Error("Talos accepted a file under /etc in the extension")
	}
}

// decodeService decodes a service definition like Talos does (lenient) or
// strictly (unknown fields are errors).
func decodeService(data []byte, strict bool) (services.Spec, error) {
	var spec services.Spec
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if strict {
		dec.KnownFields(true)
	}
	err := dec.Decode(&spec)
	return spec, err
}

// TestTalosServiceSpec checks the extension service with the machinery's
// Spec.Validate, decoded strictly (Talos decodes leniently, so a misspelled
// field would silently be dropped on the node), and what it must contain.
func TestTalosServiceSpec(t *testing.T) {
	dir := unpackTalos(t)
	data, err := os.ReadFile(filepath.Join(dir, build.TalosServiceFile))
	if err != nil {
		t.Fatalf("service definition: %v", err)
	}
	spec, err := decodeService(data, true)
	if err != nil {
		t.Fatalf("strict decoding: %v", err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatalf("services.Spec.Validate: %v", err)
	}
	if spec.Name != build.TalosServiceName {
		t.Errorf("service name %q; Talos looks for its rootfs at /usr/local/lib/containers/<name>", spec.Name)
	}
	entry := filepath.Join(dir, build.TalosServiceRootfs, spec.Container.Entrypoint)
	if fi, err := os.Stat(entry); err != nil || fi.Mode().Perm()&0o111 == 0 {
		t.Errorf("entrypoint %s is not an executable of the service rootfs: %v", spec.Container.Entrypoint, err)
	}
	if strings.Join(spec.Container.Args, " ") != "run" {
		t.Errorf("args = %v, want [run]", spec.Container.Args)
	}
	if spec.Restart != services.RestartAlways {
		t.Errorf("restart = %v, want always", spec.Restart)
	}
	var network, configuration bool
	for _, d := range spec.Depends {
		network = network || len(d.Network) > 0
		configuration = configuration || d.Configuration
	}
	if !network || !configuration {
		t.Errorf("depends: network=%v configuration=%v, want both", network, configuration)
	}
	mounts := map[string][]string{}
	for _, m := range spec.Container.Mounts {
		mounts[m.Destination] = m.Options
		if m.Source != m.Destination && m.Destination != "/tmp" {
			t.Errorf("mount %s -> %s: host paths keep their names", m.Source, m.Destination)
		}
		if _, err := os.Lstat(filepath.Join(dir, build.TalosServiceRootfs, m.Destination)); err != nil && m.Destination != "/dev/net/tun" && !strings.HasPrefix(m.Destination, "/run/") && !strings.HasPrefix(m.Destination, "/var/run/") {
			t.Errorf("mount point %s missing from the read-only rootfs", m.Destination)
		}
	}
	for _, d := range []string{"/var/lib/openvswitch", "/var/lib/ovn", "/run/openvswitch", "/run/ovn", "/run/ovnhost", "/var/run/netns", "/dev/net/tun", "/opt/cni/bin", "/etc/cni/net.d", "/tmp"} {
		if _, ok := mounts[d]; !ok {
			t.Errorf("no mount for %s", d)
		}
	}
	if !strings.Contains(strings.Join(mounts["/var/run/netns"], ","), "rshared") {
		t.Errorf("/var/run/netns options %v: pod namespaces created later need shared propagation", mounts["/var/run/netns"])
	}
	// The environment is the daemon's: its own loader must accept it (with
	// NODE_NAME, which comes from the ExtensionServiceConfig).
	if err := loadConfig(append(append([]string{}, spec.Container.Environment...), "NODE_NAME=talos-node"), nil); err != nil {
		t.Errorf("ovnhost rejects the service environment: %v", err)
	}

	// A misspelled field: Talos's lenient decoding drops it silently, the
	// strict decoding refuses it.
	typo := bytes.Replace(data, []byte("  entrypoint:"), []byte("  entrypont:"), 1)
	if bytes.Equal(typo, data) {
		t.Fatal("could not introduce the typo")
	}
	if _, err := decodeService(typo, false); err != nil {
		t.Logf("lenient decoding also refused the typo: %v", err)
	}
	if _, err := decodeService(typo, true); err == nil {
		t.Error("strict decoding accepted a misspelled field")
	}
}

// TestTalosSourceFilesMatchImage keeps the repository's service file and the
// one in the image identical (no edits at build time).
func TestTalosSourceFilesMatchImage(t *testing.T) {
	dir := unpackTalos(t)
	got, err := os.ReadFile(filepath.Join(dir, build.TalosServiceFile))
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != readRepo(t, "talos-extension/ovnhost.yaml") {
		t.Error("service file in the image differs from talos-extension/ovnhost.yaml")
	}
}

package packaging

import (
	"archive/tar"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/packaging/build"
	"github.com/ovnhost/ovnhost/packaging/ociimage"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestImageConfig reads the DaemonSet image back with go-containerregistry:
// OCI media types, linux, entrypoint `ovnhost run`.
func TestImageConfig(t *testing.T) {
	img, err := ociimage.ReadOCIArchive(imageFile(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	mt, err := img.MediaType()
	if err != nil || !strings.Contains(string(mt), "oci.image.manifest") {
		t.Errorf("manifest media type %q %v, want OCI", mt, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture == "" {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	if got := strings.Join(append(append([]string{}, cf.Config.Entrypoint...), cf.Config.Cmd...), " "); got != "/usr/bin/ovnhost run" {
		t.Errorf("entrypoint+cmd = %q, want /usr/bin/ovnhost run", got)
	}
	if cf.Config.Labels["org.opencontainers.image.version"] != testVersion {
		t.Errorf("version label %q", cf.Config.Labels["org.opencontainers.image.version"])
	}
}

// TestImageIsDistrolessAndRuns unpacks the image's only layer (no base
// image), checks it carries no shell or package manager, only root-owned
// entries, and that its programs run chrooted into the unpacked image.
func TestImageIsDistrolessAndRuns(t *testing.T) {
	root := t.TempDir()
	names := map[string]bool{}
	layerEntries(t, imageFile(t), func(h *tar.Header, r io.Reader) {
		checkHeader(t, h)
		name := "/" + strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		names[name] = true
		extract(t, root, h, r)
	})
	for _, p := range []string{"/usr/bin/ovnhost", "/usr/bin/ovnhost-cni", "/usr/bin/ovnhost-controller", "/usr/sbin/ovs-vswitchd", "/usr/sbin/ovsdb-server", "/usr/bin/ovn-controller", "/usr/share/openvswitch/vswitch.ovsschema"} {
		if !names[p] {
			t.Errorf("image lacks %s", p)
		}
	}
	for _, p := range []string{"/bin/sh", "/usr/bin/sh", "/usr/bin/bash", "/usr/bin/dash", "/usr/bin/apt", "/usr/bin/dpkg"} {
		if names[p] {
			t.Errorf("image has %s: it should be distroless", p)
		}
	}
	testenv.RequireRoot(t)
	for _, p := range []string{"/usr/bin/ovnhost", "/usr/sbin/ovs-vswitchd", "/usr/bin/ovn-controller"} {
		if out, err := runChrooted(t, root, p, "--version"); err != nil || !strings.Contains(out, filepath.Base(p)) {
			t.Errorf("chroot <image> %s --version: %v\n%s", p, err, out)
		}
	}
}

// TestImageReproducible builds the image a second time from the same bundle
// and version: the archive must be byte-identical (fixed owners, modes and
// times; no build-time randomness).
func TestImageReproducible(t *testing.T) {
	first := imageFile(t)
	second := filepath.Join(t.TempDir(), "again.tar")
	if err := build.Image(bundleDir(t), second, "ovnhost:"+build.Tag(testVersion), testVersion); err != nil {
		t.Fatal(err)
	}
	sum := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%x", sha256.Sum256(b))
	}
	if a, b := sum(first), sum(second); a != b {
		t.Errorf("two builds differ: %s vs %s", a, b)
	}
}

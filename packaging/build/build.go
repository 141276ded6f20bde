// Package build makes ovnhost's release artefacts from the programs of
// `make build`: the bundle (packaging/bundle), the DaemonSet image and the
// Talos system extension (OCI archives, built in Go without a container
// engine) and the EL7 RPM (rpmbuild from packaging/rpm/ovnhost.spec).
// packaging/cmd/ovnhost-package is its command line; the tests in
// tests/packaging call it directly.
package build

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"

	"github.com/ovnhost/ovnhost/packaging/bundle"
	"github.com/ovnhost/ovnhost/packaging/ociimage"
)

// Paths inside the Talos extension image.
const (
	TalosServiceName = "ovnhost"
	// TalosServiceFile is where Talos reads extension service definitions.
	TalosServiceFile = "/rootfs/usr/local/etc/containers/ovnhost.yaml"
	// TalosServiceRootfs is the service's root file system (the bundle).
	TalosServiceRootfs = "/rootfs/usr/local/lib/containers/ovnhost"
	// TalosCentralServiceName is the central's service (ext-ovnhost-central,
	// ovnhost run --role=central); its root file system is the same bundle,
	// packed as hard links to the node service's.
	TalosCentralServiceName   = "ovnhost-central"
	TalosCentralServiceFile   = "/rootfs/usr/local/etc/containers/ovnhost-central.yaml"
	TalosCentralServiceRootfs = "/rootfs/usr/local/lib/containers/ovnhost-central"
)

// RepoRoot finds the module root from this file's location.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// Version is the product version: $VERSION, else `git describe`, else dev.
func Version() string {
	if v := os.Getenv("VERSION"); v != "" {
		return v
	}
	out, err := exec.Command("git", "-C", RepoRoot(), "describe", "--always", "--dirty").Output()
	if err == nil && len(bytes.TrimSpace(out)) > 0 {
		return strings.TrimSpace(string(out))
	}
	return "dev"
}

// Bundle builds the bundle into out (see packaging/bundle).
func Bundle(binDir, out, version string) (*bundle.Manifest, error) {
	return bundle.Build(bundle.Options{Out: out, OVNHostBin: binDir, Version: version})
}

// arch is the image architecture of the build host.
func arch() string { return runtime.GOARCH }

var refSafe = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// Tag turns a version into an image tag.
func Tag(version string) string { return refSafe.ReplaceAllString(version, "_") }

// Image writes the DaemonSet image (the bundle at /, entrypoint `ovnhost run`)
// as an OCI archive at out, named ref.
func Image(bundleDir, out, ref, version string) error {
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".image-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	layer, err := ociimage.Layer(tmp, []ociimage.Entry{{Dir: bundleDir, Path: "/"}})
	if err != nil {
		return err
	}
	img, err := ociimage.Image(layer, ociimage.Config{
		Entrypoint: []string{"/usr/bin/ovnhost"},
		Cmd:        []string{"run"},
		Env:        []string{"PATH=/usr/sbin:/usr/bin"},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "ovnhost",
			"org.opencontainers.image.description": "ovnhost node agent with its OVS/OVN userspace",
			"org.opencontainers.image.version":     version,
			"org.opencontainers.image.source":      "https://github.com/ovnhost/ovnhost",
		},
	}, arch())
	if err != nil {
		return err
	}
	return ociimage.WriteOCIArchive(out, img, ref)
}

// TalosEntries is the content of the Talos extension image: the manifest,
// the service definition and the bundle as the service's root file system.
func TalosEntries(bundleDir, version string) ([]ociimage.Entry, error) {
	root := RepoRoot()
	manifest, err := os.ReadFile(filepath.Join(root, "talos-extension", "manifest.yaml"))
	if err != nil {
		return nil, err
	}
	if !bytes.Contains(manifest, []byte("@VERSION@")) {
		return nil, fmt.Errorf("talos-extension/manifest.yaml has no @VERSION@ placeholder")
	}
	manifest = bytes.ReplaceAll(manifest, []byte("@VERSION@"), []byte(version))
	service, err := os.ReadFile(filepath.Join(root, "talos-extension", "ovnhost.yaml"))
	if err != nil {
		return nil, err
	}
	central, err := os.ReadFile(filepath.Join(root, "talos-extension", "ovnhost-central.yaml"))
	if err != nil {
		return nil, err
	}
	return []ociimage.Entry{
		{Path: "/manifest.yaml", Data: manifest, Mode: 0o644},
		{Path: TalosServiceFile, Data: service, Mode: 0o644},
		{Path: TalosServiceRootfs, Dir: bundleDir},
		{Path: TalosCentralServiceFile, Data: central, Mode: 0o644},
		{Path: TalosCentralServiceRootfs, Dir: bundleDir, LinkTo: TalosServiceRootfs},
	}, nil
}

// TalosExtension writes the Talos system extension image as an OCI archive.
func TalosExtension(bundleDir, out, ref, version string) error {
	entries, err := TalosEntries(bundleDir, version)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(out), ".ext-*")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	layer, err := ociimage.Layer(tmp, entries)
	if err != nil {
		return err
	}
	img, err := ociimage.Image(layer, ociimage.Config{
		Labels: map[string]string{
			"org.opencontainers.image.title":   "ovnhost Talos system extension",
			"org.opencontainers.image.version": version,
		},
	}, arch())
	if err != nil {
		return err
	}
	return ociimage.WriteOCIArchive(out, img, ref)
}

// RPMVersion splits a `git describe` version into an RPM Version and
// Release: no '-' (the separator), no '~' or '^' (rpmlib features newer
// than or absent from EL7's rpm 4.11).
func RPMVersion(v string) (version, release string) {
	v = strings.TrimPrefix(v, "v")
	clean := func(s string) string {
		return regexp.MustCompile(`[^A-Za-z0-9._+]`).ReplaceAllString(s, ".")
	}
	if m := regexp.MustCompile(`^([0-9]+(\.[0-9]+)*)(-(.*))?$`).FindStringSubmatch(v); m != nil {
		if m[4] == "" {
			return m[1], "1"
		}
		return m[1], "0." + clean(m[4])
	}
	return "0.0.0", "0.git." + clean(v)
}

// RPM builds the RPM with rpmbuild and returns its path in outDir.
func RPM(binDir, outDir, version string) (string, error) {
	rpmbuild, err := exec.LookPath("rpmbuild")
	if err != nil {
		return "", fmt.Errorf("rpmbuild not found (Debian package rpm; `make deps`): %w", err)
	}
	root := RepoRoot()
	top, err := os.MkdirTemp("", "ovnhost-rpmbuild-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(top)
	src := filepath.Join(top, "SOURCES")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	for dst, from := range map[string]string{
		"ovnhost":                   filepath.Join(binDir, "ovnhost"),
		"ovnhost-cni":               filepath.Join(binDir, "ovnhost-cni"),
		"netctl":                    filepath.Join(binDir, "netctl"),
		"ovnhost.service":           filepath.Join(root, "systemd", "ovnhost.service"),
		"ovnhost.sysconfig":         filepath.Join(root, "systemd", "ovnhost.sysconfig"),
		"ovnhost-modules.conf":      filepath.Join(root, "systemd", "ovnhost-modules.conf"),
		"install.md":                filepath.Join(root, "docs", "install.md"),
		"ovnhost-central.service":   filepath.Join(root, "systemd", "ovnhost-central.service"),
		"ovnhost-central.sysconfig": filepath.Join(root, "systemd", "ovnhost-central.sysconfig"),
		"central.md":                filepath.Join(root, "docs", "central.md"),
	} {
		data, err := os.ReadFile(from)
		if err != nil {
			return "", fmt.Errorf("rpm source: %w", err)
		}
		if err := os.WriteFile(filepath.Join(src, dst), data, 0o644); err != nil {
			return "", err
		}
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	ver, rel := RPMVersion(version)
	cmd := exec.Command(rpmbuild, "-bb",
		"--define", "_topdir "+top,
		"--define", "_sourcedir "+src,
		"--define", "_rpmdir "+top+"/RPMS",
		"--define", "_build_name_fmt %{NAME}-%{VERSION}-%{RELEASE}.%{ARCH}.rpm",
		"--define", "ovnhost_version "+ver,
		"--define", "ovnhost_release "+rel,
		"--define", "_tmppath "+top+"/tmp",
		filepath.Join(root, "packaging", "rpm", "ovnhost.spec"))
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	if err := os.MkdirAll(filepath.Join(top, "tmp"), 0o755); err != nil {
		return "", err
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("rpmbuild: %v\n%s", err, out)
	}
	name := fmt.Sprintf("ovnhost-%s-%s.x86_64.rpm", ver, rel)
	data, err := os.ReadFile(filepath.Join(top, "RPMS", name))
	if err != nil {
		return "", err
	}
	dst := filepath.Join(outDir, name)
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		return "", err
	}
	return dst, nil
}

package qemuvm

import (
	"bufio"
	"bytes"
	elfpkg "debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Kernel is a Debian kernel package unpacked into the cache: its vmlinuz
// and its module tree, with depmod run.
type Kernel struct {
	Suite   string // Debian suite it came from (bookworm, bullseye)
	Package string // linux-image-<release>
	Version string // the package version
	Release string // uname -r inside the VM
	Root    string // where the package is unpacked
	Vmlinuz string
	// Vmlinux is the uncompressed ELF kernel taken out of Vmlinuz. qemu
	// starts it at its PVH entry point without a BIOS or the kernel's own
	// decompressor, which under emulation take half a minute.
	Vmlinux string
	ModDir  string // Root/lib/modules/Release, depmod'ed
}

// Suite names.
const (
	Bookworm = "bookworm" // Debian 12, kernel 6.1
	Bullseye = "bullseye" // Debian 11, kernel 5.10
)

var (
	kernelMu    sync.Mutex
	kernelCache = map[string]*Kernel{}
)

// DebianKernel returns the amd64 kernel of a Debian suite, downloading and
// unpacking it on first use (cached in ~/.cache/ovnhost/vm/<suite>, locked
// against concurrent test binaries). It fails the test when it cannot.
func DebianKernel(t testing.TB, suite string) *Kernel {
	t.Helper()
	kernelMu.Lock()
	defer kernelMu.Unlock()
	if k := kernelCache[suite]; k != nil {
		return k
	}
	k, err := fetchKernel(suite)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("Debian %s kernel: %v", suite, err)
		}
		t.Skipf("Debian %s kernel unavailable: %v", suite, err)
	}
	kernelCache[suite] = k
	return k
}

// CacheRoot is where the harness keeps kernels: $OVNHOST_VM_CACHE, else
// ~/.cache/ovnhost/vm (as tests/harness/kubeapi), else /var/cache/ovnhost/vm.
func CacheRoot() string {
	if d := os.Getenv("OVNHOST_VM_CACHE"); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "ovnhost", "vm")
	}
	return "/var/cache/ovnhost/vm"
}

const kernelRecipe = "recipe=2"

func fetchKernel(suite string) (*Kernel, error) {
	if strings.HasPrefix(CacheRoot(), "/tmp/") {
		// The guest mounts its own tmpfs on /tmp and would not see the
		// module tree there.
		return nil, fmt.Errorf("the VM cache %s is under /tmp, which the guest shadows; set OVNHOST_VM_CACHE elsewhere", CacheRoot())
	}
	dir := filepath.Join(CacheRoot(), suite)
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	stamp := filepath.Join(dir, "kernel", ".stamp")
	if b, err := os.ReadFile(stamp); err == nil {
		if k, err := parseStamp(suite, filepath.Join(dir, "kernel"), string(b)); err == nil {
			return k, nil
		}
	}
	t0 := time.Now()
	apt, err := aptFor(suite, dir)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "qemuvm: fetching Debian %s linux-image-amd64 into %s (cold: about a minute; cached afterwards)\n", suite, dir)
	pkg, version, err := apt.imagePackage()
	if err != nil {
		return nil, err
	}
	dl := filepath.Join(dir, "download")
	os.RemoveAll(dl)
	if err := os.MkdirAll(dl, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dl)
	if _, err := apt.run(dl, "apt-get", "download", pkg+"="+version); err != nil {
		return nil, err
	}
	debs, _ := filepath.Glob(filepath.Join(dl, "*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("apt-get download %s=%s left %d .deb files in %s", pkg, version, len(debs), dl)
	}
	tmp := filepath.Join(dir, "kernel.new")
	os.RemoveAll(tmp)
	if out, err := exec.Command("dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %v: %s", debs[0], err, out)
	}
	release := strings.TrimPrefix(pkg, "linux-image-")
	for _, p := range []string{filepath.Join(tmp, "boot", "vmlinuz-"+release), filepath.Join(tmp, "lib", "modules", release)} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("package %s has no %s", pkg, strings.TrimPrefix(p, tmp))
		}
	}
	depmod, err := testenv.LookPath("depmod")
	if err != nil {
		return nil, fmt.Errorf("depmod not found (Debian package kmod): %v", err)
	}
	if out, err := exec.Command(depmod, "-b", tmp, release).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("depmod -b %s %s: %v: %s", tmp, release, err, out)
	}
	if err := extractVmlinux(filepath.Join(tmp, "boot", "vmlinuz-"+release), filepath.Join(tmp, "boot", "vmlinux-"+release)); err != nil {
		return nil, err
	}
	stampText := fmt.Sprintf("%s package=%s version=%s release=%s\n", kernelRecipe, pkg, version, release)
	if err := os.WriteFile(filepath.Join(tmp, ".stamp"), []byte(stampText), 0o644); err != nil {
		return nil, err
	}
	final := filepath.Join(dir, "kernel")
	os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return nil, err
	}
	fmt.Fprintf(os.Stderr, "qemuvm: %s %s unpacked in %s\n", pkg, version, time.Since(t0).Round(100*time.Millisecond))
	return parseStamp(suite, final, stampText)
}

func parseStamp(suite, root, text string) (*Kernel, error) {
	f := map[string]string{}
	for _, kv := range strings.Fields(text) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			f[k] = v
		}
	}
	if f["recipe"] != strings.TrimPrefix(kernelRecipe, "recipe=") || f["release"] == "" {
		return nil, fmt.Errorf("stale stamp %q", text)
	}
	k := &Kernel{Suite: suite, Package: f["package"], Version: f["version"], Release: f["release"], Root: root}
	k.Vmlinuz = filepath.Join(root, "boot", "vmlinuz-"+k.Release)
	k.Vmlinux = filepath.Join(root, "boot", "vmlinux-"+k.Release)
	k.ModDir = filepath.Join(root, "lib", "modules", k.Release)
	for _, p := range []string{k.Vmlinuz, k.Vmlinux, filepath.Join(k.ModDir, "modules.dep")} {
		if _, err := os.Stat(p); err != nil {
			return nil, err
		}
	}
	return k, nil
}

// aptConfig runs apt against the host's own sources (when suite is the
// host's release) or a private sources list naming suite, with its own
// lists and cache directories so the host's apt state is not touched.
type aptConfig struct {
	opts []string
}

func hostCodename() string {
	b, _ := os.ReadFile("/etc/os-release")
	m := regexp.MustCompile(`(?m)^VERSION_CODENAME=(\S+)`).FindSubmatch(b)
	if m == nil {
		return ""
	}
	return strings.Trim(string(m[1]), `"`)
}

func aptFor(suite, dir string) (*aptConfig, error) {
	// apt drops to the _apt user for downloads, which cannot write
	// under /root/.cache.
	a := &aptConfig{opts: []string{"-o", "APT::Sandbox::User=root", "-q"}}
	if suite == hostCodename() {
		return a, nil
	}
	mirror := os.Getenv("OVNHOST_VM_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	adir := filepath.Join(dir, "apt")
	for _, d := range []string{"lists/partial", "cache/archives/partial", "parts"} {
		if err := os.MkdirAll(filepath.Join(adir, d), 0o755); err != nil {
			return nil, err
		}
	}
	keyring := "/usr/share/keyrings/debian-archive-keyring.gpg"
	src := fmt.Sprintf("deb [signed-by=%s] %s %s main\ndeb [signed-by=%s] %s %s-updates main\n", keyring, mirror, suite, keyring, mirror, suite)
	if err := os.WriteFile(filepath.Join(adir, "sources.list"), []byte(src), 0o644); err != nil {
		return nil, err
	}
	a.opts = append(a.opts,
		"-o", "Dir::Etc::SourceList="+filepath.Join(adir, "sources.list"),
		"-o", "Dir::Etc::SourceParts="+filepath.Join(adir, "parts"),
		"-o", "Dir::State::Lists="+filepath.Join(adir, "lists"),
		"-o", "Dir::Cache="+filepath.Join(adir, "cache"),
		"-o", "Dir::State::status=/dev/null",
		"-o", "APT::Architecture=amd64")
	if _, err := a.run(dir, "apt-get", "update"); err != nil {
		return nil, fmt.Errorf("%w (the private sources list %s names %s)", err, filepath.Join(adir, "sources.list"), suite)
	}
	return a, nil
}

func (a *aptConfig) run(dir, tool string, args ...string) ([]byte, error) {
	cmd := exec.Command(tool, append(append([]string{}, a.opts...), args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %v: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// imagePackage resolves the linux-image-amd64 metapackage to the image
// package it depends on, at the candidate version.
func (a *aptConfig) imagePackage() (pkg, version string, err error) {
	out, err := a.run("/", "apt-cache", "show", "--no-all-versions", "linux-image-amd64")
	if err != nil {
		return "", "", fmt.Errorf("%w (run apt-get update?)", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "Depends: "); ok {
			// "linux-image-6.1.0-57-amd64 (= 6.1.192-3)"
			m := regexp.MustCompile(`^(linux-image-[^\s,]+)\s*\(=\s*([^)\s]+)\)`).FindStringSubmatch(v)
			if m == nil {
				return "", "", fmt.Errorf("linux-image-amd64 Depends %q: no linux-image-<release> (= version)", v)
			}
			return m[1], m[2], nil
		}
	}
	return "", "", fmt.Errorf("apt-cache show linux-image-amd64: no Depends line in %q", out)
}

// ModuleOrder lists the .ko files to insmod, in order, for names and their
// dependencies (modprobe --show-depends against the unpacked tree).
// Modules built into the kernel are left out.
func (k *Kernel) ModuleOrder(names ...string) ([]string, error) {
	modprobe, err := testenv.LookPath("modprobe")
	if err != nil {
		return nil, fmt.Errorf("modprobe not found (Debian package kmod): %v", err)
	}
	var order []string
	seen := map[string]bool{}
	for _, n := range names {
		out, err := exec.Command(modprobe, "-d", k.Root, "-S", k.Release, "--show-depends", n).CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("modprobe --show-depends %s for %s: %v: %s", n, k.Release, err, strings.TrimSpace(string(out)))
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 || f[0] != "insmod" {
				continue // "builtin x" or empty
			}
			if !seen[f[1]] {
				seen[f[1]] = true
				order = append(order, f[1])
			}
		}
	}
	return order, nil
}

// extractVmlinux finds the compressed kernel inside a bzImage (Debian
// compresses with xz) and writes it out as the ELF it is, checking that
// it has the PVH entry note qemu needs to start it directly.
func extractVmlinux(vmlinuz, out string) error {
	data, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	formats := []struct {
		magic []byte
		argv  []string
	}{
		{[]byte("\xfd7zXZ\x00"), []string{"xz", "-dc", "--single-stream"}},
		{[]byte("\x28\xb5\x2f\xfd"), []string{"zstd", "-dcq"}},
		{[]byte("\x1f\x8b\x08"), []string{"gzip", "-dc"}},
	}
	for _, f := range formats {
		for off := 0; ; {
			i := bytes.Index(data[off:], f.magic)
			if i < 0 {
				break
			}
			off += i
			cmd := exec.Command(f.argv[0], f.argv[1:]...)
			cmd.Stdin = bytes.NewReader(data[off:])
			elf, _ := cmd.Output() // trailing data after the stream is expected
			off++
			if len(elf) < 4 || string(elf[:4]) != "\x7fELF" {
				continue
			}
			if !hasPVHNote(elf) {
				return fmt.Errorf("%s: the kernel has no PVH entry note (XEN_ELFNOTE_PHYS32_ENTRY); qemu cannot start it without a BIOS", vmlinuz)
			}
			return os.WriteFile(out, elf, 0o644)
		}
	}
	return fmt.Errorf("%s: no xz, zstd or gzip compressed ELF kernel found inside (is %s installed?)", vmlinuz, "xz-utils")
}

// hasPVHNote looks for the ELF note "Xen" of type 18 (PHYS32_ENTRY).
func hasPVHNote(elf []byte) bool {
	f, err := elfpkg.NewFile(bytes.NewReader(elf))
	if err != nil {
		return false
	}
	for _, p := range f.Progs {
		if p.Type != elfpkg.PT_NOTE {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz, dsz, typ := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:])
			name := b[12:min(len(b), 12+int(nsz))]
			if typ == 18 && bytes.HasPrefix(name, []byte("Xen")) {
				return true
			}
			adv := 12 + int((nsz+3)&^3) + int((dsz+3)&^3)
			if adv > len(b) {
				break
			}
			b = b[adv:]
		}
	}
	return false
}

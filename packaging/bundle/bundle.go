// Package bundle lays out the self-contained root file system that ovnhost
// runs in where the host has no OVS userspace (a Talos extension service) or
// there is no distribution under it (the distroless DaemonSet image): the
// static ovnhost programs, the OVS/OVN daemons and tools taken from the build
// host's Debian packages, the closure of their shared libraries found by
// parsing the ELF files (DT_NEEDED, DT_RUNPATH, PT_INTERP), the dynamic
// loader, the OVSDB schemas, a minimal /etc and the mount points.
//
// The layout mirrors a merged-/usr distribution: libraries keep the host path
// they were found at, and every symlink on that path (/lib -> usr/lib,
// /lib64/ld-linux-x86-64.so.2 -> ...) is recreated, so the loader finds them
// through its built-in search directories without an ld.so.cache.
package bundle

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
)

// Program is one host program copied into the bundle.
type Program struct {
	Name string // file name, e.g. ovsdb-server
	Dest string // directory in the bundle, e.g. /usr/sbin
}

// OVSPrograms are the OVS/OVN programs the node daemon runs or an operator
// needs inside the bundle. ovnhost finds them through --bin-dirs, whose
// default covers /usr/sbin and /usr/bin.
var OVSPrograms = []Program{
	{"ovsdb-server", "/usr/sbin"},
	{"ovs-vswitchd", "/usr/sbin"},
	{"ovs-appctl", "/usr/bin"},
	{"ovsdb-tool", "/usr/bin"},
	{"ovsdb-client", "/usr/bin"},
	{"ovs-vsctl", "/usr/bin"},
	{"ovs-ofctl", "/usr/bin"},
	{"ovn-controller", "/usr/bin"},
	{"ovn-northd", "/usr/bin"},
	{"ovn-appctl", "/usr/bin"},
	{"ovn-nbctl", "/usr/bin"},
	{"ovn-sbctl", "/usr/bin"},
}

// OVNHostPrograms are this project's static programs, from `make build`.
var OVNHostPrograms = []string{"ovnhost", "ovnhost-cni", "ovnhost-controller", "netctl"}

// ProgramLinks are other names of a program in /usr/bin: netctl is also
// the kubectl plugin (kubectl netctl) and its completion helper.
var ProgramLinks = map[string]string{"kubectl-netctl": "netctl", "kubectl_complete-netctl": "netctl"}

// Schemas are copied from the host to the same path in the bundle; they are
// the defaults of --ovs-schema and --ovn-schema-dir.
var Schemas = []string{
	"/usr/share/openvswitch/vswitch.ovsschema",
	"/usr/share/ovn/ovn-nb.ovsschema",
	"/usr/share/ovn/ovn-sb.ovsschema",
}

// Dlopened are libraries loaded at run time, not named in DT_NEEDED: glibc
// loads libgcc_s for thread cancellation and unwinding.
var Dlopened = []string{"libgcc_s.so.1"}

// MountPoints exist (empty) in the bundle so that a container runtime with a
// read-only root can mount the host's directories on them.
var MountPoints = []string{
	"/dev", "/proc", "/sys", "/run", "/tmp",
	"/var/lib/openvswitch", "/var/lib/ovn", "/var/log/openvswitch", "/var/log/ovn",
	"/opt/cni/bin", "/etc/cni/net.d", "/etc/ovnhost", "/run/ovnhost",
}

// Options says where the inputs are and where the bundle goes.
type Options struct {
	// Out is the bundle's root directory; it must not exist or be empty.
	Out string
	// OVNHostBin is the directory with the programs of `make build`.
	OVNHostBin string
	// HostBinDirs are searched for the OVS/OVN programs (default: Debian's).
	HostBinDirs []string
	// Version is written to /usr/share/ovnhost/VERSION.
	Version string
}

// Manifest describes what went into a bundle.
type Manifest struct {
	Programs     []string // bundle paths of all programs
	Dynamic      []string // bundle paths of the dynamically linked ones
	Interpreters []string // host paths
	Libraries    []string // host paths
	Packages     []string // Debian packages the host files came from, with versions
}

// Build writes the bundle and returns its manifest.
func Build(o Options) (*Manifest, error) {
	if o.Out == "" || o.OVNHostBin == "" {
		return nil, fmt.Errorf("bundle: Out and OVNHostBin are required")
	}
	if len(o.HostBinDirs) == 0 {
		o.HostBinDirs = []string{"/usr/sbin", "/usr/bin", "/sbin", "/bin", "/usr/local/sbin", "/usr/local/bin"}
	}
	if ents, err := os.ReadDir(o.Out); err == nil && len(ents) > 0 {
		return nil, fmt.Errorf("bundle: %s is not empty", o.Out)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	b := &builder{root: o.Out}
	m := &Manifest{}

	for _, name := range OVNHostPrograms {
		src := filepath.Join(o.OVNHostBin, name)
		dyn, err := IsDynamic(src)
		if err != nil {
			return nil, fmt.Errorf("bundle: %s (run `make build` first): %w", src, err)
		}
		if dyn {
			return nil, fmt.Errorf("bundle: %s is dynamically linked; build it with CGO_ENABLED=0", src)
		}
		dst := filepath.Join("/usr/bin", name)
		if err := b.copyFile(src, dst, 0o755); err != nil {
			return nil, err
		}
		m.Programs = append(m.Programs, dst)
	}
	for link, target := range ProgramLinks {
		if err := b.symlink(filepath.Join("/usr/bin", link), target); err != nil {
			return nil, err
		}
	}

	var hostProgs []string
	for _, p := range OVSPrograms {
		src, err := findProgram(p.Name, o.HostBinDirs)
		if err != nil {
			return nil, fmt.Errorf("bundle: %w (install Debian's openvswitch-switch, ovn-central and ovn-host: `make deps`)", err)
		}
		dst := filepath.Join(p.Dest, p.Name)
		if err := b.copyFile(src, dst, 0o755); err != nil {
			return nil, err
		}
		hostProgs = append(hostProgs, src)
		m.Programs = append(m.Programs, dst)
		m.Dynamic = append(m.Dynamic, dst)
	}

	cl, err := NewResolver().Closure(hostProgs, Dlopened...)
	if err != nil {
		return nil, fmt.Errorf("bundle: %w", err)
	}
	m.Interpreters, m.Libraries = cl.Interpreters, cl.Libraries
	for _, p := range append(append([]string{}, cl.Interpreters...), cl.Libraries...) {
		if err := b.place(p, 0); err != nil {
			return nil, fmt.Errorf("bundle: %w", err)
		}
	}
	for _, s := range Schemas {
		if err := b.copyFile(s, s, 0o644); err != nil {
			return nil, fmt.Errorf("bundle: schema: %w", err)
		}
	}
	for _, d := range MountPoints {
		if err := b.mkdir(d); err != nil {
			return nil, err
		}
	}
	if err := b.symlink("/var/run", "../run"); err != nil {
		return nil, err
	}
	for name, content := range etcFiles {
		if err := b.writeFile(name, []byte(content), 0o644); err != nil {
			return nil, err
		}
	}

	hostFiles := append(append(append([]string{}, hostProgs...), cl.Interpreters...), cl.Libraries...)
	hostFiles = append(hostFiles, Schemas...)
	pkgs, err := b.copyCopyrights(hostFiles)
	if err != nil {
		return nil, err
	}
	m.Packages = pkgs
	var info bytes.Buffer
	fmt.Fprintf(&info, "ovnhost %s\n\nDebian packages of the OVS/OVN programs and libraries:\n", o.Version)
	for _, p := range pkgs {
		fmt.Fprintf(&info, "  %s\n", p)
	}
	if err := b.writeFile("/usr/share/ovnhost/BUNDLE", info.Bytes(), 0o644); err != nil {
		return nil, err
	}
	if err := b.writeFile("/usr/share/ovnhost/VERSION", []byte(o.Version+"\n"), 0o644); err != nil {
		return nil, err
	}
	return m, nil
}

// etcFiles are the only files in the bundle's /etc: user and group lookups
// (ovnhost --run-dir-owner root:root, ovsdb-server) need passwd and group.
var etcFiles = map[string]string{
	"/etc/passwd":        "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"/etc/group":         "root:x:0:\nnogroup:x:65534:\n",
	"/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
	"/etc/hosts":         "127.0.0.1 localhost\n::1 localhost\n",
	// Container runtimes mount the node's resolv.conf over this one.
	"/etc/resolv.conf": "# the container runtime mounts the node's resolv.conf here\n",
}

func findProgram(name string, dirs []string) (string, error) {
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("program %s not found in %s", name, strings.Join(dirs, ", "))
}

type builder struct {
	root string
}

func (b *builder) path(p string) string { return filepath.Join(b.root, p) }

func (b *builder) mkdir(p string) error {
	return os.MkdirAll(b.path(p), 0o755)
}

func (b *builder) symlink(p, target string) error {
	if err := b.mkdir(filepath.Dir(p)); err != nil {
		return err
	}
	if cur, err := os.Readlink(b.path(p)); err == nil {
		if cur == target {
			return nil
		}
		return fmt.Errorf("bundle: %s already links to %s, not %s", p, cur, target)
	}
	return os.Symlink(target, b.path(p))
}

func (b *builder) writeFile(p string, data []byte, mode os.FileMode) error {
	if err := b.mkdir(filepath.Dir(p)); err != nil {
		return err
	}
	if err := os.WriteFile(b.path(p), data, mode); err != nil {
		return err
	}
	return os.Chmod(b.path(p), mode)
}

func (b *builder) copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	if err := b.mkdir(filepath.Dir(dst)); err != nil {
		return err
	}
	out, err := os.OpenFile(b.path(dst), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Chmod(b.path(dst), mode)
}

// place copies the host file at p into the bundle at the same path,
// recreating every symlink met on the way, so that the path works inside the
// bundle exactly as it does on the host.
func (b *builder) place(p string, depth int) error {
	if depth > 32 {
		return fmt.Errorf("too many symlinks resolving %s", p)
	}
	comps := strings.Split(strings.TrimPrefix(filepath.Clean(p), "/"), "/")
	cur := "/"
	for i, c := range comps {
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil {
			return err
		}
		rest := filepath.Join(comps[i+1:]...)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(next)
			if err != nil {
				return err
			}
			if err := b.symlink(next, target); err != nil {
				return err
			}
			resolved := target
			if !filepath.IsAbs(target) {
				resolved = filepath.Join(cur, target)
			}
			return b.place(filepath.Join(resolved, rest), depth+1)
		case fi.IsDir():
			if err := b.mkdir(next); err != nil {
				return err
			}
			cur = next
		case fi.Mode().IsRegular() && i == len(comps)-1:
			if _, err := os.Lstat(b.path(next)); err == nil {
				return nil
			}
			return b.copyFile(next, next, fi.Mode().Perm()&^0o022)
		default:
			return fmt.Errorf("%s: unexpected file type %v", next, fi.Mode().Type())
		}
	}
	return nil
}

// copyCopyrights finds the Debian packages that own the host files (dpkg -S)
// and copies their copyright files into the bundle, as their licences ask of
// a redistribution. It returns "package version" lines.
func (b *builder) copyCopyrights(files []string) ([]string, error) {
	dpkg, err := exec.LookPath("dpkg-query")
	if err != nil {
		return nil, nil // not a Debian build host: nothing to record
	}
	// dpkg knows files by the path the package installed, which may sit on
	// the other side of the /lib -> usr/lib symlink.
	var queries []string
	for _, f := range files {
		queries = append(queries, f)
		if r, err := filepath.EvalSymlinks(f); err == nil && r != f {
			queries = append(queries, r)
		}
		if rest, ok := strings.CutPrefix(f, "/usr/"); ok {
			queries = append(queries, "/"+rest)
		}
	}
	out, _ := exec.Command(dpkg, append([]string{"-S"}, queries...)...).Output()
	set := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		pkgs, _, ok := strings.Cut(line, ": ")
		if !ok || strings.HasPrefix(line, "diversion") {
			continue
		}
		for _, p := range strings.Split(pkgs, ",") {
			set[strings.TrimSpace(p)] = true
		}
	}
	var names []string
	for p := range set {
		names = append(names, p)
	}
	sort.Strings(names)
	var res []string
	for _, p := range names {
		v, _ := exec.Command(dpkg, "-W", "-f=${Version}", p).Output()
		res = append(res, p+" "+strings.TrimSpace(string(v)))
		base, _, _ := strings.Cut(p, ":")
		src := filepath.Join("/usr/share/doc", base, "copyright")
		if _, err := os.Stat(src); err == nil {
			if err := b.copyFile(src, src, 0o644); err != nil {
				return nil, err
			}
		}
	}
	return res, nil
}

// Install copies host programs into root at their host paths, with the
// closure of their shared libraries and the dynamic loader (for a scratch
// root that must run, say, /bin/sh).
func Install(root string, programs ...string) error {
	b := &builder{root: root}
	var elfs []string
	for _, p := range programs {
		if err := b.place(p, 0); err != nil {
			return err
		}
		if r, err := filepath.EvalSymlinks(p); err == nil {
			elfs = append(elfs, r)
		}
	}
	cl, err := NewResolver().Closure(elfs)
	if err != nil {
		return err
	}
	for _, p := range append(cl.Interpreters, cl.Libraries...) {
		if err := b.place(p, 0); err != nil {
			return err
		}
	}
	return nil
}

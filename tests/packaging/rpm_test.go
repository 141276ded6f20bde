package packaging

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/packaging/build"
	"github.com/ovnhost/ovnhost/packaging/bundle"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// rpm411 is the rpmlib feature set of rpm 4.11 (CentOS/RHEL 7): a package
// that requires any other rpmlib() feature, or a newer version of one of
// these, does not install there.
var rpm411 = map[string]string{
	"rpmlib(BuiltinLuaScripts)":        "4.2.2-1",
	"rpmlib(CompressedFileNames)":      "3.0.4-1",
	"rpmlib(ConcurrentAccess)":         "4.1-1",
	"rpmlib(ExplicitPackageProvide)":   "4.0-1",
	"rpmlib(FileCaps)":                 "4.6.1-1",
	"rpmlib(FileDigests)":              "4.6.0-1",
	"rpmlib(HeaderLoadSortsTags)":      "4.0.1-1",
	"rpmlib(PartialHardlinkSets)":      "4.0.4-1",
	"rpmlib(PayloadFilesHavePrefix)":   "4.0-1",
	"rpmlib(PayloadIsBzip2)":           "3.0.5-1",
	"rpmlib(PayloadIsLzma)":            "4.4.2-1",
	"rpmlib(PayloadIsXz)":              "5.2-1",
	"rpmlib(ScriptletExpansion)":       "4.9.0-1",
	"rpmlib(ScriptletInterpreterArgs)": "4.0.3-1",
	"rpmlib(TildeInVersions)":          "4.10.0-1",
	"rpmlib(VersionedDependencies)":    "3.0.3-1",
}

// checkRequires returns the requirements rpm 4.11 cannot satisfy: rpmlib
// features it lacks, and anything but /bin/sh (the scriptlets' shell).
func checkRequires(lines []string) []string {
	var bad []string
	for _, l := range lines {
		l = strings.TrimSpace(l)
		if l == "" || l == "/bin/sh" {
			continue
		}
		name, ver, _ := strings.Cut(l, " <= ")
		have, ok := rpm411[name]
		if !strings.HasPrefix(name, "rpmlib(") {
			bad = append(bad, l+": not an rpmlib feature (the package must need nothing on the host)")
			continue
		}
		if !ok {
			bad = append(bad, l+": rpm 4.11 lacks this feature")
			continue
		}
		if ver != "" && rpmVerCmp(ver, have) > 0 {
			bad = append(bad, fmt.Sprintf("%s: rpm 4.11 has %s", l, have))
		}
	}
	return bad
}

// rpmVerCmp compares dotted numeric versions with an optional -release.
func rpmVerCmp(a, b string) int {
	split := func(s string) []int {
		var out []int
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' }) {
			n := 0
			fmt.Sscanf(f, "%d", &n)
			out = append(out, n)
		}
		return out
	}
	x, y := split(a), split(b)
	for i := 0; i < len(x) || i < len(y); i++ {
		var p, q int
		if i < len(x) {
			p = x[i]
		}
		if i < len(y) {
			q = y[i]
		}
		if p != q {
			if p < q {
				return -1
			}
			return 1
		}
	}
	return 0
}

func rpmq(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("rpm", args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("rpm %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestRPMReadableByRPM411(t *testing.T) {
	p := rpmFile(t)
	req := strings.Split(strings.TrimSpace(rpmq(t, "-qp", "--requires", p)), "\n")
	if bad := checkRequires(req); len(bad) > 0 {
		t.Fatalf("the RPM needs what CentOS 7's rpm 4.11 lacks:\n%s", strings.Join(bad, "\n"))
	}
	// What rpm 4.11 cannot read: a zstd payload, or rpmlib features it lacks.
	for _, l := range []string{"rpmlib(PayloadIsZstd) <= 5.4.18-1", "rpmlib(RichDependencies) <= 4.12.0-1", "rpmlib(CaretInVersions) <= 4.15.0-1", "rpmlib(FileDigests) <= 4.99.0-1", "openvswitch"} {
		if bad := checkRequires([]string{l}); len(bad) == 0 {
			t.Errorf("requires check accepted %q", l)
		}
	}
	got := strings.TrimSpace(rpmq(t, "-qp", "--qf", "%{PAYLOADCOMPRESSOR} %{PAYLOADFORMAT} %{FILEDIGESTALGO} %{ARCH} %{VERSION}-%{RELEASE}", p))
	ver, rel := build.RPMVersion(testVersion)
	if want := fmt.Sprintf("gzip cpio 8 x86_64 %s-%s", ver, rel); got != want {
		t.Errorf("payload/digest/arch/version = %q, want %q (gzip and SHA-256 are what rpm 4.11 reads)", got, want)
	}
	// The package's own signature header must check out.
	rpmq(t, "-K", "--nosignature", p)
}

func TestRPMVersionHasNoSeparatorsRPM411Rejects(t *testing.T) {
	for _, v := range []string{"v1.2.3", "1.2.3-4-gabcdef-dirty", "cf5d1bf-dirty", "dev", "1.0.0~rc1", "2.0^post"} {
		ver, rel := build.RPMVersion(v)
		for _, s := range []string{ver, rel} {
			if s == "" || strings.ContainsAny(s, "-~^/ ") {
				t.Errorf("RPMVersion(%q) = %q, %q: not valid for rpm 4.11", v, ver, rel)
			}
		}
	}
}

// rpmFiles is what the spec lays down, with modes: what an operator finds
// after `yum install`.
var rpmFiles = map[string]fs.FileMode{
	"/usr/bin/ovnhost":                                0o755,
	"/usr/bin/ovnhost-cni":                            0o755,
	"/usr/bin/netctl":                                 0o755,
	"/usr/bin/kubectl-netctl":                         fs.ModeSymlink | 0o777,
	"/usr/bin/kubectl_complete-netctl":                fs.ModeSymlink | 0o777,
	"/usr/lib/systemd/system/ovnhost.service":         0o644,
	"/etc/sysconfig/ovnhost":                          0o644,
	"/usr/lib/modules-load.d/ovnhost.conf":            0o644,
	"/usr/share/doc/ovnhost/install.md":               0o644,
	"/usr/lib/systemd/system/ovnhost-central.service": 0o644,
	"/etc/sysconfig/ovnhost-central":                  0o644,
	"/usr/share/doc/ovnhost/central.md":               0o644,
	"/usr/share/doc/ovnhost":                          fs.ModeDir | 0o755,
	"/etc/ovnhost":                                    fs.ModeDir | 0o750,
	"/var/lib/openvswitch":                            fs.ModeDir | 0o750,
	"/var/lib/ovn":                                    fs.ModeDir | 0o750,
	"/var/log/openvswitch":                            fs.ModeDir | 0o750,
	"/var/log/ovn":                                    fs.ModeDir | 0o750,
	"/etc/cni":                                        fs.ModeDir | 0o755,
	"/etc/cni/net.d":                                  fs.ModeDir | 0o755,
}

// TestRPMInstallUpgradeErase installs the RPM with rpm into a scratch root
// that has a shell and stand-ins for systemctl and modprobe (which record
// their arguments), then upgrades and erases it.
func TestRPMInstallUpgradeErase(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "sh")
	p := rpmFile(t)
	root := t.TempDir()
	if err := bundle.Install(root, "/bin/sh"); err != nil {
		t.Fatal(err)
	}
	for _, tool := range []string{"/usr/bin/systemctl", "/usr/sbin/modprobe"} {
		script := "#!/bin/sh\necho \"" + filepath.Base(tool) + " $*\" >> /calls.log\n"
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(tool)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, tool), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The scriptlets redirect to /dev/null: without it they silently skip
	// their commands.
	if err := os.MkdirAll(filepath.Join(root, "dev"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(root, "dev/null"), syscall.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	rpmRoot := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("rpm", append([]string{"--root", root, "--dbpath", "/var/lib/rpm"}, args...)...)
		cmd.Env = append(os.Environ(), "LC_ALL=C")
		cmd.Env = append(cmd.Env, env...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("rpm --root %s %s: %v\n%s", root, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	calls := func() string {
		b, _ := os.ReadFile(filepath.Join(root, "calls.log"))
		os.Remove(filepath.Join(root, "calls.log"))
		return string(b)
	}
	rpmRoot("--initdb")
	out := rpmRoot("-i", "--nodeps", p)
	if strings.Contains(out, "scriptlet failed") {
		t.Fatalf("install scriptlets failed:\n%s", out)
	}
	for path, mode := range rpmFiles {
		fi, err := os.Lstat(filepath.Join(root, path))
		if err != nil {
			t.Errorf("%s not installed: %v", path, err)
			continue
		}
		if fi.Mode() != mode {
			t.Errorf("%s has mode %v, want %v", path, fi.Mode(), mode)
		}
	}
	for dst, src := range map[string]string{
		"/usr/lib/systemd/system/ovnhost.service":         "systemd/ovnhost.service",
		"/etc/sysconfig/ovnhost":                          "systemd/ovnhost.sysconfig",
		"/usr/lib/modules-load.d/ovnhost.conf":            "systemd/ovnhost-modules.conf",
		"/usr/lib/systemd/system/ovnhost-central.service": "systemd/ovnhost-central.service",
		"/etc/sysconfig/ovnhost-central":                  "systemd/ovnhost-central.sysconfig",
	} {
		if b, err := os.ReadFile(filepath.Join(root, dst)); err != nil || string(b) != readRepo(t, src) {
			t.Errorf("installed %s differs from %s (%v)", dst, src, err)
		}
	}
	if out, err := exec.Command(filepath.Join(root, "usr/bin/ovnhost"), "--version").CombinedOutput(); err != nil {
		t.Errorf("installed ovnhost --version: %v\n%s", err, out)
	}
	// rpm's own verification of the installed files against its database.
	rpmRoot("-V", "--nodeps", "ovnhost")
	if c := calls(); !strings.Contains(c, "systemctl --no-reload preset ovnhost.service") || !strings.Contains(c, "modprobe openvswitch") {
		t.Errorf("install scriptlets called:\n%s\nwant systemctl preset and modprobe openvswitch", c)
	}
	if listed := strings.Fields(rpmRoot("-ql", "ovnhost")); len(listed) != len(rpmFiles) {
		sort.Strings(listed)
		t.Errorf("package owns %d paths, the test knows %d:\n%s", len(listed), len(rpmFiles), strings.Join(listed, "\n"))
	}

	// Upgrade: a local edit of the sysconfig file survives, a running
	// ovnhost is told to make way for the new binary (SIGUSR2: it exits
	// leaving the daemons to be adopted) instead of being restarted, the
	// central is restarted, nothing is preset again.
	sysconfig := filepath.Join(root, "etc/sysconfig/ovnhost")
	if err := os.WriteFile(sysconfig, []byte("NODE_NAME=edited\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	newer, err := build.RPM(binDir(t), filepath.Join(workDir, "rpm-upgrade"), "0.1.1")
	if err != nil {
		t.Fatal(err)
	}
	rpmRoot("-U", "--nodeps", newer)
	if b, _ := os.ReadFile(sysconfig); string(b) != "NODE_NAME=edited\n" {
		t.Errorf("upgrade replaced the edited /etc/sysconfig/ovnhost: %q", b)
	}
	if c := calls(); !strings.Contains(c, "systemctl kill --signal=SIGUSR2 --kill-who=main ovnhost.service") || strings.Contains(c, "try-restart ovnhost.service") ||
		!strings.Contains(c, "systemctl try-restart ovnhost-central.service") || strings.Contains(c, "preset") || strings.Contains(c, "stop ovnhost") {
		t.Errorf("upgrade scriptlets called:\n%s\nwant SIGUSR2 to ovnhost.service and try-restart of ovnhost-central.service only", c)
	}

	rpmRoot("-e", "ovnhost")
	if c := calls(); !strings.Contains(c, "systemctl --no-reload disable ovnhost.service") || !strings.Contains(c, "systemctl stop ovnhost.service") || !strings.Contains(c, "daemon-reload") {
		t.Errorf("erase scriptlets called:\n%s\nwant disable, stop and daemon-reload", c)
	}
	for path, mode := range rpmFiles {
		_, err := os.Lstat(filepath.Join(root, path))
		switch {
		case path == "/etc/sysconfig/ovnhost":
			// An edited %config(noreplace) file is kept as .rpmsave.
			if _, err := os.Stat(filepath.Join(root, path+".rpmsave")); err != nil {
				t.Errorf("edited sysconfig not kept as .rpmsave: %v", err)
			}
		case err == nil && mode.IsDir() && strings.HasPrefix(path, "/var/"):
			t.Errorf("%s left behind after erase", path)
		case err == nil && !mode.IsDir():
			t.Errorf("%s left behind after erase", path)
		}
	}
}

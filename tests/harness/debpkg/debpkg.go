// Package debpkg fetches one Debian package of another suite (trixie's OVN
// schemas, say) and unpacks it for a test, without touching the host's apt
// configuration: a private sources list, lists and cache under
// ~/.cache/ovnhost/deb/<suite>, `apt-get download`, then `dpkg-deb -x`.
// The unpacked tree is cached, so only the first run reaches the mirror.
//
//	dir := debpkg.Unpack(t, "trixie", "ovn-central")  // dir/usr/share/ovn/...
package debpkg

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Mirror is the Debian archive the private sources list names.
const Mirror = "http://deb.debian.org/debian"

// Keyring signs every Debian suite apt can reach (debian-archive-keyring).
const Keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"

func cacheRoot() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "ovnhost")
	}
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".cache", "ovnhost")
	}
	return "/var/cache/ovnhost"
}

// Unpack returns the directory holding pkg of suite, unpacked. A missing
// apt-get, keyring or network fails the test under OVNHOST_TEST_STRICT=1
// and skips it otherwise.
func Unpack(t testing.TB, suite, pkg string) string {
	t.Helper()
	dir := filepath.Join(cacheRoot(), "deb", suite)
	out := filepath.Join(dir, "unpacked", pkg)
	if _, err := os.Stat(filepath.Join(out, ".done")); err == nil {
		return out
	}
	fail := func(format string, args ...any) string {
		t.Helper()
		msg := fmt.Sprintf(format, args...)
		if testenv.Strict() {
			t.Fatalf("fetching %s from Debian %s: %s", pkg, suite, msg)
		}
		t.Skipf("fetching %s from Debian %s: %s", pkg, suite, msg)
		return ""
	}
	for _, p := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(p); err != nil {
			return fail("%s not found (a Debian host)", p)
		}
	}
	if _, err := os.Stat(Keyring); err != nil {
		return fail("%s missing (Debian package debian-archive-keyring)", Keyring)
	}
	for _, d := range []string{"lists/partial", "cache/archives/partial", "none", "debs", "unpacked"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fail("%v", err)
		}
	}
	// Serialise test binaries fetching the same suite.
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fail("%v", err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail("%v", err)
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if _, err := os.Stat(filepath.Join(out, ".done")); err == nil {
		return out
	}
	list := filepath.Join(dir, "sources.list")
	if err := os.WriteFile(list, []byte(fmt.Sprintf("deb [signed-by=%s] %s %s main\n", Keyring, Mirror, suite)), 0o644); err != nil {
		return fail("%v", err)
	}
	status := filepath.Join(dir, "status")
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return fail("%v", err)
	}
	// Every apt path points into dir: the host's sources, preferences,
	// lists, cache and dpkg status are neither read nor written.
	opts := []string{"-q",
		"-o", "Dir::Etc::SourceList=" + list, "-o", "Dir::Etc::SourceParts=" + filepath.Join(dir, "none"),
		"-o", "Dir::Etc::Preferences=" + filepath.Join(dir, "none", "preferences"), "-o", "Dir::Etc::PreferencesParts=" + filepath.Join(dir, "none"),
		"-o", "Dir::State::Lists=" + filepath.Join(dir, "lists"), "-o", "Dir::Cache=" + filepath.Join(dir, "cache"),
		"-o", "Dir::State::status=" + status, "-o", "APT::Sandbox::User=root"}
	run := func(wd string, args ...string) error {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = wd
		b, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, lastLines(string(b), 5))
		}
		// apt-get update reports unreachable mirrors as warnings, exit 0.
		if strings.Contains(string(b), "Failed to fetch") {
			return fmt.Errorf("%s: %s", strings.Join(args, " "), lastLines(string(b), 5))
		}
		return nil
	}
	debs := filepath.Join(dir, "debs")
	files, _ := filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	if len(files) == 0 {
		if err := run(debs, append(append([]string{"apt-get"}, opts...), "update")...); err != nil {
			return fail("%v", err)
		}
		if err := run(debs, append(append([]string{"apt-get"}, opts...), "download", pkg)...); err != nil {
			return fail("%v", err)
		}
		files, _ = filepath.Glob(filepath.Join(debs, pkg+"_*.deb"))
	}
	if len(files) == 0 {
		return fail("apt-get download left no %s_*.deb in %s", pkg, debs)
	}
	tmp := out + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := run(dir, "dpkg-deb", "-x", files[len(files)-1], tmp); err != nil {
		return fail("%v", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".done"), []byte(filepath.Base(files[len(files)-1])+"\n"), 0o644); err != nil {
		return fail("%v", err)
	}
	_ = os.RemoveAll(out)
	if err := os.Rename(tmp, out); err != nil {
		return fail("%v", err)
	}
	return out
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

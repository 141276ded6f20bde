// Package debschema gives tests the OVSDB schema files of the Debian
// releases ovnhost supports: vswitch.ovsschema (package openvswitch-switch)
// and ovn-nb/ovn-sb.ovsschema (package ovn-central). Bookworm's are the
// installed ones; bullseye's and trixie's are fetched once with
// `apt-get download` against a private sources list naming that suite (the
// host's sources, lists and package cache are not touched), their
// *.ovsschema extracted with dpkg-deb, and cached under
// ~/.cache/ovnhost/ovsschema/<suite> ($OVNHOST_KUBE_CACHE overrides the
// root, as for the other harness caches). Cold: about 10-25 s per suite
// (its package index is 10-20 MB); warm: nothing.
package debschema

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Release is one Debian release's schemas; a path is "" when the suite
// has no such package (bullseye has no OVN).
type Release struct {
	Suite   string // "bullseye"
	OVS     string // "2.15"
	OVN     string // "20.12"; "" when the suite carries no OVN
	VSwitch string
	NB, SB  string
}

// Name is "bullseye (OVS 2.15)" or "trixie (OVS 3.5, OVN 25.03)".
func (r Release) Name() string {
	s := r.Suite + " (OVS " + r.OVS
	if r.OVN != "" {
		s += ", OVN " + r.OVN
	}
	return s + ")"
}

// suites are the releases fetched from the Debian archive: package, path
// inside it, and the release of each.
var suites = []struct {
	suite, ovs, ovn string
}{
	{"bullseye", "2.15", ""}, // Debian 11 carries openvswitch 2.15 but no ovn source package
	{"trixie", "3.5", "25.03"},
}

// Bookworm is the installed release (Debian 12: OVS 3.1, OVN 23.03).
func Bookworm(t testing.TB) Release {
	t.Helper()
	r := Release{Suite: "bookworm", OVS: "3.1", OVN: "23.03",
		VSwitch: "/usr/share/openvswitch/vswitch.ovsschema",
		NB:      "/usr/share/ovn/ovn-nb.ovsschema", SB: "/usr/share/ovn/ovn-sb.ovsschema"}
	for _, p := range []string{r.VSwitch, r.NB, r.SB} {
		if _, err := os.Stat(p); err != nil {
			if testenv.Strict() {
				t.Fatalf("prerequisite missing: %s (Debian packages openvswitch-switch, ovn-central; `make deps`)", p)
			}
			t.Skipf("prerequisite missing: %s", p)
		}
	}
	return r
}

// All returns bullseye, bookworm and trixie, fetching what is not cached.
func All(t testing.TB) []Release {
	t.Helper()
	out := []Release{}
	for _, s := range suites[:1] {
		out = append(out, Fetch(t, s.suite))
	}
	out = append(out, Bookworm(t))
	for _, s := range suites[1:] {
		out = append(out, Fetch(t, s.suite))
	}
	return out
}

// Fetch returns a suite's schemas from the cache, downloading them first
// if needed. Without apt-get or the archive it fails under strict mode.
func Fetch(t testing.TB, suite string) Release {
	t.Helper()
	var r Release
	found := false
	for _, s := range suites {
		if s.suite == suite {
			r, found = Release{Suite: s.suite, OVS: s.ovs, OVN: s.ovn}, true
		}
	}
	if !found {
		t.Fatalf("debschema: unknown suite %q", suite)
	}
	dir, err := fetch(r)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("debschema: %s: %v", suite, err)
		}
		t.Skipf("debschema: %s: %v", suite, err)
	}
	r.VSwitch = filepath.Join(dir, "vswitch.ovsschema")
	if r.OVN != "" {
		r.NB, r.SB = filepath.Join(dir, "ovn-nb.ovsschema"), filepath.Join(dir, "ovn-sb.ovsschema")
	}
	return r
}

// fetch fills <cache>/ovsschema/<suite> once; a "complete" stamp marks a
// finished fetch, and a lock serialises test binaries fetching at once.
func fetch(r Release) (string, error) {
	root := filepath.Join(testenv.CacheRoot(), "ovsschema")
	dir := filepath.Join(root, r.Suite)
	stamp := filepath.Join(dir, "complete")
	if _, err := os.Stat(stamp); err == nil {
		return dir, nil
	}
	unlock, err := testenv.LockDir(root)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(stamp); err == nil {
		return dir, nil
	}
	for _, p := range []string{"apt-get", "dpkg-deb"} {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("%s not found: the schemas of %s come from its Debian packages", p, r.Suite)
		}
	}
	fmt.Fprintf(os.Stderr, "debschema: fetching the OVS/OVN schemas of Debian %s into %s (once)\n", r.Suite, dir)
	work, err := os.MkdirTemp(root, "apt-"+r.Suite+"-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	for _, d := range []string{"lists/partial", "cache/archives/partial", "parts", "debs"} {
		if err := os.MkdirAll(filepath.Join(work, d), 0o755); err != nil {
			return "", err
		}
	}
	src := fmt.Sprintf("deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian %s main\n", r.Suite)
	if err := os.WriteFile(filepath.Join(work, "sources.list"), []byte(src), 0o644); err != nil {
		return "", err
	}
	// Everything apt keeps is redirected into work; the host's apt.conf.d
	// still applies (a proxy configured there keeps working).
	opts := []string{"-q",
		"-o", "Dir::Etc::sourcelist=" + filepath.Join(work, "sources.list"),
		"-o", "Dir::Etc::sourceparts=" + filepath.Join(work, "parts"),
		"-o", "Dir::State::Lists=" + filepath.Join(work, "lists"),
		"-o", "Dir::Cache=" + filepath.Join(work, "cache"),
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		"-o", "APT::Architectures=amd64",
		"-o", "APT::Sandbox::User=root",
	}
	if err := apt(work, append(opts, "update")...); err != nil {
		return "", err
	}
	pkgs := []string{"openvswitch-switch/" + r.Suite}
	if r.OVN != "" {
		pkgs = append(pkgs, "ovn-central/"+r.Suite)
	}
	if err := apt(filepath.Join(work, "debs"), append(opts, append([]string{"download"}, pkgs...)...)...); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(work, "debs", "*.deb"))
	if len(debs) != len(pkgs) {
		return "", fmt.Errorf("apt-get download %s left %d packages, want %d", strings.Join(pkgs, " "), len(debs), len(pkgs))
	}
	tmp := dir + ".tmp"
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	var versions []string
	for _, deb := range debs {
		x := filepath.Join(work, "x", filepath.Base(deb))
		if err := os.MkdirAll(x, 0o755); err != nil {
			return "", err
		}
		cmd := exec.Command("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -x -C "$2" --wildcards '*.ovsschema'`, "sh", deb, x)
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("extracting the schemas of %s: %v: %s", deb, err, out)
		}
		schemas, _ := filepath.Glob(filepath.Join(x, "usr/share/*/*.ovsschema"))
		for _, s := range schemas {
			b, err := os.ReadFile(s)
			if err != nil {
				return "", err
			}
			if err := os.WriteFile(filepath.Join(tmp, filepath.Base(s)), b, 0o644); err != nil {
				return "", err
			}
		}
		versions = append(versions, filepath.Base(deb))
	}
	for _, want := range []string{"vswitch.ovsschema"} {
		if _, err := os.Stat(filepath.Join(tmp, want)); err != nil {
			return "", fmt.Errorf("%s not in %v", want, versions)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(strings.Join(versions, "\n")+"\n"), 0o644); err != nil {
		return "", err
	}
	_ = os.RemoveAll(dir)
	return dir, os.Rename(tmp, dir)
}

func apt(dir string, args ...string) error {
	cmd := exec.Command("apt-get", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("apt-get %s: %v\n%s", args[len(args)-1], err, out.String())
	}
	return nil
}

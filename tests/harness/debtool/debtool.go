// Package debtool gives tests one program out of a Debian package of the
// host's own suite without installing the package (no service started, no
// files outside the cache): `apt-get download` and `dpkg-deb -x` of just
// that file, once per machine, into $OVNHOST_KUBE_CACHE (else
// ~/.cache/ovnhost) under deb/<package>. Debian's promtool (package
// prometheus) is seconds to fetch where building it from the module proxy
// takes many minutes of CPU.
package debtool

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

var (
	mu  sync.Mutex
	got = map[string]string{}
)

// Program returns the path of file (as the package ships it, e.g.
// "usr/bin/promtool") from Debian package pkg. It fails under strict mode,
// else skips, when apt cannot fetch the package.
func Program(t testing.TB, pkg, file string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := pkg + ":" + file
	if p, ok := got[key]; ok {
		return p
	}
	p, err := fetch(pkg, file)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("debtool: %s from Debian package %s: %v", file, pkg, err)
		}
		t.Skipf("debtool: %s from Debian package %s: %v", file, pkg, err)
	}
	got[key] = p
	return p
}

func fetch(pkg, file string) (string, error) {
	dir := filepath.Join(testenv.CacheRoot(), "deb", pkg)
	bin := filepath.Join(dir, filepath.Base(file))
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	work, err := os.MkdirTemp(dir, "work-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	run := runner(work)
	if err := download(run, pkg); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(work, pkg+"_*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
	}
	if err := run("sh", "-c", `dpkg-deb --fsys-tarfile "$1" | tar -x "./$2"`, "sh", debs[0], file); err != nil {
		return "", err
	}
	if err := os.Rename(filepath.Join(work, file), bin); err != nil {
		return "", err
	}
	_ = os.WriteFile(filepath.Join(dir, "from"), []byte(filepath.Base(debs[0])+"\n"), 0o644)
	return bin, nil
}

// Tree unpacks Debian packages pkgs whole (with `dpkg-deb -x`, nothing
// installed: no maintainer script runs, no service starts) into one
// directory, cached as deb/<name>/root, and returns it. A program from
// it runs with LD_LIBRARY_PATH=<root>/usr/lib/<triplet> for libraries the
// host lacks. It fails under strict mode, else skips, when apt cannot
// fetch a package.
func Tree(t testing.TB, name string, pkgs ...string) string {
	t.Helper()
	mu.Lock()
	defer mu.Unlock()
	key := "tree:" + name
	if p, ok := got[key]; ok {
		return p
	}
	p, err := unpackTree(name, pkgs)
	if err != nil {
		if testenv.Strict() {
			t.Fatalf("debtool: unpacking Debian packages %v: %v", pkgs, err)
		}
		t.Skipf("debtool: unpacking Debian packages %v: %v", pkgs, err)
	}
	got[key] = p
	return p
}

func unpackTree(name string, pkgs []string) (string, error) {
	dir := filepath.Join(testenv.CacheRoot(), "deb", name)
	root := filepath.Join(dir, "root")
	if _, err := os.Stat(filepath.Join(dir, "from")); err == nil {
		return root, nil
	}
	unlock, err := testenv.LockDir(dir)
	if err != nil {
		return "", err
	}
	defer unlock()
	if _, err := os.Stat(filepath.Join(dir, "from")); err == nil {
		return root, nil
	}
	work, err := os.MkdirTemp(dir, "work-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	run := runner(work)
	if err := download(run, pkgs...); err != nil {
		return "", err
	}
	_ = os.RemoveAll(root)
	tmpRoot := filepath.Join(work, "root")
	var from []string
	for _, pkg := range pkgs {
		debs, _ := filepath.Glob(filepath.Join(work, pkg+"_*.deb"))
		if len(debs) != 1 {
			return "", fmt.Errorf("apt-get download %s left %d packages", pkg, len(debs))
		}
		if err := run("dpkg-deb", "-x", debs[0], tmpRoot); err != nil {
			return "", err
		}
		from = append(from, filepath.Base(debs[0]))
	}
	if err := os.Rename(tmpRoot, root); err != nil {
		return "", err
	}
	return root, os.WriteFile(filepath.Join(dir, "from"), []byte(strings.Join(from, "\n")+"\n"), 0o644)
}

// runner runs programs in dir, their output in the error.
func runner(dir string) func(name string, args ...string) error {
	return func(name string, args ...string) error {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s %v: %v\n%s", name, args, err, out.String())
		}
		return nil
	}
}

// download fetches pkgs' .deb files with apt-get into run's directory;
// a machine whose packages were installed long ago may have no lists, so
// a failure is tried again after apt-get update.
func download(run func(string, ...string) error, pkgs ...string) error {
	args := append([]string{"-q", "-o", "APT::Sandbox::User=root", "download"}, pkgs...)
	if err := run("apt-get", args...); err != nil {
		if err2 := run("apt-get", "-q", "update"); err2 != nil {
			return fmt.Errorf("%v; apt-get update: %v", err, err2)
		}
		return run("apt-get", args...)
	}
	return nil
}

package bundle

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClosureOfShell resolves the host's /bin/sh (dynamically linked on
// every distribution this builds on): the loader and libc must be found.
func TestClosureOfShell(t *testing.T) {
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Fatalf("/bin/sh: %v (every host this builds on has one)", err)
	}
	if dyn, err := IsDynamic(sh); err != nil || !dyn {
		t.Fatalf("%s is not a dynamic executable (%v): the test needs the host's dynamically linked shell", sh, err)
	}
	c, err := NewResolver().Closure([]string{sh})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Interpreters) != 1 || !strings.Contains(c.Interpreters[0], "ld-") {
		t.Errorf("interpreters %v", c.Interpreters)
	}
	libc := false
	for _, l := range c.Libraries {
		libc = libc || strings.HasPrefix(filepath.Base(l), "libc.so")
	}
	if !libc {
		t.Errorf("libc not in %v", c.Libraries)
	}
	// Install lays them out so that the shell runs from an empty root.
	root := t.TempDir()
	if err := Install(root, "/bin/sh"); err != nil {
		t.Fatal(err)
	}
	for _, p := range append([]string{"/bin/sh"}, c.Interpreters...) {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("%s not usable in the root: %v", p, err)
		}
	}
}

// TestStaticProgramNeedsNothing: a static Go program has no interpreter.
func TestStaticProgramNeedsNothing(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := IsDynamic(exe); err != nil {
		t.Fatalf("reading the test binary: %v", err)
	}
	if _, err := IsDynamic("/nonexistent"); err == nil {
		t.Error("IsDynamic of a missing file succeeded")
	}
}

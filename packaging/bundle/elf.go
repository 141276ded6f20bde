package bundle

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Closure is what a set of dynamically linked programs needs to run in an
// empty root: the program interpreters (the dynamic loaders) and every shared
// library reachable through DT_NEEDED, each as the host path it resolved to.
type Closure struct {
	Interpreters []string
	Libraries    []string
}

// Resolver finds shared libraries the way the glibc loader does for programs
// without an ld.so.cache entry: DT_RPATH (when there is no DT_RUNPATH), then
// DT_RUNPATH, then the configured and the default system directories.
type Resolver struct {
	// Dirs are the system directories, searched after the object's own paths.
	Dirs []string
}

// NewResolver reads the host's /etc/ld.so.conf (and its includes) and adds
// the directories the loader always searches.
func NewResolver() *Resolver {
	var dirs []string
	seen := map[string]bool{}
	add := func(d string) {
		d = filepath.Clean(d)
		if !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	readLdSoConf("/etc/ld.so.conf", add, 0)
	for _, d := range []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		add(d)
	}
	return &Resolver{Dirs: dirs}
}

func readLdSoConf(path string, add func(string), depth int) {
	if depth > 8 {
		return
	}
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		if rest, ok := strings.CutPrefix(line, "include"); ok && (rest == "" || rest[0] == ' ' || rest[0] == '\t') {
			pat := strings.TrimSpace(rest)
			if !filepath.IsAbs(pat) {
				pat = filepath.Join(filepath.Dir(path), pat)
			}
			matches, _ := filepath.Glob(pat)
			sort.Strings(matches)
			for _, m := range matches {
				readLdSoConf(m, add, depth+1)
			}
			continue
		}
		if filepath.IsAbs(line) {
			add(line)
		}
	}
}

// object is what the closure needs from one ELF file.
type object struct {
	interp  string
	needed  []string
	rpath   []string
	runpath []string
	class   elf.Class
	machine elf.Machine
}

func readObject(path string) (*object, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%s: not an ELF file: %w", path, err)
	}
	defer f.Close()
	o := &object{class: f.Class, machine: f.Machine}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b := make([]byte, p.Filesz)
			if _, err := p.ReadAt(b, 0); err != nil {
				return nil, fmt.Errorf("%s: reading PT_INTERP: %w", path, err)
			}
			o.interp = strings.TrimRight(string(b), "\x00")
		}
	}
	if f.Section(".dynamic") == nil && o.interp == "" {
		return o, nil // static
	}
	if o.needed, err = f.ImportedLibraries(); err != nil {
		return nil, fmt.Errorf("%s: DT_NEEDED: %w", path, err)
	}
	origin := filepath.Dir(path)
	expand := func(tag elf.DynTag) []string {
		vals, _ := f.DynString(tag)
		var out []string
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(d, "${ORIGIN}", origin)
				d = strings.ReplaceAll(d, "$ORIGIN", origin)
				if d != "" {
					out = append(out, d)
				}
			}
		}
		return out
	}
	o.rpath = expand(elf.DT_RPATH)
	o.runpath = expand(elf.DT_RUNPATH)
	return o, nil
}

// IsDynamic reports whether the program at path needs a dynamic loader.
func IsDynamic(path string) (bool, error) {
	o, err := readObject(path)
	if err != nil {
		return false, err
	}
	return o.interp != "" || len(o.needed) > 0, nil
}

// find resolves one DT_NEEDED name for the object that needs it.
func (r *Resolver) find(name string, from *object) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	var dirs []string
	if len(from.runpath) == 0 {
		dirs = append(dirs, from.rpath...)
	}
	dirs = append(dirs, from.runpath...)
	dirs = append(dirs, r.Dirs...)
	for _, d := range dirs {
		p := filepath.Join(d, name)
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		ok := f.Class == from.class && f.Machine == from.machine
		f.Close()
		if ok {
			return p, nil
		}
	}
	return "", fmt.Errorf("shared library %s not found in %s", name, strings.Join(dirs, ":"))
}

// Closure walks DT_NEEDED from each program and returns the loaders and
// libraries they need (host paths as found, not symlink-resolved). Extra
// sonames (libraries loaded with dlopen) are resolved like DT_NEEDED.
func (r *Resolver) Closure(programs []string, extra ...string) (*Closure, error) {
	c := &Closure{}
	interps := map[string]bool{}
	libs := map[string]bool{}
	var queue []string
	var first *object
	visit := func(path string) error {
		o, err := readObject(path)
		if err != nil {
			return err
		}
		if first == nil {
			first = o
		}
		if o.interp != "" && !interps[o.interp] {
			interps[o.interp] = true
			c.Interpreters = append(c.Interpreters, o.interp)
		}
		for _, n := range o.needed {
			p, err := r.find(n, o)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if !libs[p] {
				libs[p] = true
				c.Libraries = append(c.Libraries, p)
				queue = append(queue, p)
			}
		}
		return nil
	}
	for _, p := range programs {
		if err := visit(p); err != nil {
			return nil, err
		}
	}
	if first != nil {
		for _, n := range extra {
			p, err := r.find(n, first)
			if err != nil {
				return nil, err
			}
			if !libs[p] {
				libs[p] = true
				c.Libraries = append(c.Libraries, p)
				queue = append(queue, p)
			}
		}
	}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if err := visit(p); err != nil {
			return nil, err
		}
	}
	sort.Strings(c.Interpreters)
	sort.Strings(c.Libraries)
	return c, nil
}

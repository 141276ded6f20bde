// Package cniconf tells whether ovnhost's CNI configuration is the one the
// container runtime will use, and names every other configuration that wins
// over it or conflicts with it (a stale 10-flannel.conflist, an old
// Kube-OVN file, an unparsable file that stops containerd from loading any).
//
// Runtimes load the files of the CNI conf dir whose names end in .conf,
// .conflist or .json, in lexical order, and use the first one (containerd
// stops with an error at the first file it cannot parse). Scan and Analyze
// only read; the node daemon's installer and netctl doctor both use them.
package cniconf

import (
	"bytes"
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Names of ovnhost's CNI artifacts.
const (
	Conflist   = "00-ovnhost.conflist"
	PluginType = "ovnhost-cni"
)

// Status of a report, worst first.
const (
	Fail = "fail"
	Warn = "warn"
	Pass = "pass"
)

// File is one configuration file as a runtime would see it.
type File struct {
	Name    string   `json:"name"`
	Network string   `json:"network,omitempty"` // the "name" field
	Types   []string `json:"types,omitempty"`   // plugin types, in chain order
	Err     string   `json:"error,omitempty"`   // why it cannot be loaded
	Ours    bool     `json:"ours,omitempty"`    // the ovnhost conflist
}

func (f File) describe() string {
	s := f.Name
	switch {
	case f.Err != "":
		s += " (unparsable: " + f.Err + ")"
	case len(f.Types) > 0:
		s += " (" + strings.Join(f.Types, "+")
		if f.Network != "" {
			s += ", network " + f.Network
		}
		s += ")"
	}
	return s
}

// Report is the analysis of one conf dir.
type Report struct {
	Dir string `json:"dir"`
	// Files in the order the runtime reads them.
	Files []File `json:"files"`
	// Status is Pass, Warn or Fail; Found and Fix explain it.
	Status string `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix,omitempty"`
	// Outranking are the files read before ours: the first valid one is
	// used instead of ovnhost, and an unparsable one breaks containerd.
	Outranking []File `json:"outranking,omitempty"`
	// Stale are other plugins' files read after ours: unused while ours is
	// first, used as soon as ours is missing.
	Stale []File `json:"stale,omitempty"`
}

// IsConfFile reports whether a runtime reads this file name.
func IsConfFile(name string) bool {
	switch filepath.Ext(name) {
	case ".conf", ".conflist", ".json":
		return true
	}
	return false
}

// Scan reads dir and analyzes it. ours is the name of ovnhost's file
// (Conflist unless configured otherwise).
func Scan(dir, ours string) (*Report, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range ents {
		if e.Type().IsRegular() || e.Type()&os.ModeSymlink != 0 {
			names = append(names, e.Name())
		}
	}
	return Analyze(dir, names, func(n string) ([]byte, error) { return os.ReadFile(filepath.Join(dir, n)) }, ours), nil
}

// Analyze is Scan on given file names and contents.
func Analyze(dir string, names []string, read func(name string) ([]byte, error), ours string) *Report {
	if ours == "" {
		ours = Conflist
	}
	r := &Report{Dir: dir}
	var confs []string
	for _, n := range names {
		if IsConfFile(n) {
			confs = append(confs, n)
		}
	}
	sort.Strings(confs)
	ourIdx := -1
	for _, n := range confs {
		f := parse(n, read)
		if n == ours {
			f.Ours = true
			ourIdx = len(r.Files)
		}
		r.Files = append(r.Files, f)
	}
	var others []File
	for i, f := range r.Files {
		switch {
		case f.Ours:
		case ourIdx < 0 || i < ourIdx:
			r.Outranking = append(r.Outranking, f)
			others = append(others, f)
		default:
			r.Stale = append(r.Stale, f)
			others = append(others, f)
		}
	}
	path := filepath.Join(dir, ours)
	switch {
	case ourIdx < 0:
		r.Status = Fail
		r.Found = ours + " is missing from " + dir
		if len(others) > 0 {
			r.Found += "; the runtime uses " + describeAll(others[:1]) + " instead"
			if len(others) > 1 {
				r.Found += "; also present: " + describeAll(others[1:])
			}
		} else {
			r.Found += "; there is no CNI configuration at all, pods stay in ContainerCreating"
		}
		r.Fix = "start ovnhost (it installs " + ours + "), or point --cni-conf-dir (CNI_CONF_DIR) at the runtime's conf dir"
		if len(others) > 0 {
			r.Fix += "; remove the other files: " + rmList(dir, others)
		}
	case r.Files[ourIdx].Err != "":
		r.Status = Fail
		r.Found = path + " cannot be parsed: " + r.Files[ourIdx].Err
		r.Fix = "remove it and restart ovnhost to rewrite it"
	case !contains(r.Files[ourIdx].Types, PluginType):
		r.Status = Fail
		r.Found = path + " does not call the " + PluginType + " plugin (types: " + strings.Join(r.Files[ourIdx].Types, ",") + ")"
		r.Fix = "remove it and restart ovnhost to rewrite it"
	case r.Files[ourIdx].Types[0] != PluginType:
		// Chained plugins (portmap for hostPorts) come after ovnhost-cni:
		// they need its result as prevResult.
		r.Status = Fail
		r.Found = path + " runs " + r.Files[ourIdx].Types[0] + " before the " + PluginType + " plugin (types: " + strings.Join(r.Files[ourIdx].Types, ",") + ")"
		r.Fix = "remove it and restart ovnhost to rewrite it"
	case len(r.Outranking) > 0:
		first := r.Outranking[0]
		if len(first.Types) > 0 && (first.Types[0] == "multus" || first.Types[0] == "multus-shim") && len(r.Outranking) == 1 {
			r.Status = Warn
			r.Found = "Multus (" + first.Name + ") is read before " + ours + ": pods get ovnhost only if Multus delegates to it"
			r.Fix = "make ovnhost Multus's clusterNetwork (or default delegate)"
			break
		}
		r.Status = Fail
		r.Found = describeAll(r.Outranking) + " sorts before " + ours + " in " + dir + ": "
		if first.Err != "" {
			r.Found += "containerd stops at the unparsable " + first.Name + " and loads no network"
		} else {
			r.Found += "the runtime uses " + first.Name + " instead of ovnhost"
		}
		r.Fix = "remove them: " + rmList(dir, r.Outranking)
	case len(r.Stale) > 0:
		r.Status = Warn
		r.Found = ours + " is first; other plugins' files are also present: " + describeAll(r.Stale) + " (used as soon as " + ours + " is missing)"
		r.Fix = "remove them: " + rmList(dir, r.Stale)
	default:
		r.Status = Pass
		r.Found = path + " is the only CNI configuration"
	}
	return r
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func describeAll(fs []File) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = f.describe()
	}
	return strings.Join(parts, ", ")
}

func rmList(dir string, fs []File) string {
	parts := make([]string, len(fs))
	for i, f := range fs {
		parts[i] = filepath.Join(dir, f.Name)
	}
	return "rm " + strings.Join(parts, " ")
}

// parse loads a file the way libcni does: a .conflist holds "plugins", a
// .conf or .json holds one plugin at top level.
func parse(name string, read func(string) ([]byte, error)) File {
	f := File{Name: name}
	b, err := read(name)
	if err != nil {
		f.Err = err.Error()
		return f
	}
	var raw struct {
		Name    string `json:"name"`
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		f.Err = err.Error()
		return f
	}
	f.Network = raw.Name
	if strings.HasSuffix(name, ".conflist") {
		if len(raw.Plugins) == 0 {
			f.Err = "no plugins"
			return f
		}
		for _, p := range raw.Plugins {
			if p.Type == "" {
				f.Err = "a plugin has no type"
				return f
			}
			f.Types = append(f.Types, p.Type)
		}
		return f
	}
	if raw.Type == "" {
		f.Err = "no type"
		return f
	}
	f.Types = []string{raw.Type}
	return f
}

// VersionVar is the linker symbol that carries the build stamp.
const VersionVar = "github.com/ovnhost/ovnhost/internal/version.Version"

// BuildStamp returns the version stamp of the ovnhost-cni binary at path.
// It first looks for -ldflags -X VersionVar=... in the embedded build
// information (present unless built with -trimpath, which omits -ldflags),
// then runs the plugin with an empty environment: without CNI_COMMAND a
// plugin built on the CNI skel prints only its about line,
// "ovnhost-cni <stamp>: ...", and exits.
func BuildStamp(ctx context.Context, path string) (string, error) {
	if bi, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range bi.Settings {
			if s.Key != "-ldflags" {
				continue
			}
			for _, field := range strings.Fields(s.Value) {
				field = strings.Trim(field, `'"`)
				if v, ok := strings.CutPrefix(field, VersionVar+"="); ok {
					return v, nil
				}
			}
		}
	} else {
		return "", fmt.Errorf("%s is not a Go program: %w", path, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, path)
	cmd.Env = []string{}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("running %s for its version: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	}
	line, _, _ := strings.Cut(stderr.String(), "\n")
	rest, ok := strings.CutPrefix(line, PluginType+" ")
	if !ok {
		return "", fmt.Errorf("%s printed no %s version line: %q", path, PluginType, line)
	}
	v, _, _ := strings.Cut(rest, ":")
	return strings.TrimSpace(v), nil
}

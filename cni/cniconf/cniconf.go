// Package cniconf tells whether ovnhost's CNI configuration is the one the
// container runtime will use, and names every other configuration that wins
// over it or conflicts with it (a stale 10-flannel.conflist, an old
// Kube-OVN file, an unparsable file that stops containerd from loading any).
//
// Runtimes load the files of the CNI conf dir whose names end in .conf,
// .conflist or .json, in lexical order, and use the first one (containerd
// stops with an error at the first file it cannot parse). Scan and Analyze
// only read; the installer (install.go) and netctl doctor both use them.
//
// The Installer, run by the CNI server, writes ovnhost's plugin binary and
// conflist (Render) and keeps them in place while the daemon runs.
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
	"strconv"
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
	// Socket is the "socket" of its ovnhost-cni plugin, if it has one.
	Socket string `json:"socket,omitempty"`
	// Multus is set when the file is a Multus configuration.
	Multus *Multus `json:"multus,omitempty"`
}

// Multus is what a Multus configuration (type multus, the thin plugin, or
// multus-shim, the thick one) says about the pods' default network. Multus
// takes it from clusterNetwork when set (a file or directory path, else a
// NetworkAttachmentDefinition of that name in multusNamespace, else the
// file in confDir whose network has that name), otherwise from its first
// delegate (the thin entrypoint's generated 00-multus.conf carries a copy
// of the conflist it found first).
type Multus struct {
	Thick          bool   `json:"thick,omitempty"` // multus-shim: the daemon's config decides
	ClusterNetwork string `json:"clusterNetwork,omitempty"`
	ConfDir        string `json:"confDir,omitempty"`
	// Delegate is the first delegate (Types empty when there is none).
	Delegate File `json:"delegate"`
}

// MultusDefaultConfDir is where Multus looks up a clusterNetwork given by
// name when its configuration sets no confDir.
const MultusDefaultConfDir = "/etc/cni/multus/net.d"

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
	case len(r.Outranking) > 0 && r.Outranking[0].Multus != nil:
		r.multus(ourIdx)
	case len(r.Outranking) > 0:
		first := r.Outranking[0]
		r.Status = Fail
		r.Found = describeAll(r.Outranking) + " sorts before " + ours + " in " + dir + ": "
		if first.Err != "" {
			r.Found += "containerd stops at the unparsable " + first.Name + " and loads no network"
		} else {
			r.Found += "the runtime uses " + first.Name + " instead of ovnhost"
		}
		// Multus further down is meant to be first: remove only what sorts before it.
		rm := r.Outranking
		for i, f := range rm {
			if f.Multus != nil {
				rm = rm[:i]
				break
			}
		}
		r.Fix = "remove them: " + rmList(dir, rm)
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

// multus judges a Multus configuration read before ours: the runtime
// calls Multus, which is fine when Multus gives pods ovnhost as their
// default network. Files after Multus's (ours and others) are then not used
// by the runtime directly.
func (r *Report) multus(ourIdx int) {
	mf := r.Outranking[0]
	m := mf.Multus
	us := r.Files[ourIdx]
	path := filepath.Join(r.Dir, us.Name)
	who := "Multus (" + mf.Name + ")"
	setPath := `set "clusterNetwork": "` + path + `" in ` + filepath.Join(r.Dir, mf.Name)
	var ok bool
	switch {
	case m.Thick:
		r.Status, r.Found = Warn, who+" is read before "+us.Name+" and is the thick plugin: its daemon's configuration decides whether pods get ovnhost"
		r.Fix = `make ovnhost the daemon's default network (clusterNetwork "` + path + `" in its daemon-config.json)`
	case m.ClusterNetwork != "" && strings.Contains(m.ClusterNetwork, "/"):
		switch filepath.Clean(m.ClusterNetwork) {
		case path:
			ok = true
			r.Found = who + " is read first and delegates the default network to " + path
		case filepath.Clean(r.Dir):
			// Multus would load the first file of the directory: its own.
			r.Status, r.Found = Fail, who+" takes the default network from the first file of "+m.ClusterNetwork+", which is "+mf.Name+" itself, not "+us.Name
			r.Fix = setPath
		default:
			r.Status, r.Found = Fail, who+" delegates the default network to "+m.ClusterNetwork+", not to ovnhost's "+path
			r.Fix = setPath
		}
	case m.ClusterNetwork != "":
		confDir := m.ConfDir
		if confDir == "" {
			confDir = MultusDefaultConfDir
		}
		switch {
		case m.ClusterNetwork == us.Network && filepath.Clean(confDir) == filepath.Clean(r.Dir):
			ok = true
			r.Found = who + " is read first and delegates the default network to network " + us.Network + " (" + path + ")"
		case m.ClusterNetwork == us.Network:
			r.Status, r.Found = Warn, who+" delegates the default network to network "+us.Network+", which it looks up as a NetworkAttachmentDefinition, then in "+confDir+"; "+us.Name+" is in "+r.Dir
			r.Fix = setPath + `, or "confDir": "` + r.Dir + `"`
		default:
			r.Status, r.Found = Warn, who+" delegates the default network to "+strconv.Quote(m.ClusterNetwork)+", and ovnhost's network is "+strconv.Quote(us.Network)+": pods get ovnhost only if a NetworkAttachmentDefinition of that name calls "+PluginType
			r.Fix = setPath
		}
	case len(m.Delegate.Types) == 0:
		r.Status, r.Found = Fail, who+" has neither clusterNetwork nor a usable delegate"
		if m.Delegate.Err != "" {
			r.Found += " (delegates[0]: " + m.Delegate.Err + ")"
		}
		r.Fix = setPath
	case m.Delegate.Types[0] != PluginType:
		r.Status, r.Found = Fail, who+" delegates the default network to "+strings.Join(m.Delegate.Types, "+")+" (network "+m.Delegate.Network+"), not to ovnhost"
		r.Fix = setPath + ", or regenerate Multus's configuration (restart Multus on this node) now that " + us.Name + " sorts first"
	case m.Delegate.Socket != us.Socket:
		r.Status, r.Found = Fail, who+" delegates to a stale copy of "+us.Name+": its ovnhost-cni socket is "+strconv.Quote(m.Delegate.Socket)+", ovnhost's is "+strconv.Quote(us.Socket)
		r.Fix = "regenerate Multus's configuration (restart Multus on this node), or " + setPath
	default:
		ok = true
		r.Found = who + " is read first and delegates the default network to ovnhost (its copy of " + us.Name + ")"
	}
	if !ok {
		return
	}
	r.Status = Pass
	if rest := r.Outranking[1:]; len(rest)+len(r.Stale) > 0 {
		others := append(append([]File(nil), rest...), r.Stale...)
		r.Status = Warn
		r.Found += "; other plugins' files are also present: " + describeAll(others) + " (used as soon as " + mf.Name + " and " + us.Name + " are missing)"
		r.Fix = "remove them: " + rmList(r.Dir, others)
	}
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
	b, err := read(name)
	if err != nil {
		return File{Name: name, Err: err.Error()}
	}
	return parseBytes(name, b, strings.HasSuffix(name, ".conflist"))
}

func parseBytes(name string, b []byte, list bool) File {
	f := File{Name: name}
	type plugin struct {
		Type   string `json:"type"`
		Socket string `json:"socket"`
		// Multus's fields
		ClusterNetwork string            `json:"clusterNetwork"`
		ConfDir        string            `json:"confDir"`
		Delegates      []json.RawMessage `json:"delegates"`
	}
	var raw struct {
		plugin
		Name    string   `json:"name"`
		Plugins []plugin `json:"plugins"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		f.Err = err.Error()
		return f
	}
	f.Network = raw.Name
	plugins := []plugin{raw.plugin}
	if list {
		if len(raw.Plugins) == 0 {
			f.Err = "no plugins"
			return f
		}
		plugins = raw.Plugins
	}
	for _, p := range plugins {
		if p.Type == "" {
			f.Err = "a plugin has no type"
			if !list {
				f.Err = "no type"
			}
			return f
		}
		f.Types = append(f.Types, p.Type)
		if p.Type == PluginType && f.Socket == "" {
			f.Socket = p.Socket
		}
	}
	if p := plugins[0]; p.Type == "multus" || p.Type == "multus-shim" {
		m := &Multus{Thick: p.Type == "multus-shim", ClusterNetwork: p.ClusterNetwork, ConfDir: p.ConfDir}
		if len(p.Delegates) > 0 {
			// A delegate is a conflist when it has "plugins", else one plugin.
			var probe struct {
				Plugins json.RawMessage `json:"plugins"`
			}
			_ = json.Unmarshal(p.Delegates[0], &probe)
			m.Delegate = parseBytes("delegates[0]", p.Delegates[0], len(probe.Plugins) > 0)
		}
		f.Multus = m
	}
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

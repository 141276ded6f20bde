package cniconf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/fsnotify/fsnotify"

	"github.com/ovnhost/ovnhost/cni/protocol"
)

// Installer keeps the plugin binary and the conflist in place: written
// atomically (temporary file, then rename) at start, and restored when
// something removes or changes them while the daemon runs.
type Installer struct {
	binDir, confDir, socket string
	version                 string // the conflist's cniVersion
	src                     string
	log                     *slog.Logger
}

// InstallOptions say what the installer writes where.
type InstallOptions struct {
	BinDir  string // where the plugin is installed (default /opt/cni/bin)
	ConfDir string // where the conflist is installed (default /etc/cni/net.d)
	Socket  string // the CNI server's socket, in the conflist
	// Version is the conflist's cniVersion (default protocol.DefaultConfVersion).
	Version string
	// PluginSource is the ovnhost-cni binary to install (default: next to
	// the running executable, else in /usr/libexec/ovnhost).
	PluginSource string
	Log          *slog.Logger
}

// NewInstaller is the installer of o.
func NewInstaller(o InstallOptions) *Installer {
	src, log := o.PluginSource, o.Log
	if src == "" {
		src = defaultPluginSource()
	}
	binDir, confDir := o.BinDir, o.ConfDir
	if binDir == "" {
		binDir = "/opt/cni/bin"
	}
	if confDir == "" {
		confDir = "/etc/cni/net.d"
	}
	v := o.Version
	if v == "" {
		v = protocol.DefaultConfVersion
	}
	return &Installer{binDir: binDir, confDir: confDir, socket: o.Socket, version: v, src: src, log: log}
}

// Install writes the plugin and the conflist and starts watching their
// directories; keep restores them (and follows portmap, and reports other
// configurations) until its ctx ends: run it in the background.
func (in *Installer) Install() (keep func(ctx context.Context), err error) {
	if err := in.installAll(); err != nil {
		return nil, err
	}
	w, err := in.startWatch()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) { in.watch(ctx, w) }, nil
}

// defaultPluginSource looks for ovnhost-cni next to the running executable,
// then in /usr/libexec/ovnhost.
func defaultPluginSource() string {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), PluginType)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return filepath.Join("/usr/libexec/ovnhost", PluginType)
}

// PortmapType is the CNI plugin (containernetworking-plugins' portmap)
// chained after ovnhost-cni to implement pods' hostPorts.
const PortmapType = "portmap"

// Render returns the network configuration ovnhost installs, with
// cniVersion version (node setting cni-version; "" is
// protocol.DefaultConfVersion). The runtime calls the plugin in that
// version; the plugin answers any. With portmap, portmap is chained after
// ovnhost-cni: the runtime passes ovnhost-cni's result (the pod's
// addresses on its sandbox interface) to portmap as prevResult, and the
// pod's port mappings (Kubernetes hostPort) through the portMappings
// capability; portmap DNATs hostPort on the node to the pod, and removes
// its rules on DEL. The content depends only on the arguments, so the
// installer's restore logic always wants the same bytes.
func Render(socket, version string, portmap bool) []byte {
	if version == "" {
		version = protocol.DefaultConfVersion
	}
	plugins := []map[string]any{{
		"type":   PluginType,
		"socket": socket,
	}}
	if portmap {
		plugins = append(plugins, map[string]any{
			"type":         PortmapType,
			"capabilities": map[string]bool{"portMappings": true},
			"snat":         true,
		})
	}
	conf := map[string]any{
		"cniVersion": version,
		"name":       "ovnhost",
		"plugins":    plugins,
	}
	b, _ := json.MarshalIndent(conf, "", "  ")
	return append(b, '\n')
}

func (in *Installer) installAll() error {
	bin, err := os.ReadFile(in.src)
	if err != nil {
		return fmt.Errorf("CNI plugin binary to install: %w (build it with `make build`, or place ovnhost-cni next to ovnhost)", err)
	}
	binPath := filepath.Join(in.binDir, PluginType)
	changed, err := writeAtomic(binPath, bin, 0o755)
	if err != nil {
		return fmt.Errorf("install the CNI plugin into %s (setting cni-bin-dir): %w", in.binDir, err)
	}
	if changed {
		in.log.Info("installed CNI plugin", "path", binPath)
	}
	if err := in.installAlias(); err != nil {
		return fmt.Errorf("install the CNI plugin's name %s into %s (setting cni-bin-dir): %w", KubeOVNType, in.binDir, err)
	}
	confPath := filepath.Join(in.confDir, Conflist)
	portmap := in.portmapUsable()
	changed, err = writeAtomic(confPath, Render(in.socket, in.version, portmap), 0o644)
	if err != nil {
		return fmt.Errorf("install the CNI configuration into %s (setting cni-conf-dir): %w", in.confDir, err)
	}
	if changed {
		in.log.Info("installed CNI configuration", "path", confPath, "portmap", portmap)
	}
	in.report()
	return nil
}

// portmapUsable reports whether the CNI bin dir has a portmap plugin that
// speaks the conflist's cniVersion (Debian 12's containernetworking-plugins
// 1.1.1 stops at 1.0.0): asked the way libcni asks, CNI_COMMAND=VERSION.
// Without one, the conflist has no portmap and hostPorts are not mapped.
func (in *Installer) portmapUsable() bool {
	path := filepath.Join(in.binDir, PortmapType)
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	info, err := invoke.GetVersionInfo(ctx, path, nil)
	if err != nil {
		in.warn("CNI plugin portmap does not answer VERSION: hostPorts are not mapped", "path", path, "err", err)
		return false
	}
	supported := info.SupportedVersions()
	if !slices.Contains(supported, in.version) {
		in.warn("CNI plugin portmap does not support the conflist's cniVersion: hostPorts are not mapped",
			"path", path, "cniVersion", in.version, "supported", supported)
		return false
	}
	return true
}

// portmapSettle is how long the portmap binary (or another plugin's
// configuration file) must stay unchanged before the installer probes
// (judges) it.
const portmapSettle = 300 * time.Millisecond

func (in *Installer) warn(msg string, args ...any) {
	if in.log != nil {
		in.log.Warn(msg, args...)
	}
}

// report logs what the container runtime will see in the conf dir.
func (in *Installer) report() {
	r, err := Scan(in.confDir, Conflist)
	if err != nil {
		in.log.Warn("cannot analyze the CNI configuration directory", "dir", in.confDir, "err", err)
		return
	}
	switch {
	case r.Status != Pass:
		in.log.Warn("conflicting CNI configuration", "dir", in.confDir, "status", r.Status, "found", r.Found, "fix", r.Fix)
	case len(r.Outranking) > 0:
		// Multus is read first and delegates the pods' default network to
		// ovnhost: the way a Multus node is meant to be.
		in.log.Info("CNI configuration", "dir", in.confDir, "found", r.Found)
	}
}

// writeAtomic writes data to path through a temporary file in the same
// directory and a rename, unless the file already has that content and
// mode. It reports whether it wrote.
func writeAtomic(path string, data []byte, mode os.FileMode) (bool, error) {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		if st, err := os.Stat(path); err == nil && st.Mode().Perm() == mode {
			return false, nil
		}
		return true, os.Chmod(path, mode)
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return false, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return false, err
	}
	if err := f.Close(); err != nil {
		return false, err
	}
	return true, os.Rename(tmp, path)
}

// KubeOVNType is Kube-OVN's CNI plugin name: existing
// NetworkAttachmentDefinitions of attachment networks say "type":
// "kube-ovn", and Multus executes that name from the CNI bin dir. The
// installer makes it a symbolic link to ovnhost-cni, so those NADs work
// unchanged (the plugin ignores Kube-OVN's server_socket and reaches the
// ovnhost daemon's socket).
const KubeOVNType = "kube-ovn"

// IsOurAlias: path is the link installAlias makes (ovnhost-cni in the
// same directory); a file of that name that is anything else is not ours.
func IsOurAlias(path string) bool {
	target, err := os.Readlink(path)
	return err == nil && target == PluginType
}

// installAlias makes KubeOVNType a link to the plugin, unless a file of
// that name that is not ours is there: Kube-OVN's own plugin (a node
// migrating from Kube-OVN) is left alone, with a warning naming the fix,
// since removing another product's binary is not the installer's call.
func (in *Installer) installAlias() error {
	path := filepath.Join(in.binDir, KubeOVNType)
	if IsOurAlias(path) {
		return nil
	}
	if _, err := os.Lstat(path); err == nil {
		in.warn("a CNI plugin named kube-ovn that is not ovnhost's is in the CNI bin dir: NetworkAttachmentDefinitions with \"type\": \"kube-ovn\" run it, not ovnhost; "+
			"remove it (Kube-OVN's plugin needs kube-ovn-cni, which a node running ovnhost does not run) and ovnhost links its own there, or write \"type\": \"ovnhost-cni\" in the NADs",
			"path", path)
		return nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	tmp := filepath.Join(in.binDir, "."+KubeOVNType+".tmp-link")
	_ = os.Remove(tmp)
	if err := os.Symlink(PluginType, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	in.log.Info("installed the CNI plugin under Kube-OVN's name too (NetworkAttachmentDefinitions of type kube-ovn)", "path", path, "target", PluginType)
	return nil
}

// startWatch sets up the watches before Start returns, so that no change
// made right after start is missed.
func (in *Installer) startWatch() (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch the CNI directories: %w", err)
	}
	for _, d := range []string{in.confDir, in.binDir} {
		if err := w.Add(d); err != nil {
			w.Close()
			return nil, fmt.Errorf("watch %s: %w", d, err)
		}
	}
	return w, nil
}

// watch restores the binary and conflist when they are removed or changed,
// and reports configurations that appear and outrank ours.
func (in *Installer) watch(ctx context.Context, w *fsnotify.Watcher) {
	defer w.Close()
	ours := map[string]bool{
		filepath.Join(in.confDir, Conflist):  true,
		filepath.Join(in.binDir, PluginType): true,
		// Removed or replaced, put back; a foreign file there is reported.
		filepath.Join(in.binDir, KubeOVNType): true,
	}
	// portmap is probed once its events have settled (a copy is a Create
	// and many Writes); so are other configurations judged: Multus writing
	// its 00-multus.conf is a Create of an empty file first, which is not
	// the conflict it would look like.
	var settle, reportSettle <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-reportSettle:
			reportSettle = nil
			in.report()
		case <-settle:
			settle = nil
			// portmap installed, upgraded or removed: chain it or not.
			if err := in.installAll(); err != nil {
				in.log.Error("cannot update the CNI configuration for portmap", "err", err)
			}
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			in.log.Warn("CNI directory watch", "err", err)
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			base := filepath.Base(ev.Name)
			switch {
			case ours[ev.Name] && ev.Op&(fsnotify.Remove|fsnotify.Rename|fsnotify.Write|fsnotify.Chmod) != 0:
				if err := in.installAll(); err != nil {
					in.log.Error("cannot restore the CNI installation", "err", err)
				} else {
					in.log.Warn("CNI installation was changed by someone else; restored", "path", ev.Name, "op", ev.Op.String())
				}
			case ev.Name == filepath.Join(in.binDir, PortmapType):
				settle = time.After(portmapSettle)
			case filepath.Dir(ev.Name) == in.confDir && IsConfFile(base) && base != Conflist && ev.Op&(fsnotify.Create|fsnotify.Write|fsnotify.Rename|fsnotify.Remove) != 0:
				reportSettle = time.After(portmapSettle)
			}
		}
	}
}

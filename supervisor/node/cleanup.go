package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nldump"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
)

// CleanupOptions say what `ovnhost cleanup` looks for: the node's files
// and the devices and rules its features create.
type CleanupOptions struct {
	Layout layout.Layout
	CNI    nodeconfig.CNI
	// Links name the OVS devices of the node's features (br-egw,
	// br-external), removed with the node's own.
	Links []string
	// BeforeLinks gives back, before the devices go, what the features
	// moved onto them (an underlay NIC's configuration, from its
	// journal); it returns what it did.
	BeforeLinks func() ([]string, error)
	// AfterLinks removes what the features leave that is not a device (a
	// centralized gateway's policy rules), after the devices; it returns
	// what it removed.
	AfterLinks func() ([]string, error)
	// Purge also removes the state ovnhost created (databases,
	// system-id, logs).
	Purge bool
}

// Cleanup removes what ovnhost put on this host, for an uninstall or a
// switch to another CNI: the installed plugin and conflist (only if they
// are ours), the CNI socket, the datapath devices a killed ovs-vswitchd can
// leave (br-int, ovs-netdev, ovn0, the mirror port, pods' host veths, the
// features' bridges and a centralized gateway's policy rules), and
// with purge the state it created (databases, system-id, logs). It refuses
// while any daemon of this node still runs. It returns what it removed.
func Cleanup(o CleanupOptions) ([]string, error) {
	l := o.Layout
	pidfiles := []struct{ prog, pidfile string }{
		{"ovsdb-server", l.OVSDBPid}, {"ovs-vswitchd", l.VSwitchdPid}, {"ovn-controller", l.ControllerPid},
		{"ovsdb-server", l.NBPid}, {"ovsdb-server", l.SBPid}, {"ovn-northd", l.NorthdPid},
	}
	for _, p := range pidfiles {
		if pid, ok := daemon.LivePid(p.pidfile, p.prog); ok {
			return nil, fmt.Errorf("%s is still running as pid %d (%s): stop ovnhost first (systemctl stop ovnhost, or SIGTERM); "+
				"if no ovnhost runs, it outlived a crash (adopt-children): `ovnhost run` takes it over, or kill %d", p.prog, pid, p.pidfile, pid)
		}
	}
	var removed []string
	var errs []error
	rm := func(path string) {
		err := os.Remove(path)
		switch {
		case err == nil:
			removed = append(removed, path)
		case !errors.Is(err, os.ErrNotExist):
			errs = append(errs, err)
		}
	}
	plugin := filepath.Join(o.CNI.BinDir, cniconf.PluginType)
	if isOurPlugin(plugin) {
		rm(plugin)
	}
	if alias := filepath.Join(o.CNI.BinDir, cniconf.KubeOVNType); cniconf.IsOurAlias(alias) {
		rm(alias)
	}
	conflist := filepath.Join(o.CNI.ConfDir, cniconf.Conflist)
	if isOurConflist(conflist) {
		rm(conflist)
	}
	rm(o.CNI.Socket)
	for _, p := range pidfiles {
		rm(daemon.OutputFIFO(p.pidfile))
	}

	if o.BeforeLinks != nil {
		done, err := o.BeforeLinks()
		removed = append(removed, done...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		errs = append(errs, err)
	}
	for _, link := range links {
		name := link.Attrs().Name
		ours := (link.Type() == "tuntap" || link.Type() == "openvswitch") &&
			(name == "br-int" || name == "ovs-netdev" || name == "ovn0" || slices.Contains(o.Links, name) || name == o.CNI.MirrorOutput)
		// Host ends of pod veths, named by the CNI server "ovh" + 11 hex.
		ours = ours || (link.Type() == "veth" && len(name) == 14 && strings.HasPrefix(name, "ovh"))
		if !ours {
			continue
		}
		if err := netlink.LinkDel(link); err != nil {
			errs = append(errs, fmt.Errorf("removing %s: %w", name, err))
			continue
		}
		removed = append(removed, "link "+name)
	}

	// A centralized gateway's return path: rules are not bound to a
	// link, so they outlive br-egw.
	if o.AfterLinks != nil {
		gone, err := o.AfterLinks()
		removed = append(removed, gone...)
		if err != nil {
			errs = append(errs, err)
		}
	}

	if o.Purge {
		files := []string{l.ConfDB, layout.LockFile(l.ConfDB), l.SystemIDFile, l.NBDB, layout.LockFile(l.NBDB), l.SBDB, layout.LockFile(l.SBDB)}
		backups, _ := filepath.Glob(l.ConfDB + ".backup*")
		files = append(files, backups...)
		files = append(files, l.LogFiles()...)
		for _, f := range files {
			rm(f)
		}
	}
	return removed, errors.Join(errs...)
}

// isOurPlugin: the file carries the plugin's about line (the binary is
// ours, not a same-named one from elsewhere).
func isOurPlugin(path string) bool {
	raw, err := os.ReadFile(path)
	return err == nil && strings.Contains(string(raw), "ovnhost-cni")
}

func isOurConflist(path string) bool {
	raw, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	var c struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if json.Unmarshal(raw, &c) != nil {
		return false
	}
	for _, p := range c.Plugins {
		if p.Type == cniconf.PluginType {
			return true
		}
	}
	return false
}

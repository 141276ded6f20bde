package config

import (
	"path/filepath"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// HostSettings are the settings the host checks read (internal/hostcheck):
// the daemon's preflight and netctl doctor judge the same values.
func (c *Config) HostSettings() nodeconfig.HostSettings {
	return nodeconfig.HostSettings{
		Datapath:         c.Datapath,
		DisableModules:   c.DisableMod,
		TunnelType:       c.TunnelType,
		Iface:            c.Iface,
		EncapIP:          c.EncapIP,
		ServiceCIDRs:     c.ServiceCIDRs,
		UserspaceTunnel:  c.UserspaceTunnel,
		ProviderNetworks: c.ProviderNetworks,
		AllInOne:         !c.Remote(),
		MLockAll:         c.MLockAll,
		HealthAddr:       c.HealthAddr,
		BinDirs:          c.BinDirs,
		Paths:            c.Paths,
		Dirs:             c.writableDirs(),
		CNIBinDir:        c.CNIBinDir,
		CNIConfDir:       c.CNIConfDir,
		CNISocket:        c.CNISocket,
		EnableSSL:        c.EnableSSL,
		SSLKey:           c.SSLKey,
		SSLCert:          c.SSLCert,
		SSLCACert:        c.SSLCACert,
		RunOwner:         c.RunOwner.Spec,
	}
}

// writableDirs lists every directory of c that must be writable, with the
// setting that moves it and its default.
func (c *Config) writableDirs() []nodeconfig.WritableDir {
	var ps []nodeconfig.WritableDir
	for _, d := range layout.DirSettings {
		ps = append(ps, nodeconfig.WritableDir{Setting: d.Name, Env: d.Env, Path: *d.Dir(&c.Paths), Suggest: d.Default})
	}
	for _, s := range []struct{ name, dir string }{{"cni-bin-dir", c.CNIBinDir}, {"cni-conf-dir", c.CNIConfDir}, {"cni-socket", c.CNISocket}} {
		d := Describe(s.name)
		path, suggest := s.dir, d.Default
		if s.name == "cni-socket" {
			// The socket's directory is what must be writable.
			path, suggest = filepath.Dir(s.dir), filepath.Dir(d.Default)
			if s.dir == "" {
				path = ""
			}
		}
		ps = append(ps, nodeconfig.WritableDir{Setting: d.Name, Env: d.Env, Path: path, Suggest: suggest})
	}
	var out []nodeconfig.WritableDir
	for _, s := range ps {
		if s.Path != "" {
			out = append(out, s)
		}
	}
	return out
}

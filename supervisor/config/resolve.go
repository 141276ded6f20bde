package config

import (
	"crypto/tls"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Resolve is the node's configuration once the host has been looked at:
// the settings and preflight's findings, decided once for every subsystem.
// tlsConfig is the client TLS of ssl: remotes (nil without ENABLE_SSL).
func (c *Config) Resolve(found nodeconfig.Findings, tlsConfig *tls.Config) (*nodeconfig.NodeConfig, error) {
	dp, err := nodeconfig.PickDatapath(c.Datapath, found.KernelDatapath)
	if err != nil {
		return nil, err
	}
	tt := c.TunnelType
	if tt == "" {
		tt = nodeconfig.DefaultTunnelType
	}
	encap := found.EncapIP
	if encap == "" {
		// A single node still needs an endpoint; preflight has warned.
		encap = "127.0.0.1"
	}
	remote := func(ep string) nodeconfig.Remote {
		r := nodeconfig.Remote{Endpoint: ep}
		if c.EnableSSL {
			r.TLS = tlsConfig
		}
		return r
	}
	return &nodeconfig.NodeConfig{
		Name:            c.NodeName,
		AllInOne:        !c.Remote(),
		Datapath:        dp,
		TunnelType:      tt,
		TunnelIface:     found.TunnelIface,
		EncapIP:         encap,
		UnderlayMTU:     found.UnderlayMTU,
		PodMTU:          nodeconfig.PodMTU(c.PodMTU, found.UnderlayMTU, tt),
		ServiceCIDRs:    c.ServiceCIDRs,
		UserspaceTunnel: c.UserspaceTunnel && dp.IsUserspace() && found.TunnelIface != "" && found.TunnelIface != nodeconfig.PhysBridge,
		NB:              remote(c.NBRemote),
		SB:              remote(c.SBRemote),
		Layout:          layout.New(c.Paths),
	}, nil
}

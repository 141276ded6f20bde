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
		PodMTU:          nodeconfig.PodMTU(c.PodMTU, found.UnderlayMTU, tt, nodeconfig.IsIPv6(encap)),
		ServiceCIDRs:    c.ServiceCIDRs,
		StandaloneCIDRs: c.StandaloneCIDRs, StandaloneJoinCIDRs: c.StandaloneJoinCIDRs,
		UserspaceTunnel:  c.UserspaceTunnel && dp.IsUserspace() && found.TunnelIface != "" && found.TunnelIface != nodeconfig.PhysBridge,
		ProviderNetworks: c.ProviderNetworks,
		NB:               remote(c.NBRemote),
		SB:               remote(c.SBRemote),
		Layout:           layout.New(c.Paths),
		Daemons:          c.DaemonSettings(),
		NATBackend:       nodeconfig.NATBackend(c.NATBackend),
		HostGuardOff:     c.HostGuard == "off",
		CNI:              c.CNISettings(),
		Kubernetes:       nodeconfig.Kubernetes{Kubeconfig: c.Kubeconfig},
		NodeAPI:          nodeconfig.NodeAPI{Addr: c.NodeAPIAddr, CertFile: c.NodeAPICert, KeyFile: c.NodeAPIKey},
		Host:             c.HostSettings(),
	}, nil
}

// DaemonSettings is how the daemons are run: the NodeConfig's section,
// also the central's (which needs no host findings).
func (c *Config) DaemonSettings() nodeconfig.Daemons {
	return nodeconfig.Daemons{
		BinDirs: c.BinDirs, OVSSchema: c.OVSSchema, OVNSchema: c.OVNSchema,
		StartTimeout: c.StartTimeout, StopTimeout: c.StopTimeout,
		ProbeInterval: c.ChildProbeInterval, ProbeMisses: c.ChildProbeMisses,
		AdoptChildren: c.AdoptChildren, KeepDatapath: c.KeepDatapath, RunOwner: c.RunOwner,
		LogFileMaxSize: c.LogFileMaxSize, LogRotateInterval: c.LogRotateInterval,
		TLS:      nodeconfig.TLSFiles{Enabled: c.EnableSSL, Key: c.SSLKey, Cert: c.SSLCert, CACert: c.SSLCACert},
		MLockAll: c.MLockAll, HWOffload: c.HWOffload,
		RemoteProbeInterval: c.ProbeInterval, OpenflowProbeInterval: c.OpenflowProbeInterval,
		OfctrlWaitBeforeClear: c.OfctrlWaitBeforeClear,
	}
}

// CNISettings is the CNI server's section of the NodeConfig (also what
// `ovnhost cleanup` removes).
func (c *Config) CNISettings() nodeconfig.CNI {
	return nodeconfig.CNI{
		Socket: c.CNISocket, SocketGroup: c.CNISocketGroup, BinDir: c.CNIBinDir, ConfDir: c.CNIConfDir,
		ConfVersion: c.CNIVersion, MirrorOutput: c.MirrorOutput, ControllerFieldManagers: c.ControllerFieldManagers,
	}
}

package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/node"
)

// cniPossible says whether the CNI server has a source of pod addresses:
// Kubernetes (kubeconfig or in-cluster), or the NB database to allocate
// from itself (standalone). A remote node with neither runs without it.
func cniPossible(cfg *config.Config, environ map[string]string) bool {
	return cfg.Kubeconfig != "" || environ["KUBERNETES_SERVICE_HOST"] != "" || cfg.NBRemote != ""
}

// cniUnit builds the CNI server when it starts: it needs the long-lived
// conf.db connection, which exists only once ovsdb-server is ready.
type cniUnit struct {
	n    *node.Node
	opts server.Options
	reg  prometheus.Registerer
	srv  *server.Server
}

func newCNIUnit(n *node.Node, cfg *config.Config, nc *nodeconfig.NodeConfig, log *slog.Logger, reg prometheus.Registerer) *cniUnit {
	return &cniUnit{n: n, reg: reg, opts: server.Options{
		Node: nc, Log: log,
		Socket: cfg.CNISocket, SocketGroup: cfg.CNISocketGroup,
		BinDir: cfg.CNIBinDir, ConfDir: cfg.CNIConfDir, ConfVersion: cfg.CNIVersion,
		MirrorOutput: cfg.MirrorOutput, Kubeconfig: cfg.Kubeconfig,
		ControllerFieldManagers: cfg.ControllerFieldManagers,
	}}
}

func (u *cniUnit) Name() string { return "cni-server" }

// Awaits is what /readyz says while the unit starts.
func (u *cniUnit) Awaits() string { return "the CNI socket " + u.opts.Socket }

func (u *cniUnit) Start(ctx context.Context) error {
	o := u.opts
	o.OVS = u.n.OVS().Client
	s, err := server.New(o, server.WithRegisterer(u.reg))
	if err != nil {
		return err
	}
	u.srv = s
	return s.Start(ctx)
}

func (u *cniUnit) Stop(ctx context.Context) error {
	if u.srv == nil {
		return nil
	}
	return u.srv.Stop(ctx)
}

package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/supervisor/config"
	"github.com/ovnhost/ovnhost/supervisor/health"
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
	n        *node.Node
	cfg      *config.Config
	log      *slog.Logger
	reg      prometheus.Registerer
	health   *health.Reporter
	datapath string
	srv      *server.Server
}

func newCNIUnit(n *node.Node, cfg *config.Config, log *slog.Logger, h *health.Reporter, datapath string) *cniUnit {
	// Registered now, so READY=1 also waits for the CNI socket.
	h.Register("cni-server")
	return &cniUnit{n: n, cfg: cfg, log: log, reg: h.Registry(), health: h, datapath: datapath}
}

func (u *cniUnit) Name() string { return "cni-server" }

func (u *cniUnit) Start(ctx context.Context) error {
	t0 := time.Now()
	u.health.Waiting("cni-server", "the CNI socket "+u.cfg.CNISocket)
	s, err := server.New(u.cfg, u.n.OVS().Client, u.log, server.WithRegisterer(u.reg), server.WithDatapathType(u.datapath))
	if err != nil {
		return err
	}
	u.srv = s
	if err := s.Start(ctx); err != nil {
		return err
	}
	u.health.Ready("cni-server", time.Since(t0), time.Since(t0))
	return nil
}

func (u *cniUnit) Stop(ctx context.Context) error {
	if u.srv == nil {
		return nil
	}
	return u.srv.Stop(ctx)
}

package agent

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/egress"
	"github.com/ovnhost/ovnhost/supervisor/node"
)

// The CNI server's wiring, in one place: how it is built, what it is
// given (the NodeConfig, conf.db, the Kubernetes decision) and where its
// egress plan goes.

// cniUnit builds the CNI server when it starts: it needs the long-lived
// conf.db connection, which exists only once ovsdb-server is ready.
type cniUnit struct {
	n    *node.Node
	opts server.Options
	// kube is the node's client set; nil: a standalone node, pods are
	// allocated from the NB database.
	kube *kubeClients
	reg  prometheus.Registerer
	srv  *server.Server
}

func newCNIUnit(n *node.Node, nc *nodeconfig.NodeConfig, kube *kubeClients, log *slog.Logger, reg prometheus.Registerer, apply func(context.Context, egress.Plan) error, underlayMTU func(string) int) *cniUnit {
	c := nc.CNI
	return &cniUnit{n: n, reg: reg, kube: kube, opts: server.Options{
		UnderlayMTU: underlayMTU,
		InstallHeld: n.ControllerHeld,
		Node:        nc, Log: log,
		Socket: c.Socket, SocketGroup: c.SocketGroup,
		BinDir: c.BinDir, ConfDir: c.ConfDir, ConfVersion: c.ConfVersion,
		MirrorOutput:            c.MirrorOutput,
		ControllerFieldManagers: c.ControllerFieldManagers,
		Egress:                  func(ctx context.Context, p podsource.EgressPlan) error { return apply(ctx, egressPlan(p)) },
	}}
}

// egressPlan is the pod source's egress plan as egress takes it.
func egressPlan(p podsource.EgressPlan) egress.Plan {
	out := egress.Plan{NATOutgoing: p.NATOutgoing, Cluster: p.Cluster}
	for _, g := range p.Gateways {
		out.Gateways = append(out.Gateways, egress.Gateway{Subnet: g.Subnet, CIDRs: g.CIDRs, Transit: g.Transit, NATOutgoing: g.NATOutgoing, EgressIP: g.EgressIP})
	}
	return out
}

func (u *cniUnit) Name() string { return "cni-server" }

// Awaits is what /readyz says while the unit starts.
func (u *cniUnit) Awaits() string { return "the CNI socket " + u.opts.Socket }

func (u *cniUnit) Start(ctx context.Context) error {
	o := u.opts
	o.OVS = u.n.OVS().Client
	opts := []server.Option{server.WithRegisterer(u.reg)}
	if u.kube == nil {
		opts = append(opts, server.WithStandalone())
	} else {
		opts = append(opts, server.WithKubeClients(u.kube.client, u.kube.dynamic, u.kube.subnets, u.kube.self))
	}
	s, err := server.New(o, opts...)
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

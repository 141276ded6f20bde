package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
	"github.com/ovnhost/ovnhost/supervisor/node"
)

// egressUnit owns the host side of pod egress: the masquerade rules for
// natOutgoing subnets (kept in place against flushes by other agents) and
// IPv4 forwarding from ovn0 to the uplink. The CNI server tells it what to
// masquerade once the node port is up.
type egressUnit struct {
	backend      string
	keepDatapath bool
	log          *slog.Logger
	// For centralized gateways (gateway.go): the node (br-egw), its
	// Kubernetes identity and the SB database.
	n          *node.Node
	nodeName   string
	kubeconfig string
	sb         nodeconfig.Remote

	mu        sync.Mutex
	mgr       *hostnat.Manager
	cancel    context.CancelFunc
	done      chan struct{}
	agent     chan struct{}
	gwApplied bool // br-egw and its return routes are in place
}

func (u *egressUnit) Name() string { return "host-nat" }

func (u *egressUnit) Start(ctx context.Context) error {
	m, err := hostnat.New(u.backend, u.log.With("unit", "host-nat"))
	if err != nil {
		return fmt.Errorf("host NAT for pod egress: %w; choose a backend with --nat-backend", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	u.mu.Lock()
	u.mgr, u.cancel, u.done = m, cancel, make(chan struct{})
	u.mu.Unlock()
	go func() { defer close(u.done); _ = m.Run(rctx) }()
	if u.n != nil {
		agent := make(chan struct{})
		u.mu.Lock()
		u.agent = agent
		u.mu.Unlock()
		go func() { defer close(agent); u.runGatewayAgent(rctx) }()
	}
	u.log.Info("host NAT ready", "backend", m.Backend())
	return nil
}

// apply is the CNI server's Egress hook.
func (u *egressUnit) apply(ctx context.Context, plan server.EgressPlan) error {
	u.mu.Lock()
	m := u.mgr
	u.mu.Unlock()
	if m == nil {
		return errors.New("host NAT is not running")
	}
	if len(plan.NATOutgoing) > 0 {
		// Pod traffic arrives on ovn0 and leaves by the uplink.
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable IPv4 forwarding for pod egress: %w", err)
		}
	}
	if err := m.Apply(ctx, hostnat.Rules{NATOutgoing: plan.NATOutgoing, Exclude: plan.Cluster}); err != nil {
		return err
	}
	if err := u.applyGateways(ctx, plan); err != nil {
		return err
	}
	u.log.Info("pod egress NAT applied", "masquerade_from", plan.NATOutgoing, "except_to", plan.Cluster)
	return nil
}

func (u *egressUnit) Stop(ctx context.Context) error {
	u.mu.Lock()
	m, cancel, done, agent := u.mgr, u.cancel, u.done, u.agent
	u.mgr = nil
	u.mu.Unlock()
	if m == nil {
		return nil
	}
	cancel()
	<-done
	if agent != nil {
		<-agent
	}
	defer m.Close()
	if u.keepDatapath || (u.n != nil && u.n.KeepingDatapath()) {
		// An upgrade: pods keep leaving while the next ovnhost starts.
		return nil
	}
	var errs []error
	if u.n != nil {
		_, err := node.RemoveGatewayReturnRoutes()
		errs = append(errs, err, u.n.RemoveGatewayBridge(ctx, ovnnet.GatewayNetwork))
	}
	return errors.Join(append(errs, m.Remove(ctx))...)
}

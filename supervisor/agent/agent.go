// Package agent is the node daemon's one assembly. Given the resolved
// NodeConfig it builds the node's Kubernetes client set (none on a
// standalone node: the one place that decides), the node's daemons
// (supervisor/node) and its features as lifecycle units after them, in
// order: underlay bridges (supervisor/underlay: --provider-networks, or on
// a Kubernetes node the ProviderNetwork objects, reported on its Node),
// host NAT and centralized gateways (supervisor/egress), external
// gateways (supervisor/extgw, Kubernetes only), the CNI server; it wires
// them to each other and runs start, stop and stop-for-upgrade. Features
// are given what they need; none builds its own clients or reads the
// settings table. (Antrea's agent assembly, Cilium's ordered cells.)
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/egress"
	"github.com/ovnhost/ovnhost/supervisor/extgw"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/lifecycle"
	"github.com/ovnhost/ovnhost/supervisor/node"
	"github.com/ovnhost/ovnhost/supervisor/underlay"
)

// Options are the agent's collaborators.
type Options struct {
	Log    *slog.Logger
	Health *health.Reporter
	// TLS are the SSL files behind the NodeConfig's remotes, re-read on
	// rotation (nil without ENABLE_SSL).
	TLS *ovsdbconn.TLSFiles
	// ExplainExec turns a failed exec into its cause (the host checks');
	// nil leaves it as is.
	ExplainExec func(binary string, err error) error
	// NodeAPI starts the node API server with the node's Kubernetes
	// client (nil on a standalone node) and returns its stop; it logs a
	// failure itself. Nil: supervisor/nodeapi on NodeConfig.NodeAPI (tests
	// replace it).
	NodeAPI func(ctx context.Context, kube kubernetes.Interface) (stop func(), err error)
	// OVSMetrics adds the OVS/OVN internals to the node's metrics. Nil:
	// supervisor/nodeapi's collector.
	OVSMetrics func()
}

// ErrNodeAPI wraps a failure to start the node API (already logged with
// its fix).
var ErrNodeAPI = errors.New("node API")

// Agent is the node daemon, assembled.
type Agent struct {
	nc   *nodeconfig.NodeConfig
	o    Options
	log  *slog.Logger
	kube *kubeClients // nil: a standalone node
	node *node.Node
	// features wired, for the assembly's tests.
	underlay *underlay.Unit
	egress   *egress.Unit
	extgw    *extgw.Unit
	cni      *cniUnit

	cancelAPI context.CancelFunc
	stopAPI   func()
}

// New assembles the node from its resolved configuration; nothing is
// started.
func New(nc *nodeconfig.NodeConfig, o Options) (*Agent, error) {
	kube, err := newKubeClients(nc.Kubernetes, nc.Name)
	if err != nil {
		return nil, fmt.Errorf("Kubernetes client: %w", err)
	}
	n, err := node.New(nc, node.Options{Log: o.Log, Health: o.Health, TLS: o.TLS, ExplainExec: o.ExplainExec})
	if err != nil {
		return nil, err
	}
	a := &Agent{nc: nc, o: o, log: o.Log, kube: kube, node: n, stopAPI: func() {}}
	a.wire()
	return a, nil
}

// cniPossible says whether the CNI server has a source of pod addresses:
// Kubernetes, or the NB database to allocate from itself (standalone). A
// remote node with neither runs without it.
func (a *Agent) cniPossible() bool { return a.kube != nil || a.nc.NB.Endpoint != "" }

// wire adds the features, started in this order after ovn-controller is
// ready and stopped before it.
func (a *Agent) wire() {
	if a.kube != nil {
		a.node.AddUnit(&kubeInformers{facs: []informerFactory{a.kube.kubeovn, a.kube.selfFactory}})
	}
	// First: pods of underlay Subnets need the bridges. After
	// ovn-controller, which follows ovn-bridge-mappings as it changes and,
	// stopped after this unit, removes its patch ports while the mapping
	// goes. On every node, also without networks: it gives back the
	// bridges an earlier run left that are no longer wanted.
	a.underlay = underlay.New(a.underlayOptions())
	a.node.AddUnit(a.underlay)
	if !a.cniPossible() {
		a.log.Warn("CNI server disabled: no Kubernetes configuration and no northbound database to allocate pod addresses from", "fix", "set KUBECONFIG (or run in-cluster), or OVN_DB_IPS for standalone allocation")
		return
	}
	eo := egress.Options{Config: a.nc, Node: a.node, Log: a.log, GuardState: a.guardState}
	if a.kube != nil {
		eo.Kube, eo.Dynamic, eo.Subnets = a.kube.client, a.kube.dynamic, a.kube.subnets
	}
	a.egress = egress.New(eo)
	a.node.AddUnit(a.egress)
	if reg := a.o.Health.Registry(); reg != nil {
		eg := a.egress
		reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ovnhost_guard_dropped_packets_total",
			Help: "Packets from pods to the node's OVN, node API or tunnel ports dropped by the host firewall guard (inet ovnhost-guard / OVNHOST-GUARD)."},
			func() float64 { n, _ := eg.GuardDrops(); return float64(n) }))
	}
	if a.kube != nil { // EIP/SNAT come from a ConfigMap: Kubernetes mode only
		a.extgw = extgw.New(extgw.Options{Config: a.nc, Node: a.node, Kube: a.kube.client, ConfigMaps: a.kube.configMaps, Log: a.log})
		a.node.AddUnit(a.extgw)
	}
	a.cni = newCNIUnit(a.node, a.nc, a.kube, a.log, a.o.Health.Registry(), a.egress.Apply, a.underlay.MTU)
	a.node.AddUnit(a.cni)
}

// underlayOptions: the fixed --provider-networks, or on a Kubernetes node
// the ProviderNetwork objects that select it; either way, on a Kubernetes
// node, each network's state in the Node's labels. When both are there the
// setting wins and the objects are ignored (a warning says so): the
// setting is this host's own, explicit and checked before anything
// started, and a node refusing to start over objects it may not even be
// selected by would take its pods down.
func (a *Agent) underlayOptions() underlay.Options {
	o := underlay.Options{Networks: a.nc.ProviderNetworks, Datapath: a.nc.Datapath,
		JournalDir: a.nc.Layout.UnderlayJournals, Node: a.node, Log: a.log, State: a.underlayState}
	if a.kube == nil {
		return o
	}
	var objects *underlay.Objects
	if len(a.nc.ProviderNetworks) > 0 {
		a.log.Warn("underlay: --provider-networks is set, so the ProviderNetwork objects are ignored on this node", "node", a.nc.Name,
			"fix", "unset --provider-networks (OVNHOST_PROVIDER_NETWORKS) to take the networks from the ProviderNetwork objects that select this node")
	} else {
		objects = &underlay.Objects{Node: a.nc.Name, Discovery: a.kube.client.Discovery(), KubeOVN: a.kube.kubeovn, Nodes: a.kube.self, Log: a.log}
		o.WantLater = true
	}
	reporter := &underlay.NodeReporter{Node: a.nc.Name, Kube: a.kube.client, Nodes: a.kube.self, Log: a.log}
	o.Report = reporter.Report
	o.Watch = func(ctx context.Context, set func([]nodeconfig.ProviderNetwork)) {
		done := make(chan struct{})
		go func() { defer close(done); reporter.Run(ctx) }()
		if objects != nil {
			objects.Watch(ctx, set)
		}
		<-done
	}
	return o
}

// guardState turns the host firewall guard's state into the host-nat
// unit's readiness: fail closed, the node is not ready while pods could
// reach the OVN, node API and tunnel ports (/readyz names the cause).
func (a *Agent) guardState(err error) {
	if a.o.Health == nil {
		return
	}
	if err != nil {
		a.o.Health.Lacking(a.egress.Name(), err.Error())
		return
	}
	a.o.Health.Recovered(a.egress.Name())
}

// underlayState reports the provider networks not bridged (a NIC
// missing) as the underlay unit's degradation: /readyz names them, and
// the node, whose other networks work, stays ready.
func (a *Agent) underlayState(problem error) {
	if a.o.Health == nil {
		return
	}
	reason := ""
	if problem != nil {
		reason = problem.Error()
	}
	a.o.Health.Degraded(a.underlay.Name(), reason)
}

// Kubernetes reports whether the node has a Kubernetes client (else it
// is a standalone node).
func (a *Agent) Kubernetes() bool { return a.kube != nil }

// Units are the node's units in start order.
func (a *Agent) Units() []lifecycle.Unit { return a.node.Units() }

// Start serves the node API and starts every unit in order, returning
// once the whole node is ready. On failure everything started was stopped.
func (a *Agent) Start(ctx context.Context) error {
	if err := a.startNodeAPI(); err != nil {
		return fmt.Errorf("%w: %w", ErrNodeAPI, err)
	}
	if err := a.node.Start(ctx); err != nil {
		a.stopNodeAPI()
		return err
	}
	return nil
}

// Stop stops every unit in reverse order, then the node API.
func (a *Agent) Stop(ctx context.Context) error {
	defer a.stopNodeAPI()
	return a.node.Stop(ctx)
}

// StopForUpgrade stops for the next ovnhost (SIGUSR2) and keeps the
// datapath; with adopt-children the daemons are left running for it to
// adopt (handedOver).
func (a *Agent) StopForUpgrade(ctx context.Context) (handedOver bool, err error) {
	defer a.stopNodeAPI()
	return a.node.StopForUpgrade(ctx)
}

// SystemID is the chassis name (valid once started).
func (a *Agent) SystemID() string { return a.node.SystemID() }

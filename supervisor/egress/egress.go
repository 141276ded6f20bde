// Package egress is pod egress on the node's host: the masquerade rules
// for natOutgoing subnets (over supervisor/hostnat), IPv4/IPv6 forwarding, and
// on a centralized gateway node br-egw, its return-path rules, the
// chassis announced on the Node and the active gateway reported in the
// Subnet status. Its unit is started once ovn-controller is ready; the
// pod source tells it the node's egress plan.
package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/cni/nodeport"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
)

// Node is what egress needs of the node's supervisor.
type Node interface {
	// OVS is the long-lived conf.db connection (nil while ovsdb-server
	// is not connected).
	OVS() *ovsdbconn.Conn
	// SystemID is the chassis name.
	SystemID() string
	// KeepingDatapath reports whether a stop leaves the datapath in
	// place (--keep-datapath, or an upgrade).
	KeepingDatapath() bool
}

// Plan is what the host must do for pod egress: masquerade NATOutgoing
// towards anything but Cluster, and be the gateway of Gateways.
type Plan struct {
	NATOutgoing []netip.Prefix
	Cluster     []netip.Prefix
	// Gateways are the centralized subnets this node is a gateway of.
	Gateways []Gateway
}

// Gateway is one centralized subnet this node is a gateway of.
type Gateway struct {
	Subnet string
	CIDRs  []netip.Prefix // of the families Transit has
	// Transit is the router's side of the transit link, per family.
	Transit ovnnet.Transit
	// NATOutgoing: the subnet's traffic leaving here is translated, to
	// EgressIP when gatewayNode gives one for this node (an address the
	// node must hold: egressip.go), else to the outgoing interface's.
	NATOutgoing bool
	EgressIP    netip.Addr
}

// Options are the unit's configuration and collaborators.
type Options struct {
	Config *nodeconfig.NodeConfig
	Node   Node
	// Kube and Dynamic are the node's Kubernetes clients (nil on a
	// standalone node: the chassis is not announced and no Subnet
	// status is reported).
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	// Subnets is the node's shared Subnet informer, run by the agent (nil
	// on a standalone node).
	Subnets cache.SharedIndexInformer
	Log     *slog.Logger
	// GuardState is told when the host firewall guard cannot be installed
	// or restored (the error: the node must not be, or stay, ready) and
	// when it is in place again (nil). Nil: only logged.
	GuardState func(err error)
}

// Unit owns the host side of pod egress: the masquerade rules for
// natOutgoing subnets (kept in place against flushes by other agents) and
// forwarding (per family) from ovn0 to the uplink. The pod source tells it what
// to masquerade (Apply) once the node port is up.
type Unit struct {
	backend nodeconfig.NATBackend
	log     *slog.Logger
	// For centralized gateways (gateway.go): the node (br-egw), its
	// Kubernetes identity and clients, and the SB database.
	n        Node
	datapath nodeconfig.Datapath
	nodeName string
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	subnets  cache.SharedIndexInformer
	sb       nodeconfig.Remote

	guard      hostnat.Guard
	guardState func(error)
	guardOff   bool

	mu        sync.Mutex
	mgr       *hostnat.Manager
	cancel    context.CancelFunc
	done      chan struct{}
	agent     chan struct{}
	excl      chan struct{}
	gwApplied bool // br-egw and its return routes are in place
	// plan is the last plan applied (nil: none yet); encaps and
	// nodeAddrs are never masqueraded to (exclude.go).
	plan      *Plan
	encaps    []netip.Addr
	nodeAddrs []netip.Addr
	// natMu serializes computing and applying the NAT rules (the pod
	// source's plans and the exclusion updates).
	natMu sync.Mutex
}

// PodInterfaces are where pod traffic enters the host: the node port and
// a centralized gateway's bridge. The guard drops what arrives there for
// the guarded ports.
var PodInterfaces = []string{nodeport.Name, GatewayBridge}

// GuardRetry is how often a guard that cannot be installed is tried again
// while the unit starts.
var GuardRetry = time.Second

// nodeAPIPort is the port of the node API's listen address (0: the
// default, also when the node API is off or the address unparsable).
func nodeAPIPort(addr string) uint16 {
	if addr == "" {
		return 0
	}
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil {
		return 0
	}
	return uint16(n)
}

// New plans the unit; nothing is started.
func New(o Options) *Unit {
	return &Unit{backend: o.Config.NATBackend, log: o.Log, n: o.Node, datapath: o.Config.Datapath, nodeName: o.Config.Name,
		kube: o.Kube, dyn: o.Dynamic, subnets: o.Subnets, sb: o.Config.SB,
		guard: hostnat.DefaultGuard(nodeAPIPort(o.Config.NodeAPI.Addr), PodInterfaces...), guardState: o.GuardState,
		guardOff: o.Config.HostGuardOff}
}

// Awaits is what /readyz says while the unit starts.
func (u *Unit) Awaits() string {
	return "the host firewall guard (pods must not reach the OVN, node API and tunnel ports) and the host NAT"
}

func (u *Unit) reportGuard(err error) {
	if u.guardState != nil {
		u.guardState(err)
	}
}

// installGuard installs the guard, trying again every GuardRetry until it
// is in place or ctx ends: fail closed, the unit (and so the node) is not
// ready without it, and /readyz says why.
func (u *Unit) installGuard(ctx context.Context, m *hostnat.Manager) error {
	failed := false
	for {
		err := m.ApplyGuard(ctx, u.guard)
		if err == nil {
			if failed {
				u.log.Info("host firewall guard installed")
				u.reportGuard(nil)
			}
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("host firewall guard: %w", err)
		}
		if !failed {
			u.log.Error("host firewall guard cannot be installed; the node stays not ready until it is", "err", err,
				"guards", "TCP "+fmt.Sprint(u.guard.TCPPorts)+" UDP "+fmt.Sprint(u.guard.UDPPorts)+" from "+fmt.Sprint(u.guard.Interfaces),
				"fix", "give the node daemon CAP_NET_ADMIN and the filter support of its NAT backend, or choose the other backend with --nat-backend; on a kernel without netfilter, --host-guard=off")
			failed = true
		}
		u.reportGuard(fmt.Errorf("the host firewall guard, which cannot be installed: %w", err))
		select {
		case <-ctx.Done():
			return fmt.Errorf("host firewall guard: %w", err)
		case <-time.After(GuardRetry):
		}
	}
}

func (u *Unit) Name() string { return "host-nat" }

func (u *Unit) Start(ctx context.Context) error {
	m, err := hostnat.New(string(u.backend), u.log.With("unit", "host-nat"))
	if err != nil {
		return fmt.Errorf("host NAT for pod egress: %w; choose a backend with --nat-backend", err)
	}
	if u.guardOff {
		u.log.Warn("the host firewall guard is off (--host-guard=off): pods can reach this node's OVN, node API and tunnel ports")
	} else if err := u.installGuard(ctx, m); err != nil {
		m.Close()
		return err
	}
	m.OnGuard(func(err error) {
		if err != nil {
			err = fmt.Errorf("the host firewall guard, which was removed and cannot be restored: %w", err)
		}
		u.reportGuard(err)
	})
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	excl := make(chan struct{})
	u.mu.Lock()
	u.mgr, u.cancel, u.done, u.excl = m, cancel, make(chan struct{}), excl
	u.mu.Unlock()
	go func() { defer close(u.done); _ = m.Run(rctx) }()
	go func() { defer close(excl); u.runExclusions(rctx) }()
	if u.kube != nil {
		agent := make(chan struct{})
		u.mu.Lock()
		u.agent = agent
		u.mu.Unlock()
		go func() { defer close(agent); u.runGatewayAgent(rctx) }()
	}
	u.log.Info("host NAT and firewall guard ready", "backend", m.Backend(), "guarded_tcp", u.guard.TCPPorts, "guarded_udp", u.guard.UDPPorts, "from", u.guard.Interfaces)
	return nil
}

// forwardingSysctls are the switches that let the host route pod traffic
// from ovn0 to its uplink, per family.
var forwardingSysctls = []struct {
	family string
	is     func(netip.Addr) bool
	path   string
}{
	{"IPv4", netip.Addr.Is4, "/proc/sys/net/ipv4/ip_forward"},
	// all/forwarding also turns it on for every interface; an uplink
	// with accept_ra=1 then ignores RAs (doctor's ipv6-ra check says so
	// and gives the fix, accept_ra=2).
	{"IPv6", netip.Addr.Is6, "/proc/sys/net/ipv6/conf/all/forwarding"},
}

// enableForwarding turns on forwarding for each family that has a
// natOutgoing prefix: pod traffic arrives on ovn0 and leaves by the uplink.
func (u *Unit) enableForwarding(plan Plan) error {
	for _, f := range forwardingSysctls {
		if !slices.ContainsFunc(plan.NATOutgoing, func(p netip.Prefix) bool { return f.is(p.Addr()) }) {
			continue
		}
		if b, err := os.ReadFile(f.path); err == nil && strings.TrimSpace(string(b)) == "1" {
			continue
		}
		if err := os.WriteFile(f.path, []byte("1"), 0o644); err != nil {
			return fmt.Errorf("enable %s forwarding for pod egress (%s): %w", f.family, f.path, err)
		}
		u.log.Info("forwarding enabled for pod egress", "family", f.family, "sysctl", f.path)
	}
	return nil
}

// Apply converges the host to plan (the pod source's egress hook).
func (u *Unit) Apply(ctx context.Context, plan Plan) error {
	u.mu.Lock()
	m := u.mgr
	u.mu.Unlock()
	if m == nil {
		return errors.New("host NAT is not running")
	}
	if err := u.enableForwarding(plan); err != nil {
		return err
	}
	p := plan
	p.Gateways = u.localEgressIPs(p.Gateways)
	u.natMu.Lock()
	u.mu.Lock()
	u.plan = &p
	encaps, nodes := u.encaps, u.nodeAddrs
	u.mu.Unlock()
	err := m.Apply(ctx, natRules(p, encaps, nodes))
	u.natMu.Unlock()
	if err != nil {
		return err
	}
	if err := u.applyGateways(ctx, plan); err != nil {
		return err
	}
	u.log.Info("pod egress NAT applied", "masquerade_from", plan.NATOutgoing, "except_to", plan.Cluster, "nor_encap_addresses", encaps, "nor_node_addresses", nodes)
	return nil
}

func (u *Unit) Stop(ctx context.Context) error {
	u.mu.Lock()
	m, cancel, done, agent, excl := u.mgr, u.cancel, u.done, u.agent, u.excl
	u.mgr, u.plan = nil, nil
	u.mu.Unlock()
	if m == nil {
		return nil
	}
	cancel()
	<-done
	<-excl
	if agent != nil {
		<-agent
	}
	defer m.Close()
	if u.n.KeepingDatapath() {
		// An upgrade: pods keep leaving while the next ovnhost starts,
		// and keep running, so the guard stays too (the next ovnhost
		// adopts both; `ovnhost cleanup` removes them).
		return nil
	}
	_, err := RemoveGatewayReturnRoutes()
	errs := []error{err, RemoveGatewayBridge(ctx, u.n.OVS(), ovnnet.GatewayNetwork)}
	return errors.Join(append(errs, m.Remove(ctx), m.RemoveGuard(ctx))...)
}

// GuardDrops is the number of packets the host firewall guard dropped
// (pods trying the OVN, node API or tunnel ports); false while the unit
// does not run or the counters cannot be read.
func (u *Unit) GuardDrops() (uint64, bool) {
	u.mu.Lock()
	m := u.mgr
	u.mu.Unlock()
	if m == nil {
		return 0, false
	}
	n, err := m.GuardDrops()
	return n, err == nil
}

// CleanupNAT removes the masquerade rules and the firewall guard of either
// backend (no-op when absent), for `ovnhost cleanup`; RemoveGatewayReturnRoutes removes
// a centralized gateway's rules.
func CleanupNAT() error { return hostnat.Cleanup(nil) }

// SubnetInformer is the Subnet informer the unit reads (the assembly's
// tests check it is the node's shared one).
func (u *Unit) SubnetInformer() cache.SharedIndexInformer { return u.subnets }

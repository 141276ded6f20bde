// Package nodeport keeps ovn0, the node's port into OVN: an internal port
// on br-int bound to the logical switch port node-<name> on the join
// switch, with the address the pod source gives, and routes to the pod
// CIDRs and the Service CIDRs through the join gateway, so that the host
// (kubelet probes) reaches pods and ClusterIPs. Once ovn0 is up, the pod
// source's egress plan goes to the host's NAT (Options.Egress).
package nodeport

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/ovsport"
	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podsource"
)

// Name is the node port's device, OVS port and interface name.
const Name = "ovn0"

// Source gives ovn0's network (a podsource.Source).
type Source interface {
	NodeNetwork(ctx context.Context) (*podsource.NodeNetwork, error)
}

// Watcher is a Source that says when the node's network may have changed
// (podsource.Kube: the node's annotations, the Subnets).
type Watcher interface {
	WatchNode() (node, subnets <-chan struct{}, stop func())
}

// Options are what the node port needs.
type Options struct {
	// OVS is a client of the local conf.db with the internal/ovsdb/vswitch
	// models; Bridge is where ovn0 goes (default ovsport.DefaultBridge).
	OVS    client.Client
	Bridge string
	Source Source
	// ServiceCIDRs are routed through ovn0 too (the join switch's load
	// balancers translate ClusterIPs).
	ServiceCIDRs []netip.Prefix
	MTU          int
	// InstallWait bounds the wait for ovn-controller's ovn-installed.
	InstallWait time.Duration
	// Retry is the first delay before a failed set-up is tried again
	// (default 1 s), doubling up to retryMax.
	Retry time.Duration
	// Egress is told what the host must masquerade for pod egress once
	// ovn0 is up; nil leaves the host alone.
	Egress func(ctx context.Context, plan podsource.EgressPlan) error
	Log    *slog.Logger
}

// Port keeps ovn0 configured.
type Port struct {
	o   Options
	ovs *ovsport.Bridge
	log *slog.Logger
}

// New is the node port of o.
func New(o Options) *Port {
	if o.Retry <= 0 {
		o.Retry = time.Second
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return &Port{o: o, ovs: ovsport.New(o.OVS, o.Bridge), log: o.Log}
}

// Run creates and configures ovn0, then configures it again whenever its
// network changes or its device is recreated, until ctx ends. It runs in
// the background because in Kubernetes mode it waits for the controller's
// node annotations.
func (p *Port) Run(ctx context.Context) {
	var nodeChanges, subnetChanges <-chan struct{}
	if w, ok := p.o.Source.(Watcher); ok {
		nch, sch, stop := w.WatchNode()
		defer stop()
		nodeChanges, subnetChanges = nch, sch
	}
	// ovs-vswitchd recreates an internal port's device when it restarts
	// (with the userspace datapath, a tap device): the new device has no
	// address or route. Link events say when to configure it again.
	links := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{}); err != nil {
		p.log.Warn("no link events: "+Name+" will not be reconfigured after an ovs-vswitchd restart", "err", err)
		links = nil
	}
	backoff := p.o.Retry
	for {
		applied, err := p.ensure(ctx)
		// The device just configured (or tried): only ovn0 with another
		// ifindex is a recreated one. Our own address and route changes,
		// carrier and MTU changes also come as RTM_NEWLINK for it.
		idx := 0
		if l, lerr := netlink.LinkByName(Name); lerr == nil {
			idx = l.Attrs().Index
		}
		var retry <-chan time.Time
		if err != nil && ctx.Err() == nil {
			// Standalone mode has no event that would bring a retry: try
			// again after a growing delay.
			p.log.Error("node port "+Name+" not configured; the host cannot reach pods; retrying", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, retryMax)
		} else {
			backoff = p.o.Retry
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-retry:
				break wait
			case <-subnetChanges: // Subnet CIDRs (ovn0's routes) or natOutgoing changed
				break wait
			case <-nodeChanges:
				// Most node updates are status; act only when the
				// controller's annotations for the node port changed.
				nn, err := p.o.Source.NodeNetwork(ctx)
				if err == nil && (applied == nil || !sameNodePort(nn, applied)) {
					p.log.Info("node annotations changed; configuring "+Name+" again", "addresses", nn.Addrs, "mac", nn.MAC.String())
					break wait
				}
			case u, ok := <-links:
				if !ok {
					links = nil
					continue
				}
				if u.Attrs().Name != Name || u.Header.Type != unix.RTM_NEWLINK {
					continue
				}
				// The same device brought down (ovs-vswitchd may set
				// a fresh tap's flags after we configured it) lost its
				// routes: configure it again.
				down := u.IfInfomsg.Flags&unix.IFF_UP == 0
				if u.Attrs().Index == idx && !down {
					continue
				}
				if u.Attrs().Index == idx {
					p.log.Info(Name+" went down and lost its routes; configuring it again", "ifindex", idx)
				} else if idx == 0 {
					p.log.Info(Name+" appeared; configuring it", "ifindex", u.Attrs().Index)
				} else {
					p.log.Info(Name+" was recreated (ovs-vswitchd restart?); configuring it again", "ifindex", u.Attrs().Index, "was", idx)
				}
				break wait
			}
		}
	}
}

// A failed node port set-up is retried after Options.Retry,
// doubling up to retryMax, besides any event that calls for it. The cap
// is short: without ovn0 the host cannot reach its pods, and a retry is a
// few netlink and OVSDB calls.
const retryMax = 5 * time.Second

func sameNodePort(a, b *podsource.NodeNetwork) bool {
	return a.PortName == b.PortName && slices.Equal(a.Addrs, b.Addrs) && slices.Equal(a.Gateways, b.Gateways) && a.MAC.String() == b.MAC.String()
}

// ensure configures ovn0 and returns what it applied.
func (p *Port) ensure(ctx context.Context) (*podsource.NodeNetwork, error) {
	nn, err := p.o.Source.NodeNetwork(ctx)
	if err != nil {
		return nil, err
	}
	return nn, p.apply(ctx, nn)
}

func (p *Port) apply(ctx context.Context, nn *podsource.NodeNetwork) error {
	ids, exists, err := p.ovs.Interface(ctx, Name)
	if err != nil {
		return err
	}
	if exists && ids[ovsport.KeyIfaceID] != nn.PortName {
		if err := p.ovs.DeletePort(ctx, Name); err != nil {
			return err
		}
		exists = false
	}
	// Kube-OVN's ovn0 external_ids:ip: the addresses, comma-separated.
	ips := make([]string, len(nn.Addrs))
	for i, a := range nn.Addrs {
		ips[i] = a.Addr().String()
	}
	ip := strings.Join(ips, ",")
	if exists && (ids[ovsport.KeyAttachedMAC] != nn.MAC.String() || ids[ovsport.KeyIP] != ip) {
		// Same logical port, new address: the device stays, its
		// external_ids follow and the address is replaced below.
		if err := p.ovs.SetExternalIDs(ctx, Name, map[string]string{ovsport.KeyAttachedMAC: nn.MAC.String(), ovsport.KeyIP: ip}); err != nil {
			return err
		}
	}
	if !exists {
		err := p.ovs.AddPort(ctx, ovsport.PortSpec{Name: Name, Type: "internal", ExternalIDs: map[string]string{
			ovsport.KeyIfaceID: nn.PortName, ovsport.KeyIP: ip, ovsport.KeyAttachedMAC: nn.MAC.String(), ovsport.KeyVendor: ovsport.Vendor,
		}})
		if err != nil {
			return fmt.Errorf("add %s to %s: %w", Name, p.ovs.Name(), err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := podnet.WaitLink(wctx, Name); err != nil {
		return err
	}
	// Each CIDR through the join gateway of its family (none: the join
	// subnet lacks that family, nothing of it is routed here).
	routes := []podnet.Route{}
	// ClusterIPs too: the Service load balancers on the join switch
	// translate them, so the node reaches Services without kube-proxy.
	for _, c := range slices.Concat(nn.PodCIDRs, p.o.ServiceCIDRs) {
		if gw, ok := nn.GatewayOf(c); ok {
			routes = append(routes, podnet.Route{Dst: c, GW: gw})
		}
	}
	if err := podnet.ConfigureHostPort(podnet.HostPort{Name: Name, MAC: nn.MAC, MTU: p.o.MTU,
		Addrs: nn.Addrs, Routes: routes, PruneRoutes: true}); err != nil {
		return err
	}
	if err := p.ovs.WaitInstalled(ctx, Name, p.o.InstallWait); err != nil {
		return fmt.Errorf("%s (iface-id %s) not installed by ovn-controller: %w", Name, nn.PortName, err)
	}
	p.log.Info("node port ready", "port", Name, "lsp", nn.PortName, "addresses", nn.Addrs, "routes", len(routes))
	if nn.Egress != nil && p.o.Egress != nil {
		if err := p.o.Egress(ctx, *nn.Egress); err != nil {
			return fmt.Errorf("egress NAT on the host: %w", err)
		}
	}
	return nil
}

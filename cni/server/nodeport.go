package server

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/podnet"
)

// nodePortLoop creates ovn0, the node's internal port on br-int bound to
// the logical switch port node-<name> on the join switch, gives it the
// controller's address and routes the pod CIDRs and the Service CIDRs
// through the join gateway, so that the host (kubelet probes) reaches pods
// and ClusterIPs. It runs in the background
// because in Kubernetes mode it waits for the controller's node annotations.
func (s *Server) nodePortLoop(ctx context.Context) {
	var nodeChanges, subnetChanges <-chan struct{}
	ks, _ := s.src.(*kubeSource)
	if ks != nil {
		sch, scancel := ks.subscribe(subnetsKey)
		defer scancel()
		subnetChanges = sch
		nch, ncancel := ks.subscribe("node")
		defer ncancel()
		nodeChanges = nch
	}
	// ovs-vswitchd recreates an internal port's device when it restarts
	// (with the userspace datapath, a tap device): the new device has no
	// address or route. Link events say when to configure it again.
	links := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{}); err != nil {
		s.log.Warn("no link events: "+NodePortName+" will not be reconfigured after an ovs-vswitchd restart", "err", err)
		links = nil
	}
	backoff := s.nodePortRetry
	for {
		applied, err := s.ensureNodePort(ctx)
		// The device just configured (or tried): only ovn0 with another
		// ifindex is a recreated one. Our own address and route changes,
		// carrier and MTU changes also come as RTM_NEWLINK for it.
		idx := 0
		if l, lerr := netlink.LinkByName(NodePortName); lerr == nil {
			idx = l.Attrs().Index
		}
		var retry <-chan time.Time
		if err != nil && ctx.Err() == nil {
			// Standalone mode has no event that would bring a retry: try
			// again after a growing delay.
			s.log.Error("node port "+NodePortName+" not configured; the host cannot reach pods; retrying", "err", err, "retry_in", backoff)
			retry = time.After(backoff)
			backoff = min(2*backoff, retryMax)
		} else {
			backoff = s.nodePortRetry
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
				nn, err := ks.NodeNetwork(ctx)
				if err == nil && (applied == nil || !sameNodePort(nn, applied)) {
					s.log.Info("node annotations changed; configuring "+NodePortName+" again", "address", nn.Addr, "mac", nn.MAC.String())
					break wait
				}
			case u, ok := <-links:
				if !ok {
					links = nil
					continue
				}
				if u.Attrs().Name != NodePortName || u.Header.Type != unix.RTM_NEWLINK {
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
					s.log.Info(NodePortName+" went down and lost its routes; configuring it again", "ifindex", idx)
				} else if idx == 0 {
					s.log.Info(NodePortName+" appeared; configuring it", "ifindex", u.Attrs().Index)
				} else {
					s.log.Info(NodePortName+" was recreated (ovs-vswitchd restart?); configuring it again", "ifindex", u.Attrs().Index, "was", idx)
				}
				break wait
			}
		}
	}
}

// A failed node port set-up is retried after Server.nodePortRetry,
// doubling up to retryMax, besides any event that calls for it. The cap
// is short: without ovn0 the host cannot reach its pods, and a retry is a
// few netlink and OVSDB calls.
const retryMax = 5 * time.Second

func sameNodePort(a, b *NodeNetwork) bool {
	return a.PortName == b.PortName && a.Addr == b.Addr && a.Gateway == b.Gateway && a.MAC.String() == b.MAC.String()
}

// ensureNodePort configures ovn0 and returns what it applied.
func (s *Server) ensureNodePort(ctx context.Context) (*NodeNetwork, error) {
	nn, err := s.src.NodeNetwork(ctx)
	if err != nil {
		return nil, err
	}
	return nn, s.applyNodePort(ctx, nn)
}

func (s *Server) applyNodePort(ctx context.Context, nn *NodeNetwork) error {
	ids, exists, err := s.ovs.Interface(ctx, NodePortName)
	if err != nil {
		return err
	}
	if exists && ids[extIfaceID] != nn.PortName {
		if err := s.ovs.DeletePort(ctx, NodePortName); err != nil {
			return err
		}
		exists = false
	}
	if exists && (ids[extAttachedMAC] != nn.MAC.String() || ids[extIP] != nn.Addr.Addr().String()) {
		// Same logical port, new address: the device stays, its
		// external_ids follow and the address is replaced below.
		if err := s.ovs.SetExternalIDs(ctx, NodePortName, map[string]string{extAttachedMAC: nn.MAC.String(), extIP: nn.Addr.Addr().String()}); err != nil {
			return err
		}
	}
	if !exists {
		err := s.ovs.AddPort(ctx, portSpec{Name: NodePortName, Type: "internal", ExternalIDs: map[string]string{
			extIfaceID: nn.PortName, extIP: nn.Addr.Addr().String(), extAttachedMAC: nn.MAC.String(), extVendor: vendor,
		}})
		if err != nil {
			return fmt.Errorf("add %s to %s: %w", NodePortName, DefaultBridge, err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := podnet.WaitLink(wctx, NodePortName); err != nil {
		return err
	}
	routes := []podnet.Route{}
	for _, c := range nn.PodCIDRs {
		if c.Addr().Is4() == nn.Gateway.Is4() {
			routes = append(routes, podnet.Route{Dst: c, GW: nn.Gateway})
		}
	}
	// ClusterIPs too: the Service load balancers on the join switch
	// translate them, so the node reaches Services without kube-proxy.
	for _, c := range s.cfg.Node.ServiceCIDRs {
		if c.Addr().Is4() == nn.Gateway.Is4() {
			routes = append(routes, podnet.Route{Dst: c, GW: nn.Gateway})
		}
	}
	if err := podnet.ConfigureHostPort(podnet.HostPort{Name: NodePortName, MAC: nn.MAC, MTU: s.mtu,
		Addrs: []netip.Prefix{nn.Addr}, Routes: routes, PruneRoutes: true}); err != nil {
		return err
	}
	if err := s.ovs.WaitInstalled(ctx, NodePortName, s.installWait); err != nil {
		return fmt.Errorf("%s (iface-id %s) not installed by ovn-controller: %w", NodePortName, nn.PortName, err)
	}
	s.log.Info("node port ready", "port", NodePortName, "lsp", nn.PortName, "address", nn.Addr, "routes", len(routes))
	if nn.Egress != nil && s.cfg.Egress != nil {
		if err := s.cfg.Egress(ctx, *nn.Egress); err != nil {
			return fmt.Errorf("egress NAT on the host: %w", err)
		}
	}
	return nil
}

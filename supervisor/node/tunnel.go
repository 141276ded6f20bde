package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/supervisor/preflight"
)

// The userspace datapath sends encapsulated packets only from an address
// it owns: the tunnel endpoint must sit on the internal port of an OVS
// bridge (br-phy) whose other port is the underlay interface. With
// --userspace-tunnel the node sets that up and puts the host back as it was
// on stop (BRIEF section 4; the usual OVS-DPDK layout).

// wantTunnelBridge reports whether br-phy is to be managed.
func (n *Node) wantTunnelBridge() bool {
	iface := n.pre.TunnelIface
	return n.cfg.UserspaceTunnel && n.pre.Datapath == "netdev" && iface != "" && iface != preflight.PhysBridge
}

// tunnelBridgeOps adds br-phy (internal port + the underlay interface) to
// the configuration transaction, or the missing underlay port to an existing
// br-phy. root is the Open_vSwitch row (named-uuid when created in the same
// transaction: newRoot).
func (n *Node) tunnelBridgeOps(ctx context.Context, root *vswitch.OpenvSwitch, newRoot bool) ([]ovsdb.Operation, error) {
	ovs := n.OVS()
	iface := n.pre.TunnelIface
	link, err := netlink.LinkByName(iface)
	if err != nil {
		return nil, fmt.Errorf("userspace-tunnel: tunnel interface %s: %w", iface, err)
	}
	var ops []ovsdb.Operation
	add := func(m model.Model) error {
		o, err := ovs.Create(m)
		ops = append(ops, o...)
		return err
	}
	br := &vswitch.Bridge{Name: preflight.PhysBridge}
	if ovs.Get(ctx, br) == nil {
		if ovs.Get(ctx, &vswitch.Port{Name: iface}) == nil {
			return nil, nil
		}
		if err := add(&vswitch.Interface{UUID: "phyiface", Name: iface}); err != nil {
			return nil, err
		}
		if err := add(&vswitch.Port{UUID: "phyport", Name: iface, Interfaces: []string{"phyiface"}}); err != nil {
			return nil, err
		}
		m, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"phyport"}})
		return append(ops, m...), err
	}
	standalone := vswitch.BridgeFailModeStandalone
	steps := []model.Model{
		&vswitch.Interface{UUID: "phybriface", Name: preflight.PhysBridge, Type: "internal"},
		&vswitch.Port{UUID: "phybrport", Name: preflight.PhysBridge, Interfaces: []string{"phybriface"}},
		&vswitch.Interface{UUID: "phyiface", Name: iface},
		&vswitch.Port{UUID: "phyport", Name: iface, Interfaces: []string{"phyiface"}},
		// Same MAC as the underlay NIC: the network knows that one.
		&vswitch.Bridge{UUID: "phybr", Name: preflight.PhysBridge, DatapathType: "netdev", FailMode: &standalone,
			OtherConfig: map[string]string{"hwaddr": link.Attrs().HardwareAddr.String(), "disable-in-band": "true"},
			ExternalIDs: map[string]string{"vendor": Vendor}, Ports: []string{"phybrport", "phyport"}},
	}
	for _, m := range steps {
		if err := add(m); err != nil {
			return nil, err
		}
	}
	if newRoot {
		root.Bridges = append(root.Bridges, "phybr")
		return ops, nil
	}
	m, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"phybr"}})
	return append(ops, m...), err
}

// tunnelBridgeUnit moves the tunnel interface's addresses and routes to
// br-phy once ovs-vswitchd has created it, and back on stop.
type tunnelBridgeUnit struct{ n *Node }

func (u *tunnelBridgeUnit) Name() string { return "tunnel-bridge" }

func (u *tunnelBridgeUnit) Start(context.Context) error {
	moved, err := moveAddresses(u.n.pre.TunnelIface, preflight.PhysBridge)
	if err != nil {
		return fmt.Errorf("moving the addresses of %s to %s: %w", u.n.pre.TunnelIface, preflight.PhysBridge, err)
	}
	if moved > 0 {
		u.n.log.Info("tunnel endpoint moved to the userspace bridge", "from", u.n.pre.TunnelIface, "to", preflight.PhysBridge, "addresses", moved)
	}
	return nil
}

func (u *tunnelBridgeUnit) Stop(context.Context) error {
	if u.n.cfg.KeepDatapath {
		return nil
	}
	moved, err := moveAddresses(preflight.PhysBridge, u.n.pre.TunnelIface)
	if moved > 0 {
		u.n.log.Info("tunnel endpoint given back to the interface", "to", u.n.pre.TunnelIface, "addresses", moved)
	}
	return err
}

// moveAddresses moves global addresses, then the routes through from, to
// the link to, and sets to up with from's MTU. Idempotent: nothing to move
// is not an error.
func moveAddresses(from, to string) (int, error) {
	src, err := netlink.LinkByName(from)
	if err != nil {
		return 0, err
	}
	dst, err := netlink.LinkByName(to)
	if err != nil {
		return 0, err
	}
	addrs, err := netlink.AddrList(src, netlink.FAMILY_ALL)
	if err != nil {
		return 0, err
	}
	routes, err := netlink.RouteList(src, netlink.FAMILY_ALL)
	if err != nil {
		return 0, err
	}
	if err := netlink.LinkSetMTU(dst, src.Attrs().MTU); err != nil {
		return 0, err
	}
	if err := netlink.LinkSetUp(dst); err != nil {
		return 0, err
	}
	var errs []error
	n := 0
	for _, a := range addrs {
		if a.Scope != int(netlink.SCOPE_UNIVERSE) || a.IP.IsLinkLocalUnicast() {
			continue
		}
		moved := a
		moved.Label = ""
		if err := netlink.AddrDel(src, &a); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := netlink.AddrAdd(dst, &moved); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	// Routes the kernel made for the addresses follow them; the others
	// (default route, static ones) are re-added through the new link.
	for _, r := range routes {
		if r.Protocol == netlink.RouteProtocol(2) /* kernel */ || r.Dst != nil && r.Dst.IP.IsLinkLocalUnicast() {
			continue
		}
		r.LinkIndex = dst.Attrs().Index
		if err := netlink.RouteReplace(&r); err != nil {
			errs = append(errs, fmt.Errorf("route %s: %w", r, err))
		}
	}
	return n, errors.Join(errs...)
}

package node

import (
	"context"
	"fmt"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/supervisor/hostlink"
)

// The userspace datapath sends encapsulated packets only from an address
// it owns: the tunnel endpoint must sit on the internal port of an OVS
// bridge (br-phy) whose other port is the underlay interface. With
// --userspace-tunnel the node sets that up and puts the host back as it was
// on stop (BRIEF section 4; the usual OVS-DPDK layout).

// wantTunnelBridge reports whether br-phy is to be managed.
func (n *Node) wantTunnelBridge() bool {
	return n.nc.UserspaceTunnel
}

// tunnelBridgeOps adds br-phy (internal port + the underlay interface) to
// the configuration transaction, or the missing underlay port to an existing
// br-phy. root is the Open_vSwitch row (named-uuid when created in the same
// transaction: newRoot).
func (n *Node) tunnelBridgeOps(ctx context.Context, root *vswitch.OpenvSwitch, newRoot bool) ([]ovsdb.Operation, error) {
	ovs := n.OVS()
	iface := n.nc.TunnelIface
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
	br := &vswitch.Bridge{Name: nodeconfig.PhysBridge}
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
		&vswitch.Interface{UUID: "phybriface", Name: nodeconfig.PhysBridge, Type: "internal"},
		&vswitch.Port{UUID: "phybrport", Name: nodeconfig.PhysBridge, Interfaces: []string{"phybriface"}},
		&vswitch.Interface{UUID: "phyiface", Name: iface},
		&vswitch.Port{UUID: "phyport", Name: iface, Interfaces: []string{"phyiface"}},
		// Same MAC as the underlay NIC: the network knows that one.
		&vswitch.Bridge{UUID: "phybr", Name: nodeconfig.PhysBridge, DatapathType: string(nodeconfig.Userspace), FailMode: &standalone,
			OtherConfig: map[string]string{"hwaddr": link.Attrs().HardwareAddr.String(), "disable-in-band": "true"},
			ExternalIDs: map[string]string{"vendor": ovsconf.Vendor}, Ports: []string{"phybrport", "phyport"}},
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

// tunnelBridgeUnit moves the tunnel interface's IP configuration
// (addresses, routes of all tables, policy rules, permanent neighbours,
// MTU: supervisor/hostlink) to br-phy once ovs-vswitchd has created it, and
// back on stop.
type tunnelBridgeUnit struct{ n *Node }

func (u *tunnelBridgeUnit) Name() string { return "tunnel-bridge" }

func (u *tunnelBridgeUnit) Start(context.Context) error {
	moved, err := hostlink.Move(u.n.nc.TunnelIface, nodeconfig.PhysBridge, hostlink.Options{})
	if err != nil {
		return fmt.Errorf("moving the addresses of %s to %s: %w", u.n.nc.TunnelIface, nodeconfig.PhysBridge, err)
	}
	if moved.Addrs > 0 {
		u.n.log.Info("tunnel endpoint moved to the userspace bridge", "from", u.n.nc.TunnelIface, "to", nodeconfig.PhysBridge, "addresses", moved.Addrs)
	}
	return nil
}

func (u *tunnelBridgeUnit) Stop(context.Context) error {
	if u.n.KeepingDatapath() {
		return nil
	}
	moved, err := hostlink.Move(nodeconfig.PhysBridge, u.n.nc.TunnelIface, hostlink.Options{})
	if moved.Addrs > 0 {
		u.n.log.Info("tunnel endpoint given back to the interface", "to", u.n.nc.TunnelIface, "addresses", moved.Addrs)
	}
	return err
}

package node

import (
	"context"
	"fmt"
	"maps"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// ovsConfigUnit writes what ovn-controller reads from the Open_vSwitch
// table, and creates br-int, in one transaction before ovs-vswitchd starts
// (so br-int exists when ovn-controller connects: no 1 s back-off).
type ovsConfigUnit struct{ n *Node }

func (u *ovsConfigUnit) Name() string { return "ovs-config" }

func (u *ovsConfigUnit) Stop(context.Context) error { return nil }

func (u *ovsConfigUnit) Start(ctx context.Context) error {
	n := u.n
	ovs := n.OVS()
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil {
		return err
	}
	var existing string
	if len(roots) == 1 {
		existing = roots[0].ExternalIDs["system-id"]
	}
	id, created, err := loadSystemID(n.nc.Layout.SystemIDFile, existing)
	if err != nil {
		return err
	}
	n.systemID = id
	if created {
		n.log.Info("new system-id (chassis name) saved", "system_id", id, "file", n.nc.Layout.SystemIDFile)
	}
	ops, err := n.ovsConfigOps(ctx, roots)
	if err != nil {
		return err
	}
	if err := transact(ctx, ovs, ops...); err != nil {
		return fmt.Errorf("initialising the Open_vSwitch table and br-int: %w", err)
	}
	return nil
}

// ExternalIDs is what ovn-controller needs from the Open_vSwitch row.
func (n *Node) ExternalIDs() map[string]string {
	ids := map[string]string{
		"system-id":                   n.systemID,
		"hostname":                    n.nc.Name,
		"ovn-remote":                  n.nc.SB.Endpoint,
		"ovn-encap-type":              n.nc.TunnelType,
		"ovn-encap-ip":                n.nc.EncapIP,
		"ovn-remote-probe-interval":   strconv.FormatInt(n.nc.Daemons.RemoteProbeInterval.Milliseconds(), 10),
		"ovn-openflow-probe-interval": strconv.FormatInt(int64(n.nc.Daemons.OpenflowProbeInterval.Seconds()), 10),
		"ovn-bridge-datapath-type":    string(n.nc.Datapath),
		"ovn-bridge":                  "br-int",
	}
	return ids
}

func (n *Node) ovsConfigOps(ctx context.Context, roots []vswitch.OpenvSwitch) ([]ovsdb.Operation, error) {
	ovs := n.OVS()
	var ops []ovsdb.Operation
	root := &vswitch.OpenvSwitch{UUID: "root"}
	newRoot := len(roots) == 0
	if newRoot {
		root.ExternalIDs = n.ExternalIDs()
		root.OtherConfig = n.otherConfig(nil)
	} else {
		*root = roots[0]
		ids := maps.Clone(root.ExternalIDs)
		if ids == nil {
			ids = map[string]string{}
		}
		maps.Copy(ids, n.ExternalIDs())
		root.ExternalIDs = ids
		root.OtherConfig = n.otherConfig(root.OtherConfig)
		o, err := ovs.Where(root).Update(root, &root.ExternalIDs, &root.OtherConfig)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}

	br := &vswitch.Bridge{Name: "br-int"}
	err := ovs.Get(ctx, br)
	secure := vswitch.BridgeFailModeSecure
	switch {
	case err == nil:
		// Exists (earlier run): enforce what OVN needs, keep the rest.
		br.DatapathType = string(n.nc.Datapath)
		br.FailMode = &secure
		oc := maps.Clone(br.OtherConfig)
		if oc == nil {
			oc = map[string]string{}
		}
		oc["disable-in-band"] = "true"
		br.OtherConfig = oc
		o, err := ovs.Where(br).Update(br, &br.DatapathType, &br.FailMode, &br.OtherConfig)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	default:
		iface := &vswitch.Interface{UUID: "brintiface", Name: "br-int", Type: "internal"}
		port := &vswitch.Port{UUID: "brintport", Name: "br-int", Interfaces: []string{iface.UUID}}
		nb := &vswitch.Bridge{UUID: "brint", Name: "br-int", DatapathType: string(n.nc.Datapath), FailMode: &secure,
			OtherConfig: map[string]string{"disable-in-band": "true"},
			ExternalIDs: map[string]string{"vendor": ovsconf.Vendor},
			Ports:       []string{port.UUID}}
		for _, m := range []model.Model{iface, port, nb} {
			o, err := ovs.Create(m)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
		if newRoot {
			root.Bridges = []string{nb.UUID}
		} else {
			m, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{nb.UUID}})
			if err != nil {
				return nil, err
			}
			ops = append(ops, m...)
		}
	}
	if n.wantTunnelBridge() {
		o, err := n.tunnelBridgeOps(ctx, root, newRoot)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	if newRoot {
		o, err := ovs.Create(root)
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

func (n *Node) otherConfig(cur map[string]string) map[string]string {
	oc := maps.Clone(cur)
	if oc == nil {
		oc = map[string]string{}
	}
	if n.nc.Daemons.HWOffload {
		oc["hw-offload"] = "true"
	} else {
		delete(oc, "hw-offload")
	}
	return oc
}

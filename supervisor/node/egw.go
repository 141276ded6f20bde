package node

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// GatewayBridge is the OVS bridge of a centralized-gateway node: OVN's
// gateway switches reach it through their localnet port (ovn-bridge-mappings
// maps the network to it), and its own internal port, named like the
// bridge, is the host end of the transit networks.
const GatewayBridge = "br-egw"

const bridgeMappings = "ovn-bridge-mappings"

// EnsureGatewayBridge creates br-egw (datapath type of the node, fail mode
// standalone: a plain learning switch, the host port MAC mac) and maps
// network to it in ovn-bridge-mappings, keeping other mappings.
func (n *Node) EnsureGatewayBridge(ctx context.Context, network, mac string) error {
	ovs := n.OVS()
	if ovs == nil {
		return errors.New("gateway bridge: conf.db is not connected")
	}
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil || len(roots) == 0 {
		return fmt.Errorf("gateway bridge: no Open_vSwitch row in conf.db (%v)", err)
	}
	root := &roots[0]
	var ops []ovsdb.Operation
	br := &vswitch.Bridge{Name: GatewayBridge}
	switch err := ovs.Get(ctx, br); {
	case errors.Is(err, client.ErrNotFound):
		standalone := vswitch.BridgeFailModeStandalone
		for _, m := range []model.Model{
			&vswitch.Interface{UUID: "egwiface", Name: GatewayBridge, Type: "internal"},
			&vswitch.Port{UUID: "egwport", Name: GatewayBridge, Interfaces: []string{"egwiface"}},
			&vswitch.Bridge{UUID: "egwbr", Name: GatewayBridge, DatapathType: string(n.nc.Datapath), FailMode: &standalone,
				OtherConfig: map[string]string{"hwaddr": mac, "disable-in-band": "true"},
				ExternalIDs: map[string]string{"vendor": Vendor}, Ports: []string{"egwport"}},
		} {
			o, err := ovs.Create(m)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
		m, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"egwbr"}})
		if err != nil {
			return err
		}
		ops = append(ops, m...)
	case err != nil:
		return err
	case br.OtherConfig["hwaddr"] != mac:
		oc := maps.Clone(br.OtherConfig)
		if oc == nil {
			oc = map[string]string{}
		}
		oc["hwaddr"] = mac
		br.OtherConfig = oc
		o, err := ovs.Where(br).Update(br, &br.OtherConfig)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	want := network + ":" + GatewayBridge
	mappings := splitMappings(root.ExternalIDs[bridgeMappings])
	if !slices.Contains(mappings, want) {
		mappings = slices.DeleteFunc(mappings, func(m string) bool { return strings.HasPrefix(m, network+":") })
		mappings = append(mappings, want)
		ops = append(ops, setExternalID(root, bridgeMappings, strings.Join(mappings, ","))...)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := ovsdbconn.Transact(ctx, ovs, "ensure gateway bridge "+GatewayBridge, ops...)
	return err
}

// RemoveGatewayBridge deletes br-egw and network's bridge mapping; absent is fine.
func (n *Node) RemoveGatewayBridge(ctx context.Context, network string) error {
	ovs := n.OVS()
	if ovs == nil {
		return nil
	}
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil || len(roots) == 0 {
		return err
	}
	root := &roots[0]
	var ops []ovsdb.Operation
	br := &vswitch.Bridge{Name: GatewayBridge}
	if err := ovs.Get(ctx, br); err == nil {
		m, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{br.UUID}})
		if err != nil {
			return err
		}
		ops = append(ops, m...)
	}
	mappings := splitMappings(root.ExternalIDs[bridgeMappings])
	kept := slices.DeleteFunc(slices.Clone(mappings), func(m string) bool { return strings.HasPrefix(m, network+":") })
	if len(kept) != len(mappings) {
		ops = append(ops, setExternalID(root, bridgeMappings, strings.Join(kept, ","))...)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := ovsdbconn.Transact(ctx, ovs, "remove gateway bridge "+GatewayBridge, ops...)
	return err
}

func splitMappings(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// setExternalID replaces (or with "" removes) one key of the Open_vSwitch
// row's external_ids, leaving the others to their writers.
func setExternalID(root *vswitch.OpenvSwitch, key, value string) []ovsdb.Operation {
	where := []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: root.UUID}}}
	ops := []ovsdb.Operation{{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: where,
		Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: []any{key}}}}}}
	if value != "" {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: where,
			Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: map[any]any{key: value}}}}})
	}
	return ops
}

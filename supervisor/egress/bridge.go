package egress

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

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// GatewayBridge is the OVS bridge of a centralized-gateway node: OVN's
// gateway switches reach it through their localnet port (ovn-bridge-mappings
// maps the network to it), and its own internal port, named like the
// bridge, is the host end of the transit networks.
const GatewayBridge = "br-egw"

// EnsureGatewayBridge creates br-egw in conf.db (ovs; datapath type of the
// node, fail mode standalone: a plain learning switch, the host port MAC
// mac) and maps network to it in ovn-bridge-mappings, keeping other
// mappings.
func EnsureGatewayBridge(ctx context.Context, ovs *ovsdbconn.Conn, datapath nodeconfig.Datapath, network, mac string) error {
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
			&vswitch.Bridge{UUID: "egwbr", Name: GatewayBridge, DatapathType: string(datapath), FailMode: &standalone,
				OtherConfig: map[string]string{"hwaddr": mac, "disable-in-band": "true"},
				ExternalIDs: map[string]string{"vendor": ovsconf.Vendor}, Ports: []string{"egwport"}},
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
	mappings := ovsconf.SplitMappings(root.ExternalIDs[ovsconf.BridgeMappings])
	if !slices.Contains(mappings, want) {
		mappings = slices.DeleteFunc(mappings, func(m string) bool { return strings.HasPrefix(m, network+":") })
		mappings = append(mappings, want)
		ops = append(ops, ovsconf.SetExternalID(root, ovsconf.BridgeMappings, strings.Join(mappings, ","))...)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := ovsdbconn.Transact(ctx, ovs, "ensure gateway bridge "+GatewayBridge, ops...)
	return err
}

// RemoveGatewayBridge deletes br-egw and network's bridge mapping from
// conf.db (ovs); absent is fine.
func RemoveGatewayBridge(ctx context.Context, ovs *ovsdbconn.Conn, network string) error {
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
	mappings := ovsconf.SplitMappings(root.ExternalIDs[ovsconf.BridgeMappings])
	kept := slices.DeleteFunc(slices.Clone(mappings), func(m string) bool { return strings.HasPrefix(m, network+":") })
	if len(kept) != len(mappings) {
		ops = append(ops, ovsconf.SetExternalID(root, ovsconf.BridgeMappings, strings.Join(kept, ","))...)
	}
	if len(ops) == 0 {
		return nil
	}
	_, err := ovsdbconn.Transact(ctx, ovs, "remove gateway bridge "+GatewayBridge, ops...)
	return err
}

package extgw

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// The external gateway bridge of an EIP/SNAT gateway node (Kube-OVN's
// br-external): the NIC named by external-gw-nic is its port, and
// ovn-bridge-mappings maps the external network to it, so the localnet port
// of ovn-external reaches the outside through that NIC.

// ExternalBridge is the bridge's name (and its internal port's).
const ExternalBridge = ovnnet.ExternalBridge

// keyExternalNIC marks the Port row of the NIC ovnhost put into br-external.
const keyExternalNIC = "ovnhost-external-nic"

// EnsureExternalBridge creates br-external in conf.db (ovs; the node's
// datapath type) with nic as its port (replacing a NIC an earlier
// configuration put there) and maps network to it, keeping the other
// mappings.
func EnsureExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn, datapath nodeconfig.Datapath, network, nic string) error {
	if ovs == nil {
		return errors.New("external bridge: conf.db is not connected")
	}
	root, err := ovsRoot(ctx, ovs)
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	nicIface := &vswitch.Interface{UUID: "extnic", Name: nic}
	nicPort := &vswitch.Port{UUID: "extnicport", Name: nic, Interfaces: []string{"extnic"}, ExternalIDs: map[string]string{"vendor": ovsconf.Vendor, keyExternalNIC: "true"}}
	br := &vswitch.Bridge{Name: ExternalBridge}
	if p := (&vswitch.Port{Name: nic}); ovs.Get(ctx, p) == nil && p.ExternalIDs[keyExternalNIC] != "true" {
		return fmt.Errorf("%s is already a port of another OVS bridge; external-gw-nic must name a NIC for the external network alone", nic)
	}
	switch err := ovs.Get(ctx, br); {
	case errors.Is(err, client.ErrNotFound):
		standalone := vswitch.BridgeFailModeStandalone
		for _, m := range []model.Model{
			&vswitch.Interface{UUID: "extiface", Name: ExternalBridge, Type: "internal"},
			&vswitch.Port{UUID: "extport", Name: ExternalBridge, Interfaces: []string{"extiface"}},
			nicIface, nicPort,
			&vswitch.Bridge{UUID: "extbr", Name: ExternalBridge, DatapathType: string(datapath), FailMode: &standalone,
				OtherConfig: map[string]string{"disable-in-band": "true"},
				ExternalIDs: map[string]string{"vendor": ovsconf.Vendor}, Ports: []string{"extport", "extnicport"}},
		} {
			if err := add(ovs.Create(m)); err != nil {
				return err
			}
		}
		if err := add(ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"extbr"}})); err != nil {
			return err
		}
	case err != nil:
		return err
	default:
		var stale []string
		present := false
		for _, pu := range br.Ports {
			p := &vswitch.Port{UUID: pu}
			if ovs.Get(ctx, p) != nil {
				continue
			}
			if p.Name == nic {
				present = true
			} else if p.ExternalIDs[keyExternalNIC] == "true" {
				stale = append(stale, p.UUID)
			}
		}
		if len(stale) > 0 {
			if err := add(ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationDelete, Value: stale})); err != nil {
				return err
			}
		}
		if !present {
			for _, m := range []model.Model{nicIface, nicPort} {
				if err := add(ovs.Create(m)); err != nil {
					return err
				}
			}
			if err := add(ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"extnicport"}})); err != nil {
				return err
			}
		}
	}
	if len(ops) > 0 {
		if _, err := ovsdbconn.Transact(ctx, ovs, "ensure external bridge "+ExternalBridge+" with "+nic, ops...); err != nil {
			return err
		}
	}
	return setBridgeMapping(ctx, ovs, network, ExternalBridge)
}

// WaitExternalNIC waits until ovs-vswitchd has opened nic (an OpenFlow
// port number) and returns the interface's error when it could not.
func WaitExternalNIC(ctx context.Context, ovs *ovsdbconn.Conn, nic string) error {
	var last string
	err := ovs.WaitUntil(ctx, "ovs-vswitchd to open "+nic+" in "+ExternalBridge, func() bool {
		i := &vswitch.Interface{Name: nic}
		if ovs.Get(ctx, i) != nil {
			return false
		}
		if i.Error != nil && *i.Error != "" {
			last = *i.Error
			return true
		}
		return i.Ofport != nil && *i.Ofport > 0
	}, nil)
	if err != nil {
		return err
	}
	if last != "" {
		return fmt.Errorf("ovs-vswitchd cannot use %s: %s", nic, last)
	}
	return nil
}

// RemoveExternalBridge deletes br-external (its ports with it) and
// network's mapping from conf.db (ovs); absent is fine.
func RemoveExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn, network string) error {
	if ovs == nil {
		return nil
	}
	br := &vswitch.Bridge{Name: ExternalBridge}
	if err := ovs.Get(ctx, br); err == nil {
		root, err := ovsRoot(ctx, ovs)
		if err != nil {
			return err
		}
		ops, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{br.UUID}})
		if err != nil {
			return err
		}
		if _, err := ovsdbconn.Transact(ctx, ovs, "remove external bridge "+ExternalBridge, ops...); err != nil {
			return err
		}
	}
	return setBridgeMapping(ctx, ovs, network, "")
}

// HasExternalBridge reports whether conf.db (ovs) has br-external.
func HasExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn) bool {
	return ovs != nil && ovs.Get(ctx, &vswitch.Bridge{Name: ExternalBridge}) == nil
}

func ovsRoot(ctx context.Context, ovs *ovsdbconn.Conn) (*vswitch.OpenvSwitch, error) {
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil || len(roots) == 0 {
		return nil, fmt.Errorf("no Open_vSwitch row in conf.db (%v)", err)
	}
	return &roots[0], nil
}

// setBridgeMapping maps network to bridge in ovn-bridge-mappings ("" drops
// network's mapping), keeping the others. Other writers change the same
// key, so the write waits on the value it was computed from and starts
// over when someone else changed it first.
func setBridgeMapping(ctx context.Context, ovs *ovsdbconn.Conn, network, bridge string) error {
	for attempt := 0; ; attempt++ {
		root, err := ovsRoot(ctx, ovs)
		if err != nil {
			return err
		}
		cur := ovsconf.SplitMappings(root.ExternalIDs[ovsconf.BridgeMappings])
		next := slices.DeleteFunc(slices.Clone(cur), func(m string) bool { return strings.HasPrefix(m, network+":") })
		if bridge != "" {
			next = append(next, network+":"+bridge)
		}
		if slices.Equal(cur, next) {
			return nil
		}
		zero := 0
		old := map[any]any{}
		for k, v := range root.ExternalIDs {
			old[k] = v
		}
		guard := ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Open_vSwitch", Timeout: &zero,
			Where:   []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: root.UUID}}},
			Columns: []string{"external_ids"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"external_ids": ovsdb.OvsMap{GoMap: old}}}}
		ops := append([]ovsdb.Operation{guard}, ovsconf.SetExternalID(root, ovsconf.BridgeMappings, strings.Join(next, ","))...)
		_, err = ovsdbconn.Transact(ctx, ovs, "set "+ovsconf.BridgeMappings+" for "+network, ops...)
		var tx *ovsdbconn.TxError
		if err == nil || !errors.As(err, &tx) || !tx.TimedOut() || attempt >= 5 {
			return err
		}
		// Someone wrote external_ids since our cache showed them: wait for
		// the cache to catch up, then compute again.
		seen := maps.Clone(root.ExternalIDs)
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = ovs.WaitUntil(wctx, "conf.db external_ids to change", func() bool {
			r, err := ovsRoot(ctx, ovs)
			return err == nil && !maps.Equal(r.ExternalIDs, seen)
		}, nil)
		cancel()
	}
}

// Package ovsconf holds what more than one part of the node writes into
// the local conf.db's Open_vSwitch row and bridges: the vendor mark on the
// rows ovnhost creates, and ovn-bridge-mappings, which all the node's
// localnet bridges share (br-egw, br-external, underlay providers; its one
// writer is supervisor/ovsbridge).
package ovsconf

import (
	"strings"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// Vendor marks what ovnhost creates in the databases (external_ids:vendor).
const Vendor = "ovnhost"

// BridgeMappings is the Open_vSwitch external_ids key mapping OVN's
// physical networks to OVS bridges ("net:br,net2:br2").
const BridgeMappings = "ovn-bridge-mappings"

// SplitMappings splits an ovn-bridge-mappings value into its entries.
func SplitMappings(s string) []string {
	var out []string
	for _, m := range strings.Split(s, ",") {
		if m = strings.TrimSpace(m); m != "" {
			out = append(out, m)
		}
	}
	return out
}

// SetExternalID replaces (or with "" removes) one key of the Open_vSwitch
// row's external_ids, leaving the others to their writers.
func SetExternalID(root *vswitch.OpenvSwitch, key, value string) []ovsdb.Operation {
	where := []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: root.UUID}}}
	ops := []ovsdb.Operation{{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: where,
		Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: []any{key}}}}}}
	if value != "" {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: where,
			Mutations: []ovsdb.Mutation{{Column: "external_ids", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: map[any]any{key: value}}}}})
	}
	return ops
}

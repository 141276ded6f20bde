package ovsbridge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// maxMappingAttempts bounds SetMapping's start-overs. Each one means
// another writer changed the Open_vSwitch row's external_ids between our
// read and our write, so a handful of features writing at once settle in
// as many attempts; more means something rewrites them in a loop.
const maxMappingAttempts = 10

// Mappings reads ovn-bridge-mappings from conf.db (ovs): network -> bridge,
// every writer's (entries without a ':' are left out).
func Mappings(ctx context.Context, ovs *ovsdbconn.Conn) (map[string]string, error) {
	if ovs == nil {
		return nil, errors.New(ovsconf.BridgeMappings + ": conf.db is not connected")
	}
	root, err := openVSwitch(ctx, ovs)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range ovsconf.SplitMappings(root.ExternalIDs[ovsconf.BridgeMappings]) {
		if n, b, ok := strings.Cut(m, ":"); ok {
			out[n] = b
		}
	}
	return out, nil
}

// SetMapping maps network to bridge in ovn-bridge-mappings of conf.db
// (ovs); bridge "" drops network's mapping. Every other mapping stays, in
// its place, whoever wrote it (ovnhost's features, an administrator's
// "physnet0:br-eth0"). It is the one writer of that key in ovnhost: the
// key is one string shared by all, so the write is guarded by an OVSDB
// wait on the external_ids it was computed from, and starts over from
// the new value when another writer got there first. When it returns,
// the connection's cache (Mappings) shows the write.
func SetMapping(ctx context.Context, ovs *ovsdbconn.Conn, network, bridge string) error {
	if err := checkMapping(network, bridge); err != nil {
		return err
	}
	return setEntry(ctx, ovs, ovsconf.BridgeMappings, network, bridge)
}

// ChassisMACMappings is the key of OVN's per-chassis MAC on each provider
// network: routed traffic leaves onto a VLAN network with it rather than
// the distributed router port's MAC, which every chassis would otherwise
// send from (the physical switch would see that MAC move between ports).
const ChassisMACMappings = "ovn-chassis-mac-mappings"

// ChassisMAC is network's entry in ovn-chassis-mac-mappings ("" none).
func ChassisMAC(ctx context.Context, ovs *ovsdbconn.Conn, network string) (string, error) {
	if ovs == nil {
		return "", errors.New(ChassisMACMappings + ": conf.db is not connected")
	}
	root, err := openVSwitch(ctx, ovs)
	if err != nil {
		return "", err
	}
	for _, m := range ovsconf.SplitMappings(root.ExternalIDs[ChassisMACMappings]) {
		if n, mac, ok := strings.Cut(m, ":"); ok && n == network {
			return mac, nil
		}
	}
	return "", nil
}

// SetChassisMAC sets network's MAC in ovn-chassis-mac-mappings (mac nil:
// drops it), written as SetMapping writes bridge mappings.
func SetChassisMAC(ctx context.Context, ovs *ovsdbconn.Conn, network string, mac net.HardwareAddr) error {
	if err := checkMapping(network, ""); err != nil {
		return err
	}
	if mac != nil && (len(mac) != 6 || mac[0]&1 == 1) {
		return fmt.Errorf("%s for %s: %s is not a unicast Ethernet MAC", ChassisMACMappings, network, mac)
	}
	v := ""
	if mac != nil {
		v = mac.String()
	}
	return setEntry(ctx, ovs, ChassisMACMappings, network, v)
}

// setEntry sets network's value in the mappings of key ("" drops it).
func setEntry(ctx context.Context, ovs *ovsdbconn.Conn, key, network, value string) error {
	if ovs == nil {
		return fmt.Errorf("%s for %s: conf.db is not connected", key, network)
	}
	for attempt := 1; ; attempt++ {
		root, err := openVSwitch(ctx, ovs)
		if err != nil {
			return fmt.Errorf("%s for %s: %w", key, network, err)
		}
		wrote, err := setEntryFrom(ctx, ovs, root, key, network, value)
		if wrote {
			// Return once the cache has it, so that what the caller reads
			// next (and its next write) starts from it: the guard made our
			// write the first change after root's value, and the cache
			// takes changes in order. The write is done either way.
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_ = ovs.WaitUntil(wctx, "our "+key+" in the cache", func() bool { return changedSince(ctx, ovs, root) }, nil)
			cancel()
		}
		var tx *ovsdbconn.TxError
		if err == nil || !errors.As(err, &tx) || !tx.TimedOut() {
			return err
		}
		if attempt == maxMappingAttempts {
			return fmt.Errorf("%s for %s: the Open_vSwitch row's external_ids changed under each of %d attempts to write it; something keeps rewriting them (watch them with ovsdb-client monitor Open_vSwitch external_ids) and stop it",
				key, network, attempt)
		}
		// Someone wrote external_ids after our cache showed them: let
		// the cache catch up, then compute again.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		_ = ovs.WaitUntil(wctx, "conf.db's external_ids to change", func() bool { return changedSince(ctx, ovs, root) }, nil)
		cancel()
		if ctx.Err() != nil {
			return fmt.Errorf("%s for %s: %w", key, network, ctx.Err())
		}
	}
}

// changedSince reports whether the cache's external_ids differ from root's.
func changedSince(ctx context.Context, ovs *ovsdbconn.Conn, root *vswitch.OpenvSwitch) bool {
	r, err := openVSwitch(ctx, ovs)
	return err == nil && !maps.Equal(r.ExternalIDs, root.ExternalIDs)
}

// setEntryFrom writes network's entry of key computed from root (the
// cache's Open_vSwitch row), in one transaction that first waits, without
// blocking, for external_ids to still be root's: the server refuses it
// (a *ovsdbconn.TxError that TimedOut) when they changed since. wrote:
// the server took the write.
func setEntryFrom(ctx context.Context, ovs *ovsdbconn.Conn, root *vswitch.OpenvSwitch, key, network, value string) (wrote bool, err error) {
	cur := ovsconf.SplitMappings(root.ExternalIDs[key])
	next := withMapping(cur, network, value)
	if strings.Join(cur, ",") == strings.Join(next, ",") {
		return false, nil
	}
	zero := 0
	old := map[any]any{}
	for k, v := range root.ExternalIDs {
		old[k] = v
	}
	guard := ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Open_vSwitch", Timeout: &zero,
		Where:   []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: root.UUID}}},
		Columns: []string{"external_ids"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"external_ids": ovsdb.OvsMap{GoMap: old}}}}
	ops := append([]ovsdb.Operation{guard}, ovsconf.SetExternalID(root, key, strings.Join(next, ","))...)
	what := "set " + network + " to " + value + " in " + key
	if value == "" {
		what = "drop " + network + " from " + key
	}
	_, err = ovsdbconn.Transact(ctx, ovs, what, ops...)
	return err == nil, err
}

// withMapping is mappings with network mapped to bridge ("": dropped): a
// network already there keeps its place, a new one goes last, duplicates
// of network go.
func withMapping(mappings []string, network, bridge string) []string {
	var out []string
	placed := bridge == ""
	for _, m := range mappings {
		if n, _, ok := strings.Cut(m, ":"); !ok || n != network {
			out = append(out, m)
		} else if !placed {
			out = append(out, network+":"+bridge)
			placed = true
		}
	}
	if !placed {
		out = append(out, network+":"+bridge)
	}
	return out
}

// checkMapping refuses names that would corrupt the key for everyone.
func checkMapping(network, bridge string) error {
	bad := func(name string) bool { return name == "" || strings.ContainsAny(name, ":, \t\n") }
	which := ""
	switch {
	case bad(network):
		which = "the network name"
	case bridge != "" && bad(bridge):
		which = "the bridge name"
	default:
		return nil
	}
	return fmt.Errorf("%s: cannot map network %q to bridge %q: %s must be non-empty and hold no ':', ',' or spaces", ovsconf.BridgeMappings, network, bridge, which)
}

package ovnnb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// GatewayPort is a distributed gateway port: a router port on its own small
// switch whose localnet port reaches the gateway node's host (a bridge of
// that node mapped to Network). HA_Chassis_Group Name ranks Chassis: OVN
// binds the port's chassisredirect (cr-) port to the highest-priority
// chassis that its BFD sessions see alive, without anyone writing the NB.
type GatewayPort struct {
	Router  string
	Switch  string // the small switch, also the HA group's name
	Network string // localnet network_name (ovn-bridge-mappings key)
	// Addresses are the router port's networks, one per family at most.
	Addresses []netip.Prefix
	Chassis   []HAChassis // highest priority first
	IDs       map[string]string
}

// HAChassis is one chassis of a gateway's HA group.
type HAChassis struct {
	Name     string // Chassis name (the node's OVS system-id)
	Priority int
}

// LocalnetPortName is the localnet port of a gateway switch (an underlay
// subnet's is SubnetLocalnetPortName).
func LocalnetPortName(sw string) string { return sw + "-localnet" }

// EnsureGatewayPort creates or updates the switch with its router port
// pair, the localnet port and the HA chassis group, and attaches the group
// to the router port.
func (c *Client) EnsureGatewayPort(ctx context.Context, g GatewayPort) error {
	if len(g.Chassis) == 0 {
		return fmt.Errorf("ovnnb: gateway port on %q: no chassis; name at least one gateway node", g.Switch)
	}
	if len(g.Addresses) == 0 {
		return fmt.Errorf("ovnnb: gateway port on %q: no address", g.Switch)
	}
	var cidrs []netip.Prefix
	var gws []netip.Addr
	for _, a := range g.Addresses {
		cidrs, gws = append(cidrs, a.Masked()), append(gws, a.Addr())
	}
	if err := c.EnsureSwitch(ctx, Switch{Name: g.Switch, Router: g.Router, CIDRs: cidrs, Gateways: gws,
		Localnet: &Localnet{Port: LocalnetPortName(g.Switch), Network: g.Network}}); err != nil {
		return err
	}
	// HA_Chassis_Group is not in the monitored tables: read from the server.
	ops, groupRef, err := c.haGroupOps(ctx, g.Switch, g.Chassis, g.IDs)
	if err != nil {
		return err
	}
	lrpName := RouterPortName(g.Router, g.Switch)
	lrp := &nbdb.LogicalRouterPort{Name: lrpName}
	if err := c.cl.Get(ctx, lrp); err != nil {
		return fmt.Errorf("ovnnb: gateway router port %s: %w", lrpName, err)
	}
	ids := vendorIDs(maps.Clone(g.IDs))
	ids[KeySwitch] = g.Switch
	if lrp.HaChassisGroup == nil || *lrp.HaChassisGroup != groupRef || !maps.Equal(lrp.ExternalIDs, ids) {
		ref := ovsdb.OvsSet{GoSet: []any{uuidOrName(groupRef)}}
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.LogicalRouterPortTable,
			Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: lrpName}},
			Row:   ovsdb.Row{"ha_chassis_group": ref, "external_ids": ovsdb.OvsMap{GoMap: anyMap(ids)}}})
	}
	_, err = c.transact(ctx, "ensure gateway port "+lrpName, ops)
	return err
}

func uuidOrName(s string) ovsdb.UUID {
	return ovsdb.UUID{GoUUID: s}
}

func anyMap(m map[string]string) map[any]any {
	out := make(map[any]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

type haGroupRow struct {
	uuid    string
	chassis []HAChassis // highest priority first
}

// haGroup reads an HA chassis group and its chassis by name (nil: none).
func (c *Client) haGroup(ctx context.Context, name string) (*haGroupRow, error) {
	res, err := c.transact(ctx, "read HA chassis group "+name, []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: nbdb.HAChassisGroupTable,
		Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}}, Columns: []string{"_uuid", "ha_chassis"}}})
	if err != nil {
		return nil, err
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return nil, nil
	}
	row := res[0].Rows[0]
	g := &haGroupRow{}
	if u, ok := row["_uuid"].(ovsdb.UUID); ok {
		g.uuid = u.GoUUID
	}
	var members []any
	switch v := row["ha_chassis"].(type) {
	case ovsdb.OvsSet:
		members = v.GoSet
	case ovsdb.UUID:
		members = []any{v}
	}
	if len(members) == 0 {
		return g, nil
	}
	// One select per member: _uuid is a scalar column.
	var ops []ovsdb.Operation
	for _, m := range members {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: nbdb.HAChassisTable,
			Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: m}}, Columns: []string{"chassis_name", "priority"}})
	}
	all, err := c.transact(ctx, "read HA chassis of "+name, ops)
	if err != nil {
		return nil, err
	}
	for _, r := range all {
		for _, row := range r.Rows {
			name, _ := row["chassis_name"].(string)
			prio := 0
			switch p := row["priority"].(type) {
			case int:
				prio = p
			case float64:
				prio = int(p)
			}
			g.chassis = append(g.chassis, HAChassis{Name: name, Priority: prio})
		}
	}
	slices.SortFunc(g.chassis, func(a, b HAChassis) int { return b.Priority - a.Priority })
	return g, nil
}

// DeleteGatewayPort removes the gateway switch (its ports with it), its
// router port and its HA chassis group; absent parts are fine.
func (c *Client) DeleteGatewayPort(ctx context.Context, router, sw string) error {
	if err := c.DeleteSwitch(ctx, sw, router); err != nil {
		return err
	}
	_, err := c.transact(ctx, "delete HA chassis group "+sw, []ovsdb.Operation{{Op: ovsdb.OperationDelete, Table: nbdb.HAChassisGroupTable,
		Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: sw}}}})
	return err
}

// GatewayPorts lists the router's ovnhost router ports whose external IDs
// contain match, by name, with their networks.
func (c *Client) GatewayPorts(ctx context.Context, match map[string]string) (map[string][]netip.Prefix, error) {
	var lrps []nbdb.LogicalRouterPort
	if err := c.cl.WhereCache(func(p *nbdb.LogicalRouterPort) bool { return owned(p.ExternalIDs, match) }).List(ctx, &lrps); err != nil {
		return nil, err
	}
	out := map[string][]netip.Prefix{}
	for _, p := range lrps {
		var nets []netip.Prefix
		for _, n := range p.Networks {
			if pfx, err := netip.ParsePrefix(n); err == nil {
				nets = append(nets, pfx)
			}
		}
		out[p.Name] = nets
	}
	return out, nil
}

// SetBFDOptions sets NB_Global options bfd-min-rx, bfd-min-tx (ms) and
// bfd-mult: ovn-controller applies them to the BFD sessions it runs over
// tunnels to HA chassis, which decide how fast a gateway failure is seen.
func (c *Client) SetBFDOptions(ctx context.Context, minRx, minTx, mult int) error {
	want := map[string]string{"bfd-min-rx": strconv.Itoa(minRx), "bfd-min-tx": strconv.Itoa(minTx), "bfd-mult": strconv.Itoa(mult)}
	res, err := c.transact(ctx, "read NB_Global options", []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: nbdb.NBGlobalTable,
		Where: []ovsdb.Condition{}, Columns: []string{"_uuid", "options"}}})
	if err != nil {
		return err
	}
	if len(res) == 0 || len(res[0].Rows) == 0 {
		return errors.New("ovnnb: no NB_Global row: is ovn-northd's database initialised?")
	}
	row, ok := res[0].Rows[0]["_uuid"].(ovsdb.UUID)
	if !ok {
		return errors.New("ovnnb: NB_Global row without _uuid in a select answer")
	}
	// A mutate needs a where clause: an empty one is dropped from the
	// JSON and the server refuses the operation.
	where := []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: row}}
	if m, ok := res[0].Rows[0]["options"].(ovsdb.OvsMap); ok {
		same := true
		for k, v := range want {
			if m.GoMap[k] != v {
				same = false
			}
		}
		if same {
			return nil
		}
	}
	keys := []any{}
	for k := range want {
		keys = append(keys, k)
	}
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable, Where: where,
			Mutations: []ovsdb.Mutation{{Column: "options", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: keys}}}},
		{Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable, Where: where,
			Mutations: []ovsdb.Mutation{{Column: "options", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: anyMap(want)}}}},
	}
	_, err = c.transact(ctx, "set NB_Global BFD options", ops)
	return err
}

// SetStaticMACBindings makes port's Static_MAC_Binding rows exactly want
// (IP -> MAC; nil removes them all). The table has no external IDs: the
// router port, which ovnhost owns, says whose they are.
func (c *Client) SetStaticMACBindings(ctx context.Context, port string, want map[netip.Addr]string) error {
	res, err := c.transact(ctx, "read static MAC bindings of "+port, []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: nbdb.StaticMACBindingTable,
		Where: []ovsdb.Condition{{Column: "logical_port", Function: ovsdb.ConditionEqual, Value: port}}, Columns: []string{"_uuid", "ip", "mac"}}})
	if err != nil {
		return err
	}
	have := map[netip.Addr]bool{}
	var ops []ovsdb.Operation
	if len(res) > 0 {
		for _, row := range res[0].Rows {
			ipStr, _ := row["ip"].(string)
			mac, _ := row["mac"].(string)
			ip, err := netip.ParseAddr(ipStr)
			if err == nil && want[ip] == mac && !have[ip] {
				have[ip] = true
				continue
			}
			if u, ok := row["_uuid"].(ovsdb.UUID); ok {
				ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: nbdb.StaticMACBindingTable,
					Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: u}}})
			}
		}
	}
	for ip, mac := range want {
		if !have[ip] {
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.StaticMACBindingTable,
				Row: ovsdb.Row{"logical_port": port, "ip": ip.String(), "mac": mac, "override_dynamic_mac": false}})
		}
	}
	_, err = c.transact(ctx, "set static MAC bindings of "+port, ops)
	return err
}

// GatewayAttachment is another router's distributed gateway port on an
// existing gateway switch (a custom VPC's port on ovn-external): the
// switch, its localnet port and the other routers on it are left as they
// are. Group names its own HA chassis group.
type GatewayAttachment struct {
	Router  string
	Switch  string // the existing gateway switch
	Group   string // its HA chassis group's name
	Address netip.Prefix
	MAC     string // "" = RouterPortMAC of the port's name
	Chassis []HAChassis
	IDs     map[string]string // on the router port, its switch port and the group
}

// EnsureGatewayAttachment creates or updates the router port
// "<router>-<switch>" with Address and MAC, its switch port
// "<switch>-<router>" (announcing the router's NAT addresses from the
// active chassis) and its HA chassis group, in one transaction. The
// router and the switch must exist.
func (c *Client) EnsureGatewayAttachment(ctx context.Context, g GatewayAttachment) error {
	switch {
	case len(g.Chassis) == 0:
		return fmt.Errorf("ovnnb: gateway port of %q on %q: no chassis; name at least one gateway node", g.Router, g.Switch)
	case !g.Address.IsValid():
		return fmt.Errorf("ovnnb: gateway port of %q on %q: no address", g.Router, g.Switch)
	case g.Group == "":
		return fmt.Errorf("ovnnb: gateway port of %q on %q: no HA chassis group name", g.Router, g.Switch)
	}
	r, err := c.router(ctx, g.Router)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("ovnnb: gateway port on %q: router %q does not exist", g.Switch, g.Router)
	}
	ls, err := c.lswitch(ctx, g.Switch)
	if err != nil {
		return err
	}
	if ls == nil {
		return fmt.Errorf("ovnnb: gateway port of %q: switch %q does not exist (the external gateway is not programmed)", g.Router, g.Switch)
	}
	lrpName, lspName := RouterPortName(g.Router, g.Switch), SwitchRouterPortName(g.Router, g.Switch)
	mac := g.MAC
	if mac == "" {
		mac = RouterPortMAC(lrpName)
	}
	ids := vendorIDs(maps.Clone(g.IDs))
	ids[KeySwitch] = g.Switch
	ops, groupRef, err := c.haGroupOps(ctx, g.Group, g.Chassis, g.IDs)
	if err != nil {
		return err
	}
	nets := []string{g.Address.String()}
	lrp := &nbdb.LogicalRouterPort{Name: lrpName}
	err = c.cl.Get(ctx, lrp)
	switch {
	case errors.Is(err, client.ErrNotFound):
		ref := groupRef
		lrp = &nbdb.LogicalRouterPort{UUID: "newgwlrp", Name: lrpName, MAC: mac, Networks: nets, ExternalIDs: ids, HaChassisGroup: &ref}
		o, err := c.cl.Create(lrp)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		o, err = c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{lrp.UUID}})
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	case err != nil:
		return err
	default:
		if !slices.Contains(r.Ports, lrp.UUID) {
			return fmt.Errorf("ovnnb: router port %s exists on another router; remove it or rename router %q", lrpName, g.Router)
		}
		if lrp.MAC != mac || !slices.Equal(lrp.Networks, nets) || !maps.Equal(lrp.ExternalIDs, ids) || lrp.HaChassisGroup == nil || *lrp.HaChassisGroup != groupRef {
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.LogicalRouterPortTable,
				Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: lrp.UUID}}},
				Row: ovsdb.Row{"mac": mac, "networks": ovsdb.OvsSet{GoSet: []any{nets[0]}}, "external_ids": ovsdb.OvsMap{GoMap: anyMap(ids)},
					"ha_chassis_group": ovsdb.OvsSet{GoSet: []any{uuidOrName(groupRef)}}}})
		}
	}
	opts := map[string]string{"router-port": lrpName, "nat-addresses": "router"}
	lsp := &nbdb.LogicalSwitchPort{Name: lspName}
	err = c.cl.Get(ctx, lsp)
	switch {
	case errors.Is(err, client.ErrNotFound):
		lsp = &nbdb.LogicalSwitchPort{UUID: "newgwlsp", Name: lspName, Type: "router", Addresses: []string{"router"}, Options: opts, ExternalIDs: ids}
		o, err := c.cl.Create(lsp)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		o, err = c.mutateSwitchPorts(g.Switch, ovsdb.MutateOperationInsert, lsp.UUID)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	case err != nil:
		return err
	default:
		// The cache has no switch ports column: the port's own IDs say
		// where it is (a port no switch holds is gone with its switch).
		if lsp.ExternalIDs[KeySwitch] != g.Switch {
			return fmt.Errorf("ovnnb: switch port %s exists and is not ovnhost's port on %s; remove it", lspName, g.Switch)
		}
		if lsp.Type != "router" || !maps.Equal(lsp.Options, opts) || !maps.Equal(lsp.ExternalIDs, ids) || !slices.Equal(lsp.Addresses, []string{"router"}) {
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.LogicalSwitchPortTable,
				Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: lsp.UUID}}},
				Row: ovsdb.Row{"type": "router", "addresses": ovsdb.OvsSet{GoSet: []any{"router"}}, "options": ovsdb.OvsMap{GoMap: anyMap(opts)},
					"external_ids": ovsdb.OvsMap{GoMap: anyMap(ids)}}})
		}
	}
	if len(ops) == 0 {
		return nil
	}
	_, err = c.transact(ctx, "ensure gateway port "+lrpName, ops)
	return err
}

// haGroupOps are the operations that make HA chassis group name hold
// exactly chassis (a changed group is replaced), and the reference to use
// for it in the same transaction.
func (c *Client) haGroupOps(ctx context.Context, name string, chassis []HAChassis, ids map[string]string) ([]ovsdb.Operation, string, error) {
	cur, err := c.haGroup(ctx, name)
	if err != nil {
		return nil, "", err
	}
	if cur != nil && slices.Equal(cur.chassis, chassis) {
		return nil, cur.uuid, nil
	}
	var ops []ovsdb.Operation
	if cur != nil {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: nbdb.HAChassisGroupTable,
			Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}}})
	}
	var refs []any
	for i, ch := range chassis {
		id := "hach" + strconv.Itoa(i)
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.HAChassisTable, UUIDName: id,
			Row: ovsdb.Row{"chassis_name": ch.Name, "priority": ch.Priority}})
		refs = append(refs, ovsdb.UUID{GoUUID: id})
	}
	ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationInsert, Table: nbdb.HAChassisGroupTable, UUIDName: "hagroup",
		Row: ovsdb.Row{"name": name, "ha_chassis": ovsdb.OvsSet{GoSet: refs},
			"external_ids": ovsdb.OvsMap{GoMap: anyMap(vendorIDs(ids))}}})
	return ops, "hagroup", nil
}

// DeleteGatewayAttachment removes a router's port on a gateway switch, its
// switch port and HA chassis group; absent parts (the router too) are fine.
func (c *Client) DeleteGatewayAttachment(ctx context.Context, router, sw, group string) error {
	var ops []ovsdb.Operation
	lrp := &nbdb.LogicalRouterPort{Name: RouterPortName(router, sw)}
	switch err := c.cl.Get(ctx, lrp); {
	case err == nil:
		// The port lets go of the group first: ovsdb-server checks the
		// group's references before it collects the unreferenced port.
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: nbdb.LogicalRouterPortTable,
			Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: lrp.UUID}}},
			Row:   ovsdb.Row{"ha_chassis_group": ovsdb.OvsSet{GoSet: []any{}}}})
		if r, err := c.router(ctx, router); err != nil {
			return err
		} else if r != nil && slices.Contains(r.Ports, lrp.UUID) {
			o, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{lrp.UUID}})
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
	case !errors.Is(err, client.ErrNotFound):
		return err
	}
	lsp := &nbdb.LogicalSwitchPort{Name: SwitchRouterPortName(router, sw)}
	switch err := c.cl.Get(ctx, lsp); {
	case err == nil:
		ops = append(ops, unrefPort(lsp.UUID)...)
	case !errors.Is(err, client.ErrNotFound):
		return err
	}
	ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: nbdb.HAChassisGroupTable,
		Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: group}}})
	_, err := c.transact(ctx, "delete gateway port "+lrp.Name, ops)
	return err
}

// GatewayAttachments are the values of external_ids key on the ovnhost
// router ports and switch ports of gateway switch sw that carry it (the
// routers EnsureGatewayAttachment gave a port there with key: router in
// their IDs). Both sides are read: a router or a switch deleted meanwhile
// leaves the other side to be found.
func (c *Client) GatewayAttachments(ctx context.Context, sw, key string) ([]string, error) {
	mine := func(ids map[string]string) bool {
		return ids[KeyVendor] == Vendor && ids[KeySwitch] == sw && ids[key] != ""
	}
	var lsps []nbdb.LogicalSwitchPort
	if err := c.cl.WhereCache(func(p *nbdb.LogicalSwitchPort) bool { return p.Type == "router" && mine(p.ExternalIDs) }).List(ctx, &lsps); err != nil {
		return nil, err
	}
	var lrps []nbdb.LogicalRouterPort
	if err := c.cl.WhereCache(func(p *nbdb.LogicalRouterPort) bool { return mine(p.ExternalIDs) }).List(ctx, &lrps); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range lsps {
		out = append(out, p.ExternalIDs[key])
	}
	for _, p := range lrps {
		out = append(out, p.ExternalIDs[key])
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

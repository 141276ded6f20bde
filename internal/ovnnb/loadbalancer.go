package ovnnb

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// LoadBalancer is an OVN load balancer row: VIPs "ip:port" (IPv6 in
// brackets) to backends "ip:port,ip:port" ("" = none: with
// options:reject=true OVN then refuses connections).
type LoadBalancer struct {
	Name     string
	Protocol string // "tcp", "udp" or "sctp"
	VIPs     map[string]string
	Options  map[string]string
	// SelectionFields pick the backend by a hash of these fields (OVN's
	// selection_fields, e.g. "ip_src"); empty: a hash of the 5-tuple.
	SelectionFields []string
	ExternalIDs     map[string]string // added to vendor
}

// lbState tracks what the libovsdb cache cannot know yet: load balancers
// this client created whose insert has not come back through the monitor
// (a second sync of the same Service right after the first would otherwise
// create a duplicate, Load_Balancer names not being unique), and the load
// balancer groups to attach to switches and routers created later.
type lbState struct {
	mu      sync.Mutex
	pending map[string]pendingLB // name -> created row not yet in the cache
	groups  map[string]string    // group name -> UUID, attached by AttachLBGroup
}

type pendingLB struct {
	uuid string
	at   time.Time
}

// pendingTTL bounds how long a created row is trusted without the cache
// showing it (it normally shows within milliseconds); afterwards the row is
// taken as deleted by someone else and created again.
const pendingTTL = 30 * time.Second

// lbIndexes is the client index that lets load balancers be found by name
// without scanning (and cloning) the whole table.
var lbIndexes = nameIndex

// indexedPortKeys are the external_ids keys of Logical_Switch_Port with a
// client index: the owner keys Ports is most often asked for.
var indexedPortKeys = []string{KeyPod, KeyNode}

// clientIndexes are the NB client's indexes: load balancers by name, logical
// switch ports by owner key, address sets and port groups by owning NetworkPolicy, switches and routers by name.
var clientIndexes = map[string][]model.ClientIndex{
	nbdb.LoadBalancerTable:      lbIndexes,
	nbdb.LogicalSwitchPortTable: portIndexes(),
	nbdb.AddressSetTable:        policyIndex,
	nbdb.PortGroupTable:         policyIndex,
	nbdb.LogicalSwitchTable:     nameIndex,
	nbdb.LogicalRouterTable:     nameIndex,
}

var nameIndex = []model.ClientIndex{{Columns: []model.ColumnKey{{Column: "name"}}}}

var policyIndex = []model.ClientIndex{{Columns: []model.ColumnKey{{Column: "external_ids", Key: KeyPolicy}}}}

func portIndexes() []model.ClientIndex {
	var out []model.ClientIndex
	for _, k := range indexedPortKeys {
		key := k
		out = append(out, model.ClientIndex{Columns: []model.ColumnKey{{Column: "external_ids", Key: key}}})
	}
	return out
}

// lbByName returns the UUID and current row of the load balancer called
// name (row nil when only a pending create is known), or "" when none.
func (c *Client) lbByName(name string) (string, *nbdb.LoadBalancer, error) {
	t := c.cl.Cache().Table(nbdb.LoadBalancerTable)
	if t == nil {
		return "", nil, errors.New("ovnnb: Load_Balancer is not monitored")
	}
	rows, err := t.RowsByModels([]model.Model{&nbdb.LoadBalancer{Name: name}})
	if err != nil {
		return "", nil, err
	}
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	for uuid, m := range rows {
		if lb, ok := m.(*nbdb.LoadBalancer); ok && lb.Name == name {
			delete(c.lbs.pending, name)
			return uuid, lb, nil
		}
	}
	if p, ok := c.lbs.pending[name]; ok {
		if time.Since(p.at) < pendingTTL {
			return p.uuid, nil, nil
		}
		delete(c.lbs.pending, name)
	}
	return "", nil, nil
}

// EnsureLBGroup creates the load balancer group if missing and returns its UUID.
func (c *Client) EnsureLBGroup(ctx context.Context, name string) (string, error) {
	g := &nbdb.LoadBalancerGroup{Name: name}
	if err := c.cl.Get(ctx, g); err == nil {
		return g.UUID, nil
	}
	// Guarded by a wait for no group of that name: concurrent callers create it once.
	zero := 0
	wait := ovsdb.Operation{Op: ovsdb.OperationWait, Table: nbdb.LoadBalancerGroupTable, Timeout: &zero,
		Where:   []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}},
		Columns: []string{"name"}, Until: string(ovsdb.WaitConditionNotEqual), Rows: []ovsdb.Row{{"name": name}}}
	ins, err := c.cl.Create(&nbdb.LoadBalancerGroup{UUID: "newlbg", Name: name})
	if err != nil {
		return "", err
	}
	res, err := c.transact(ctx, "create load balancer group "+name, append([]ovsdb.Operation{wait}, ins...))
	var tx *ovsdbconn.TxError
	if errors.As(err, &tx) && tx.TimedOut() {
		// Created by someone else a moment ago: read its UUID from the server.
		sel := []ovsdb.Operation{{Op: ovsdb.OperationSelect, Table: nbdb.LoadBalancerGroupTable, Columns: []string{"_uuid"},
			Where: []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}}}}
		res, err = c.transact(ctx, "read load balancer group "+name, sel)
		if err != nil {
			return "", err
		}
		if len(res) == 1 && len(res[0].Rows) == 1 {
			if u, ok := res[0].Rows[0]["_uuid"].(ovsdb.UUID); ok {
				return u.GoUUID, nil
			}
		}
		return "", fmt.Errorf("ovnnb: load balancer group %q exists but its UUID could not be read", name)
	}
	if err != nil {
		return "", err
	}
	return res[1].UUID.GoUUID, nil
}

// AttachLBGroup attaches the group (EnsureLBGroup's UUID) to every logical
// switch of the default VPC and to the named routers, in one transaction, and remembers it so
// that EnsureSwitch and EnsureRouter attach it to switches and routers
// created afterwards.
func (c *Client) AttachLBGroup(ctx context.Context, group, uuid string, routers ...string) error {
	c.lbs.mu.Lock()
	if c.lbs.groups == nil {
		c.lbs.groups = map[string]string{}
	}
	c.lbs.groups[group] = uuid
	c.lbs.mu.Unlock()
	var ops []ovsdb.Operation
	if t := c.cl.Cache().Table(nbdb.LogicalSwitchTable); t != nil {
		for _, m := range t.RowsShallow() { // read-only rows
			// Not the switches of a custom VPC (external_ids:vpc): the
			// cluster's Services would reach across the VPC's isolation.
			if ls, ok := m.(*nbdb.LogicalSwitch); ok && ls.ExternalIDs[KeyVPC] == "" && !slices.Contains(ls.LoadBalancerGroup, uuid) {
				ops = append(ops, mutateGroupRef(nbdb.LogicalSwitchTable, ls.Name, uuid))
			}
		}
	}
	for _, r := range routers {
		lr, err := c.router(ctx, r)
		if err != nil {
			return err
		}
		if lr == nil {
			return fmt.Errorf("ovnnb: attaching load balancer group %q: router %q does not exist; call EnsureRouter first", group, r)
		}
		if !slices.Contains(lr.LoadBalancerGroup, uuid) {
			ops = append(ops, mutateGroupRef(nbdb.LogicalRouterTable, r, uuid))
		}
	}
	_, err := c.transact(ctx, "attach load balancer group "+group, ops)
	return err
}

// mutateGroupRef inserts a load balancer group into a switch's or router's
// load_balancer_group, by name (written out: libovsdb's conditional API
// would clone the row).
func mutateGroupRef(table, name, uuid string) ovsdb.Operation {
	return ovsdb.Operation{
		Op: ovsdb.OperationMutate, Table: table,
		Where:     []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}},
		Mutations: []ovsdb.Mutation{{Column: "load_balancer_group", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: uuid}}}}},
	}
}

// attachedGroups are the UUIDs of the groups AttachLBGroup was called for.
func (c *Client) attachedGroups() []string {
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	out := make([]string, 0, len(c.lbs.groups))
	for _, u := range c.lbs.groups {
		out = append(out, u)
	}
	slices.Sort(out)
	return out
}

// missingGroups are the attached groups not in have.
func (c *Client) missingGroups(have []string) []string {
	var out []string
	for _, u := range c.attachedGroups() {
		if !slices.Contains(have, u) {
			out = append(out, u)
		}
	}
	return out
}

// SetLoadBalancers makes the load balancers called names exactly want
// (each of want must be named in names): missing ones are created and put in
// the group, changed ones updated, the rest of names deleted, all in one
// transaction. A caller owns its names (e.g. a Service's, one per protocol).
func (c *Client) SetLoadBalancers(ctx context.Context, group string, names []string, want []LoadBalancer) error {
	err := c.setLBs(ctx, lbHolder{table: nbdb.LoadBalancerGroupTable, name: group}, names, want)
	var tx *ovsdbconn.TxError
	if errors.As(err, &tx) && tx.TimedOut() {
		return fmt.Errorf("ovnnb: load balancer group %q does not exist; call EnsureLBGroup first", group)
	}
	return err
}

// SetRouterLoadBalancers is SetLoadBalancers for load balancers held by a
// logical router's own load_balancer column (a custom VPC's port
// forwards, which no other datapath may see). With router "" the rows of
// names are only deleted (their router is gone).
func (c *Client) SetRouterLoadBalancers(ctx context.Context, router string, names []string, want []LoadBalancer) error {
	if router == "" && len(want) > 0 {
		return fmt.Errorf("ovnnb: load balancers %v: no router to hold them", names)
	}
	err := c.setLBs(ctx, lbHolder{table: nbdb.LogicalRouterTable, name: router}, names, want)
	var tx *ovsdbconn.TxError
	if errors.As(err, &tx) && tx.TimedOut() {
		return fmt.Errorf("ovnnb: router %q does not exist; create it before its load balancers", router)
	}
	return err
}

// lbHolder is the row whose load_balancer column holds a set of load
// balancers: a Load_Balancer_Group or a Logical_Router, by name ("": none).
type lbHolder struct{ table, name string }

func (h lbHolder) mutate(op ovsdb.Mutator, uuid string) ovsdb.Operation {
	return ovsdb.Operation{
		Op: ovsdb.OperationMutate, Table: h.table,
		Where:     []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: h.name}},
		Mutations: []ovsdb.Mutation{{Column: "load_balancer", Mutator: op, Value: ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: uuid}}}}},
	}
}

func (c *Client) setLBs(ctx context.Context, holder lbHolder, names []string, want []LoadBalancer) error {
	byName := map[string]*LoadBalancer{}
	for i := range want {
		lb := &want[i]
		if !slices.Contains(names, lb.Name) {
			return fmt.Errorf("ovnnb: load balancer %q is not among the names %v being set; pass it in names", lb.Name, names)
		}
		if lb.Protocol != nbdb.LoadBalancerProtocolTCP && lb.Protocol != nbdb.LoadBalancerProtocolUDP && lb.Protocol != nbdb.LoadBalancerProtocolSCTP {
			return fmt.Errorf("ovnnb: load balancer %q: protocol %q is not tcp, udp or sctp", lb.Name, lb.Protocol)
		}
		byName[lb.Name] = lb
	}
	var ops []ovsdb.Operation
	var created, deleted []string
	for _, name := range names {
		uuid, cur, err := c.lbByName(name)
		if err != nil {
			return err
		}
		w := byName[name]
		switch {
		case w == nil && uuid == "":
		case w == nil:
			if holder.name != "" {
				ops = append(ops, holder.mutate(ovsdb.MutateOperationDelete, uuid))
			}
			ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: nbdb.LoadBalancerTable,
				Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: uuid}}}})
			deleted = append(deleted, name)
		case uuid == "":
			proto := w.Protocol
			row := &nbdb.LoadBalancer{UUID: "newlb" + fmt.Sprint(len(created)), Name: name, Protocol: &proto,
				Vips: nonNil(w.VIPs), Options: nonNil(w.Options), SelectionFields: selectionFields(w.SelectionFields), ExternalIDs: vendorIDs(w.ExternalIDs)}
			o, err := c.cl.Create(row)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
			ops = append(ops, holder.mutate(ovsdb.MutateOperationInsert, row.UUID))
			created = append(created, name)
		default:
			ids := vendorIDs(w.ExternalIDs)
			if cur != nil && cur.Protocol != nil && *cur.Protocol == w.Protocol && maps.Equal(cur.Vips, w.VIPs) &&
				maps.Equal(cur.Options, w.Options) && maps.Equal(cur.ExternalIDs, ids) && sameFields(cur.SelectionFields, w.SelectionFields) {
				continue
			}
			proto := w.Protocol
			upd := &nbdb.LoadBalancer{UUID: uuid, Name: name, Protocol: &proto, Vips: nonNil(w.VIPs), Options: nonNil(w.Options),
				SelectionFields: selectionFields(w.SelectionFields), ExternalIDs: ids}
			o, err := c.cl.Where(upd).Update(upd, &upd.Protocol, &upd.Vips, &upd.Options, &upd.SelectionFields, &upd.ExternalIDs)
			if err != nil {
				return err
			}
			ops = append(ops, o...)
		}
	}
	if len(ops) == 0 {
		return nil
	}
	// First: the holder must exist, or the transaction would leave rows
	// nothing holds (Load_Balancer is a root table, nothing collects them).
	// Its absence fails the wait: a TxError that times out.
	if holder.name != "" {
		zero := 0
		guard := ovsdb.Operation{Op: ovsdb.OperationWait, Table: holder.table, Timeout: &zero,
			Where:   []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: holder.name}},
			Columns: []string{"name"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"name": holder.name}}}
		ops = append([]ovsdb.Operation{guard}, ops...)
	}
	res, err := c.transact(ctx, fmt.Sprintf("set load balancers %v of %s %s", names, holder.table, holder.name), ops)
	if err != nil {
		return err
	}
	c.lbs.mu.Lock()
	defer c.lbs.mu.Unlock()
	if c.lbs.pending == nil {
		c.lbs.pending = map[string]pendingLB{}
	}
	for _, n := range deleted {
		delete(c.lbs.pending, n)
	}
	for i, op := range ops {
		if op.Op == ovsdb.OperationInsert && op.Table == nbdb.LoadBalancerTable && i < len(res) {
			if n, ok := op.Row["name"].(string); ok {
				c.lbs.pending[n] = pendingLB{uuid: res[i].UUID.GoUUID, at: time.Now()}
			}
		}
	}
	return nil
}

func selectionFields(fs []string) []nbdb.LoadBalancerSelectionFields {
	out := []nbdb.LoadBalancerSelectionFields{}
	for _, f := range fs {
		out = append(out, nbdb.LoadBalancerSelectionFields(f))
	}
	return out
}

func sameFields(cur []nbdb.LoadBalancerSelectionFields, want []string) bool {
	if len(cur) != len(want) {
		return false
	}
	for _, f := range cur {
		if !slices.Contains(want, string(f)) {
			return false
		}
	}
	return true
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// LoadBalancers lists the ovnhost load balancers whose external IDs contain
// match, reading the cache without cloning every row.
func (c *Client) LoadBalancers(_ context.Context, match map[string]string) ([]LoadBalancer, error) {
	t := c.cl.Cache().Table(nbdb.LoadBalancerTable)
	if t == nil {
		return nil, errors.New("ovnnb: Load_Balancer is not monitored")
	}
	var out []LoadBalancer
	for _, m := range t.RowsShallow() { // read-only rows
		lb, ok := m.(*nbdb.LoadBalancer)
		if !ok || !owned(lb.ExternalIDs, match) {
			continue
		}
		x := LoadBalancer{Name: lb.Name, VIPs: maps.Clone(lb.Vips), Options: maps.Clone(lb.Options), ExternalIDs: maps.Clone(lb.ExternalIDs)}
		for _, f := range lb.SelectionFields {
			x.SelectionFields = append(x.SelectionFields, string(f))
		}
		slices.Sort(x.SelectionFields)
		if lb.Protocol != nil {
			x.Protocol = *lb.Protocol
		}
		out = append(out, x)
	}
	slices.SortFunc(out, func(a, b LoadBalancer) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	return out, nil
}

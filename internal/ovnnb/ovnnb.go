// Package ovnnb programs the OVN northbound database through libovsdb: the
// cluster router, one logical switch per subnet attached to it, logical
// switch ports for pods and nodes, and static routes. It has no Kubernetes
// dependency; the controller and the node daemon's standalone mode share it.
//
//	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: "unix:/var/run/ovn/ovnnb_db.sock"})
//	defer nb.Close()
//	err = nb.EnsureRouter(ctx, "ovn-cluster")
//	err = nb.EnsureSwitch(ctx, ovnnb.Switch{Name: "ovn-default", Router: "ovn-cluster", CIDRs: ..., Gateways: ...})
//	err = nb.EnsurePort(ctx, ovnnb.Port{Name: "web-0.default", Switch: "ovn-default", MAC: mac, IPs: ips})
//	err = nb.DeletePort(ctx, "web-0.default")
//
// Every Ensure*/Delete* call is one OVSDB transaction and is idempotent.
// Reads come from the libovsdb cache of the monitored tables; the client
// keeps one connection and reconnects by itself (calls block while it is away,
// up to their context's deadline).
//
// Names follow Kube-OVN: router ports "<router>-<switch>", switch-side router
// ports "<switch>-<router>"; everything created carries external_ids:vendor=ovnhost.
package ovnnb

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// TransactTimeout bounds a transaction whose context has no deadline.
var TransactTimeout = 30 * time.Second

// Vendor is the external_ids:vendor value on every row ovnhost creates.
const Vendor = "ovnhost"

// External ID keys.
const (
	KeyVendor = "vendor"
	KeySwitch = "ls"  // the switch a port belongs to
	KeyPod    = "pod" // "namespace/name" of a pod's port
	// KeyVM marks a virtual machine's port (KubeVirt): KeyPod is then
	// "namespace/<vm>" (Kube-OVN's value) and KeyVM the VM's name. The
	// port belongs to the VM, not to the pod that runs it now.
	KeyVM = "vm"
	// KeyProvider marks a pod's attachment-network port: its provider
	// ("<nad>.<namespace>.ovn"); absent on the pod's default port.
	KeyProvider = "provider"
	KeyNode     = "node" // node name of a node port or route
	// KeyPolicy is "namespace/name" of the NetworkPolicy owning a port
	// group and its address sets (indexed: a policy's sync finds its sets
	// without visiting every policy's).
	KeyPolicy = "np"
	KeyCIDR   = "cidr" // a switch's CIDR
	KeyVPC    = "vpc"  // a custom VPC's switch, router, routes, policies
)

// Options configure Connect.
type Options struct {
	// Endpoints: one or more OVSDB endpoints, comma-separated
	// ("unix:/run/ovn/ovnnb_db.sock", "tcp:10.0.0.1:6641,tcp:10.0.0.2:6641";
	// ovsdbconn.ClusterRemotes derives them from OVN_DB_IPS).
	Endpoints string
	Logger    *slog.Logger
	// ConnectTimeout bounds each connection attempt (default
	// ovsdbconn.DefaultTimeout). Connect itself retries until ctx ends.
	ConnectTimeout time.Duration
	// TLS is required for ssl: endpoints (Kube-OVN's ENABLE_SSL); see LoadTLS.
	TLS *tls.Config
	// PortGroups adds Port_Group and ACL to the cache (NetworkPolicy). They
	// must be in the connection's one monitor: libovsdb v0.8.1 deadlocks
	// when a second monitor is added while the first delivers updates (its
	// update handler waits for the monitor lock that Monitor holds while it
	// awaits the server's reply, which that same handler's goroutine reads).
	PortGroups bool
}

// LoadTLS builds the client TLS configuration from PEM files (Kube-OVN
// mounts them at /var/run/tls/key, /var/run/tls/cert and /var/run/tls/cacert).
// They are read once; WatchTLS follows rotations.
func LoadTLS(keyFile, certFile, caFile string) (*tls.Config, error) {
	t, err := ovsdbconn.LoadTLS(keyFile, certFile, caFile, nil)
	if err != nil {
		return nil, fmt.Errorf("ovnnb: %w", err)
	}
	return t.Config(), nil
}

// WatchTLS is LoadTLS that re-reads the files whenever they change (a
// rotated Secret) until ctx ends: every later handshake, the reconnects
// after the NB drops the connection included, presents the current
// certificate and checks the server against the current CA. A half-written
// set keeps the previous one (and says so in the log).
func WatchTLS(ctx context.Context, keyFile, certFile, caFile string, log *slog.Logger) (*tls.Config, error) {
	t, err := ovsdbconn.LoadTLS(keyFile, certFile, caFile, log)
	if err != nil {
		return nil, fmt.Errorf("ovnnb: %w", err)
	}
	if err := t.Watch(ctx); err != nil {
		return nil, fmt.Errorf("ovnnb: %w", err)
	}
	return t.Config(), nil
}

// Client is a long-lived NB connection.
type Client struct {
	cl  client.Client
	log *slog.Logger
	lbs lbState // load balancers and groups (loadbalancer.go)
	// portGroups: Port_Group and ACL are in the cache (Options.PortGroups).
	portGroups bool
}

// Connect dials the NB through ovsdbconn.Dial (the policy every ovnhost
// OVSDB client shares: retry until ctx ends, wait for a unix socket to
// appear, reconnect with back-off once connected), monitors the tables
// ovnhost uses and returns once the cache holds their current contents.
func Connect(ctx context.Context, o Options) (*Client, error) {
	if strings.TrimSpace(o.Endpoints) == "" {
		return nil, errors.New("ovnnb: no northbound endpoint; pass e.g. unix:/var/run/ovn/ovnnb_db.sock or tcp:IP:6641 (OVN_DB_IPS)")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	dbm, err := nbdb.FullDatabaseModel()
	if err != nil {
		return nil, err
	}
	dbm.SetIndexes(clientIndexes)
	// Logical_Switch without its ports column: with 10k ports on a switch,
	// every port change would otherwise copy the whole set into the cache
	// (libovsdb clones rows through JSON), which dominated CPU at scale.
	// Logical_Switch_Port without the columns ovn-controller and northd
	// write (up, dynamic_addresses, ...): pod start-ups then cost no update here.
	// tag is read: a localnet port's VLAN is ours to keep.
	ls := &nbdb.LogicalSwitch{}
	lsp := &nbdb.LogicalSwitchPort{}
	conn, err := ovsdbconn.Dial(ctx, dbm, o.Endpoints, ovsdbconn.Options{
		Monitor: append([]ovsdbconn.Table{
			{Model: ls, Fields: []any{&ls.Name, &ls.ExternalIDs, &ls.OtherConfig, &ls.LoadBalancerGroup, &ls.ACLs}},
			{Model: lsp, Fields: []any{&lsp.Name, &lsp.Addresses, &lsp.PortSecurity, &lsp.ExternalIDs, &lsp.Type, &lsp.Options, &lsp.Tag}},
			{Model: &nbdb.LogicalRouter{}},
			{Model: &nbdb.LogicalRouterPort{}},
			{Model: &nbdb.LogicalRouterStaticRoute{}},
			{Model: &nbdb.LogicalRouterPolicy{}},
			{Model: &nbdb.NAT{}},
			{Model: &nbdb.AddressSet{}},
			{Model: &nbdb.LoadBalancer{}},
			{Model: &nbdb.LoadBalancerGroup{}},
			{Model: &nbdb.ChassisTemplateVar{}},
		}, portGroupTables(o.PortGroups)...),
		TLS:     o.TLS,
		Log:     o.Logger.With("component", "libovsdb"),
		Timeout: o.ConnectTimeout,
		Name:    "ovsdb-server (OVN_Northbound)",
	})
	if err != nil {
		return nil, fmt.Errorf("ovnnb: %w", err)
	}
	return &Client{cl: conn.Client, log: o.Logger, portGroups: o.PortGroups}, nil
}

// Close ends the connection.
func (c *Client) Close() { c.cl.Close() }

// Connected reports whether the connection is up (for /readyz, /healthz).
// libovsdb's own Connected stays true while it is reconnecting (it only
// drops its RPC client): no current endpoint means no connection.
func (c *Client) Connected() bool { return c.cl.Connected() && c.cl.CurrentEndpoint() != "" }

// Raw exposes the libovsdb client (tests and diagnostics read the cache through it).
func (c *Client) Raw() client.Client { return c.cl }

// transact runs ops through ovsdbconn.Transact, bounded by TransactTimeout
// when ctx has no deadline.
func (c *Client) transact(ctx context.Context, what string, ops []ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	if len(ops) == 0 {
		return nil, nil
	}
	if _, ok := ctx.Deadline(); !ok {
		// While the NB is away libovsdb blocks until it reconnects: bound
		// that so callers see an error and retry instead of hanging.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, TransactTimeout)
		defer cancel()
	}
	res, err := ovsdbconn.Transact(ctx, c.cl, what, ops...)
	if err != nil {
		return nil, fmt.Errorf("ovnnb: %w", err)
	}
	return res, nil
}

func vendorIDs(extra map[string]string) map[string]string {
	m := map[string]string{KeyVendor: Vendor}
	maps.Copy(m, extra)
	return m
}

// router and lswitch read a row by name through the client index on name
// (names are not a schema index in the NB): a predicate visited every
// switch on each Subnet sync, a cost growing with the Subnets (50 VPCs x 4
// Subnets in BenchmarkControllerVPCs50's profile). The row is a copy.
func (c *Client) router(_ context.Context, name string) (*nbdb.LogicalRouter, error) {
	m, err := c.byName(nbdb.LogicalRouterTable, &nbdb.LogicalRouter{Name: name})
	if m == nil || err != nil {
		return nil, err
	}
	return m.(*nbdb.LogicalRouter), nil
}

func (c *Client) lswitch(_ context.Context, name string) (*nbdb.LogicalSwitch, error) {
	m, err := c.byName(nbdb.LogicalSwitchTable, &nbdb.LogicalSwitch{Name: name})
	if m == nil || err != nil {
		return nil, err
	}
	return m.(*nbdb.LogicalSwitch), nil
}

// byName is a copy of the row of table whose name is probe's (the lowest
// UUID when several share it), or nil.
func (c *Client) byName(table string, probe model.Model) (model.Model, error) {
	t := c.cl.Cache().Table(table)
	if t == nil {
		return nil, fmt.Errorf("ovnnb: %s is not monitored", table)
	}
	rows, err := t.RowsByModels([]model.Model{probe})
	if err != nil {
		return nil, fmt.Errorf("ovnnb: %s by name: %w", table, err)
	}
	first := ""
	for uuid := range rows {
		if first == "" || uuid < first {
			first = uuid
		}
	}
	if first == "" {
		return nil, nil
	}
	return model.Clone(rows[first]), nil
}

// EnsureRouter creates the logical router if no router of that name exists.
func (c *Client) EnsureRouter(ctx context.Context, name string) error {
	r, err := c.router(ctx, name)
	if err != nil {
		return err
	}
	if r != nil {
		// Load balancer groups attached since (AttachLBGroup) join existing routers too.
		var ops []ovsdb.Operation
		for _, g := range c.missingGroups(r.LoadBalancerGroup) {
			ops = append(ops, mutateGroupRef(nbdb.LogicalRouterTable, name, g))
		}
		_, err = c.transact(ctx, "attach load balancer groups to router "+name, ops)
		return err
	}
	ops, err := c.cl.Create(&nbdb.LogicalRouter{Name: name, ExternalIDs: vendorIDs(nil), LoadBalancerGroup: c.attachedGroups()})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "create router "+name, ops)
	return err
}

// Switch is a subnet's logical switch and its attachment to a router.
type Switch struct {
	Name     string
	Router   string // "" = not attached
	CIDRs    []netip.Prefix
	Gateways []netip.Addr // one per CIDR: the router port's addresses
	// Detached: the switch has no port on Router, and one left from before
	// is removed (an underlay subnet whose gateway is a physical router:
	// a router port would answer ARP for that gateway's address).
	Detached bool
	// Localnet, when set, joins the switch to a physical network through a
	// localnet port (underlay); nil removes one the switch had.
	Localnet *Localnet
	// VPC names the custom VPC the switch is in ("" the default VPC),
	// recorded as external_ids:vpc. Such a switch carries no load
	// balancer group (the cluster's Services are the default VPC's).
	VPC string
}

// Localnet is a switch's way out to a physical network: OVN's localnet
// port, bound on each chassis to the bridge ovn-bridge-mappings names
// for Network.
type Localnet struct {
	Port    string // the port's name; "" = SubnetLocalnetPortName
	Network string // the provider network (ovn-bridge-mappings key)
	Tag     int    // 802.1Q VLAN id; 0 = untagged
}

// SubnetLocalnetPortName is an underlay subnet's localnet port, named as
// Kube-OVN names it so a migrated NB keeps its row.
func SubnetLocalnetPortName(sw string) string { return "localnet." + sw }

// RouterPortName is the router-side port of a switch ("ovn-cluster-join").
func RouterPortName(router, sw string) string { return router + "-" + sw }

// SwitchRouterPortName is the switch-side port ("join-ovn-cluster").
func SwitchRouterPortName(router, sw string) string { return sw + "-" + router }

// RouterPortMAC is the router port's MAC, derived from its name so it is stable.
func RouterPortMAC(name string) string {
	h := sha256.Sum256([]byte(name))
	h[0] = (h[0] &^ 1) | 2
	return net.HardwareAddr(h[:6]).String()
}

// RouterPortMACOf is the MAC a router port has in the NB (it may differ from
// RouterPortMAC when the port was written by another tool, e.g. Kube-OVN);
// false when there is no such port.
func (c *Client) RouterPortMACOf(ctx context.Context, name string) (string, bool, error) {
	lrp := &nbdb.LogicalRouterPort{Name: name}
	err := c.cl.Get(ctx, lrp)
	if errors.Is(err, client.ErrNotFound) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	return lrp.MAC, true, nil
}

// EnsureSwitch creates or updates the switch, and when Router is set the
// router port pair that connects them, in one transaction.
func (c *Client) EnsureSwitch(ctx context.Context, s Switch) error {
	if len(s.CIDRs) == 0 || len(s.CIDRs) != len(s.Gateways) {
		return fmt.Errorf("ovnnb: switch %q: need one gateway per CIDR (got %d CIDRs, %d gateways)", s.Name, len(s.CIDRs), len(s.Gateways))
	}
	cidrs := make([]string, len(s.CIDRs))
	nets := make([]string, len(s.CIDRs))
	for i, p := range s.CIDRs {
		cidrs[i] = p.String()
		nets[i] = netip.PrefixFrom(s.Gateways[i], p.Bits()).String()
	}
	ids := vendorIDs(map[string]string{KeyCIDR: strings.Join(cidrs, ",")})
	if s.VPC != "" {
		ids[KeyVPC] = s.VPC
	}
	groups := c.attachedGroups()
	if s.VPC != "" {
		groups = nil
	}
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	ls, err := c.lswitch(ctx, s.Name)
	if err != nil {
		return err
	}
	var newPorts []string // ports of a switch created in this transaction
	if ls != nil {
		if !maps.Equal(ls.ExternalIDs, ids) {
			upd := &nbdb.LogicalSwitch{UUID: ls.UUID, ExternalIDs: ids}
			if err := add(c.cl.Where(upd).Update(upd, &upd.ExternalIDs)); err != nil {
				return err
			}
		}
		// Every switch of the default VPC carries the attached load
		// balancer groups (Services); a custom VPC's none.
		if s.VPC == "" {
			for _, g := range c.missingGroups(ls.LoadBalancerGroup) {
				ops = append(ops, mutateGroupRef(nbdb.LogicalSwitchTable, s.Name, g))
			}
		} else if len(ls.LoadBalancerGroup) > 0 {
			upd := &nbdb.LogicalSwitch{UUID: ls.UUID, LoadBalancerGroup: []string{}}
			if err := add(c.cl.Where(upd).Update(upd, &upd.LoadBalancerGroup)); err != nil {
				return err
			}
		}
	}
	if s.Router != "" && s.Detached {
		o, err := c.detachOps(ctx, s.Name, s.Router)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	} else if s.Router != "" {
		r, err := c.router(ctx, s.Router)
		if err != nil {
			return err
		}
		if r == nil {
			return fmt.Errorf("ovnnb: switch %q: router %q does not exist; call EnsureRouter first", s.Name, s.Router)
		}
		lrpName := RouterPortName(s.Router, s.Name)
		lrp := &nbdb.LogicalRouterPort{Name: lrpName}
		err = c.cl.Get(ctx, lrp)
		switch {
		case errors.Is(err, client.ErrNotFound):
			lrp = &nbdb.LogicalRouterPort{UUID: "newlrp", Name: lrpName, MAC: RouterPortMAC(lrpName), Networks: nets, ExternalIDs: vendorIDs(map[string]string{KeySwitch: s.Name})}
			if err := add(c.cl.Create(lrp)); err != nil {
				return err
			}
			if err := add(c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{lrp.UUID}})); err != nil {
				return err
			}
		case err != nil:
			return err
		case !slices.Equal(lrp.Networks, nets):
			lrp.Networks = nets
			if err := add(c.cl.Where(lrp).Update(lrp, &lrp.Networks)); err != nil {
				return err
			}
		}
		lspName := SwitchRouterPortName(s.Router, s.Name)
		lsp := &nbdb.LogicalSwitchPort{Name: lspName}
		err = c.cl.Get(ctx, lsp)
		switch {
		case errors.Is(err, client.ErrNotFound):
			lsp = &nbdb.LogicalSwitchPort{UUID: "newlsp", Name: lspName, Type: "router", Addresses: []string{"router"},
				Options: map[string]string{"router-port": lrpName}, ExternalIDs: vendorIDs(map[string]string{KeySwitch: s.Name})}
			if err := add(c.cl.Create(lsp)); err != nil {
				return err
			}
			if ls == nil {
				newPorts = append(newPorts, lsp.UUID)
			} else if err := add(c.mutateSwitchPorts(s.Name, ovsdb.MutateOperationInsert, lsp.UUID)); err != nil {
				return err
			}
		case err != nil:
			return err
		}
	}
	lo, created, err := c.localnetOps(ctx, s, ls != nil)
	if err != nil {
		return err
	}
	ops = append(ops, lo...)
	newPorts = append(newPorts, created...)
	if ls == nil {
		if err := add(c.cl.Create(&nbdb.LogicalSwitch{UUID: "newls", Name: s.Name, ExternalIDs: ids, Ports: newPorts, LoadBalancerGroup: groups})); err != nil {
			return err
		}
	}
	_, err = c.transact(ctx, "ensure switch "+s.Name, ops)
	return err
}

// detachOps removes the router port pair between switch sw and router,
// if there is one.
func (c *Client) detachOps(ctx context.Context, sw, router string) ([]ovsdb.Operation, error) {
	var ops []ovsdb.Operation
	lrp := &nbdb.LogicalRouterPort{Name: RouterPortName(router, sw)}
	switch err := c.cl.Get(ctx, lrp); {
	case err == nil:
		if r, _ := c.router(ctx, router); r != nil {
			o, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{lrp.UUID}})
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
	case !errors.Is(err, client.ErrNotFound):
		return nil, err
	}
	lsp := &nbdb.LogicalSwitchPort{Name: SwitchRouterPortName(router, sw)}
	switch err := c.cl.Get(ctx, lsp); {
	case err == nil:
		ops = append(ops, unrefPort(lsp.UUID)...)
	case !errors.Is(err, client.ErrNotFound):
		return nil, err
	}
	return ops, nil
}

// localnetOps brings switch s's localnet port in line with s.Localnet.
// created lists a port created for a switch that does not exist yet (the
// caller creates the switch with it); for an existing switch the port is
// added to it here.
func (c *Client) localnetOps(ctx context.Context, s Switch, switchExists bool) (ops []ovsdb.Operation, created []string, err error) {
	name := SubnetLocalnetPortName(s.Name)
	if s.Localnet != nil && s.Localnet.Port != "" {
		name = s.Localnet.Port
	}
	cur := &nbdb.LogicalSwitchPort{Name: name}
	err = c.cl.Get(ctx, cur)
	if err != nil && !errors.Is(err, client.ErrNotFound) {
		return nil, nil, err
	}
	exists := err == nil
	if s.Localnet == nil {
		if exists {
			ops = append(ops, unrefPort(cur.UUID)...)
		}
		return ops, nil, nil
	}
	var tag *int
	if t := s.Localnet.Tag; t > 0 {
		tag = &t
	}
	opts := map[string]string{"network_name": s.Localnet.Network}
	ids := vendorIDs(map[string]string{KeySwitch: s.Name})
	if exists {
		if cur.Type == "localnet" && maps.Equal(cur.Options, opts) && equalTag(cur.Tag, tag) && maps.Equal(cur.ExternalIDs, ids) {
			return nil, nil, nil
		}
		// Written out: libovsdb's Update leaves an optional column alone
		// when its pointer is nil, and an untagged network clears the tag.
		tagSet := ovsdb.OvsSet{GoSet: []any{}}
		if tag != nil {
			tagSet.GoSet = []any{*tag}
		}
		return []ovsdb.Operation{{Op: ovsdb.OperationUpdate, Table: nbdb.LogicalSwitchPortTable,
			Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: cur.UUID}}},
			Row: ovsdb.Row{"type": "localnet", "addresses": ovsdb.OvsSet{GoSet: []any{"unknown"}},
				"options": ovsdb.OvsMap{GoMap: anyMap(opts)}, "tag": tagSet, "external_ids": ovsdb.OvsMap{GoMap: anyMap(ids)}}}}, nil, nil
	}
	lsp := &nbdb.LogicalSwitchPort{UUID: "newlocalnet", Name: name, Type: "localnet", Addresses: []string{"unknown"},
		Options: opts, Tag: tag, ExternalIDs: ids}
	o, err := c.cl.Create(lsp)
	if err != nil {
		return nil, nil, err
	}
	ops = append(ops, o...)
	if !switchExists {
		return ops, []string{lsp.UUID}, nil
	}
	o, err = c.mutateSwitchPorts(s.Name, ovsdb.MutateOperationInsert, lsp.UUID)
	return append(ops, o...), nil, err
}

func equalTag(a, b *int) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// mutateSwitchPorts inserts or deletes a port reference in the switch named
// name. The operation is written out rather than generated by libovsdb's
// conditional API, which would clone every switch row (and its port set) from the cache.
func (c *Client) mutateSwitchPorts(name string, op ovsdb.Mutator, port string) ([]ovsdb.Operation, error) {
	return []ovsdb.Operation{{
		Op: ovsdb.OperationMutate, Table: nbdb.LogicalSwitchTable,
		Where:     []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: name}},
		Mutations: []ovsdb.Mutation{{Column: "ports", Mutator: op, Value: ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: port}}}}},
	}}, nil
}

// unrefPort removes a port from whichever switch holds it.
func unrefPort(uuid string) []ovsdb.Operation {
	set := ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: uuid}}}
	return []ovsdb.Operation{{
		Op: ovsdb.OperationMutate, Table: nbdb.LogicalSwitchTable,
		Where:     []ovsdb.Condition{{Column: "ports", Function: ovsdb.ConditionIncludes, Value: set}},
		Mutations: []ovsdb.Mutation{{Column: "ports", Mutator: ovsdb.MutateOperationDelete, Value: set}},
	}}
}

// DeleteSwitch removes a switch and its router port pair.
func (c *Client) DeleteSwitch(ctx context.Context, name, router string) error {
	var ops []ovsdb.Operation
	ls, err := c.lswitch(ctx, name)
	if err != nil {
		return err
	}
	if ls != nil {
		o, err := c.cl.Where(ls).Delete()
		if err != nil {
			return err
		}
		ops = append(ops, o...)
	}
	if router != "" {
		lrp := &nbdb.LogicalRouterPort{Name: RouterPortName(router, name)}
		if err := c.cl.Get(ctx, lrp); err == nil {
			if r, _ := c.router(ctx, router); r != nil {
				o, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.Ports, Mutator: ovsdb.MutateOperationDelete, Value: []string{lrp.UUID}})
				if err != nil {
					return err
				}
				ops = append(ops, o...)
			}
		}
	}
	_, err = c.transact(ctx, "delete switch "+name, ops)
	return err
}

// Port is a workload's logical switch port.
type Port struct {
	Name        string
	Switch      string
	MAC         string
	IPs         []netip.Addr
	ExternalIDs map[string]string // added to vendor and ls
	// Gateway ports (a node's ovn0) forward traffic for any destination:
	// port security would drop what the node routes on.
	NoPortSecurity bool
	// AddressSets, when set, name existing address sets that get the
	// port's addresses in the same transaction, each family its own (a
	// node's egress sets).
	AddressSets FamilySets
	// Adopt lets EnsurePort take over a row of that name that records no
	// owner but was made by Kube-OVN (external_ids:vendor=kube-ovn; its
	// node ports carry no owner key), keeping its UUID: migration.
	Adopt bool
}

// KubeOVNVendor is the external_ids:vendor of rows kube-ovn-controller made.
const KubeOVNVendor = "kube-ovn"

func (p Port) portSecurity() []string {
	if p.NoPortSecurity {
		return nil
	}
	return []string{p.Addresses()}
}

// Addresses is the Logical_Switch_Port addresses / port_security entry: "mac ip [ip]".
func (p Port) Addresses() string {
	s := []string{p.MAC}
	for _, ip := range p.IPs {
		s = append(s, ip.String())
	}
	return strings.Join(s, " ")
}

// ErrNoSwitch is returned when a port's switch does not exist.
var ErrNoSwitch = errors.New("logical switch does not exist")

// ErrNotOwner is returned (wrapped in *OwnerError) when a port of that name
// exists but belongs to someone else.
var ErrNotOwner = errors.New("port belongs to another owner")

// OwnerError says which port is held by whom; errors.Is(err, ErrNotOwner).
type OwnerError struct {
	Port   string
	Holder string // OwnerOf the existing row ("" = no owner recorded: not a workload port of ovnhost)
	Want   string // the owner that asked
}

func (e *OwnerError) Error() string {
	holder := e.Holder
	if holder == "" {
		holder = "a row without an owner (not created by ovnhost for a pod or node)"
	}
	return fmt.Sprintf("logical switch port %q belongs to %s, not %s; it is left alone", e.Port, holder, e.Want)
}

func (e *OwnerError) Unwrap() error { return ErrNotOwner }

// OwnerOf is who a workload port belongs to, from its external_ids:
// "pod:<namespace>/<name>" (a pod port, which may also name its node in
// standalone mode), "node:<name>" (a node's join port), or "" (none: router
// ports, rows other tools made). Only the owner updates or deletes a port.
func OwnerOf(ids map[string]string) string {
	if p := ids[KeyPod]; p != "" {
		if ids[KeyVM] != "" {
			return "vm:" + p
		}
		return "pod:" + p
	}
	if n := ids[KeyNode]; n != "" {
		return "node:" + n
	}
	return ""
}

// PodPortOwner and NodePortOwner are the OwnerOf values of a pod's and a node's port.
func PodPortOwner(namespace, name string) string { return "pod:" + namespace + "/" + name }
func NodePortOwner(node string) string           { return "node:" + node }

// VMPortOwner is the OwnerOf value of a virtual machine's port: a pod of
// the same name as the VM cannot take it, nor the VM a pod's.
func VMPortOwner(namespace, vm string) string { return "vm:" + namespace + "/" + vm }

// EnsurePort creates or updates the port (addresses and port security set to
// MAC + IPs) on its switch, moving it if it sits on another switch, in one
// transaction. p.ExternalIDs must name its owner (KeyPod or KeyNode); a port
// of that name that belongs to another owner is left untouched and the error
// is an *OwnerError (errors.Is ErrNotOwner).
func (c *Client) EnsurePort(ctx context.Context, p Port) error {
	if p.Name == "" || p.Switch == "" || p.MAC == "" || len(p.IPs) == 0 {
		return fmt.Errorf("ovnnb: port %q: name, switch, MAC and IPs are required (switch %q, MAC %q, %d IPs)", p.Name, p.Switch, p.MAC, len(p.IPs))
	}
	owner := OwnerOf(p.ExternalIDs)
	if owner == "" {
		return fmt.Errorf("ovnnb: port %q: external_ids name no owner; set %q (namespace/name) or %q", p.Name, KeyPod, KeyNode)
	}
	addr := p.Addresses()
	ids := vendorIDs(p.ExternalIDs)
	ids[KeySwitch] = p.Switch
	setOps, err := c.addressSetInsertOps(ctx, p.AddressSets, p.IPs)
	if err != nil {
		return err
	}
	cur := &nbdb.LogicalSwitchPort{Name: p.Name}
	err = c.cl.Get(ctx, cur)
	// First, so that the switch insert stays the last operation (checked below).
	ops := setOps
	switch {
	case errors.Is(err, client.ErrNotFound):
		lsp := &nbdb.LogicalSwitchPort{UUID: "newport", Name: p.Name, Addresses: []string{addr}, PortSecurity: p.portSecurity(), ExternalIDs: ids}
		o, err := c.cl.Create(lsp)
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		m, err := c.mutateSwitchPorts(p.Switch, ovsdb.MutateOperationInsert, lsp.UUID)
		if err != nil {
			return err
		}
		ops = append(ops, m...)
	case err != nil:
		return err
	case OwnerOf(cur.ExternalIDs) != owner && !(p.Adopt && OwnerOf(cur.ExternalIDs) == "" && cur.ExternalIDs[KeyVendor] == KubeOVNVendor):
		return &OwnerError{Port: p.Name, Holder: OwnerOf(cur.ExternalIDs), Want: owner}
	default:
		if slices.Equal(cur.Addresses, []string{addr}) && slices.Equal(cur.PortSecurity, p.portSecurity()) && maps.Equal(cur.ExternalIDs, ids) {
			if len(setOps) > 0 {
				_, err := c.transact(ctx, fmt.Sprintf("add port %s to address sets %v", p.Name, p.AddressSets), setOps)
				return err
			}
			return nil
		}
		upd := &nbdb.LogicalSwitchPort{UUID: cur.UUID, Addresses: []string{addr}, PortSecurity: p.portSecurity(), ExternalIDs: ids}
		o, err := c.cl.Where(upd).Update(upd, &upd.Addresses, &upd.PortSecurity, &upd.ExternalIDs)
		if err != nil {
			return err
		}
		// The row must still be the owner's when the server applies this
		// (the cache may lag a concurrent writer): checked by a wait below.
		guard := ownerKV(p.ExternalIDs)
		if OwnerOf(cur.ExternalIDs) == "" { // adopted: still Kube-OVN's
			guard = map[string]string{KeyVendor: KubeOVNVendor}
		}
		ops = append(ops, ownerWait(cur.UUID, guard))
		ops = append(ops, o...)
		if old := cur.ExternalIDs[KeySwitch]; old != p.Switch {
			if old != "" {
				ops = append(ops, unrefPort(cur.UUID)...)
			}
			m, err := c.mutateSwitchPorts(p.Switch, ovsdb.MutateOperationInsert, cur.UUID)
			if err != nil {
				return err
			}
			ops = append(ops, m...)
		}
	}
	res, err := c.transact(ctx, "ensure port "+p.Name, ops)
	if err != nil {
		return err
	}
	// The last operation inserts into the switch: zero rows means no such switch
	// (the unreferenced port is then dropped by the database itself).
	if len(ops) > 0 && ops[len(ops)-1].Op == ovsdb.OperationMutate && res[len(ops)-1].Count == 0 {
		return fmt.Errorf("ovnnb: port %q: switch %q: %w; create the subnet first", p.Name, p.Switch, ErrNoSwitch)
	}
	return nil
}

// DeletePort removes the port from its switch (the row goes with it) if it
// belongs to owner (an OwnerOf value). Absent ports are ignored; a port of
// that name held by another owner is left alone and reported as an
// *OwnerError.
func (c *Client) DeletePort(ctx context.Context, name, owner string) error {
	cur := &nbdb.LogicalSwitchPort{Name: name}
	err := c.cl.Get(ctx, cur)
	if errors.Is(err, client.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if got := OwnerOf(cur.ExternalIDs); got != owner || owner == "" {
		return &OwnerError{Port: name, Holder: got, Want: owner}
	}
	ops := append([]ovsdb.Operation{ownerWait(cur.UUID, ownerKV(cur.ExternalIDs))}, unrefPort(cur.UUID)...)
	_, err = c.transact(ctx, "delete port "+name, ops)
	return err
}

// ownerKV is the owner key of ids (pod, with its vm, else node) as a map.
func ownerKV(ids map[string]string) map[string]string {
	if p := ids[KeyPod]; p != "" {
		if vm := ids[KeyVM]; vm != "" {
			return map[string]string{KeyPod: p, KeyVM: vm}
		}
		return map[string]string{KeyPod: p}
	}
	return map[string]string{KeyNode: ids[KeyNode]}
}

// ownerWait is an OVSDB wait that aborts the transaction unless the port row
// uuid still carries the owner entry kv in its external_ids (a row changed
// by another writer since the cache showed it fails the transaction instead
// of being overwritten).
func ownerWait(uuid string, kv map[string]string) ovsdb.Operation {
	m, _ := ovsdb.NewOvsMap(kv)
	timeout := 0
	return ovsdb.Operation{
		Op: ovsdb.OperationWait, Table: nbdb.LogicalSwitchPortTable, Timeout: &timeout,
		Where: []ovsdb.Condition{
			{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: uuid}},
			{Column: "external_ids", Function: ovsdb.ConditionIncludes, Value: m},
		},
		Columns: []string{"_uuid"}, Until: string(ovsdb.WaitConditionEqual), Rows: []ovsdb.Row{{"_uuid": ovsdb.UUID{GoUUID: uuid}}},
	}
}

// GetPort reads a port from the cache.
func (c *Client) GetPort(ctx context.Context, name string) (Port, bool, error) {
	cur := &nbdb.LogicalSwitchPort{Name: name}
	err := c.cl.Get(ctx, cur)
	if errors.Is(err, client.ErrNotFound) {
		return Port{}, false, nil
	}
	if err != nil {
		return Port{}, false, err
	}
	return toPort(cur), true, nil
}

func toPort(l *nbdb.LogicalSwitchPort) Port {
	p := Port{Name: l.Name, Switch: l.ExternalIDs[KeySwitch], ExternalIDs: l.ExternalIDs}
	if len(l.Addresses) > 0 {
		f := strings.Fields(l.Addresses[0])
		if len(f) > 0 {
			p.MAC = f[0]
			for _, s := range f[1:] {
				if a, err := netip.ParseAddr(s); err == nil {
					p.IPs = append(p.IPs, a)
				}
			}
		}
	}
	return p
}

// Ports lists the ovnhost workload ports (not router ports) whose external IDs
// contain every key/value in match (nil = all). It reads the cache without
// copying rows (libovsdb would clone each through JSON), so it stays cheap at 10k ports.
func (c *Client) Ports(_ context.Context, match map[string]string) ([]Port, error) {
	t := c.cl.Cache().Table(nbdb.LogicalSwitchPortTable)
	if t == nil {
		return nil, errors.New("ovnnb: Logical_Switch_Port is not monitored")
	}
	// A pod's or a node's ports come from the client index on that key
	// (portIndexes): a scan of every port on each pod sync made pod
	// throughput fall with the cluster's size (docs/scale.md).
	var rows map[string]model.Model
	indexed := false
	for _, k := range indexedPortKeys {
		v, ok := match[k]
		if !ok || v == "" {
			continue
		}
		found, err := t.RowsByModels([]model.Model{&nbdb.LogicalSwitchPort{ExternalIDs: map[string]string{k: v}}})
		if err != nil {
			return nil, fmt.Errorf("ovnnb: ports with external_ids:%s=%s: %w", k, v, err)
		}
		rows, indexed = found, true
		break
	}
	if !indexed {
		rows = t.RowsShallow() // read-only rows
	}
	var out []Port
	for _, m := range rows {
		l, ok := m.(*nbdb.LogicalSwitchPort)
		if !ok || l.Type != "" || l.ExternalIDs[KeyVendor] != Vendor {
			continue
		}
		keep := true
		for k, v := range match {
			if l.ExternalIDs[k] != v {
				keep = false
				break
			}
		}
		if keep {
			p := toPort(l)
			p.ExternalIDs = maps.Clone(l.ExternalIDs)
			out = append(out, p)
		}
	}
	return out, nil
}

// Route is a static route on a router.
type Route struct {
	Router      string
	Prefix      netip.Prefix
	Nexthop     netip.Addr
	ExternalIDs map[string]string // identify the route's owner, e.g. node=<name>
}

// EnsureRoute creates or updates the route to Prefix owned by ExternalIDs.
func (c *Client) EnsureRoute(ctx context.Context, rt Route) error {
	r, err := c.router(ctx, rt.Router)
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("ovnnb: route %s: router %q does not exist; call EnsureRouter first", rt.Prefix, rt.Router)
	}
	ids := vendorIDs(rt.ExternalIDs)
	prefix := rt.Prefix.Masked().String()
	if rt.Prefix.IsSingleIP() {
		prefix = rt.Prefix.Addr().String()
	}
	var cur []*nbdb.LogicalRouterStaticRoute
	if err := c.cl.WhereCache(func(s *nbdb.LogicalRouterStaticRoute) bool {
		return s.IPPrefix == prefix && slices.Contains(r.StaticRoutes, s.UUID)
	}).List(ctx, &cur); err != nil {
		return err
	}
	var ops []ovsdb.Operation
	if len(cur) > 0 {
		s := cur[0]
		if s.Nexthop == rt.Nexthop.String() && maps.Equal(s.ExternalIDs, ids) {
			return nil
		}
		s.Nexthop, s.ExternalIDs = rt.Nexthop.String(), ids
		ops, err = c.cl.Where(s).Update(s, &s.Nexthop, &s.ExternalIDs)
		if err != nil {
			return err
		}
	} else {
		pol := nbdb.LogicalRouterStaticRoutePolicyDstIP
		s := &nbdb.LogicalRouterStaticRoute{UUID: "newroute", IPPrefix: prefix, Nexthop: rt.Nexthop.String(), Policy: &pol, ExternalIDs: ids}
		o, err := c.cl.Create(s)
		if err != nil {
			return err
		}
		m, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.StaticRoutes, Mutator: ovsdb.MutateOperationInsert, Value: []string{s.UUID}})
		if err != nil {
			return err
		}
		ops = append(o, m...)
	}
	_, err = c.transact(ctx, "ensure route "+prefix+" on "+rt.Router, ops)
	return err
}

// Routes lists the ovnhost routes of a router whose external IDs contain match.
func (c *Client) Routes(ctx context.Context, router string, match map[string]string) ([]Route, error) {
	r, err := c.router(ctx, router)
	if err != nil || r == nil {
		return nil, err
	}
	var cur []*nbdb.LogicalRouterStaticRoute
	if err := c.cl.WhereCache(func(s *nbdb.LogicalRouterStaticRoute) bool {
		if s.ExternalIDs[KeyVendor] != Vendor || !slices.Contains(r.StaticRoutes, s.UUID) {
			return false
		}
		for k, v := range match {
			if s.ExternalIDs[k] != v {
				return false
			}
		}
		return true
	}).List(ctx, &cur); err != nil {
		return nil, err
	}
	var out []Route
	for _, s := range cur {
		rt := Route{Router: router, ExternalIDs: s.ExternalIDs}
		if p, err := netip.ParsePrefix(s.IPPrefix); err == nil {
			rt.Prefix = p
		} else if a, err := netip.ParseAddr(s.IPPrefix); err == nil {
			rt.Prefix = netip.PrefixFrom(a, a.BitLen())
		}
		rt.Nexthop, _ = netip.ParseAddr(s.Nexthop)
		out = append(out, rt)
	}
	return out, nil
}

// DeleteRoutes removes the ovnhost routes of a router whose external IDs contain match.
func (c *Client) DeleteRoutes(ctx context.Context, router string, match map[string]string) error {
	r, err := c.router(ctx, router)
	if err != nil || r == nil {
		return err
	}
	var cur []*nbdb.LogicalRouterStaticRoute
	if err := c.cl.WhereCache(func(s *nbdb.LogicalRouterStaticRoute) bool {
		if s.ExternalIDs[KeyVendor] != Vendor || !slices.Contains(r.StaticRoutes, s.UUID) {
			return false
		}
		for k, v := range match {
			if s.ExternalIDs[k] != v {
				return false
			}
		}
		return true
	}).List(ctx, &cur); err != nil {
		return err
	}
	if len(cur) == 0 {
		return nil
	}
	var uuids []string
	for _, s := range cur {
		uuids = append(uuids, s.UUID)
	}
	ops, err := c.cl.Where(r).Mutate(r, model.Mutation{Field: &r.StaticRoutes, Mutator: ovsdb.MutateOperationDelete, Value: uuids})
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "delete routes on "+router, ops)
	return err
}

// SetGlobalOption sets one key of NB_Global's options, leaving the others
// (northd's, an administrator's) alone. Written out: the client does not
// monitor NB_Global, and a map mutation touches only that key.
func (c *Client) SetGlobalOption(ctx context.Context, key, value string) error {
	ops := []ovsdb.Operation{{
		// The one row, whatever its UUID (OVSDB requires a where clause).
		Op: ovsdb.OperationMutate, Table: nbdb.NBGlobalTable,
		Where: []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionNotEqual, Value: ovsdb.UUID{GoUUID: "00000000-0000-0000-0000-000000000000"}}},
		Mutations: []ovsdb.Mutation{
			{Column: "options", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: []any{key}}},
			{Column: "options", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: map[any]any{key: value}}},
		},
	}}
	_, err := c.transact(ctx, "set NB_Global options:"+key+"="+value, ops)
	return err
}

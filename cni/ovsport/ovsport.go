// Package ovsport is the OVSDB side of the ports the CNI side puts on
// br-int: one Port with one Interface carrying Kube-OVN's external_ids,
// optional QoS with one Queue, optional membership in the node's mirror,
// and the wait for ovn-controller's ovn-installed. Pod wiring (cni/podwire)
// and the node port ovn0 (cni/nodeport) use it.
package ovsport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// Every call is a raw OVSDB transaction on the daemon's connection, so the
// CNI side needs no monitor of its own and never reads a stale cache. The wait for
// ovn-installed is a server-side "wait" operation: ovsdb-server holds the
// transaction until ovn-controller writes the key or the timeout expires.

// External ID keys set on the Interface, Port, QoS and Queue rows.
const (
	KeyIfaceID      = "iface-id"
	KeyPodName      = "pod_name"
	KeyPodNamespace = "pod_namespace"
	KeyPodNetns     = "pod_netns"
	KeyIP           = "ip"
	KeyAttachedMAC  = "attached-mac"
	KeyVendor       = "vendor"
	KeyOVNInstalled = "ovn-installed"
	KeyContainerID  = "ovnhost_container_id" // for GC and DEL without state
	KeyIfName       = "ovnhost_ifname"
	KeyProvider     = "ovnhost_provider" // an attachment network's interface: its provider
	extPort         = "ovnhost_port"     // on QoS and Queue: the port they belong to
	extMirror       = "ovnhost_mirror"
	// Vendor is KeyVendor's value on the rows ovnhost creates.
	Vendor = "ovnhost"
)

// DefaultBridge is the integration bridge pods and ovn0 are attached to.
const DefaultBridge = "br-int"

// MirrorName is the Mirror row of the node that mirrored pods join.
const MirrorName = "ovnhost-mirror"

// PortSpec is a port to add.
type PortSpec struct {
	Name        string // host veth name = Port and Interface name
	Type        string // "" (system/veth) or "internal"
	ExternalIDs map[string]string
	IngressMbps int  // traffic into the pod: QoS linux-htb max-rate on the port
	EgressMbps  int  // traffic from the pod: ingress policing on the interface
	Mirror      bool // add to MirrorName's select_src_port and select_dst_port
	MAC         string
}

// Bridge transacts on one bridge's ports in the local conf.db.
type Bridge struct {
	cl     client.Client
	bridge string
}

// New is the bridge named bridge ("" is DefaultBridge) through cl, a
// client of the local conf.db with the internal/ovsdb/vswitch models.
func New(cl client.Client, bridge string) *Bridge {
	if bridge == "" {
		bridge = DefaultBridge
	}
	return &Bridge{cl: cl, bridge: bridge}
}

// Name is the bridge's name.
func (o *Bridge) Name() string { return o.bridge }

func (o *Bridge) transact(ctx context.Context, what string, ops ...ovsdb.Operation) ([]ovsdb.OperationResult, error) {
	res, err := ovsdbconn.Transact(ctx, o.cl, what, ops...)
	var te *ovsdbconn.TxError
	switch {
	case errors.As(err, &te):
		return res, &ovsdbError{what: what, details: te.Reason(), timedOut: hasTimeout(res)}
	case err != nil:
		return nil, fmt.Errorf("OVSDB transaction: %w", err)
	}
	return res, nil
}

type ovsdbError struct {
	what, details string
	timedOut      bool
}

func (e *ovsdbError) Error() string {
	return fmt.Sprintf("OVSDB transaction (%s) failed: %s", e.what, e.details)
}

func hasTimeout(res []ovsdb.OperationResult) bool {
	for _, r := range res {
		if r.Error == "timed out" {
			return true
		}
	}
	return false
}

func strMap(m map[string]string) ovsdb.OvsMap {
	g := make(map[any]any, len(m))
	for k, v := range m {
		g[k] = v
	}
	return ovsdb.OvsMap{GoMap: g}
}

func uuidSet(ids ...string) ovsdb.OvsSet {
	s := make([]any, len(ids))
	for i, id := range ids {
		s[i] = ovsdb.UUID{GoUUID: id}
	}
	return ovsdb.OvsSet{GoSet: s}
}

func eq(col string, v any) ovsdb.Condition { return ovsdb.NewCondition(col, ovsdb.ConditionEqual, v) }

func includes(col string, m map[string]string) ovsdb.Condition {
	return ovsdb.NewCondition(col, ovsdb.ConditionIncludes, strMap(m))
}

// bridgeExists is a wait op with timeout 0 that aborts the transaction when
// the bridge is missing (otherwise an insert would be garbage-collected
// silently, or a root QoS row left behind).
func (o *Bridge) bridgeExists() ovsdb.Operation {
	zero := 0
	return ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Bridge", Timeout: &zero,
		Where: []ovsdb.Condition{eq("name", o.bridge)}, Columns: []string{"name"}, Until: "==",
		Rows: []ovsdb.Row{{"name": o.bridge}}}
}

// qosOps inserts a QoS (linux-htb, one queue) limiting traffic sent to the
// port at mbps, named "qos" in the transaction.
func qosOps(port string, mbps int, ids map[string]string) []ovsdb.Operation {
	rate := strconv.FormatInt(int64(mbps)*1_000_000, 10)
	qids := map[string]string{extPort: port, KeyVendor: Vendor}
	for _, k := range []string{KeyIfaceID, KeyPodName, KeyPodNamespace} {
		if v, ok := ids[k]; ok {
			qids[k] = v
		}
	}
	return []ovsdb.Operation{
		{Op: ovsdb.OperationInsert, Table: "Queue", UUIDName: "queue0", Row: ovsdb.Row{
			"other_config": strMap(map[string]string{"max-rate": rate}),
			"external_ids": strMap(qids),
		}},
		{Op: ovsdb.OperationInsert, Table: "QoS", UUIDName: "qos", Row: ovsdb.Row{
			"type":         "linux-htb",
			"other_config": strMap(map[string]string{"max-rate": rate}),
			"queues":       ovsdb.OvsMap{GoMap: map[any]any{0: ovsdb.UUID{GoUUID: "queue0"}}},
			"external_ids": strMap(qids),
		}},
	}
}

// policing returns the ingress policing columns for egress traffic of the
// pod limited to mbps (kbps, burst 10% of the rate, at least 1 Mbit).
func policing(mbps int) (rate, burst int) {
	if mbps <= 0 {
		return 0, 0
	}
	rate = mbps * 1000
	burst = max(rate/10, 1000)
	return rate, burst
}

// AddPort creates the Port/Interface (and QoS, mirror membership) on the bridge.
func (o *Bridge) AddPort(ctx context.Context, p PortSpec) error {
	prate, pburst := policing(p.EgressMbps)
	iface := ovsdb.Row{
		"name":                   p.Name,
		"external_ids":           strMap(p.ExternalIDs),
		"ingress_policing_rate":  prate,
		"ingress_policing_burst": pburst,
	}
	if p.Type != "" {
		iface["type"] = p.Type
	}
	ops := []ovsdb.Operation{o.bridgeExists(),
		{Op: ovsdb.OperationInsert, Table: "Interface", UUIDName: "iface", Row: iface}}
	port := ovsdb.Row{
		"name":         p.Name,
		"interfaces":   uuidSet("iface"),
		"external_ids": strMap(p.ExternalIDs),
	}
	if p.IngressMbps > 0 {
		ops = append(ops, qosOps(p.Name, p.IngressMbps, p.ExternalIDs)...)
		port["qos"] = uuidSet("qos")
	}
	ops = append(ops,
		ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Port", UUIDName: "port", Row: port},
		ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Bridge", Where: []ovsdb.Condition{eq("name", o.bridge)},
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", ovsdb.MutateOperationInsert, uuidSet("port"))}})
	if p.Mirror {
		ops = append(ops, mirrorJoin("port")...)
	}
	res, err := o.transact(ctx, "add port "+p.Name+" to "+o.bridge, ops...)
	if err != nil {
		var oe *ovsdbError
		if errors.As(err, &oe) && len(res) > 0 && res[0].Error != "" {
			return fmt.Errorf("bridge %s does not exist in the local OVS database (is the ovnhost node daemon's OVS up?)", o.bridge)
		}
		return err
	}
	if p.Mirror && len(res) >= len(ops) && res[len(ops)-1].Count == 0 {
		// Not fatal for connectivity, but the user asked for it: fail precisely.
		_ = o.DeletePort(context.WithoutCancel(ctx), p.Name)
		return fmt.Errorf("pod asks for traffic mirroring (ovn.kubernetes.io/mirror=true) but this node has no mirror %q: start ovnhost with a mirror output port (--mirror-output)", MirrorName)
	}
	return nil
}

func mirrorJoin(portUUID string) []ovsdb.Operation {
	return []ovsdb.Operation{{Op: ovsdb.OperationMutate, Table: "Mirror", Where: []ovsdb.Condition{eq("name", MirrorName)},
		Mutations: []ovsdb.Mutation{
			*ovsdb.NewMutation("select_src_port", ovsdb.MutateOperationInsert, uuidSet(portUUID)),
			*ovsdb.NewMutation("select_dst_port", ovsdb.MutateOperationInsert, uuidSet(portUUID)),
		}}}
}

// WaitInstalled waits, inside ovsdb-server, until ovn-controller has set
// external_ids:ovn-installed=true on the interface.
func (o *Bridge) WaitInstalled(ctx context.Context, name string, timeout time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl)
	}
	ms := max(int(timeout/time.Millisecond), 1)
	op := ovsdb.Operation{Op: ovsdb.OperationWait, Table: "Interface", Timeout: &ms,
		Where:   []ovsdb.Condition{eq("name", name), includes("external_ids", map[string]string{KeyOVNInstalled: "true"})},
		Columns: []string{"name"}, Until: "==", Rows: []ovsdb.Row{{"name": name}}}
	// The RPC itself must outlive the server-side timeout a little.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+5*time.Second)
	defer cancel()
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	_, err := o.transact(cctx, "wait for ovn-installed on "+name, op)
	var oe *ovsdbError
	if errors.As(err, &oe) && oe.timedOut {
		return ErrInstallTimeout
	}
	return err
}

// ErrInstallTimeout is WaitInstalled's error when ovn-controller did not
// set ovn-installed within the timeout.
var ErrInstallTimeout = errors.New("timed out")

// rowUUID extracts a row's _uuid.
func rowUUID(r ovsdb.Row) string {
	if u, ok := r["_uuid"].(ovsdb.UUID); ok {
		return u.GoUUID
	}
	return ""
}

func rowMap(r ovsdb.Row, col string) map[string]string {
	out := map[string]string{}
	if m, ok := r[col].(ovsdb.OvsMap); ok {
		for k, v := range m.GoMap {
			ks, _ := k.(string)
			vs, _ := v.(string)
			out[ks] = vs
		}
	}
	return out
}

func rowString(r ovsdb.Row, col string) string {
	s, _ := r[col].(string)
	return s
}

func rowUUIDs(r ovsdb.Row, col string) []string {
	switch v := r[col].(type) {
	case ovsdb.UUID:
		return []string{v.GoUUID}
	case ovsdb.OvsSet:
		var out []string
		for _, x := range v.GoSet {
			if u, ok := x.(ovsdb.UUID); ok {
				out = append(out, u.GoUUID)
			}
		}
		return out
	}
	return nil
}

func (o *Bridge) selectRows(ctx context.Context, table string, where []ovsdb.Condition, cols ...string) ([]ovsdb.Row, error) {
	op := ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where, Columns: cols}
	res, err := o.transact(ctx, "select "+table, op)
	if err != nil {
		return nil, err
	}
	return res[0].Rows, nil
}

// DeletePort removes the port, its interface, QoS and queue rows; a missing
// port is not an error.
func (o *Bridge) DeletePort(ctx context.Context, name string) error {
	rows, err := o.selectRows(ctx, "Port", []ovsdb.Condition{eq("name", name)}, "_uuid")
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	for _, r := range rows {
		u := rowUUID(r)
		ops = append(ops,
			ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Bridge",
				Where:     []ovsdb.Condition{ovsdb.NewCondition("ports", ovsdb.ConditionIncludes, uuidSet(u))},
				Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", ovsdb.MutateOperationDelete, uuidSet(u))}},
			ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "Port", Where: []ovsdb.Condition{eq("_uuid", ovsdb.UUID{GoUUID: u})}})
	}
	ops = append(ops,
		ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "Interface", Where: []ovsdb.Condition{eq("name", name)}},
		ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "QoS", Where: []ovsdb.Condition{includes("external_ids", map[string]string{extPort: name})}},
		ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "Queue", Where: []ovsdb.Condition{includes("external_ids", map[string]string{extPort: name})}})
	_, err = o.transact(ctx, "delete port "+name, ops...)
	return err
}

// PortsByIfaceID lists the pod interfaces (veths: no type) carrying
// iface-id. Internal ports are never a pod's, so a pod whose port name
// equals the node port's (pod node-w1 in namespace example on node
// w1.example) cannot make ADD remove ovn0, whatever let the name through.
func (o *Bridge) PortsByIfaceID(ctx context.Context, ifaceID string) ([]string, error) {
	rows, err := o.selectRows(ctx, "Interface", []ovsdb.Condition{includes("external_ids", map[string]string{KeyIfaceID: ifaceID})}, "name", "type")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, r := range rows {
		if rowString(r, "type") != "" {
			continue
		}
		out = append(out, rowString(r, "name"))
	}
	return out, nil
}

// OwnedInterface is an Interface row created for a pod by the CNI server.
type OwnedInterface struct {
	Name        string
	ExternalIDs map[string]string
}

// OwnedInterfaces lists the interfaces the CNI server created for pods
// (Vendor and a container ID in external_ids).
func (o *Bridge) OwnedInterfaces(ctx context.Context) ([]OwnedInterface, error) {
	rows, err := o.selectRows(ctx, "Interface", []ovsdb.Condition{includes("external_ids", map[string]string{KeyVendor: Vendor})}, "name", "external_ids")
	if err != nil {
		return nil, err
	}
	var out []OwnedInterface
	for _, r := range rows {
		ids := rowMap(r, "external_ids")
		if ids[KeyContainerID] == "" {
			continue
		}
		out = append(out, OwnedInterface{Name: rowString(r, "name"), ExternalIDs: ids})
	}
	return out, nil
}

// Interface reads one interface's external_ids and policing; ok=false when absent.
func (o *Bridge) Interface(ctx context.Context, name string) (map[string]string, bool, error) {
	rows, err := o.selectRows(ctx, "Interface", []ovsdb.Condition{eq("name", name)}, "external_ids")
	if err != nil || len(rows) == 0 {
		return nil, false, err
	}
	return rowMap(rows[0], "external_ids"), true, nil
}

// SetQoS replaces the port's rate limits: QoS row and queue for ingress
// (traffic to the pod), ingress policing for egress (traffic from the pod).
// A port that is gone (the pod was deleted meanwhile) aborts the whole
// transaction: its QoS and Queue rows are roots, and would stay forever.
func (o *Bridge) SetQoS(ctx context.Context, name string, ids map[string]string, ingressMbps, egressMbps int) error {
	prate, pburst := policing(egressMbps)
	zero := 0
	ops := []ovsdb.Operation{
		{Op: ovsdb.OperationWait, Table: "Port", Timeout: &zero, Where: []ovsdb.Condition{eq("name", name)},
			Columns: []string{"name"}, Until: "==", Rows: []ovsdb.Row{{"name": name}}},
		{Op: ovsdb.OperationUpdate, Table: "Interface", Where: []ovsdb.Condition{eq("name", name)},
			Row: ovsdb.Row{"ingress_policing_rate": prate, "ingress_policing_burst": pburst}},
	}
	portRow := ovsdb.Row{"qos": ovsdb.OvsSet{GoSet: []any{}}}
	if ingressMbps > 0 {
		ops = append(ops, qosOps(name, ingressMbps, ids)...)
		portRow["qos"] = uuidSet("qos")
	}
	ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: "Port", Where: []ovsdb.Condition{eq("name", name)}, Row: portRow})
	// Old QoS/Queue rows of this port, but not the ones inserted above: they
	// are matched by UUID after a select.
	old, err := o.selectRows(ctx, "QoS", []ovsdb.Condition{includes("external_ids", map[string]string{extPort: name})}, "_uuid")
	if err != nil {
		return err
	}
	oldQ, err := o.selectRows(ctx, "Queue", []ovsdb.Condition{includes("external_ids", map[string]string{extPort: name})}, "_uuid")
	if err != nil {
		return err
	}
	for _, r := range old {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "QoS", Where: []ovsdb.Condition{eq("_uuid", ovsdb.UUID{GoUUID: rowUUID(r)})}})
	}
	for _, r := range oldQ {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationDelete, Table: "Queue", Where: []ovsdb.Condition{eq("_uuid", ovsdb.UUID{GoUUID: rowUUID(r)})}})
	}
	res, err := o.transact(ctx, "set QoS of "+name, ops...)
	var oe *ovsdbError
	switch {
	case errors.As(err, &oe) && len(res) > 0 && res[0].Error != "":
		return fmt.Errorf("OVS port %s does not exist (its pod was deleted?); no QoS was written", name)
	case err != nil:
		return err
	case res[1].Count == 0:
		return fmt.Errorf("OVS interface %s does not exist", name)
	}
	return nil
}

// DatapathType reads datapath_type of the bridge ("" when absent).
func (o *Bridge) DatapathType(ctx context.Context) (string, bool, error) {
	rows, err := o.selectRows(ctx, "Bridge", []ovsdb.Condition{eq("name", o.bridge)}, "datapath_type")
	if err != nil || len(rows) == 0 {
		return "", false, err
	}
	return rowString(rows[0], "datapath_type"), true, nil
}

// EnsureMirror creates (or re-points) the node's mirror on the bridge with
// output port out, which must be a port of the bridge; an internal port of
// that name is created when it does not exist.
func (o *Bridge) EnsureMirror(ctx context.Context, out string) error {
	ports, err := o.selectRows(ctx, "Port", []ovsdb.Condition{eq("name", out)}, "_uuid")
	if err != nil {
		return err
	}
	var ops []ovsdb.Operation
	outRef := "mirrorout"
	if len(ports) == 0 {
		ops = append(ops, o.bridgeExists(),
			ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Interface", UUIDName: "mirroriface", Row: ovsdb.Row{
				"name": out, "type": "internal", "external_ids": strMap(map[string]string{KeyVendor: Vendor, extMirror: "output"})}},
			ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Port", UUIDName: outRef, Row: ovsdb.Row{
				"name": out, "interfaces": uuidSet("mirroriface"), "external_ids": strMap(map[string]string{KeyVendor: Vendor, extMirror: "output"})}},
			ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Bridge", Where: []ovsdb.Condition{eq("name", o.bridge)},
				Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("ports", ovsdb.MutateOperationInsert, uuidSet(outRef))}})
	} else {
		outRef = rowUUID(ports[0])
	}
	mirrors, err := o.selectRows(ctx, "Mirror", []ovsdb.Condition{eq("name", MirrorName)}, "_uuid")
	if err != nil {
		return err
	}
	if len(mirrors) == 0 {
		ops = append(ops,
			ovsdb.Operation{Op: ovsdb.OperationInsert, Table: "Mirror", UUIDName: "mirror", Row: ovsdb.Row{
				"name": MirrorName, "output_port": uuidSet(outRef), "external_ids": strMap(map[string]string{KeyVendor: Vendor})}},
			ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Bridge", Where: []ovsdb.Condition{eq("name", o.bridge)},
				Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("mirrors", ovsdb.MutateOperationInsert, uuidSet("mirror"))}})
	} else {
		ops = append(ops, ovsdb.Operation{Op: ovsdb.OperationUpdate, Table: "Mirror", Where: []ovsdb.Condition{eq("name", MirrorName)},
			Row: ovsdb.Row{"output_port": uuidSet(outRef)}})
	}
	_, err = o.transact(ctx, "ensure mirror "+MirrorName+" -> "+out, ops...)
	return err
}

// MirrorMembers lists the port names the mirror selects.
func (o *Bridge) MirrorMembers(ctx context.Context) ([]string, error) {
	mirrors, err := o.selectRows(ctx, "Mirror", []ovsdb.Condition{eq("name", MirrorName)}, "select_src_port")
	if err != nil || len(mirrors) == 0 {
		return nil, err
	}
	var names []string
	for _, u := range rowUUIDs(mirrors[0], "select_src_port") {
		rows, err := o.selectRows(ctx, "Port", []ovsdb.Condition{eq("_uuid", ovsdb.UUID{GoUUID: u})}, "name")
		if err != nil {
			return nil, err
		}
		for _, r := range rows {
			names = append(names, rowString(r, "name"))
		}
	}
	return names, nil
}

// SetExternalIDs sets keys of an interface's external_ids, keeping the others.
func (o *Bridge) SetExternalIDs(ctx context.Context, name string, kv map[string]string) error {
	keys := make([]any, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	where := []ovsdb.Condition{eq("name", name)}
	_, err := o.transact(ctx, "set external_ids of "+name,
		ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Interface", Where: where,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationDelete, ovsdb.OvsSet{GoSet: keys})}},
		ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Interface", Where: where,
			Mutations: []ovsdb.Mutation{*ovsdb.NewMutation("external_ids", ovsdb.MutateOperationInsert, strMap(kv))}})
	return err
}

// Rates returns the port's current ingress limit (its queue's max-rate)
// and egress policing, in Mbit/s (0: none).
func (o *Bridge) Rates(ctx context.Context, name string) (ingressMbps, egressMbps int, err error) {
	ifs, err := o.selectRows(ctx, "Interface", []ovsdb.Condition{eq("name", name)}, "ingress_policing_rate")
	if err != nil {
		return 0, 0, err
	}
	if len(ifs) > 0 {
		switch r := ifs[0]["ingress_policing_rate"].(type) {
		case int:
			egressMbps = r / 1000
		case float64:
			egressMbps = int(r) / 1000
		}
	}
	qs, err := o.selectRows(ctx, "Queue", []ovsdb.Condition{includes("external_ids", map[string]string{extPort: name})}, "other_config")
	if err != nil {
		return 0, 0, err
	}
	for _, q := range qs {
		if v, err := strconv.ParseInt(rowMap(q, "other_config")["max-rate"], 10, 64); err == nil {
			ingressMbps = int(v / 1_000_000)
		}
	}
	return ingressMbps, egressMbps, nil
}

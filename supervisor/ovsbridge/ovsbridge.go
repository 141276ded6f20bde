// Package ovsbridge is the one writer of the node's OVS bridges that OVN
// reaches through a localnet port, and of ovn-bridge-mappings, which maps
// OVN's physical networks to them. Several features own such a bridge on
// the same node (egress's br-egw, extgw's br-external, one br-<provider>
// per underlay network), each with at most one host NIC as its uplink
// port, and all of them share the one external_ids key; so they write
// both through here: Ensure/Remove a bridge, SetMapping a network.
//
// It is a part: it imports internal/* only, knows no feature and no
// Kubernetes, and reads and writes conf.db through libovsdb
// (internal/ovsdbconn).
package ovsbridge

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// Spec is one bridge as its feature wants it.
type Spec struct {
	// Name is the bridge's, and its internal port's (the host end).
	Name string
	// Datapath is the node's datapath type: a localnet port is a patch
	// port to br-int, which only works within one datapath ("": the
	// default, and an existing bridge's is left as it is).
	Datapath nodeconfig.Datapath
	// HWAddr is other_config:hwaddr, the internal port's MAC ("": left to
	// ovs-vswitchd, or as an earlier Ensure set it).
	HWAddr string
	// Uplink is the host NIC to be the bridge's port ("": none).
	Uplink string
	// UplinkMark is the Port external_ids key (value "true") that marks the
	// uplink this feature put in the bridge, so a later Ensure with another
	// NIC takes the old one out and leaves ports others added. Required with
	// Uplink. extgw's is "ovnhost-external-nic", as earlier releases wrote it.
	UplinkMark string
}

func (s Spec) check() error {
	switch {
	case s.Name == "":
		return errors.New("OVS bridge: no name given")
	case s.Uplink == s.Name:
		return fmt.Errorf("OVS bridge %s: the uplink NIC cannot be the bridge's own internal port; name the host NIC", s.Name)
	case s.Uplink != "" && s.UplinkMark == "":
		return fmt.Errorf("OVS bridge %s: uplink %s given without the external_ids key that marks it (Spec.UplinkMark)", s.Name, s.Uplink)
	}
	return nil
}

// Ensure creates bridge s.Name in conf.db (ovs) in one transaction: its
// internal port, fail mode standalone (a plain learning switch until OVN's
// patch port joins it), no in-band control, the vendor mark, the datapath
// type, hwaddr and uplink; or converges an existing one: datapath type,
// hwaddr, and the uplink (added; an earlier uplink under the same mark
// taken out). An uplink that is a port of another bridge is refused:
// taking it would cut that bridge off.
func Ensure(ctx context.Context, ovs *ovsdbconn.Conn, s Spec) error {
	if err := s.check(); err != nil {
		return err
	}
	if ovs == nil {
		return fmt.Errorf("OVS bridge %s: conf.db is not connected", s.Name)
	}
	root, err := openVSwitch(ctx, ovs)
	if err != nil {
		return fmt.Errorf("OVS bridge %s: %w", s.Name, err)
	}
	if s.Uplink != "" {
		if holder, err := bridgeOfPort(ctx, ovs, s.Uplink); err != nil {
			return err
		} else if holder != "" && holder != s.Name {
			return fmt.Errorf("%s cannot be the uplink of OVS bridge %s: it is already a port of another OVS bridge, %s; name a NIC that no other bridge holds, or take %s out of %s first",
				s.Uplink, s.Name, holder, s.Uplink, holder)
		}
	}
	var ops []ovsdb.Operation
	add := func(o []ovsdb.Operation, err error) error {
		ops = append(ops, o...)
		return err
	}
	uplink := []model.Model{
		&vswitch.Interface{UUID: "uplinkiface", Name: s.Uplink},
		&vswitch.Port{UUID: "uplinkport", Name: s.Uplink, Interfaces: []string{"uplinkiface"},
			ExternalIDs: map[string]string{"vendor": ovsconf.Vendor, s.UplinkMark: "true"}},
	}
	br := &vswitch.Bridge{Name: s.Name}
	switch err := ovs.Get(ctx, br); {
	case errors.Is(err, client.ErrNotFound):
		standalone := vswitch.BridgeFailModeStandalone
		other := map[string]string{"disable-in-band": "true"}
		if s.HWAddr != "" {
			other["hwaddr"] = s.HWAddr
		}
		rows := []model.Model{
			&vswitch.Interface{UUID: "hostiface", Name: s.Name, Type: "internal"},
			&vswitch.Port{UUID: "hostport", Name: s.Name, Interfaces: []string{"hostiface"}},
		}
		ports := []string{"hostport"}
		if s.Uplink != "" {
			rows = append(rows, uplink...)
			ports = append(ports, "uplinkport")
		}
		rows = append(rows, &vswitch.Bridge{UUID: "newbridge", Name: s.Name, DatapathType: string(s.Datapath), FailMode: &standalone,
			OtherConfig: other, ExternalIDs: map[string]string{"vendor": ovsconf.Vendor}, Ports: ports})
		for _, m := range rows {
			if err := add(ovs.Create(m)); err != nil {
				return err
			}
		}
		if err := add(ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationInsert, Value: []string{"newbridge"}})); err != nil {
			return err
		}
	case err != nil:
		return fmt.Errorf("OVS bridge %s: reading conf.db: %w", s.Name, err)
	default:
		if err := add(converge(ctx, ovs, br, s)); err != nil {
			return err
		}
		if err := add(convergeUplink(ctx, ovs, br, s, uplink)); err != nil {
			return err
		}
	}
	what := "ensure OVS bridge " + s.Name
	if s.Uplink != "" {
		what += " with uplink " + s.Uplink
	}
	_, err = ovsdbconn.Transact(ctx, ovs, what, ops...)
	return err
}

// converge updates an existing bridge's datapath type and hwaddr.
func converge(ctx context.Context, ovs *ovsdbconn.Conn, br *vswitch.Bridge, s Spec) ([]ovsdb.Operation, error) {
	var fields []any
	same := br.DatapathType == string(s.Datapath) || br.DatapathType == "" && s.Datapath == nodeconfig.Kernel // "" is ovs-vswitchd's default, system
	if s.Datapath != "" && !same {
		br.DatapathType = string(s.Datapath)
		fields = append(fields, &br.DatapathType)
	}
	if s.HWAddr != "" && br.OtherConfig["hwaddr"] != s.HWAddr {
		oc := maps.Clone(br.OtherConfig)
		if oc == nil {
			oc = map[string]string{}
		}
		oc["hwaddr"] = s.HWAddr
		br.OtherConfig = oc
		fields = append(fields, &br.OtherConfig)
	}
	if len(fields) == 0 {
		return nil, nil
	}
	return ovs.Where(br).Update(br, fields...)
}

// convergeUplink adds s.Uplink to br (rows: its new Interface and Port),
// marks it when someone else put it there, and takes out the ports an
// earlier Ensure marked.
func convergeUplink(ctx context.Context, ovs *ovsdbconn.Conn, br *vswitch.Bridge, s Spec, rows []model.Model) ([]ovsdb.Operation, error) {
	if s.UplinkMark == "" {
		return nil, nil
	}
	var ops []ovsdb.Operation
	var stale []string
	present := false
	for _, pu := range br.Ports {
		p := &vswitch.Port{UUID: pu}
		if ovs.Get(ctx, p) != nil {
			continue
		}
		switch {
		case s.Uplink != "" && p.Name == s.Uplink:
			present = true
			if p.ExternalIDs[s.UplinkMark] != "true" {
				o, err := ovs.Where(p).Mutate(p, model.Mutation{Field: &p.ExternalIDs, Mutator: ovsdb.MutateOperationInsert, Value: map[string]string{s.UplinkMark: "true"}})
				if err != nil {
					return nil, err
				}
				ops = append(ops, o...)
			}
		case p.ExternalIDs[s.UplinkMark] == "true":
			stale = append(stale, p.UUID)
		}
	}
	if len(stale) > 0 {
		o, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationDelete, Value: stale})
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	if s.Uplink != "" && !present {
		for _, m := range rows {
			o, err := ovs.Create(m)
			if err != nil {
				return nil, err
			}
			ops = append(ops, o...)
		}
		o, err := ovs.Where(br).Mutate(br, model.Mutation{Field: &br.Ports, Mutator: ovsdb.MutateOperationInsert, Value: []string{"uplinkport"}})
		if err != nil {
			return nil, err
		}
		ops = append(ops, o...)
	}
	return ops, nil
}

// MarkedUplinks lists, per bridge, the uplink NIC an Ensure with mark put
// in it (a bridge left by an earlier run is found by its mark alone).
func MarkedUplinks(ctx context.Context, ovs *ovsdbconn.Conn, mark string) (map[string]string, error) {
	if ovs == nil {
		return nil, errors.New("OVS bridges: conf.db is not connected")
	}
	var bridges []vswitch.Bridge
	if err := ovs.List(ctx, &bridges); err != nil {
		return nil, fmt.Errorf("listing the bridges in conf.db: %w", err)
	}
	out := map[string]string{}
	for _, b := range bridges {
		for _, pu := range b.Ports {
			p := &vswitch.Port{UUID: pu}
			if ovs.Get(ctx, p) == nil && p.ExternalIDs[mark] == "true" {
				out[b.Name] = p.Name
			}
		}
	}
	return out, nil
}

// bridgeOfPort names the bridge holding port name ("" none).
func bridgeOfPort(ctx context.Context, ovs *ovsdbconn.Conn, name string) (string, error) {
	p := &vswitch.Port{Name: name}
	switch err := ovs.Get(ctx, p); {
	case errors.Is(err, client.ErrNotFound):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("looking up port %s in conf.db: %w", name, err)
	}
	var bridges []vswitch.Bridge
	if err := ovs.List(ctx, &bridges); err != nil {
		return "", fmt.Errorf("listing the bridges in conf.db: %w", err)
	}
	for _, b := range bridges {
		if slices.Contains(b.Ports, p.UUID) {
			return b.Name, nil
		}
	}
	return "", nil
}

// Remove deletes bridge name (its ports with it) from conf.db (ovs);
// absent, or no connection, is fine. Its mapping is the caller's
// (SetMapping with "").
func Remove(ctx context.Context, ovs *ovsdbconn.Conn, name string) error {
	if ovs == nil {
		return nil
	}
	br := &vswitch.Bridge{Name: name}
	switch err := ovs.Get(ctx, br); {
	case errors.Is(err, client.ErrNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("OVS bridge %s: reading conf.db: %w", name, err)
	}
	root, err := openVSwitch(ctx, ovs)
	if err != nil {
		return fmt.Errorf("OVS bridge %s: %w", name, err)
	}
	ops, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.Bridges, Mutator: ovsdb.MutateOperationDelete, Value: []string{br.UUID}})
	if err != nil {
		return err
	}
	_, err = ovsdbconn.Transact(ctx, ovs, "remove OVS bridge "+name, ops...)
	return err
}

// Exists reports whether conf.db (ovs) has bridge name.
func Exists(ctx context.Context, ovs *ovsdbconn.Conn, name string) bool {
	return ovs != nil && ovs.Get(ctx, &vswitch.Bridge{Name: name}) == nil
}

// WaitUplink waits until ovs-vswitchd has opened nic, the uplink of
// bridge (an OpenFlow port number), and returns the interface's error when
// it could not; ctx bounds the wait.
func WaitUplink(ctx context.Context, ovs *ovsdbconn.Conn, bridge, nic string) error {
	var last string
	err := ovs.WaitUntil(ctx, "ovs-vswitchd to open "+nic+" in "+bridge, func() bool {
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

// openVSwitch is conf.db's one Open_vSwitch row, as the cache has it.
func openVSwitch(ctx context.Context, ovs *ovsdbconn.Conn) (*vswitch.OpenvSwitch, error) {
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil {
		return nil, fmt.Errorf("reading the Open_vSwitch row of conf.db: %w", err)
	}
	if len(roots) == 0 {
		return nil, errors.New("conf.db has no Open_vSwitch row yet; the node's ovs-config step writes it before any feature starts")
	}
	return &roots[0], nil
}

// WaitApplied waits until ovs-vswitchd has applied conf.db as it is now
// (next_cfg bumped, cur_cfg reaching it): after Remove, it has closed the
// bridge's ports, so a NIC it read is released (no longer promiscuous,
// its packet socket gone). ctx bounds the wait.
func WaitApplied(ctx context.Context, ovs *ovsdbconn.Conn) error {
	root, err := openVSwitch(ctx, ovs)
	if err != nil {
		return err
	}
	ops, err := ovs.Where(root).Mutate(root, model.Mutation{Field: &root.NextCfg, Mutator: ovsdb.MutateOperationAdd, Value: 1})
	if err != nil {
		return err
	}
	if _, err := ovsdbconn.Transact(ctx, ovs, "bump next_cfg", ops...); err != nil {
		return err
	}
	want := root.NextCfg + 1
	return ovs.WaitUntil(ctx, "ovs-vswitchd to apply conf.db (cur_cfg)", func() bool {
		r, err := openVSwitch(ctx, ovs)
		return err == nil && r.CurCfg >= want
	}, nil)
}

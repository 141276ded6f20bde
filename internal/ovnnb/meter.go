package ovnnb

import (
	"context"
	"fmt"
	"maps"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// ACLLogMeter is the meter every logging ACL ovnhost writes names
// (ACL.meter): ovn-controller sends a logged packet to itself (a
// packet-in) only within its rate, so a tenant who logs a flood of drops
// cannot flood ovn-controller. The name is OVN's own example's.
const ACLLogMeter = "acl-log-meter"

// DefaultACLLogRate is the meter's rate in packets per second when none is
// configured (ovn-kubernetes' default ACL logging rate limit is 20/s).
const DefaultACLLogRate = 20

// Meter is an OVN meter with one drop band.
type Meter struct {
	Name  string
	Unit  string // "pktps" (default) or "kbps"
	Rate  int    // in Unit, >= 1
	Burst int    // burst size in Unit (0: none)
	// Fair: each ACL naming the meter gets its own rate (ovn-northd makes
	// one meter per ACL), so one noisy policy does not starve the others' logs.
	Fair bool
}

// EnsureMeter creates the meter with its band, or brings an existing one
// (of that name) to m, in one transaction; nothing is written when it
// already is so.
func (c *Client) EnsureMeter(ctx context.Context, m Meter) error {
	if m.Unit == "" {
		m.Unit = nbdb.MeterUnitPktps
	}
	if m.Rate < 1 {
		return fmt.Errorf("ovnnb: meter %s: rate %d; give a rate of at least 1 %s", m.Name, m.Rate, m.Unit)
	}
	ids := vendorIDs(nil)
	var cur []nbdb.Meter
	if err := c.cl.WhereCache(func(x *nbdb.Meter) bool { return x.Name == m.Name }).List(ctx, &cur); err != nil {
		return err
	}
	band := &nbdb.MeterBand{UUID: "newband", Action: nbdb.MeterBandActionDrop, Rate: m.Rate, BurstSize: m.Burst, ExternalIDs: ids}
	fair := m.Fair
	if len(cur) == 0 {
		ops, err := c.cl.Create(band)
		if err != nil {
			return err
		}
		o, err := c.cl.Create(&nbdb.Meter{UUID: "newmeter", Name: m.Name, Unit: m.Unit, Fair: &fair, Bands: []string{band.UUID}, ExternalIDs: ids})
		if err != nil {
			return err
		}
		ops = append(ops, o...)
		_, err = c.transact(ctx, "create meter "+m.Name, ops)
		return err
	}
	x := &cur[0]
	if c.meterIs(ctx, x, m) && maps.Equal(x.ExternalIDs, ids) {
		return nil
	}
	ops, err := c.cl.Create(band)
	if err != nil {
		return err
	}
	// The old band, no longer referenced, is removed by the database (Meter_Band is not a root table).
	up := &nbdb.Meter{UUID: x.UUID, Unit: m.Unit, Fair: &fair, Bands: []string{band.UUID}, ExternalIDs: ids}
	o, err := c.cl.Where(up).Update(up, &up.Unit, &up.Fair, &up.Bands, &up.ExternalIDs)
	if err != nil {
		return err
	}
	_, err = c.transact(ctx, "update meter "+m.Name, append(ops, o...))
	return err
}

// meterIs reports whether x already has m's unit, fairness and one band of m's rate and burst.
func (c *Client) meterIs(ctx context.Context, x *nbdb.Meter, m Meter) bool {
	if x.Unit != m.Unit || x.Fair == nil || *x.Fair != m.Fair || len(x.Bands) != 1 {
		return false
	}
	b := &nbdb.MeterBand{UUID: x.Bands[0]}
	if err := c.cl.Get(ctx, b); err != nil {
		return false
	}
	return b.Action == nbdb.MeterBandActionDrop && b.Rate == m.Rate && b.BurstSize == m.Burst
}

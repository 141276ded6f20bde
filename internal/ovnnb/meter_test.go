package ovnnb_test

import (
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func TestEnsureMeterCreatesKeepsAndRetunesItsBand(t *testing.T) {
	s, nb := nbtest.Client(t)
	ctx := t.Context()
	m := ovnnb.Meter{Name: ovnnb.ACLLogMeter, Rate: 20, Burst: 20, Fair: true}
	if err := nb.EnsureMeter(ctx, m); err != nil {
		t.Fatal(err)
	}
	read := func() (*nbdb.Meter, []*nbdb.MeterBand) {
		ms := nbtest.Rows[*nbdb.Meter](t, s, nb, nbdb.MeterTable)
		if len(ms) != 1 {
			t.Fatalf("%d meters", len(ms))
		}
		return ms[0], nbtest.Rows[*nbdb.MeterBand](t, s, nb, nbdb.MeterBandTable)
	}
	m1, b1 := read()
	if m1.Unit != "pktps" || len(b1) != 1 || b1[0].Rate != 20 || b1[0].BurstSize != 20 || m1.Bands[0] != b1[0].UUID {
		t.Fatalf("meter %+v bands %+v", m1, b1)
	}
	// Again: nothing changes (same band row).
	if err := nb.EnsureMeter(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m2, b2 := read(); len(b2) != 1 || b2[0].UUID != b1[0].UUID || m2.Bands[0] != b1[0].UUID {
		t.Fatalf("rewritten without a change: %+v %+v", m2, b2)
	}
	// Another rate: one band, the new rate (the old band is gone).
	m.Rate, m.Burst = 5, 5
	if err := nb.EnsureMeter(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m3, b3 := read(); len(b3) != 1 || b3[0].Rate != 5 || m3.Bands[0] != b3[0].UUID {
		t.Fatalf("after a new rate: %+v %+v", m3, b3)
	}
	if err := nb.EnsureMeter(ctx, ovnnb.Meter{Name: "x", Rate: 0}); err == nil {
		t.Fatal("a meter with rate 0 was accepted")
	}
}

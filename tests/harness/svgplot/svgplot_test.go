package svgplot

import (
	"encoding/xml"
	"math"
	"strings"
	"testing"
)

func TestPlotIsWellFormedSVGWithEverySeriesAndPoint(t *testing.T) {
	p := Plot{Title: "RSS <controller> & northd", XLabel: "pods", YLabel: "MiB", Series: []Series{
		{Name: "controller", Points: []Point{{5000, 80}, {10000, 120}, {20000, 190}}},
		{Name: "linear", Points: []Point{{5000, 80}, {20000, 320}}, Dashed: true},
		{Name: "with a gap", Points: []Point{{5000, 1}, {10000, math.NaN()}, {20000, 3}}},
	}}
	svg := p.SVG()
	var doc struct {
		XMLName   xml.Name
		Polylines []struct {
			Points string `xml:"points,attr"`
		} `xml:"polyline"`
		Circles []struct{} `xml:"circle"`
		Texts   []string   `xml:"text"`
	}
	if err := xml.Unmarshal(svg, &doc); err != nil {
		t.Fatalf("not well-formed XML: %v\n%s", err, svg)
	}
	if doc.XMLName.Local != "svg" {
		t.Fatalf("root %q, want svg", doc.XMLName.Local)
	}
	if len(doc.Polylines) != 3 {
		t.Fatalf("%d polylines, want one per series (3)", len(doc.Polylines))
	}
	for i, want := range []int{3, 2, 2} {
		if got := len(strings.Fields(doc.Polylines[i].Points)); got != want {
			t.Errorf("series %d: %d points drawn, want %d (NaN skipped)", i, got, want)
		}
	}
	if len(doc.Circles) != 5 { // markers on solid series only
		t.Errorf("%d markers, want 5", len(doc.Circles))
	}
	all := strings.Join(doc.Texts, "|")
	for _, s := range []string{"RSS <controller> & northd", "pods", "MiB", "controller", "linear", "20k"} {
		if !strings.Contains(all, s) {
			t.Errorf("text %q missing from %q", s, all)
		}
	}
}

func TestTicksAreRoundAndCoverTheMaximum(t *testing.T) {
	for _, c := range []struct {
		max, top, step float64
	}{{190, 200, 20}, {20000, 20000, 2000}, {0.37, 0.4, 0.05}, {7, 7, 1}, {501, 600, 100}, {0, 1, 1}} {
		ticks, top := Ticks(c.max)
		if math.Abs(top-c.top) > 1e-9 {
			t.Errorf("Ticks(%g) top %g, want %g", c.max, top, c.top)
		}
		if len(ticks) < 2 || len(ticks) > 11 || ticks[0] != 0 || math.Abs(ticks[1]-c.step) > 1e-9 {
			t.Errorf("Ticks(%g) = %v, want from 0 by %g", c.max, ticks, c.step)
		}
	}
}

func TestLabel(t *testing.T) {
	for v, want := range map[float64]string{12000: "12k", 2500: "2.5k", 1.5e6: "1.5M", 250: "250", 0.25: "0.25", 0: "0", 1234.5: "1235"} {
		if got := Label(v); got != want {
			t.Errorf("Label(%g) = %q, want %q", v, got, want)
		}
	}
}

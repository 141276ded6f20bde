package scale

import (
	"math"
	"testing"
)

func TestExponentOfKnownCurves(t *testing.T) {
	xs := []float64{50, 100, 250, 500}
	for _, c := range []struct {
		name string
		f    func(float64) float64
		want float64
	}{
		{"linear", func(x float64) float64 { return 3 * x }, 1},
		{"quadratic", func(x float64) float64 { return x * x / 7 }, 2},
		{"constant", func(float64) float64 { return 42 }, 0},
		{"n log n", func(x float64) float64 { return x * math.Log(x) }, 1.2},
	} {
		var pts []Point
		for _, x := range xs {
			pts = append(pts, Point{x, c.f(x)})
		}
		if k := Exponent(pts); math.Abs(k-c.want) > 0.05 {
			t.Errorf("%s: exponent %.3f, want %.2f", c.name, k, c.want)
		}
	}
	if k := Exponent([]Point{{1, 1}}); !math.IsNaN(k) {
		t.Errorf("one point: %v, want NaN", k)
	}
}

func TestBendFindsWhereItTurnsWorseThanLinear(t *testing.T) {
	pts := []Point{{50, 50}, {100, 100}, {250, 260}, {500, 2000}}
	x, ok := Bend(pts, 1.25)
	if !ok || x != 250 {
		t.Fatalf("bend at %v (%v), want from 250", x, ok)
	}
	if _, ok := Bend(pts[:3], 1.25); ok {
		t.Fatal("a linear start has no bend")
	}
	if got := Order(Exponent(pts[:3]), 0.15); got != "linear (x^1.03)" {
		t.Errorf("Order = %q", got)
	}
	if got := Order(2.04, 0.15); got != "worse than linear (x^2.04)" {
		t.Errorf("Order = %q", got)
	}
}

// Package scale is the control-plane simulation of a large cluster (`make
// scale`, issue 29): simulated nodes (Node objects with the annotations an
// ovnhost node writes, SB Chassis and Encap rows) against the real
// kube-apiserver, the real OVN central and the real ovnhost-controller,
// grown in steps, with each step's figures written as BENCHRESULT lines,
// a CSV and a JSON file, and SVG curves (docs/scale.md reads them).
//
// The benchmark itself is scale_test.go, built only with the `scale` tag so
// that neither `make test` nor `make bench` runs it. This file holds the
// growth-order arithmetic, unit-tested without the tag.
package scale

import "math"

// Point is one measurement y at size x.
type Point struct{ X, Y float64 }

// Exponent is the least-squares slope of log y against log x: the k of
// y ~ x^k (1: linear, 2: quadratic). Points with x or y not positive are
// left out; NaN when fewer than two remain.
func Exponent(pts []Point) float64 {
	var n, sx, sy, sxx, sxy float64
	for _, p := range pts {
		if !(p.X > 0) || !(p.Y > 0) {
			continue
		}
		x, y := math.Log(p.X), math.Log(p.Y)
		n++
		sx += x
		sy += y
		sxx += x * x
		sxy += x * y
	}
	d := n*sxx - sx*sx
	if n < 2 || d == 0 {
		return math.NaN()
	}
	return (n*sxy - sx*sy) / d
}

// LocalExponents is the exponent between each pair of consecutive points
// (len(pts)-1 values; NaN where a value is not positive).
func LocalExponents(pts []Point) []float64 {
	var out []float64
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		if a.X > 0 && b.X > 0 && a.Y > 0 && b.Y > 0 && a.X != b.X {
			out = append(out, math.Log(b.Y/a.Y)/math.Log(b.X/a.X))
		} else {
			out = append(out, math.NaN())
		}
	}
	return out
}

// Bend is the first point (its x) from which the curve grows faster than
// x^limit between consecutive points, and whether there is one.
func Bend(pts []Point, limit float64) (float64, bool) {
	for i, k := range LocalExponents(pts) {
		if k > limit {
			return pts[i].X, true
		}
	}
	return 0, false
}

// Order names a growth exponent: "sublinear", "linear", or "worse than
// linear (x^k)". Within tol of 1 counts as linear.
func Order(k, tol float64) string {
	switch {
	case math.IsNaN(k):
		return "unknown (fewer than two points)"
	case k > 1+tol:
		return "worse than linear (x^" + trim(k) + ")"
	case k < 1-tol:
		return "sublinear (x^" + trim(k) + ")"
	default:
		return "linear (x^" + trim(k) + ")"
	}
}

func trim(k float64) string {
	s := math.Round(k*100) / 100
	return formatFloat(s)
}

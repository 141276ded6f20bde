// Package svgplot draws small line plots as standalone SVG documents, for
// the curves benchmarks commit under docs/ (no external tools):
//
//	svg := svgplot.Plot{Title: "controller RSS", XLabel: "pods", YLabel: "MiB",
//		Series: []svgplot.Series{{Name: "RSS", Points: []svgplot.Point{{5000, 80}, {20000, 190}}}}}.SVG()
//
// Axes start at zero and end at a round number above the largest value;
// each series is a polyline with a marker per point and a legend entry.
package svgplot

import (
	"bytes"
	"fmt"
	"html"
	"math"
	"strconv"
)

// Point is one measured (x, y).
type Point struct{ X, Y float64 }

// Series is one named curve.
type Series struct {
	Name   string
	Points []Point
	// Dashed draws the line dashed (e.g. a reference line such as "linear
	// from the first point").
	Dashed bool
}

// Plot is one chart.
type Plot struct {
	Title, XLabel, YLabel string
	Series                []Series
	// Width and Height in pixels; 640x400 when zero.
	Width, Height int
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// SVG renders the plot.
func (p Plot) SVG() []byte {
	w, h := p.Width, p.Height
	if w == 0 {
		w = 640
	}
	if h == 0 {
		h = 400
	}
	const left, right, top, bottom = 70.0, 20.0, 40.0, 55.0
	pw, ph := float64(w)-left-right, float64(h)-top-bottom
	var xmax, ymax float64
	for _, s := range p.Series {
		for _, pt := range s.Points {
			if finite(pt.X) && pt.X > xmax {
				xmax = pt.X
			}
			if finite(pt.Y) && pt.Y > ymax {
				ymax = pt.Y
			}
		}
	}
	xticks, xmax := Ticks(xmax)
	yticks, ymax := Ticks(ymax)
	sx := func(x float64) float64 { return left + x/xmax*pw }
	sy := func(y float64) float64 { return top + ph - y/ymax*ph }

	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%g" y="22" font-size="14" text-anchor="middle">%s</text>`+"\n", float64(w)/2, esc(p.Title))
	// Grid and ticks.
	for _, t := range xticks {
		x := sx(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x, top, x, top+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, top+ph+16, Label(t))
	}
	for _, t := range yticks {
		y := sy(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, y, left+pw, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, y+4, Label(t))
	}
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="black"/>`+"\n", left, top, pw, ph)
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+pw/2, h-12, esc(p.XLabel))
	fmt.Fprintf(&b, `<text x="16" y="%.1f" text-anchor="middle" transform="rotate(-90 16 %.1f)">%s</text>`+"\n", top+ph/2, top+ph/2, esc(p.YLabel))
	// Series.
	for i, s := range p.Series {
		col := palette[i%len(palette)]
		var pts bytes.Buffer
		var n int
		for _, pt := range s.Points {
			if !finite(pt.X) || !finite(pt.Y) {
				continue
			}
			if n > 0 {
				pts.WriteByte(' ')
			}
			fmt.Fprintf(&pts, "%.1f,%.1f", sx(pt.X), sy(pt.Y))
			n++
		}
		dash := ""
		if s.Dashed {
			dash = ` stroke-dasharray="6 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", col, dash, pts.String())
		if !s.Dashed {
			for _, pt := range s.Points {
				if finite(pt.X) && finite(pt.Y) {
					fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
						sx(pt.X), sy(pt.Y), col, esc(s.Name), Label(pt.X), Label(pt.Y))
				}
			}
		}
		ly := top + 14 + float64(i)*16
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", left+10, ly-4, left+30, ly-4, col, dash)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", left+36, ly, esc(s.Name))
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func finite(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }

func esc(s string) string { return html.EscapeString(s) }

// Ticks returns round tick values from 0 to a round top at or above max
// (1, 2 or 5 times a power of ten apart, at most 10 intervals), and that top.
func Ticks(max float64) ([]float64, float64) {
	if !(max > 0) || !finite(max) {
		return []float64{0, 1}, 1
	}
	mag := math.Pow(10, math.Floor(math.Log10(max)))
	var step float64
	for _, m := range []float64{0.1, 0.2, 0.5, 1, 2, 5, 10} {
		step = m * mag
		if max/step <= 10 {
			break
		}
	}
	top := math.Ceil(max/step-1e-9) * step
	var out []float64
	for i := 0; float64(i)*step <= top+step/2; i++ {
		out = append(out, float64(i)*step)
	}
	return out, top
}

// Label formats a tick or point value briefly (12000 -> 12k, 0.25 -> 0.25).
func Label(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6 && math.Mod(v, 1e5) == 0:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case a >= 1e3 && math.Mod(v, 100) == 0:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	case a >= 100:
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

package benchresult

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The doc marks each generated table with the benchmarks it shows:
//
//	<!-- benchresults BenchmarkColdStart BenchmarkVswitchdKillGap -->
//	(generated table)
//	<!-- end benchresults -->
const (
	beginMarker = "<!-- benchresults "
	endMarker   = "<!-- end benchresults -->"
)

// GenerateDoc returns doc with every marked region replaced by the table
// of its benchmarks' results.
func GenerateDoc(doc string, results []Result) (string, error) {
	var out strings.Builder
	lines := strings.SplitAfter(doc, "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		out.WriteString(line)
		trimmed := strings.TrimSpace(line)
		if !strings.HasPrefix(trimmed, beginMarker) {
			continue
		}
		names := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(trimmed, beginMarker), "-->"))
		if len(names) == 0 {
			return "", fmt.Errorf("line %d: %q names no benchmark; write the benchmark names before -->", i+1, trimmed)
		}
		end := -1
		for j := i + 1; j < len(lines); j++ {
			t := strings.TrimSpace(lines[j])
			if t == endMarker {
				end = j
				break
			}
			if strings.HasPrefix(t, beginMarker) {
				break
			}
		}
		if end < 0 {
			return "", fmt.Errorf("line %d: %q has no %q after it", i+1, trimmed, endMarker)
		}
		table, err := Table(results, names)
		if err != nil {
			return "", fmt.Errorf("line %d: %v", i+1, err)
		}
		out.WriteString(table)
		out.WriteString(lines[end])
		i = end
	}
	return out.String(), nil
}

// Table renders the results of the named benchmarks (in that order) as a
// Markdown table; figures measured more than once show their median and
// every run.
func Table(results []Result, benchmarks []string) (string, error) {
	var b strings.Builder
	b.WriteString("| benchmark | figure | value | reference | ratio | target | met | measured |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|\n")
	for _, bench := range benchmarks {
		groups := group(results, bench)
		if len(groups) == 0 {
			return "", fmt.Errorf("no results of %s in the JSON: run it (make bench, or go test -bench '^%s$') and merge its results", bench, bench)
		}
		for _, g := range groups {
			b.WriteString(row(g))
		}
	}
	return b.String(), nil
}

// group collects bench's results by figure name, in first-seen order.
func group(results []Result, bench string) [][]Result {
	var order []string
	by := map[string][]Result{}
	for _, r := range results {
		if r.Benchmark != bench {
			continue
		}
		if _, ok := by[r.Name]; !ok {
			order = append(order, r.Name)
		}
		by[r.Name] = append(by[r.Name], r)
	}
	var out [][]Result
	for _, n := range order {
		out = append(out, by[n])
	}
	return out
}

func row(runs []Result) string {
	mid := medianOf(runs)
	r := runs[mid]
	figure := r.Name
	if r.Note != "" {
		figure += " (" + r.Note + ")"
	}
	value := num(r.Value) + " " + r.Unit
	if len(runs) > 1 {
		var vs []string
		for _, x := range runs {
			vs = append(vs, num(x.Value))
		}
		value = "median " + value + " (runs " + strings.Join(vs, ", ") + ")"
	}
	ref := "-"
	switch {
	case r.ReferenceValue != nil:
		ref = num(*r.ReferenceValue) + " " + r.Unit + " (" + r.Reference + ", same run)"
	case r.Source != "":
		ref = r.Reference + " (quoted: " + r.Source + "; no ratio)"
	case r.Reference != "":
		ref = r.Reference
	}
	ratio := "-"
	if r.Ratio != nil {
		ratio = strconv.FormatFloat(*r.Ratio, 'f', 2, 64)
	}
	target, met := "-", "-"
	if r.Target != "" {
		target = r.Target
	}
	if r.Met != nil {
		met = "met"
		if !*r.Met {
			met = "**not met**"
		}
	}
	measured := r.Measured
	if r.Load > 0 {
		measured += ", load " + strconv.FormatFloat(r.Load, 'f', 1, 64)
	}
	cells := []string{"`" + r.Benchmark + "`", figure, value, ref, ratio, target, met, measured}
	for i, c := range cells {
		cells[i] = strings.ReplaceAll(c, "|", `\|`)
	}
	return "| " + strings.Join(cells, " | ") + " |\n"
}

// medianOf returns the index of the run with the median value (the lower
// one of an even count).
func medianOf(runs []Result) int {
	idx := make([]int, len(runs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case runs[a].Value < runs[b].Value:
			return -1
		case runs[a].Value > runs[b].Value:
			return 1
		}
		return 0
	})
	return idx[(len(idx)-1)/2]
}

// num prints a figure with three significant digits at most, no exponent.
func num(v float64) string {
	a := v
	if a < 0 {
		a = -a
	}
	prec := 0
	switch {
	case a == 0 || a >= 100:
		prec = 0
	case a >= 10:
		prec = 1
	case a >= 1:
		prec = 2
	default:
		prec = 3
	}
	s := strconv.FormatFloat(v, 'f', prec, 64)
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

// Package benchresult is how every benchmark under tests/ states a figure:
// one machine-readable line per figure on stdout,
//
//	BENCHRESULT {"benchmark":...,"name":...,"value":...,"unit":...,"reference":...,"reference_value":...,"ratio":...,"target":...,"met":...}
//
// which `make bench` gathers into one JSON file (cmd benchjson) and from
// which docs/benchmarks.md's result tables are generated (GenerateDoc), so
// the doc cannot say what the code did not measure.
//
// A ratio exists only against a reference measured in the same run
// (Against); a figure quoted from elsewhere (Quoted) carries its source and
// is never divided by.
package benchresult

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Prefix starts every result line.
const Prefix = "BENCHRESULT "

// Result is one figure of one benchmark run.
type Result struct {
	Benchmark string  `json:"benchmark"`
	Name      string  `json:"name"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit"`
	// Reference says what the figure is compared with; ReferenceValue is
	// set only when it was measured in the same run, Source only when it
	// is quoted.
	Reference      string   `json:"reference,omitempty"`
	ReferenceValue *float64 `json:"reference_value,omitempty"`
	Source         string   `json:"source,omitempty"`
	// Ratio is Value / ReferenceValue.
	Ratio  *float64 `json:"ratio,omitempty"`
	Target string   `json:"target,omitempty"`
	// Met is absent when the target is not a checkable bound.
	Met      *bool  `json:"met,omitempty"`
	Note     string `json:"note,omitempty"`
	Measured string `json:"measured"` // UTC date of the run
	// Load is the 1-minute load average when the figure was reported: the
	// machine is shared, and a figure is read with it.
	Load float64 `json:"load,omitempty"`
}

// Figure starts a result of benchmark b.
func Figure(b testing.TB, name string, value float64, unit string) *Builder {
	return &Builder{tb: b, r: Result{Benchmark: b.Name(), Name: name, Value: value, Unit: unit}}
}

// Builder completes a Result; Report prints it.
type Builder struct {
	tb     testing.TB
	r      Result
	target *Target
}

// Against sets a reference measured in the same run, and so the ratio.
func (f *Builder) Against(reference string, value float64) *Builder {
	f.r.Reference, f.r.ReferenceValue, f.r.Source = reference, &value, ""
	if value != 0 {
		ratio := f.r.Value / value
		f.r.Ratio = &ratio
	}
	return f
}

// Quoted sets a reference not measured here, with where it comes from.
func (f *Builder) Quoted(reference, source string) *Builder {
	f.r.Reference, f.r.Source, f.r.ReferenceValue, f.r.Ratio = reference, source, nil, nil
	return f
}

// Target sets the target the figure is judged by.
func (f *Builder) Target(t Target) *Builder { f.target = &t; return f }

// Note adds a short remark (conditions, per-run values).
func (f *Builder) Note(format string, args ...any) *Builder {
	f.r.Note = fmt.Sprintf(format, args...)
	return f
}

// Result returns the completed result without printing it.
func (f *Builder) Result() Result {
	r := f.r
	if f.target != nil {
		r.Target = f.target.Text
		if f.target.check != nil {
			if met, ok := f.target.check(r); ok {
				r.Met = &met
			}
		}
	}
	r.Measured = time.Now().UTC().Format(time.DateOnly)
	r.Load = loadAverage()
	return r
}

var printMu sync.Mutex

// Report prints the result line and logs it for a human reader.
func (f *Builder) Report() Result {
	r := f.Result()
	line, err := Format(r)
	if err != nil {
		f.tb.Fatalf("benchmark result %q: %v", r.Name, err)
	}
	printMu.Lock()
	fmt.Fprintln(os.Stdout, line)
	printMu.Unlock()
	return r
}

// Format renders r as one result line.
func Format(r Result) (string, error) {
	if math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
		return "", fmt.Errorf("value %v is not a number; the benchmark measured nothing", r.Value)
	}
	if r.Ratio != nil && (math.IsNaN(*r.Ratio) || math.IsInf(*r.Ratio, 0)) {
		r.Ratio = nil
	}
	raw, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	return Prefix + string(raw), nil
}

// Parse reads a result line; ok is false for any other line. The prefix
// may come after other text on the line (go test indents some output, and
// without -v prints a benchmark's name without a newline).
func Parse(line string) (Result, bool, error) {
	s := strings.TrimSpace(line)
	i := strings.Index(s, Prefix)
	if i < 0 {
		return Result{}, false, nil
	}
	rest := s[i+len(Prefix):]
	var r Result
	if err := json.Unmarshal([]byte(rest), &r); err != nil {
		return Result{}, true, fmt.Errorf("result line %q: %v", s, err)
	}
	if r.Benchmark == "" || r.Name == "" || r.Unit == "" {
		return Result{}, true, fmt.Errorf("result line %q: benchmark, name and unit are required", s)
	}
	return r, true, nil
}

// Target is a target from ../shared/BRIEF.md section 5 (or an issue):
// its words, and when it is a bound, how to check it.
type Target struct {
	Text  string
	check func(Result) (met, ok bool)
}

// Goal is a target stated in words only (met is not computed).
func Goal(text string) Target { return Target{Text: text} }

// AtMost: the value is at most v (in the figure's unit).
func AtMost(v float64, text string) Target {
	return Target{Text: text, check: func(r Result) (bool, bool) { return r.Value <= v, true }}
}

// Below: the value is under v.
func Below(v float64, text string) Target {
	return Target{Text: text, check: func(r Result) (bool, bool) { return r.Value < v, true }}
}

// AtLeast: the value is at least v.
func AtLeast(v float64, text string) Target {
	return Target{Text: text, check: func(r Result) (bool, bool) { return r.Value >= v, true }}
}

// RatioAtMost: the ratio to the same-run reference is at most x; not
// judged without one.
func RatioAtMost(x float64, text string) Target {
	return Target{Text: text, check: func(r Result) (bool, bool) {
		if r.Ratio == nil {
			return false, false
		}
		return *r.Ratio <= x, true
	}}
}

// RatioAtLeast: the ratio to the same-run reference is at least x.
func RatioAtLeast(x float64, text string) Target {
	return Target{Text: text, check: func(r Result) (bool, bool) {
		if r.Ratio == nil {
			return false, false
		}
		return *r.Ratio >= x, true
	}}
}

// Ms converts a duration to milliseconds, the unit of most figures.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// loadAverage reads the 1-minute load average (0 when unreadable).
func loadAverage() float64 {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(raw))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Package promcheck answers "which metric names does ovnhost export" and
// "which metric names does this PromQL expression read", so tests can hold
// the dashboards and rules to the metrics that exist.
//
// Defined names come from the Go sources (every prometheus Opts Name, with
// Namespace/Subsystem when given, and every NewDesc name under ovnhost_);
// the cluster test checks that everything a live node serves is among them,
// so the scan cannot silently miss a family.
package promcheck

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

var (
	optsName  = regexp.MustCompile(`Name:\s*"(ovnhost_[a-z0-9_]+)"`)
	nsSubName = regexp.MustCompile(`Namespace:\s*"(\w+)",\s*Subsystem:\s*"(\w+)",\s*Name:\s*"(\w+)"`)
	descName  = regexp.MustCompile(`NewDesc\(\s*"(ovnhost_[a-z0-9_]+)"`)
)

// DefinedNames scans the non-test Go files under root's program
// directories for metric definitions.
func DefinedNames(root string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, dir := range []string{"cni", "controller", "supervisor", "netctl", "internal"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := string(raw)
			for _, m := range optsName.FindAllStringSubmatch(s, -1) {
				out[m[1]] = true
			}
			for _, m := range descName.FindAllStringSubmatch(s, -1) {
				out[m[1]] = true
			}
			for _, m := range nsSubName.FindAllStringSubmatch(s, -1) {
				out[m[1]+"_"+m[2]+"_"+m[3]] = true
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// StandardPrefixes are families of client_golang's Go and process
// collectors, which every ovnhost program registers.
var StandardPrefixes = []string{"go_", "process_", "promhttp_"}

var promqlWords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true, "bool": true,
	"and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true,
	"sum": true, "min": true, "max": true, "avg": true, "count": true, "stddev": true, "stdvar": true, "topk": true,
	"bottomk": true, "quantile": true, "count_values": true, "group": true, "limitk": true, "limit_ratio": true,
}

var (
	strLit     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	braces     = regexp.MustCompile(`\{[^}]*\}`)
	brackets   = regexp.MustCompile(`\[[^\]]*\]`)
	grouping   = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	durationOr = regexp.MustCompile(`^[0-9]`)
)

// MetricNames returns the metric names an expression reads (not
// functions, keywords, label names or Grafana variables).
func MetricNames(expr string) []string {
	e := strLit.ReplaceAllString(expr, `""`)
	e = braces.ReplaceAllString(e, " ")
	e = brackets.ReplaceAllString(e, " ")
	e = grouping.ReplaceAllString(e, " ")
	e = regexp.MustCompile(`\$\{?\w+\}?`).ReplaceAllString(e, " ")
	// Numbers with exponents or units are not identifiers.
	e = regexp.MustCompile(`\b[0-9][0-9a-zA-Z.]*`).ReplaceAllString(e, " ")
	seen := map[string]bool{}
	var out []string
	for _, m := range identifier.FindAllString(e, -1) {
		if strings.HasSuffix(strings.TrimSpace(m), "(") || durationOr.MatchString(m) {
			continue // a function call
		}
		m = strings.TrimSpace(m)
		if promqlWords[strings.ToLower(m)] || seen[m] {
			continue
		}
		seen[m] = true
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

// Exported says whether name is served, given the defined families: a
// histogram's _bucket/_sum/_count series count as its family, and the
// standard collectors' families are always there.
func Exported(name string, defined map[string]bool) bool {
	if defined[name] {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok && defined[b] {
			return true
		}
	}
	for _, p := range StandardPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

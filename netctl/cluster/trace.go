package cluster

import (
	"regexp"
	"strings"
)

var traceStage = regexp.MustCompile(`(?m)^\s*(?:ingress|egress)\(dp="([^"]+)"`)

// TracePath is the logical datapaths (switches and routers) an ovn-trace
// output passes, in order, each once per visit.
func TracePath(logical string) []string {
	var out []string
	for _, m := range traceStage.FindAllStringSubmatch(logical, -1) {
		if len(out) == 0 || out[len(out)-1] != m[1] {
			out = append(out, m[1])
		}
	}
	return out
}

// RoutersOn are the path's datapaths that are routers of topo (all of
// the path's datapaths not switches when topo is nil: "" is returned).
func RoutersOn(path []string, routers map[string]bool) []string {
	var out []string
	for _, dp := range path {
		if routers[dp] {
			out = append(out, dp)
		}
	}
	return out
}

// PathString joins the path for the trace's output.
func PathString(path []string, routers map[string]bool) string {
	parts := make([]string, len(path))
	for i, dp := range path {
		parts[i] = dp
		if routers[dp] {
			parts[i] = "router " + dp
		}
	}
	return strings.Join(parts, " -> ")
}

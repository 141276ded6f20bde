// Package layering holds the import rules of the tree (docs/architecture.md):
// which rooms may depend on which. They are read from `go list -deps`, so a
// new import that breaks a rule fails here with the chain's two ends named.
package layering

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
)

const module = "github.com/ovnhost/ovnhost/"

var (
	graphOnce sync.Once
	graph     map[string][]string // package (module-relative or full) -> its deps, itself included
	graphErr  string
)

// depsOf lists every package pkg depends on, itself included, from one
// `go list -deps` of the whole module (tests excluded: they may reach
// anywhere).
func depsOf(t *testing.T, pkg string) []string {
	t.Helper()
	graphOnce.Do(func() {
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"...").CombinedOutput()
		if err != nil {
			graphErr = err.Error() + "\n" + string(out)
			return
		}
		graph = map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			graph[strings.TrimPrefix(f[0], module)] = append([]string{f[0]}, f[1:]...)
		}
	})
	if graphErr != "" {
		t.Fatalf("go list: %s", graphErr)
	}
	d, ok := graph[pkg]
	if !ok {
		t.Fatalf("package %s is not in the module: a rule names a room that moved; update the rule", pkg)
	}
	return d
}

// packagesUnder lists the module's packages at or below prefix.
func packagesUnder(t *testing.T, prefix string) []string {
	depsOf(t, "internal/version") // loads the graph
	var out []string
	for p := range graph {
		if p == prefix || strings.HasPrefix(p, prefix+"/") {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

type rule struct {
	from      []string // packages (a trailing "/..." takes the packages under it)
	forbidden []string // prefixes of module-relative paths, or of full paths for outside packages (contain a dot)
	except    []string // prefixes allowed although forbidden matches
	why       string
}

// violations lists "pkg depends on dep: why" for every break of r.
func (r rule) violations(t *testing.T) []string {
	t.Helper()
	var out []string
	var from []string
	for _, f := range r.from {
		if base, ok := strings.CutSuffix(f, "/..."); ok {
			from = append(from, packagesUnder(t, base)...)
		} else {
			from = append(from, f)
		}
	}
	for _, pkg := range from {
		for _, d := range depsOf(t, pkg) {
			p := d
			rel := strings.TrimPrefix(d, module)
			for _, bad := range r.forbidden {
				if !strings.Contains(bad, ".") {
					if rel == d {
						continue // outside the module
					}
					p = rel
				}
				if !strings.HasPrefix(p, bad) || hasPrefix(p, r.except) || samePackageTree(p, pkg) {
					continue
				}
				out = append(out, pkg+" depends on "+d+": "+r.why)
			}
		}
	}
	return out
}

func hasPrefix(p string, prefixes []string) bool {
	for _, x := range prefixes {
		if p == x || strings.HasPrefix(p, x+"/") {
			return true
		}
	}
	return false
}

// samePackageTree: a room may use its own sub-packages (controller/kube is
// not "another feature" of itself).
func samePackageTree(dep, pkg string) bool { return dep == pkg || strings.HasPrefix(dep, pkg+"/") }

// Node features: each in one room, importing no sibling; only the agent
// (and the programs) wire them.
var nodeFeatures = []string{"supervisor/node", "supervisor/central", "supervisor/egress", "supervisor/extgw", "supervisor/underlay", "supervisor/nodeapi", "cni/server"}

// Node parts: what the node features are built from (a supervised daemon,
// the unit lifecycle, host NAT, a link's IP configuration moved to
// another, OVS bridges and their mappings). They use internal/* and each
// other, never a feature, the assembly, the settings table or Kubernetes,
// so any feature may import them.
var nodeParts = []string{"supervisor/daemon", "supervisor/process", "supervisor/lifecycle", "supervisor/hostnat", "supervisor/hostlink", "supervisor/health", "supervisor/ovsbridge"}

// Controller reconcilers: each with its own queue and state; only
// controller/kube wires them.
var reconcilers = []string{"controller/pods", "controller/subnets", "controller/ips", "controller/services", "controller/netpol", "controller/gateways", "controller/extgw", "controller/underlay", "controller/vpcs", "controller/vpcnat"}

// Test helpers that must never be linked into a program.
var testOnly = []string{"internal/ovnnb/nbtest", "controller/internal/ctltest", "internal/ovsconf/ovsconftest", "cni/ovsport/ovsporttest", "cni/podnet/podnettest"}

var programs = []string{"supervisor/cmd/ovnhost", "cni/cmd/ovnhost-cni", "controller/cmd/ovnhost-controller", "netctl/cmd/netctl", "packaging/cmd/ovnhost-package"}

func rules() []rule {
	rs := []rule{
		{from: []string{"supervisor/cmd/ovnhost"}, forbidden: []string{"controller/"},
			why: "the node daemon does not carry the controller; shared OVN logic lives in internal/"},
		{from: []string{"supervisor/..."}, forbidden: []string{"netctl/"},
			why: "the daemon does not link the CLI; what both need (node API wire types, host checks) lives in internal/"},
		{from: []string{"netctl/..."}, forbidden: []string{"supervisor/"},
			why: "netctl links no daemon code: the node API's wire types are internal/nodeapi, the host checks internal/hostcheck"},
		{from: []string{"netctl/..."}, forbidden: []string{"controller/"}, except: []string{"controller/apis"},
			why: "netctl reads the CRD types, not the controller's reconcilers; names both need live in internal/"},
		{from: []string{"supervisor/node", "supervisor/central", "supervisor/daemon", "supervisor/process", "supervisor/lifecycle", "supervisor/health", "supervisor/egress", "supervisor/extgw", "supervisor/underlay", "cni/..."},
			forbidden: []string{"internal/hostcheck", "internal/config"},
			why:       "the runtime acts on the resolved NodeConfig; only the programs, the agent, the node API's doctor and netctl read the settings table and the checks"},
		{from: []string{"cni/..."}, forbidden: []string{"supervisor/", "controller/", "netctl/"},
			why: "the CNI side is given its options by the agent; it does not read the node's settings table"},
		{from: []string{"internal/..."}, forbidden: []string{"supervisor/", "controller/", "netctl/", "cni/"},
			except: []string{"cni/protocol", "cni/cniconf"},
			why:    "internal/ is the neutral ground every program stands on (of cni/ only the two leaves: the plugin's wire format and conflist handling)"},
		{from: []string{"cni/protocol", "cni/cniconf"}, forbidden: []string{""}, except: []string{"cni/protocol", "cni/cniconf"},
			why: "cni/protocol and cni/cniconf are leaves that internal/ may use: they import nothing else of the module"},
		{from: []string{"internal/ovnnet", "internal/ipam", "internal/ovnnb", "internal/annotations", "cni/cmd/ovnhost-cni", "cni/protocol"},
			forbidden: []string{"k8s.io/", "sigs.k8s.io/"},
			why:       "standalone hosts and the small plugin run without Kubernetes"},
		{from: nodeParts, forbidden: append([]string{"supervisor/agent", "controller/", "cni/"}, nodeFeatures...),
			why: "a part is used by features; it imports none of them, nor the assembly or the controller"},
		{from: []string{"supervisor/hostlink"}, forbidden: []string{"k8s.io/", "sigs.k8s.io/", "github.com/ovn-kubernetes/libovsdb", "internal/ovs"},
			why: "hostlink is pure netlink: moving a link's IP configuration needs neither Kubernetes nor OVS (the caller owns the bridge)"},
	}
	for _, f := range nodeFeatures {
		var others []string
		for _, o := range nodeFeatures {
			if o != f {
				others = append(others, o)
			}
		}
		rs = append(rs, rule{from: []string{f + "/..."}, forbidden: others,
			why: "node features do not import each other; supervisor/agent wires them"})
	}
	for _, p := range nodeParts {
		rs = append(rs, rule{from: []string{p + "/..."},
			forbidden: append(slices.Clone(nodeFeatures), "supervisor/agent", "supervisor/cmd", "cni/", "controller/", "netctl/", "internal/config", "internal/hostcheck", "k8s.io/", "sigs.k8s.io/"),
			why:       "node parts (" + strings.Join(nodeParts, ", ") + ") are shared by the features: they import no feature, assembly, settings table or Kubernetes"})
	}
	for _, f := range reconcilers {
		var others []string
		for _, o := range reconcilers {
			if o != f {
				others = append(others, o)
			}
		}
		rs = append(rs, rule{from: []string{f + "/..."}, forbidden: append(others, "controller/kube"),
			why: "reconcilers reach each other through small interfaces; controller/kube wires them"})
	}
	rs = append(rs, rule{from: programs, forbidden: testOnly, why: "test helpers are never linked into a program"})
	return rs
}

func TestImportRules(t *testing.T) {
	for _, r := range rules() {
		for _, v := range r.violations(t) {
			t.Error(v)
		}
	}
}

// TestOnlyTheAssemblyWires: a node feature is imported only by
// supervisor/agent (and by the feature's own sub-packages), a controller
// reconciler only by controller/kube.
func TestOnlyTheAssemblyWires(t *testing.T) {
	wirers := map[string][]string{}
	for _, f := range nodeFeatures {
		wirers[f] = []string{"supervisor/agent"}
	}
	for _, f := range reconcilers {
		wirers[f] = []string{"controller/kube"}
	}
	depsOf(t, "internal/version")
	for pkg, deps := range graph {
		if strings.Contains(pkg, ".") && !strings.HasPrefix(pkg, "github.com/ovnhost") {
			continue
		}
		for _, d := range deps[1:] {
			rel := strings.TrimPrefix(d, module)
			allowed, isFeature := wirers[rel]
			if !isFeature || samePackageTree(rel, pkg) || hasPrefix(pkg, allowed) || transitive(pkg, rel, allowed) {
				continue
			}
			t.Errorf("%s imports the feature %s: only %v wires it", pkg, rel, allowed)
		}
	}
}

// transitive: pkg reaches feature only through an allowed wirer (the
// programs import the agent, which imports the features).
func transitive(pkg, feature string, wirers []string) bool {
	for _, w := range wirers {
		for _, d := range graph[pkg] {
			if strings.TrimPrefix(d, module) == w {
				return true
			}
		}
	}
	return false
}

// TestRuleCatchesAViolation keeps the rules honest: a package known to
// import the controller's Kubernetes code is reported, and a rule with a
// violation fails.
func TestRuleCatchesAViolation(t *testing.T) {
	found := false
	for _, d := range depsOf(t, "controller/cmd/ovnhost-controller") {
		if d == module+"controller/kube" {
			found = true
		}
	}
	if !found {
		t.Fatal("go list -deps did not report controller/kube under the controller's main: the rules above would pass vacuously")
	}
	bad := rule{from: []string{"controller/cmd/ovnhost-controller"}, forbidden: []string{"controller/kube"}, why: "x"}
	if len(bad.violations(t)) == 0 {
		t.Fatal("a rule forbidding what the controller's main imports reported nothing")
	}
}

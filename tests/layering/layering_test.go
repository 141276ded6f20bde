// Package layering holds the import rules of the tree: which rooms may
// depend on which. They are read from `go list -deps`, so a new import that
// breaks a rule fails here with the chain's two ends named.
package layering

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/ovnhost/ovnhost/"

// deps lists every package pkg depends on, itself included.
func deps(t *testing.T, pkg string) []string {
	t.Helper()
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", module+pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}

func TestImportRules(t *testing.T) {
	rules := []struct {
		from      []string
		forbidden []string
		why       string
	}{
		{[]string{"supervisor/cmd/ovnhost"}, []string{"controller/"},
			"the node daemon does not carry the controller; shared OVN logic lives in internal/"},
		{[]string{"supervisor/node", "supervisor/central", "supervisor/process", "supervisor/lifecycle", "supervisor/health", "cni/server", "cni/podnet"},
			[]string{"supervisor/preflight"},
			"the runtime acts on the resolved NodeConfig; preflight only checks"},
		{[]string{"cni/server", "cni/podnet", "cni/cniconf", "cni/protocol", "cni/cmd/ovnhost-cni"},
			[]string{"supervisor/", "controller/", "netctl/"},
			"the CNI side is given its options; it does not read the node's settings table"},
		{[]string{"internal/nodeconfig", "internal/layout", "internal/ovsdbconn", "internal/ovnnb", "internal/ovnnet", "internal/ipam", "internal/annotations"},
			[]string{"supervisor/", "cni/", "controller/", "netctl/"},
			"internal/ is the neutral ground every program stands on"},
		{[]string{"internal/ovnnet", "internal/ipam", "internal/ovnnb", "internal/annotations", "cni/cmd/ovnhost-cni"},
			[]string{"k8s.io/", "sigs.k8s.io/"},
			"standalone hosts and the small plugin run without Kubernetes"},
	}
	for _, r := range rules {
		for _, from := range r.from {
			for _, d := range deps(t, from) {
				for _, bad := range r.forbidden {
					p := d
					if !strings.Contains(bad, ".") {
						p = strings.TrimPrefix(d, module)
						if p == d {
							continue // outside the module
						}
					}
					if strings.HasPrefix(p, bad) {
						t.Errorf("%s depends on %s: %s", from, d, r.why)
					}
				}
			}
		}
	}
}

// TestRuleCatchesAViolation keeps the rule honest: a package known to import
// the controller's Kubernetes code is reported.
func TestRuleCatchesAViolation(t *testing.T) {
	found := false
	for _, d := range deps(t, "controller/cmd/ovnhost-controller") {
		if d == module+"controller/kube" {
			found = true
		}
	}
	if !found {
		t.Fatal("go list -deps did not report controller/kube under the controller's main: the rules above would pass vacuously")
	}
}

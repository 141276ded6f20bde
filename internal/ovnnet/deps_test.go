package ovnnet

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestNoKubernetesDependency keeps the library usable where there is no
// Kubernetes: neither it nor ipam/ovnnb may pull in k8s.io packages.
func TestNoKubernetesDependency(t *testing.T) {
	out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps",
		"github.com/ovnhost/ovnhost/internal/ovnnet", "github.com/ovnhost/ovnhost/internal/annotations").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v: %s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "k8s.io/") || strings.HasPrefix(p, "sigs.k8s.io/") {
			t.Fatalf("internal/ovnnet depends on %s; keep Kubernetes code in controller/kube", p)
		}
	}
}

package packaging

import (
	"os"
	"testing"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
)

// kubectl is the harness's kubectl (tests/harness/kubeapi builds it).
func kubectl(t *testing.T) string { return kubeapi.Kubectl(t) }

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

package kubeclient

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- cluster: {server: "https://192.0.2.1:6443"}
  name: c
contexts:
- context: {cluster: c, user: u}
  name: c
current-context: c
users:
- name: u
  user: {token: t}
`

func TestConfig(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	c, err := Config("")
	if c != nil || err != nil {
		t.Fatalf("outside a cluster without a kubeconfig: %v %v, want nil nil (standalone)", c, err)
	}
	if _, err := Required(""); !errors.Is(err, rest.ErrNotInCluster) {
		t.Fatalf("Required outside a cluster: %v", err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Config(path)
	if err != nil || c == nil || c.Host != "https://192.0.2.1:6443" {
		t.Fatalf("kubeconfig: %+v %v", c, err)
	}
	_, err = Config(path + ".missing")
	if err == nil || !strings.Contains(err.Error(), path+".missing") {
		t.Fatalf("a missing kubeconfig is an error naming it: %v", err)
	}
}

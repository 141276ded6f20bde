package runtime_test

import (
	"os"
	"testing"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// The real-runtime tests run Debian's containerd (CRI) and runc, a real
// kubelet and podman against the ovnhost CNI plugin that a real `ovnhost
// run` installed; tests/harness/criruntime is their harness.

// env is one test's world: a network namespace with ovnhost and containerd.
type env struct {
	*criruntime.Env
	t testing.TB
}

// newEnv checks the prerequisites and lays out the directories; nothing runs yet.
func newEnv(t testing.TB) *env { return &env{criruntime.New(t), t} }

type (
	pod          = criruntime.Pod
	controlPlane = criruntime.ControlPlane
)

func run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return netns.Run(t, name, args...)
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	return criruntime.LookPath(t, name)
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

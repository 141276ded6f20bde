// Command prebuild builds, into the harness cache, the Kubernetes programs,
// helm and the runtime harness's crictl, pause and Multus that make test's
// packages build on first use, in the order the packages need them. make
// test starts it in the background at the lowest
// CPU priority, so that on a cold machine the builds use the CPU the tests
// leave idle (they mostly wait on daemons) instead of running one after
// another inside the tests. A test that needs a program still being built
// waits on the same cache lock the harness always takes; a failure here
// changes nothing, since each test builds what is missing itself.
package main

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
	"github.com/ovnhost/ovnhost/tests/harness/gotool"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
)

func main() {
	steps := []struct {
		name  string
		build func(testing.TB)
	}{
		// tests/cni, tests/controller...: kube-apiserver and etcd.
		{"kube-apiserver and etcd", func(b testing.TB) { kubeapi.Binaries(b) }},
		// tests/harness/kubeapi, tests/node.
		{"kube-controller-manager", func(b testing.TB) { kubeapi.ControllerManager(b) }},
		{"kube-proxy", func(b testing.TB) { kubeapi.KubeProxy(b) }},
		// tests/monitoring, tests/packaging.
		{"kubectl", func(b testing.TB) { kubeapi.Kubectl(b) }},
		{"helm", func(b testing.TB) { gotool.Helm(b) }},
		// tests/runtime (tests/harness/criruntime).
		{"kubelet", func(b testing.TB) { kubeapi.Kubelet(b) }},
		{"crictl", func(b testing.TB) { criruntime.Crictl(b) }},
		{"pause", func(b testing.TB) { criruntime.Pause(b) }},
		{"multus", func(b testing.TB) { criruntime.Multus(b) }},
	}
	failed := 0
	for _, s := range steps {
		t0 := time.Now()
		// testing.Benchmark lends the harness the testing.B it expects
		// outside go test; a Fatal or Skip inside ends only that step.
		r := testing.Benchmark(func(b *testing.B) { s.build(stepTB{b}) })
		if r.N == 0 {
			failed++
			fmt.Fprintf(os.Stderr, "prebuild: %s failed (the test that needs it will build it and report why)\n", s.name)
			continue
		}
		fmt.Fprintf(os.Stderr, "prebuild: %s ready after %s\n", s.name, time.Since(t0).Round(time.Second))
	}
	if failed > 0 {
		os.Exit(1)
	}
}

// stepTB prints what the harness logs: the testing.B of testing.Benchmark
// panics in Log (Go 1.26: no test runner behind it to report the caller).
type stepTB struct{ testing.TB }

func (s stepTB) Log(args ...any) { fmt.Fprintln(os.Stderr, append([]any{"prebuild:"}, args...)...) }
func (s stepTB) Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "prebuild: "+format+"\n", args...)
}
func (s stepTB) Error(args ...any)                 { s.Log(args...); s.Fail() }
func (s stepTB) Errorf(format string, args ...any) { s.Logf(format, args...); s.Fail() }
func (s stepTB) Fatal(args ...any)                 { s.Log(args...); s.FailNow() }
func (s stepTB) Fatalf(format string, args ...any) { s.Logf(format, args...); s.FailNow() }
func (s stepTB) Skip(args ...any)                  { s.Log(args...); s.SkipNow() }
func (s stepTB) Skipf(format string, args ...any)  { s.Logf(format, args...); s.SkipNow() }

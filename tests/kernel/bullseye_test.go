package kernel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// BenchmarkBullseyeKernel: the datapath checks of TestKernelNode on
// Debian bullseye's 5.10 kernel (fetched through a private sources list
// naming bullseye), for the old-kernel reports: all-in-one on the system
// datapath, geneve probed, two pods ping and carry TCP through the kernel.
// It fails like a test; it runs in `make bench` because a second kernel
// (fetch, boot, a node start) would push the VM tests in `make test` past
// their time budget. Reported: ovnhost's start to ready in the VM.
func BenchmarkBullseyeKernel(t *testing.B) {
	b := programs(t)
	k := qemuvm.DebianKernel(t, qemuvm.Bullseye)
	if !strings.HasPrefix(k.Release, "5.10.") {
		t.Fatalf("bullseye's kernel is %s, want 5.10", k.Release)
	}
	vm := qemuvm.Boot(t, qemuvm.Config{Name: "oldnode", Kernel: k, Memory: 1536, NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
	out, code := preflight(t, vm, b, nil)
	if c := checkOf(t, out, "tunnel-support"); code != 0 || c.status != "PASS" {
		t.Fatalf("preflight on %s exited %d, tunnel-support %+v\n%s", k.Release, code, c, out)
	}
	t0 := time.Now()
	n := startNode(t, vm, b, nil)
	ready := time.Since(t0)
	t.ReportMetric(ready.Seconds(), "s-to-ready")
	benchresult.Figure(t, "ovnhost start to ready on Debian bullseye's "+k.Release+" kernel in a VM (TCG)", benchresult.Ms(ready), "ms").Report()
	if log := n.log(t); !strings.Contains(log, "datapath=system") {
		t.Fatalf("ovnhost on %s did not choose the system datapath:\n%s", k.Release, tailLines(log, 30))
	}
	conf := cniConf(t, vm)
	p1, p2 := addPod(t, vm, conf, "pod1"), addPod(t, vm, conf, "pod2")
	vm.MustExec(t, qemuvm.Cmd{Argv: inPod(p1, "ping", "-c", "3", "-W", "5", p2.ip.String()), Timeout: time.Minute})
	probeServer(t, vm, b, p2, 5201)
	var r tcpResult
	probeJSON(t, vm, b, p1, time.Minute, &r, "tcp", "-to", fmt.Sprintf("%s:5201", p2.ip), "-n", "64", "-size", "8192")
	if r.Rounds != 64 {
		t.Errorf("TCP on %s: %d round trips, want 64", k.Release, r.Rounds)
	}
	if datapathFlows(t, vm) == 0 {
		t.Errorf("the %s kernel datapath holds no flows after pod traffic", k.Release)
	}
}

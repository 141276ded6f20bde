package kernel

import (
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// bridgeConf is the reference: Debian's bridge plugin with host-local IPAM
// (containernetworking-plugins), the usual single-node CNI.
const bridgeConf = `{"cniVersion":"0.4.0","name":"ref","type":"bridge","bridge":"cniref0","isGateway":true,"ipMasq":false,
"ipam":{"type":"host-local","subnet":"10.99.0.0/16","dataDir":"/run/cni-ref-ipam"}}`

// BenchmarkKernelCNIAdd (issue 17): CNI ADD on the kernel datapath, one at a
// time, in one VM: ovnhost's installed plugin (the answer comes once OVN's
// flows for the pod are on br-int, all-in-one) against the bridge plugin,
// alternating, each timed from the plugin's exec to its result. Emulation
// makes both slow; the ratio is the figure.
func BenchmarkKernelCNIAdd(b *testing.B) {
	const pods = 10
	bn := programs(b)
	vm := qemuvm.Boot(b, qemuvm.Config{Name: "cniadd", Memory: 1536, NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
	n := startNode(b, vm, bn, nil)
	conf := cniConf(b, vm)
	run := func(plugin string, stdin []byte, verb, name string) time.Duration {
		b.Helper()
		t0 := time.Now()
		r, err := vm.Exec(qemuvm.Cmd{Argv: []string{plugin}, Stdin: stdin, Timeout: 3 * time.Minute,
			Env: []string{"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + name, "CNI_NETNS=/var/run/netns/" + name, "CNI_IFNAME=eth0",
				"CNI_PATH=/usr/lib/cni:/opt/cni/bin", "CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=" + name}})
		d := time.Since(t0)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Err(); err != nil {
			b.Fatalf("%s %s %s: %v", plugin, verb, name, err)
		}
		return d
	}
	var ours, ref []time.Duration
	for i := 0; i < pods; i++ {
		o, r := fmt.Sprintf("ovh%d", i), fmt.Sprintf("ref%d", i)
		vm.Run(b, "ip", "netns", "add", o)
		vm.Run(b, "ip", "netns", "add", r)
		ours = append(ours, run("/opt/cni/bin/ovnhost-cni", conf, "ADD", o))
		ref = append(ref, run("/usr/lib/cni/bridge", []byte(bridgeConf), "ADD", r))
	}
	for i := 0; i < pods; i++ {
		o, r := fmt.Sprintf("ovh%d", i), fmt.Sprintf("ref%d", i)
		run("/opt/cni/bin/ovnhost-cni", conf, "DEL", o)
		run("/usr/lib/cni/bridge", []byte(bridgeConf), "DEL", r)
		vm.Run(b, "ip", "netns", "del", o)
		vm.Run(b, "ip", "netns", "del", r)
	}
	vm.Sh(b, "ip link del cniref0 2>/dev/null || true")
	if code := n.stop(b); code != 0 {
		b.Fatalf("ovnhost exited %d", code)
	}
	pct := func(d []time.Duration, q float64) time.Duration {
		s := append([]time.Duration(nil), d...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[int(q*float64(len(s)-1))]
	}
	b.ReportMetric(float64(pct(ours, 0.5).Milliseconds()), "ovnhost-p50-ms")
	b.ReportMetric(float64(pct(ref, 0.5).Milliseconds()), "bridge-p50-ms")
	b.ReportMetric(float64(pct(ours, 0.5))/float64(pct(ref, 0.5)), "ratio-p50")
	b.ReportMetric(float64(pct(ours, 1))/float64(pct(ref, 1)), "ratio-max")
	benchresult.Figure(b, fmt.Sprintf("CNI ADD exec to result on the kernel datapath in a VM (TCG), p50 of %d", pods), benchresult.Ms(pct(ours, 0.5)), "ms").
		Against("bridge + host-local, alternating", benchresult.Ms(pct(ref, 0.5))).
		Target(benchresult.RatioAtMost(1.5, "p50 within 1.5x of bridge (BRIEF 5)")).
		Note("max %.0f ms against %.0f ms", benchresult.Ms(pct(ours, 1)), benchresult.Ms(pct(ref, 1))).Report()
	b.Logf("CNI ADD on the kernel datapath under TCG, %d each: ovnhost p50 %s max %s, bridge p50 %s max %s (ovnhost %v; bridge %v)",
		pods, pct(ours, 0.5).Round(time.Millisecond), pct(ours, 1).Round(time.Millisecond),
		pct(ref, 0.5).Round(time.Millisecond), pct(ref, 1).Round(time.Millisecond), ours, ref)
}

package runtime_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// BenchmarkKubeletPods measures pod create → Running for 50 pods created at
// once, through the real kubelet, containerd 1.6 and the ovnhost plugin with
// ovnhost-controller allocating the addresses, against the same kubelet and
// containerd with the reference bridge + host-local configuration
// (bridgeRef), in the same run.
//
// Method:
//
//   - The harness of TestKubeletRunsPods: apiserver, OVN central,
//     ovnhost-controller, ovnhost in Kubernetes mode, containerd, kubelet.
//
//   - A phase creates N Pod objects (spec.nodeName set, busybox, image
//     already imported) from 10 goroutines; a pod's sample is the time from
//     just before its Create call to the watch event showing it Running with
//     a pod IP (kubelet's PLEG relists every second: both plugins pay it).
//     Every pod must get an address of the plugin's range. Then all are
//     deleted and the phase waits until the objects are gone and kubelet has
//     stopped every sandbox (CNI DEL done) before the next phase.
//
//   - In the bridge phases ovnhost-controller still allocates addresses and
//     logical ports for the pods (they are Pods of the node): work the
//     ovnhost phases need and the bridge phases do in the background.
//
//   - One untimed warm-up pod per plugin; rounds alternate which plugin goes
//     first. Reported: p50, p99 and the wall time of the whole wave.
//
//     OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$PWD/bin go test -run '^$' -bench KubeletPods -benchtime 1x -v ./tests/runtime/
//
// $OVNHOST_KUBELET_BENCH_PODS (default 50) and $OVNHOST_KUBELET_BENCH_ROUNDS
// (default 1) change the size.
func BenchmarkKubeletPods(b *testing.B) {
	e := newEnv(b)
	criruntime.RequireFile(b, "/usr/lib/cni/bridge", "containernetworking-plugins")
	criruntime.RequireFile(b, "/usr/lib/cni/host-local", "containernetworking-plugins")
	n, rounds := envInt(b, "OVNHOST_KUBELET_BENCH_PODS", 50), envInt(b, "OVNHOST_KUBELET_BENCH_ROUNDS", 1)
	pauseTar, bbTar := criruntime.BuildImages(b, e.Dir)
	cp := criruntime.StartControlPlane(b, e.Dir)
	e.StartKubeNode(cp)
	ref := newBridgeRef(b, e)
	b.Cleanup(func() { _ = os.Remove(ref.conf) })
	e.StartContainerd()
	e.ImportImage(pauseTar)
	e.ImportImage(bbTar)
	e.StartKubelet(cp)

	type plugin struct {
		name    string
		bridge  bool
		cidr    netip.Prefix
		samples []float64 // ms
		waves   []float64 // ms, first create to last Running
	}
	plugins := []*plugin{
		{name: "ovnhost", cidr: netip.MustParsePrefix("10.16.0.0/16")},
		{name: "bridge", bridge: true, cidr: netip.MustParsePrefix("10.88.0.0/16")},
	}
	phase := func(p *plugin, tag string, count int, record bool) {
		b.Helper()
		ref.use(p.bridge)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		sel := "bench=" + tag
		start := make(map[string]time.Time, count) // pod -> just before its Create
		var mu sync.Mutex
		// Pods are stamped Running as the watch delivers them; the watch
		// runs from before the first Create.
		running := map[string]time.Duration{}
		var last time.Time
		var badIP string
		werrc := make(chan error, 1)
		go func() {
			werrc <- criruntime.WatchPods(ctx, cp.Kube, metav1.ListOptions{LabelSelector: sel}, func(pod *corev1.Pod) bool {
				if pod.Status.Phase != corev1.PodRunning || pod.Status.PodIP == "" {
					return false
				}
				if _, done := running[pod.Name]; done {
					return false
				}
				now := time.Now()
				ip, err := netip.ParseAddr(pod.Status.PodIP)
				if err != nil || !p.cidr.Contains(ip) {
					badIP = fmt.Sprintf("%s pod %s: IP %q, want one of %s", p.name, pod.Name, pod.Status.PodIP, p.cidr)
					return true
				}
				mu.Lock()
				t0, ok := start[pod.Name]
				mu.Unlock()
				if !ok {
					return false // its Create has not returned yet; counted when seen again
				}
				running[pod.Name] = now.Sub(t0)
				last = now
				return len(running) == count
			})
		}()
		names := make([]string, count)
		var wg sync.WaitGroup
		jobs := make(chan int)
		errs := make(chan error, count)
		for g := 0; g < 10; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					pod := criruntime.KubePod(names[i], nil, "sh", "-c", "trap 'exit 0' TERM; while :; do sleep 1; done")
					pod.Labels = map[string]string{"bench": tag}
					t0 := time.Now()
					if _, err := cp.Kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
						errs <- err
						continue
					}
					mu.Lock()
					start[names[i]] = t0
					mu.Unlock()
				}
			}()
		}
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", tag, i)
		}
		first := time.Now()
		for i := range names {
			jobs <- i
		}
		close(jobs)
		wg.Wait()
		close(errs)
		for err := range errs {
			b.Fatalf("creating pods: %v", err)
		}
		werr := <-werrc
		if badIP != "" {
			b.Fatal(badIP)
		}
		if werr != nil {
			b.Fatalf("%s: %d of %d pods Running (%v)\n%s", p.name, len(running), count, werr, e.Tail("kubelet.log", 20))
		}
		if record {
			for _, d := range running {
				p.samples = append(p.samples, sbMs(d))
			}
			p.waves = append(p.waves, sbMs(last.Sub(first)))
		}
		e.DeletePods(cp, names...)
		e.WaitNoReadySandboxes(5 * time.Minute)
	}

	for _, p := range plugins {
		phase(p, "warm-"+p.name, 1, false)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			order := []*plugin{plugins[0], plugins[1]}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, p := range order {
				phase(p, fmt.Sprintf("%s-r%d-%d", p.name, i, r), n, true)
			}
		}
	}
	b.StopTimer()
	ref.use(false)
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		b.Fatalf("ovnhost pod veths %v / OVS ports %v left after the pods were deleted", l, p)
	}

	ovn, br := plugins[0], plugins[1]
	b.ReportMetric(sbPct(ovn.samples, 50), "ovnhost-p50-ms")
	b.ReportMetric(sbPct(ovn.samples, 99), "ovnhost-p99-ms")
	b.ReportMetric(sbPct(br.samples, 50), "bridge-p50-ms")
	b.ReportMetric(sbPct(br.samples, 99), "bridge-p99-ms")
	b.ReportMetric(sbPct(ovn.samples, 50)/sbPct(br.samples, 50), "p50-ratio")
	b.ReportMetric(sbPct(ovn.samples, 99)/sbPct(br.samples, 99), "p99-ratio")
	b.ReportMetric(sbPct(ovn.waves, 50)/sbPct(br.waves, 50), "wave-ratio")
	benchresult.Figure(b, fmt.Sprintf("pod create to Running through kubelet, %d pods at once, p50", n), sbPct(ovn.samples, 50), "ms").
		Against("bridge + host-local with the same kubelet and containerd", sbPct(br.samples, 50)).Report()
	benchresult.Figure(b, "same, p99", sbPct(ovn.samples, 99), "ms").
		Against("bridge + host-local, p99", sbPct(br.samples, 99)).Report()
	benchresult.Figure(b, "whole wave to Running", sbPct(ovn.waves, 50), "ms").
		Against("bridge + host-local, whole wave", sbPct(br.waves, 50)).Report()
	b.Logf("kubelet %s + containerd 1.6: %d pods created at once -> Running, %d round(s); ovnhost (controller IPAM, conflist %v) vs bridge+host-local:",
		"v1.37.2", n, rounds, ref.ovnTypes)
	b.Logf("| %.0f / %.0f ms | %.0f / %.0f ms | %.2fx / %.2fx | %.1f s vs %.1f s (%.2fx) |",
		sbPct(ovn.samples, 50), sbPct(ovn.samples, 99), sbPct(br.samples, 50), sbPct(br.samples, 99),
		sbPct(ovn.samples, 50)/sbPct(br.samples, 50), sbPct(ovn.samples, 99)/sbPct(br.samples, 99),
		sbPct(ovn.waves, 50)/1e3, sbPct(br.waves, 50)/1e3, sbPct(ovn.waves, 50)/sbPct(br.waves, 50))
}

func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}

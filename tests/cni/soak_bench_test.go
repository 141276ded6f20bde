package cni_test

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
)

// BenchmarkSoakAddDel (issue 14, soak): OVNHOST_SOAK_CYCLES (default
// 10,000) ADD/DEL cycles through the installed plugin at concurrency 20 on
// a standalone node, while ovn-controller and ovs-vswitchd are killed with
// SIGKILL (and started again, as the supervisor does) at random intervals
// of 2-6 s. An ADD or DEL that fails meanwhile is retried as kubelet
// would, up to 10 times. At the end nothing may be left: no veth, OVS
// port, QoS or Queue row, no pod port in NB (the next pod gets the first
// address), and the CNI server (in this process) holds no more goroutines
// or file descriptors than before.
func BenchmarkSoakAddDel(b *testing.B) {
	cycles := 10000
	if v := os.Getenv("OVNHOST_SOAK_CYCLES"); v != "" {
		c, err := strconv.Atoi(v)
		if err != nil || c < 1 {
			b.Fatalf("OVNHOST_SOAK_CYCLES=%q: want a positive number of cycles", v)
		}
		cycles = c
	}
	const conc, retries = 20, 10
	n := startNode(b, nodeOpts{})
	conf := n.netconf(b, "", nil)
	// Warm up once so that lazily started goroutines are in the baseline.
	p := n.add(b, "warm", "")
	if out := n.del(b, p); out.Code != 0 {
		b.Fatal(out.Err.Msg)
	}
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), openFDs(b)
	var prof bytes.Buffer
	_ = pprof.Lookup("goroutine").WriteTo(&prof, 1)
	baseProf := prof.String()

	stop := make(chan struct{})
	killerDone := make(chan struct{})
	var kills atomic.Int64
	go func() {
		defer close(killerDone)
		rnd := rand.New(rand.NewSource(1))
		victims := []string{"ovn-controller", "ovs-vswitchd"}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(2000+rnd.Intn(4000)) * time.Millisecond):
			}
			n.crash(victims[i%2])
			kills.Add(1)
		}
	}()

	var next, retried, failed atomic.Int64
	var mu sync.Mutex
	var durs []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	b.ResetTimer()
	t0 := time.Now()
	for w := 0; w < conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > int64(cycles) {
					return
				}
				name := fmt.Sprintf("soak%05d", i)
				nsName := fmt.Sprintf("ovhs-%d-%d", os.Getpid(), i)
				path, err := podnettest.Create(nsName)
				if err != nil {
					failed.Add(1)
					continue
				}
				c := cniCall{ContainerID: "cid-" + name, Netns: path, IfName: "eth0", Args: "K8S_POD_NAMESPACE=soak;K8S_POD_NAME=" + name, Conf: conf}
				start := time.Now()
				ok := true
				for _, verb := range []string{"ADD", "DEL"} {
					c.Command = verb
					var out cniOut
					for try := 0; try < retries; try++ {
						if out = runPlugin(b, n.installedPlugin(), c); out.Code == 0 {
							break
						}
						retried.Add(1)
					}
					if out.Code != 0 {
						ok = false
						mu.Lock()
						if firstErr == nil {
							firstErr = fmt.Errorf("%s %s after %d tries: code %d: %s", verb, name, retries, out.Err.Code, out.Err.Msg)
						}
						mu.Unlock()
					}
				}
				_ = netns.DeleteNamed(nsName)
				if !ok {
					failed.Add(1)
					continue
				}
				mu.Lock()
				durs = append(durs, time.Since(start))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(stop)
	<-killerDone
	b.StopTimer()
	if firstErr != nil {
		b.Errorf("%d of %d cycles failed even after retries; first: %v", failed.Load(), cycles, firstErr)
	}

	// What the daemons hold is checked once they are back.
	waitOVN0(b)
	n.assertClean(b)
	n.assertNoAddressLeft(b)
	// Goroutines of finished requests are gone by now (the checks above
	// took seconds); counted once, not waited for.
	runtime.GC()
	g := runtime.NumGoroutine()
	fds := openFDs(b)
	if g > baseG+2 {
		var buf bytes.Buffer
		_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
		b.Errorf("goroutines: %d after the soak, %d before; now:\n%s\nbefore:\n%s", g, baseG, buf.String(), baseProf)
	}
	if fds > baseFD+2 {
		b.Errorf("open file descriptors: %d after the soak, %d before", fds, baseFD)
	}

	sort.Slice(durs, func(i, j int) bool { return durs[i] < durs[j] })
	pct := func(q float64) time.Duration {
		if len(durs) == 0 {
			return 0
		}
		return durs[int(q*float64(len(durs)-1))]
	}
	b.ReportMetric(float64(cycles)/elapsed.Seconds(), "cycles/s")
	b.ReportMetric(float64(pct(0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(pct(0.99).Microseconds())/1000, "p99-ms")
	b.ReportMetric(float64(kills.Load()), "kills")
	b.ReportMetric(float64(retried.Load()), "retries")
	b.ReportMetric(float64(failed.Load()), "failed")
	benchresult.Figure(b, fmt.Sprintf("ADD+DEL cycles at concurrency %d with the CNI server killed %d times", conc, kills.Load()), float64(cycles)/elapsed.Seconds(), "cycles/s").
		Note("p50 %.1f ms, p99 %.1f ms; %d retries, %d failed", benchresult.Ms(pct(0.5)), benchresult.Ms(pct(0.99)), retried.Load(), failed.Load()).Report()
	b.Logf("%d cycles at concurrency %d in %s with %d kills: %d retries, %d failed; goroutines %d -> %d, fds %d -> %d",
		cycles, conc, elapsed.Round(time.Second), kills.Load(), retried.Load(), failed.Load(), baseG, g, baseFD, fds)
}

func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

package runtime_test

import (
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/criruntime"
)

// BenchmarkCRISandbox measures RunPodSandbox (create → SANDBOX_READY, the
// CNI ADD included) through containerd 1.6's CRI with the ovnhost plugin
// and with the reference bridge plugin, in the same run, on the same
// containerd with the same pause image.
//
// Method:
//
//   - One containerd (the harness's), one ovnhost all-in-one node. Its CNI
//     conf dir holds ovnhost's installed 00-ovnhost.conflist; for the bridge
//     phases a 0-bridge.conflist (Debian's /usr/lib/cni/bridge + host-local,
//     copied into the CNI bin dir, chained with portmap like ovnhost's) is
//     renamed into the conf dir, where it sorts first (max_conf_num = 1), and
//     removed again for the ovnhost phases. containerd 1.6's CRI reloads the
//     CNI configuration on every change of the conf dir (fsnotify); each
//     phase waits until `crictl info` shows the expected network loaded.
//     Every sandbox of a phase is removed (stopp + rmp, whose CNI DEL uses
//     the configuration loaded at that time) before the next switch.
//
//   - The timed operation is the exec of `crictl runp <config>` until it
//     exits with the sandbox id (crictl adds a few milliseconds of exec and
//     gRPC connection, the same for both plugins). Every sandbox is then
//     checked (untimed): SANDBOX_READY with an address from the plugin's
//     range (ovnhost 10.16.0.0/16, bridge 10.88.0.0/16).
//
//   - Per round and plugin: 20 sandboxes one at a time (kept until the end
//     of the series), all removed, then 20 at once, all removed. Rounds
//     alternate the plugin that goes first. One untimed warm-up sandbox per
//     plugin before the first round.
//
//   - At the end: no sandbox, pod veth, OVS pod port, logical switch port,
//     host-local reservation, libcni cache entry, pod netns, process, cgroup
//     or mount left.
//
//     OVNHOST_TEST_STRICT=1 OVNHOST_BIN=$PWD/bin go test -run '^$' -bench CRISandbox -benchtime 1x -v ./tests/runtime/
//
// $OVNHOST_CRI_BENCH_ROUNDS sets the rounds (default 3).
func BenchmarkCRISandbox(b *testing.B) {
	e := newEnv(b)
	criruntime.RequireFile(b, "/usr/lib/cni/bridge", "containernetworking-plugins")
	criruntime.RequireFile(b, "/usr/lib/cni/host-local", "containernetworking-plugins")
	rounds := 3
	if s := os.Getenv("OVNHOST_CRI_BENCH_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("OVNHOST_CRI_BENCH_ROUNDS=%q: want a positive integer", s)
		}
		rounds = n
	}
	const serialN, conc = 20, 20

	pauseTar, _ := criruntime.BuildImages(b, e.Dir)
	e.StartNode()
	ref := newBridgeRef(b, e)
	ovnNet, ovnTypes, brPlugins, hostLocalDir, brConf := ref.ovnNetwork, ref.ovnTypes, ref.plugins, ref.hostLocal, ref.conf
	b.Cleanup(func() { _ = os.Remove(brConf) })

	e.StartContainerd()
	e.ImportImage(pauseTar)

	plugins := []*sbPlugin{
		{name: "ovnhost", network: ovnNet, cidr: netip.MustParsePrefix("10.16.0.0/16")},
		{name: "bridge", network: bridgeRefNetwork, cidr: netip.MustParsePrefix("10.88.0.0/16")},
	}
	use := func(p *sbPlugin) {
		b.Helper()
		ref.use(p.name == "bridge")
	}

	var ids []string // every sandbox, for the leak check of the libcni cache
	var idsMu sync.Mutex
	podCfg := func(name string) string {
		b.Helper()
		return e.WriteJSON(name+"-pod.json", map[string]any{
			"metadata":      map[string]any{"name": name, "namespace": "default", "uid": name + "-uid", "attempt": 0},
			"hostname":      name,
			"log_directory": e.Path("cri", "logs", name),
			"linux":         map[string]any{"cgroup_parent": e.CgroupParent},
		})
	}
	// runp is the timed operation; safe in goroutines (no b.Fatal).
	runp := func(p *sbPlugin, name, cfg string) (string, time.Duration, error) {
		cmd := e.CrictlCmd("runp", cfg)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		t0 := time.Now()
		out, err := cmd.Output()
		d := time.Since(t0)
		if err != nil {
			return "", d, fmt.Errorf("crictl runp %s (%s): %v\n%s", name, p.name, err, stderr.String())
		}
		id := strings.TrimSpace(string(out))
		idsMu.Lock()
		ids = append(ids, id)
		idsMu.Unlock()
		return id, d, nil
	}
	// check verifies (untimed) that the sandboxes are ready with an address
	// of p's range, records their netns for the harness's cleanup, and
	// removes them.
	check := func(p *sbPlugin, sbs []string) {
		b.Helper()
		for _, id := range sbs {
			sb := e.InspectSandbox(id)
			if sb.Netns != "" {
				e.NetnsPaths = append(e.NetnsPaths, sb.Netns)
			}
			ip, err := netip.ParseAddr(sb.IP)
			if sb.State != "SANDBOX_READY" || err != nil || !p.cidr.Contains(ip) {
				b.Fatalf("%s sandbox %s: state %s, IP %q, want SANDBOX_READY in %s", p.name, id, sb.State, sb.IP, p.cidr)
			}
		}
		t0 := time.Now()
		e.CRI(append([]string{"stopp"}, sbs...)...)
		e.CRI(append([]string{"rmp"}, sbs...)...)
		p.removal = append(p.removal, float64(time.Since(t0).Microseconds())/1e3/float64(len(sbs)))
		if out := e.CRI("pods", "-q"); out != "" {
			b.Fatalf("sandboxes left after rmp: %s", out)
		}
	}
	serial := func(p *sbPlugin, tag string, n int) {
		b.Helper()
		var sbs []string
		for i := 0; i < n; i++ {
			name := fmt.Sprintf("sb-%s-%s-%d", p.name, tag, i)
			id, d, err := runp(p, name, podCfg(name))
			if err != nil {
				b.Fatalf("%v\n%s\n%s", err, e.Tail("containerd.log", 30), e.Tail("ovnhost.log", 20))
			}
			if tag != "warm" {
				p.serial = append(p.serial, sbMs(d))
			}
			sbs = append(sbs, id)
		}
		check(p, sbs)
	}
	wave := func(p *sbPlugin, tag string) {
		b.Helper()
		start := make(chan struct{})
		var wg sync.WaitGroup
		sbs, lat, errs := make([]string, conc), make([]time.Duration, conc), make([]error, conc)
		for i := 0; i < conc; i++ {
			name := fmt.Sprintf("sb-%s-%s-c%d", p.name, tag, i)
			cfg := podCfg(name)
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				<-start
				sbs[i], lat[i], errs[i] = runp(p, name, cfg)
			}(i)
		}
		close(start)
		wg.Wait()
		var ok []string
		for i := range sbs {
			if errs[i] != nil {
				b.Errorf("%v", errs[i])
				continue
			}
			ok = append(ok, sbs[i])
			p.conc = append(p.conc, sbMs(lat[i]))
		}
		if len(ok) != conc {
			b.Fatalf("%d of %d concurrent sandboxes failed\n%s\n%s", conc-len(ok), conc, e.Tail("containerd.log", 30), e.Tail("ovnhost.log", 20))
		}
		check(p, ok)
	}

	// Warm-up: the first sandbox of each plugin (bridge device, first OVN
	// port flows, first snapshot of the pause image).
	for _, p := range plugins {
		use(p)
		serial(p, "warm", 1)
	}
	for _, p := range plugins {
		p.removal = nil
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for r := 0; r < rounds; r++ {
			order := []*sbPlugin{plugins[0], plugins[1]}
			if r%2 == 1 {
				order[0], order[1] = order[1], order[0]
			}
			for _, p := range order {
				use(p)
				serial(p, fmt.Sprintf("r%d-%d", i, r), serialN)
				wave(p, fmt.Sprintf("r%d-%d", i, r))
			}
		}
	}
	b.StopTimer()
	use(plugins[0]) // back to ovnhost's own configuration

	// Nothing left.
	if out := e.CRI("pods", "-q"); out != "" {
		b.Fatalf("sandboxes left: %s", out)
	}
	if l, p := e.PodIfaces(); len(l) != 0 || len(p) != 0 {
		b.Fatalf("ovnhost pod veths %v / OVS ports %v left in the node namespace", l, p)
	}
	for _, l := range e.NodeLinks() {
		if strings.HasPrefix(l, "veth") {
			b.Fatalf("bridge pod veth %s left in the node namespace", l)
		}
	}
	lsps := run(b, lookPath(b, "ovn-nbctl"), "--db=unix:"+e.Path("ovn-run", "ovnnb_db.sock"), "--timeout=10",
		"--bare", "--columns=name", "list", "Logical_Switch_Port")
	for _, n := range strings.Fields(lsps) {
		if strings.HasPrefix(n, "sb-") {
			b.Fatalf("logical switch port %s left in NB", n)
		}
	}
	leases, _ := filepath.Glob(filepath.Join(hostLocalDir, "bridgebench", "10.*"))
	if len(leases) != 0 {
		b.Fatalf("host-local reservations left: %v", leases)
	}
	cached := 0
	if ents, err := os.ReadDir("/var/lib/cni/results"); err == nil {
		for _, d := range ents {
			for _, id := range ids {
				if strings.Contains(d.Name(), id) {
					b.Errorf("libcni result cache entry left: /var/lib/cni/results/%s", d.Name())
					cached++
				}
			}
		}
	}
	for _, p := range e.NetnsPaths {
		if fileExists(p) {
			b.Fatalf("pod network namespace %s left", p)
		}
	}
	e.TeardownAndCheck(b)

	ovn, br := plugins[0], plugins[1]
	rep := func(v float64, name string) { b.ReportMetric(v, name) }
	rep(sbPct(ovn.serial, 50), "ovnhost-serial-p50-ms")
	rep(sbPct(ovn.serial, 99), "ovnhost-serial-p99-ms")
	rep(sbPct(br.serial, 50), "bridge-serial-p50-ms")
	rep(sbPct(br.serial, 99), "bridge-serial-p99-ms")
	rep(sbPct(ovn.serial, 50)/sbPct(br.serial, 50), "serial-p50-ratio")
	rep(sbPct(ovn.serial, 99)/sbPct(br.serial, 99), "serial-p99-ratio")
	rep(sbPct(ovn.conc, 50), "ovnhost-c20-p50-ms")
	rep(sbPct(ovn.conc, 99), "ovnhost-c20-p99-ms")
	rep(sbPct(br.conc, 50), "bridge-c20-p50-ms")
	rep(sbPct(br.conc, 99), "bridge-c20-p99-ms")
	rep(sbPct(ovn.conc, 50)/sbPct(br.conc, 50), "c20-p50-ratio")
	rep(sbPct(ovn.conc, 99)/sbPct(br.conc, 99), "c20-p99-ratio")
	const within = "within 1.5x of bridge through the same containerd (BRIEF 5)"
	benchresult.Figure(b, fmt.Sprintf("crictl runp exec to sandbox id, one at a time, p50 of %d", len(ovn.serial)), sbPct(ovn.serial, 50), "ms").
		Against("bridge + host-local through the same containerd, alternating", sbPct(br.serial, 50)).
		Target(benchresult.RatioAtMost(1.5, within)).Report()
	benchresult.Figure(b, "same, one at a time, p99", sbPct(ovn.serial, 99), "ms").
		Against("bridge + host-local, p99", sbPct(br.serial, 99)).
		Target(benchresult.RatioAtMost(1.5, within)).Report()
	benchresult.Figure(b, fmt.Sprintf("crictl runp, 20 at once, p50 of %d", len(ovn.conc)), sbPct(ovn.conc, 50), "ms").
		Against("bridge + host-local, 20 at once, p50", sbPct(br.conc, 50)).
		Target(benchresult.RatioAtMost(1.5, within)).Report()
	benchresult.Figure(b, "same, 20 at once, p99", sbPct(ovn.conc, 99), "ms").
		Against("bridge + host-local, 20 at once, p99", sbPct(br.conc, 99)).
		Target(benchresult.RatioAtMost(1.5, within)).Report()
	b.Logf("CRI RunPodSandbox (crictl runp exec → sandbox id, SANDBOX_READY), containerd 1.6, pause image, %d rounds; ovnhost conflist %v vs bridge+host-local (Debian /usr/lib/cni)%s:",
		rounds, ovnTypes, map[bool]string{true: " + portmap", false: ""}[len(brPlugins) > 1])
	b.Logf("  serial (%d+%d samples) ovnhost p50 %.1f ms p99 %.1f ms | bridge p50 %.1f ms p99 %.1f ms | ratio p50 %.2fx p99 %.2fx (target <= 1.5x)",
		len(ovn.serial), len(br.serial), sbPct(ovn.serial, 50), sbPct(ovn.serial, 99), sbPct(br.serial, 50), sbPct(br.serial, 99),
		sbPct(ovn.serial, 50)/sbPct(br.serial, 50), sbPct(ovn.serial, 99)/sbPct(br.serial, 99))
	b.Logf("  20 at once (%d+%d samples) ovnhost p50 %.1f ms p99 %.1f ms | bridge p50 %.1f ms p99 %.1f ms | ratio p50 %.2fx p99 %.2fx (target <= 1.5x)",
		len(ovn.conc), len(br.conc), sbPct(ovn.conc, 50), sbPct(ovn.conc, 99), sbPct(br.conc, 50), sbPct(br.conc, 99),
		sbPct(ovn.conc, 50)/sbPct(br.conc, 50), sbPct(ovn.conc, 99)/sbPct(br.conc, 99))
	b.Logf("  stopp+rmp per sandbox (batches of 20, median of batches): ovnhost %.1f ms | bridge %.1f ms",
		sbPct(ovn.removal, 50), sbPct(br.removal, 50))
	b.Logf("| %.1f / %.1f ms | %.1f / %.1f ms | %.2fx / %.2fx | %.1f / %.1f ms | %.1f / %.1f ms | %.2fx / %.2fx |",
		sbPct(ovn.serial, 50), sbPct(ovn.serial, 99), sbPct(br.serial, 50), sbPct(br.serial, 99),
		sbPct(ovn.serial, 50)/sbPct(br.serial, 50), sbPct(ovn.serial, 99)/sbPct(br.serial, 99),
		sbPct(ovn.conc, 50), sbPct(ovn.conc, 99), sbPct(br.conc, 50), sbPct(br.conc, 99),
		sbPct(ovn.conc, 50)/sbPct(br.conc, 50), sbPct(ovn.conc, 99)/sbPct(br.conc, 99))
	if cached > 0 {
		b.Fatalf("%d libcni cache entries left", cached)
	}
}

// bridgeRefNetwork is the network name of the reference configuration.
const bridgeRefNetwork = "bridgebench"

// bridgeRef is the reference CNI configuration of the benchmarks: Debian's
// bridge + host-local (10.88.0.0/16), chained with portmap when ovnhost's
// installed conflist chains it, staged outside the conf dir and renamed in
// as 0-bridge.conflist (sorting before 00-ovnhost.conflist, max_conf_num =
// 1) for the bridge phases. containerd 1.6's CRI reloads the CNI
// configuration on every change of the conf dir (fsnotify); use waits until
// `crictl info` shows the expected network loaded.
type bridgeRef struct {
	e                       *env
	ovnNetwork              string
	ovnTypes                []string
	plugins                 []any
	hostLocal, staged, conf string
}

// newBridgeRef copies bridge and host-local into ovnhost's CNI bin dir and
// stages the reference conflist; ovnhost's conflist must be installed.
func newBridgeRef(t testing.TB, e *env) *bridgeRef {
	t.Helper()
	var ovnNet struct {
		Name    string           `json:"name"`
		Plugins []map[string]any `json:"plugins"`
	}
	raw, err := os.ReadFile(e.WaitConflist())
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &ovnNet); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"bridge", "host-local"} {
		data, err := os.ReadFile("/usr/lib/cni/" + p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(e.Path("cni-bin", p), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	r := &bridgeRef{e: e, ovnNetwork: ovnNet.Name, hostLocal: e.Path("host-local"), staged: e.Path("bridge.conflist.staged"),
		conf: e.Path("cni-conf", "0-bridge.conflist")}
	r.plugins = []any{map[string]any{
		"type": "bridge", "bridge": "cnibench0", "isGateway": true, "ipMasq": false,
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]any{{{"subnet": "10.88.0.0/16"}}},
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}}, "dataDir": r.hostLocal},
	}}
	for _, p := range ovnNet.Plugins {
		r.ovnTypes = append(r.ovnTypes, fmt.Sprint(p["type"]))
		if p["type"] == "portmap" { // chain it like ovnhost's conflist does
			r.plugins = append(r.plugins, map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}})
		}
	}
	brRaw, _ := json.MarshalIndent(map[string]any{"cniVersion": criruntime.CNIVersion, "name": bridgeRefNetwork, "plugins": r.plugins}, "", "  ")
	if err := os.WriteFile(r.staged, brRaw, 0o644); err != nil {
		t.Fatal(err)
	}
	return r
}

// use makes bridge (true) or ovnhost (false) the runtime's network.
func (r *bridgeRef) use(bridge bool) {
	t := r.e.t
	t.Helper()
	if bridge {
		data, err := os.ReadFile(r.staged)
		if err != nil {
			t.Fatal(err)
		}
		tmp := r.e.Path("cni-conf", ".0-bridge.tmp") // not a conf file name until renamed
		if err := os.WriteFile(tmp, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, r.conf); err != nil {
			t.Fatal(err)
		}
		r.e.waitCNINetwork(bridgeRefNetwork)
		return
	}
	if err := os.Remove(r.conf); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	r.e.waitCNINetwork(r.ovnNetwork)
}

// sbPlugin is one CNI configuration of BenchmarkCRISandbox and its samples (ms).
type sbPlugin struct {
	name, network string
	cidr          netip.Prefix
	serial, conc  []float64
	removal       []float64 // stopp+rmp per sandbox, one per batch
}

func sbMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1e3 }

// sbPct is the nearest-rank percentile of v.
func sbPct(v []float64, p float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

// waitCNINetwork waits until containerd's CRI has loaded the CNI network
// named name as the pod network (eth0): `crictl info` shows what it loaded.
func (e *env) waitCNINetwork(name string) {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var got []string
	for {
		var info struct {
			CNIConfig struct {
				Networks []struct {
					Config struct {
						Name string `json:"Name"`
					} `json:"Config"`
					IFName string `json:"IFName"`
				} `json:"Networks"`
			} `json:"cniconfig"`
			LastCNILoadStatus string `json:"lastCNILoadStatus"`
		}
		if err := json.Unmarshal([]byte(e.CRI("info")), &info); err != nil {
			e.t.Fatal(err)
		}
		got = got[:0]
		for _, n := range info.CNIConfig.Networks {
			got = append(got, n.Config.Name+"/"+n.IFName)
			if n.IFName == "eth0" && n.Config.Name == name {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("containerd did not load CNI network %q within 20s: has %v (last load status %q)", name, got, info.LastCNILoadStatus)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

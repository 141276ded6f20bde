package kernel

import (
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelNode is a Debian host as it boots: the module tree is there
// but openvswitch and geneve are not loaded. One VM, steps in order:
// preflight gets openvswitch loaded and the genetlink check passes, geneve
// is probed right; all-in-one runs on the system datapath; two pods wired
// by the installed plugin ping and carry TCP through the kernel; a
// --keep-datapath restart of the node daemon loses nothing of an
// established flow; DEL leaves nothing.
//
// Seen here: with the module tree present, the genetlink query for
// ovs_datapath alone makes the kernel load openvswitch (request_module of
// net-pf-16-proto-16-family-ovs_datapath), before ovnhost's own modprobe;
// DISABLE_MODULES_MANAGEMENT cannot prevent that, so its refusal is tested
// where there is no module to load (TestNoModuleTree).
func TestKernelNode(t *testing.T) {
	top := t
	b := programs(t)
	vm := qemuvm.Boot(t, qemuvm.Config{Name: "node1", Memory: 1536, Modules: []string{"veth"},
		NICs: []qemuvm.NIC{qemuvm.UserNIC()}})
	if moduleLoaded(t, vm, "openvswitch") {
		t.Fatal("openvswitch is loaded at boot; the test needs it absent")
	}

	if !t.Run("loads openvswitch and the genetlink check passes", func(t *testing.T) {
		out, code := preflight(t, vm, b, nil)
		if code != 0 {
			t.Fatalf("preflight exited %d\n%s", code, out)
		}
		if c := checkOf(t, out, "datapath"); c.status != "PASS" || !strings.Contains(c.found, "generic netlink family ovs_datapath present") {
			t.Errorf("datapath check %+v; want PASS with ovs_datapath present", c)
		}
		if !moduleLoaded(t, vm, "openvswitch") {
			t.Error("openvswitch not in /proc/modules after preflight")
		}
		// The probe creates a flow-based geneve device in a throwaway
		// namespace; the kernel loads geneve.ko for it.
		if c := checkOf(t, out, "tunnel-support"); c.status != "PASS" || c.found != "kernel supports geneve tunnel devices" {
			t.Errorf("tunnel-support check %+v; want PASS: kernel supports geneve tunnel devices", c)
		}
		if !moduleLoaded(t, vm, "geneve") {
			t.Error("geneve not loaded after the probe created a geneve device")
		}
	}) {
		return
	}

	var n *guestNode
	if !t.Run("all-in-one runs on the system datapath", func(t *testing.T) {
		n = startNode(t, vm, b, nil, "--keep-datapath")
		log := n.log(t)
		if !strings.Contains(log, "datapath=system") {
			t.Errorf("ovnhost did not start with datapath=system:\n%s", tailLines(log, 30))
		}
		if got := strings.TrimSpace(vsctl(t, vm, "get", "bridge", "br-int", "datapath_type")); got != "system" {
			t.Errorf("br-int datapath_type = %s, want system", got)
		}
		dp := vm.Run(t, "ovs-dpctl", "show")
		if !strings.Contains(dp, "system@ovs-system") || !strings.Contains(dp, ": br-int (internal)") {
			t.Errorf("the kernel datapath does not hold br-int:\n%s", dp)
		}
		// Open vSwitch 3.1.0 started in the first 10 s after boot (this VM
		// boots in 4) sets up no upcall handler and drops every flow miss
		// for good: ovnhost holds it back until it can count the CPUs.
		if vlog := vm.Run(t, "cat", "/var/log/openvswitch/ovs-vswitchd.log"); strings.Contains(vlog, "Overriding n-handler-threads to 0") {
			t.Errorf("ovs-vswitchd ran with no upcall handler:\n%s", tailLines(vlog, 30))
		}
	}) {
		return
	}

	conf := cniConf(t, vm)
	var p1, p2 pod
	if !t.Run("pods ping and carry TCP through the kernel datapath", func(t *testing.T) {
		p1, p2 = addPod(t, vm, conf, "pod1"), addPod(t, vm, conf, "pod2")
		dp := vm.Run(t, "ovs-dpctl", "show")
		for _, p := range []pod{p1, p2} {
			port := strings.TrimSpace(vsctl(t, vm, "--bare", "--columns=name", "find", "interface", "external_ids:iface-id="+p.name+".default"))
			if port == "" || !strings.Contains(dp, ": "+port+"\n") && !strings.Contains(dp, ": "+port+" ") {
				t.Errorf("pod %s's host interface %q is not a port of the kernel datapath:\n%s", p.name, port, dp)
			}
		}
		vm.MustExec(t, qemuvm.Cmd{Argv: inPod(p1, "ping", "-c", "3", "-W", "5", p2.ip.String()), Timeout: time.Minute})
		probeServer(top, vm, b, p2, 5201) // also serves the next step
		var r tcpResult
		probeJSON(t, vm, b, p1, time.Minute, &r, "tcp", "-to", fmt.Sprintf("%s:5201", p2.ip), "-n", "64", "-size", "8192")
		if r.Rounds != 64 {
			t.Errorf("TCP: %d round trips, want 64", r.Rounds)
		}
		// The kernel forwarded it: its flow table has the pods' flows.
		if f := datapathFlows(t, vm); f == 0 {
			t.Error("the kernel datapath holds no flows after pod traffic")
		}
	}) {
		return
	}

	t.Run("keep-datapath restart keeps established flows", func(t *testing.T) {
		// A TCP connection: its ACKs keep the pods' neighbour entries
		// confirmed, so it needs no new datapath flow while ovs-vswitchd
		// is away (a UDP flow's ARP refresh after 30 s would: a new flow).
		s := vm.Spawn(t, "/var/log/stream-keep.log", nil, inPod(p1, b.probe, "tcpstream", "-to", fmt.Sprintf("%s:5201", p2.ip), "-for", "30m", "-every", "20ms")...)
		if err := s.WaitLog("established", time.Minute); err != nil {
			t.Fatal(err)
		}
		if code := n.stop(t); code != 0 {
			t.Fatalf("ovnhost --keep-datapath exited %d on SIGTERM\n%s", code, tailLines(n.log(t), 30))
		}
		if !strings.Contains(vm.Run(t, "ovs-dpctl", "show"), "br-int") {
			t.Fatal("--keep-datapath stop removed the kernel datapath")
		}
		t.Logf("datapath flows with ovnhost stopped: %d (%s)", datapathFlows(t, vm), time.Now().UTC().Format(time.RFC3339Nano))
		n.start(t)
		// Let the restarted daemons settle with traffic flowing.
		vm.MustExec(t, qemuvm.Cmd{Argv: inPod(p1, "ping", "-c", "5", "-i", "0.5", "-W", "5", p2.ip.String()), Timeout: time.Minute})
		if err := s.Signal(syscall.SIGTERM, false); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Wait(time.Minute); err != nil {
			t.Fatal(err)
		}
		var r streamResult
		readJSONLine(t, vm, s.Log, &r)
		t.Logf("established TCP flow across a --keep-datapath restart: %d messages, longest wait for an echo %.0f ms (from %s)", r.Sent, r.MaxGapMS, r.GapStart)
		// A flush of the kept datapath stalls the flow from ovs-vswitchd's
		// start until ovn-controller's flows are back: the stall spans
		// ovn-controller's ready time. Emulation on a busy machine also
		// starves the guest for a second or more, at random times; such a
		// stall is logged, not failed, unless it is long.
		readyAt := logTime(t, vm, n.logFile, "msg=ready child=ovn-controller")
		gapStart, err := time.Parse(time.RFC3339Nano, r.GapStart)
		if err != nil {
			t.Fatalf("stream gap start %q: %v", r.GapStart, err)
		}
		gapEnd := gapStart.Add(time.Duration(r.MaxGapMS * float64(time.Millisecond)))
		spansRestore := gapStart.Before(readyAt) && gapEnd.After(readyAt.Add(-time.Second))
		switch {
		case r.Lost != 0 || r.MaxGapMS > grossStallMS || (r.MaxGapMS > stallLimitMS && spansRestore):
			t.Logf("ovn-controller ready at %s; ovnhost's stop and start (guest clock):\n%s", readyAt.Format(time.RFC3339Nano),
				vm.Run(t, "sh", "-c", "grep -h -E 'msg=stop|stopping|stopped|msg=starting|flow-restore|unit ready|msg=ready took' /var/log/ovnhost/ovnhost-*.log | grep -v child= | cut -c1-160"))
			t.Errorf("an established TCP flow stalled %.0f ms (%d of %d echoes missing) across a --keep-datapath restart, from %s to %s (ovn-controller ready at %s)",
				r.MaxGapMS, r.Lost, r.Sent, gapStart.Format(time.RFC3339Nano), gapEnd.Format(time.RFC3339Nano), readyAt.Format(time.RFC3339Nano))
		case r.MaxGapMS > stallLimitMS:
			t.Logf("a %.0f ms stall away from ovn-controller's restart (ready at %s): the emulated guest, not the datapath", r.MaxGapMS, readyAt.Format(time.RFC3339Nano))
		}
	})

	t.Run("pods removed leave nothing", func(t *testing.T) {
		for _, p := range []pod{p1, p2} {
			if p.name != "" {
				delPod(t, vm, conf, p)
			}
		}
		if out := vsctl(t, vm, "--bare", "--columns=name", "find", "interface", "external_ids:vendor=ovnhost"); strings.Contains(out, "pod") {
			t.Errorf("OVS interfaces left after DEL: %s", out)
		}
	})
}

// stallLimitMS is the longest pause of an established TCP flow counted as
// no loss (see above).
const (
	stallLimitMS = 2000
	grossStallMS = 10000
)

// logTime is the time= of the last log line containing sub.
func logTime(t testing.TB, vm *qemuvm.VM, file, sub string) time.Time {
	t.Helper()
	line := vm.Run(t, "sh", "-c", "grep -F -- \""+sub+"\" "+file+" | tail -n 1")
	m := regexp.MustCompile(`time=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no %q line with a time in %s", sub, file)
	}
	ts, err := time.Parse(time.RFC3339Nano, m[1])
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	return ts
}

// readJSONLine decodes the last line of a guest file.
func readJSONLine(t testing.TB, vm *qemuvm.VM, path string, v any) {
	t.Helper()
	out := strings.TrimSpace(vm.Run(t, "tail", "-n", "1", path))
	if err := jsonUnmarshal(out, v); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, vm.Run(t, "cat", path))
	}
}

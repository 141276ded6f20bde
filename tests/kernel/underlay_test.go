package kernel

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelUnderlayHostKeepsItsNetwork: the node's only NIC (eth0, its
// default route and its tunnel interface), with a VLAN interface on it
// (eth0.10, the host's second network), goes into br-physnet1 on the
// kernel datapath, stays there across an upgrade's hand-over (SIGUSR2)
// and a --keep-datapath restart, and comes back at the stop, while the
// node pings its neighbour every 10 ms, over eth0 once per phase and over
// eth0.10 throughout. eth0.10 is left alone and keeps working (the kernel
// gives a VLAN interface its frames before OVS sees the NIC's; moving its
// addresses to a tagged internal port of the bridge, as Kube-OVN's
// vlanInterfaces does, broke it here: the frames kept going to eth0.10).
// The goal is none lost; measured here 2 to 8 on eth0 at the move, none
// across the hand-over, the restart and the give-back, none on eth0.10.
// The move's loss is Open vSwitch's: from the moment the kernel datapath
// takes eth0 as a port until ovs-vswitchd associates that port with
// br-physnet1, what arrives on eth0 is dropped ("received packet on
// unassociated datapath port" in its log, within the lost replies'
// window: 50-150 ms under this emulation). More than moveLimit at the
// move or 5 in another phase fails the test: a move that left a moment without an
// address or a route loses far more.
func TestKernelUnderlayHostKeepsItsNetwork(t *testing.T) {
	b := programs(t)
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, Modules: append(slices.Clone(qemuvm.DatapathModules), "8021q"), NICs: []qemuvm.NIC{link.End(0, "192.168.101.1/24")}},
		qemuvm.Config{Name: "peer", Memory: 512, Modules: []string{"8021q"}, NICs: []qemuvm.NIC{link.End(1, "192.168.101.2/24")}})
	a := vms[0]
	// VLAN 10 on the same cable, the host's second network (eth0.10).
	for i, vm := range vms {
		vm.Sh(t, fmt.Sprintf("ip link add link eth0 name eth0.10 type vlan id 10 && ip addr add 192.168.110.%d/24 dev eth0.10 && ip link set eth0.10 up", i+1))
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", "192.168.101.2"}, Timeout: time.Minute})
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", "192.168.110.2"}, Timeout: time.Minute})
	a.Run(t, "ip", "route", "add", "10.101.0.0/16", "via", "192.168.101.2", "metric", "20")
	a.Run(t, "ip", "route", "add", "10.110.0.0/16", "via", "192.168.110.2", "metric", "20")
	hostState := "for d in eth0 eth0.10; do ip -4 addr show dev $d | grep inet; done; ip route show table all | grep -v '^local\\|^broadcast\\|^fe80\\|^ff00\\|^multicast\\|^anycast'"
	before := a.Run(t, "sh", "-c", hostState)

	pinger := startPinger(t, a, "/tmp/ping.log", "192.168.101.2")
	vlanPinger := startPinger(t, a, "/tmp/ping10.log", "192.168.110.2")
	n := startNode(t, a, b, []string{"IFACE=eth0"}, "--provider-networks=physnet1:eth0")
	if err := n.proc.WaitLog("underlay: NIC bridged, its configuration moved to the bridge", time.Minute); err != nil {
		t.Fatal(err)
	}
	if dp := a.Run(t, "ovs-dpctl", "show"); !strings.Contains(dp, "system@ovs-system") || !strings.Contains(dp, ": eth0") || !strings.Contains(dp, ": br-physnet1 (internal)") {
		t.Fatalf("eth0 and br-physnet1 are not ports of the kernel datapath:\n%s", dp)
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "br-physnet1"); !strings.Contains(addrs, "192.168.101.1/24") {
		t.Fatalf("br-physnet1 lacks eth0's address:\n%s", addrs)
	}
	if r := a.Run(t, "ip", "route", "show", "10.101.0.0/16"); !strings.Contains(r, "dev br-physnet1") {
		t.Fatalf("the route did not move to br-physnet1: %s", r)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.101.2"}, Timeout: time.Minute})
	// eth0.10 is left as it is and keeps working: the kernel hands VLAN
	// 10's frames to it before OVS sees eth0's; no port stands in for it.
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "eth0.10"); !strings.Contains(addrs, "192.168.110.1/24") {
		t.Fatalf("eth0.10 lost its address:\n%s", addrs)
	}
	if err := n.proc.WaitLog("vlan_interface=eth0.10 vlan=10", time.Second); err != nil {
		t.Errorf("the node did not name eth0.10: %v", err)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.110.2"}, Timeout: time.Minute})
	phases := []phaseLoss{{"the move", pinger}}

	// An upgrade's hand-over (SIGUSR2: exit 75, the daemons and the
	// bridge stay, the next ovnhost adopts them and moves nothing), then a
	// restart that keeps the datapath (--keep-datapath: the daemons stop,
	// ovs-vswitchd starts again over the kept bridge), each under its own
	// 10 ms ping.
	pinger = startPinger(t, a, "/tmp/ping-handover.log", "192.168.101.2")
	if err := n.proc.Signal(syscall.SIGUSR2, false); err != nil {
		t.Fatal(err)
	}
	if r, err := n.proc.Wait(3 * time.Minute); err != nil || r.Exit != 75 {
		t.Fatalf("hand-over: %v %+v\n%s", err, r, tailLines(n.log(t), 30))
	}
	n.args = append(n.args, "--adopt-children", "--keep-datapath")
	n.start(t)
	if err := n.proc.WaitLog("underlay: NIC already bridged, nothing to move", time.Minute); err != nil {
		t.Fatalf("the adopting start: %v", err)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.101.2"}, Timeout: time.Minute})
	phases = append(phases, phaseLoss{"the hand-over", pinger})

	pinger = startPinger(t, a, "/tmp/ping-restart.log", "192.168.101.2")
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost --keep-datapath exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "br-physnet1"); !strings.Contains(addrs, "192.168.101.1/24") {
		t.Fatalf("a --keep-datapath stop took br-physnet1's address:\n%s", addrs)
	}
	n.args = slices.DeleteFunc(n.args, func(a string) bool { return a == "--keep-datapath" || a == "--adopt-children" })
	n.start(t)
	if err := n.proc.WaitLog("underlay: NIC already bridged, nothing to move", time.Minute); err != nil {
		t.Fatalf("the start after --keep-datapath: %v", err)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.101.2"}, Timeout: time.Minute})
	phases = append(phases, phaseLoss{"a --keep-datapath restart", pinger})

	pinger = startPinger(t, a, "/tmp/ping-giveback.log", "192.168.101.2")
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	// The host reaches its neighbour again (a fresh ping waits for it),
	// then the 10 ms pinger's count is final.
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.101.2"}, Timeout: time.Minute})
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.110.2"}, Timeout: time.Minute})
	phases = append(phases, phaseLoss{"the give-back", pinger}, phaseLoss{"all of it, over eth0.10", vlanPinger})
	checkPhases(t, a, "eth0", phases)
	after := a.Run(t, "sh", "-c", hostState)
	if after != before {
		t.Errorf("eth0's and eth0.10's addresses and the routes after the stop are not as before:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if links := a.Run(t, "ip", "-o", "link", "show"); strings.Contains(links, "br-physnet1") {
		t.Errorf("br-physnet1 left after the stop:\n%s", links)
	}
}

// startPinger pings dst from vm every 10 ms in the background, each reply
// logged with its time (-D), into log.
func startPinger(t testing.TB, vm *qemuvm.VM, log, dst string) *qemuvm.Proc {
	t.Helper()
	return vm.Spawn(t, log, nil, "ping", "-D", "-i", "0.01", "-W", "1", dst)
}

// pingLoss stops a background ping (SIGINT) and reads its summary; the
// sequence numbers that got no reply are logged with the times of the
// replies around them, to set against the node's log.
func pingLoss(t testing.TB, vm *qemuvm.VM, p *qemuvm.Proc) (sent, lost int) {
	t.Helper()
	if err := p.Signal(syscall.SIGINT, false); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	out := vm.Run(t, "cat", p.Log)
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no ping summary in %s:\n%s", p.Log, tailLines(out, 10))
	}
	sent, _ = strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	// The echoes sent after the last reply were cut off by the SIGINT,
	// not lost: they are not counted.
	replies := map[int]string{}
	last := 0
	for _, r := range regexp.MustCompile(`\[([0-9.]+)\] .*icmp_seq=(\d+) `).FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(r[2])
		replies[n] = r[1]
		last = max(last, n)
	}
	if last == 0 {
		return sent, sent - got // no timestamps (-D): the summary only
	}
	sent = last
	var gaps []string
	first, lastGap := 0, 0
	for seq := 1; seq < last; seq++ {
		if _, ok := replies[seq]; !ok {
			lost++
			if first == 0 {
				first = seq
			}
			lastGap = seq
			if len(gaps) < 10 {
				gaps = append(gaps, strconv.Itoa(seq))
			}
		}
	}
	if lost > 0 {
		t.Logf("%s: no reply to icmp_seq %s%s (last reply before at %s, first after the last gap at %s)", p.Log, strings.Join(gaps, ", "),
			map[bool]string{true: ", ...", false: ""}[lost > len(gaps)], stamp(replies[first-1]), stamp(replies[lastGap+1]))
	}
	return sent, lost
}

// stamp turns ping -D's epoch seconds into the node log's UTC form.
func stamp(epoch string) string {
	f, err := strconv.ParseFloat(epoch, 64)
	if err != nil {
		return "?"
	}
	return time.Unix(0, int64(f*1e9)).UTC().Format("15:04:05.000")
}

// moveLimit is the most pings of 10 ms a test lets the move lose: OVS's
// port-association window (TestKernelUnderlayHostKeepsItsNetwork), 50-150
// ms measured under emulation, slower under load. Other phases: 5.
const moveLimit = 25

// checkPhases reads each phase's pinger (the first is the move) and fails
// the test when a phase lost more than its limit; when the move lost any,
// the node's first run's underlay lines are logged beside the lost ones.
func checkPhases(t testing.TB, vm *qemuvm.VM, nic string, phases []phaseLoss) {
	t.Helper()
	for i, p := range phases {
		sent, lost := pingLoss(t, vm, p.proc)
		t.Logf("kernel datapath, %s as the NIC: ping every 10 ms across %s: %d sent, %d lost", nic, p.what, sent, lost)
		limit := 5
		if i == 0 {
			limit = moveLimit
			if lost > 0 {
				t.Logf("the node's underlay lines of that run:\n%s", vm.Run(t, "sh", "-c", "grep -E 'msg=\"?(underlay|ready|starting)|unassociated datapath port' /var/log/ovnhost/ovnhost-1.log | cut -c1-220 | head -30"))
			}
		}
		if lost > limit {
			t.Errorf("the host lost %d of %d pings to its neighbour across %s", lost, sent, p.what)
		}
	}
}

// phaseLoss is a background ping over one phase of a test.
type phaseLoss struct {
	what string
	proc *qemuvm.Proc
}

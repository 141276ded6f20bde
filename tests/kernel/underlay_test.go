package kernel

import (
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelUnderlayHostKeepsItsNetwork: the node's only NIC (eth0, its
// default route and its tunnel interface) goes into br-physnet1 on the
// kernel datapath and comes back at the stop, while the node pings its
// neighbour every 10 ms. The goal is none lost; measured here 1 or 2 of
// ~1000, both at the move, not at the give-back (why is not known yet:
// perhaps the NIC's first packets going up to ovs-vswitchd before a
// flow exists, under qemu's software emulation); more than 5 (50 ms) fails the test: a move that
// left a moment without an address or a route loses far more.
func TestKernelUnderlayHostKeepsItsNetwork(t *testing.T) {
	b := programs(t)
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, NICs: []qemuvm.NIC{link.End(0, "192.168.101.1/24")}},
		qemuvm.Config{Name: "peer", Memory: 512, Modules: []string{}, NICs: []qemuvm.NIC{link.End(1, "192.168.101.2/24")}})
	a := vms[0]
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", "192.168.101.2"}, Timeout: time.Minute})
	a.Run(t, "ip", "route", "add", "10.101.0.0/16", "via", "192.168.101.2", "metric", "20")
	before := a.Run(t, "sh", "-c", "ip -4 addr show dev eth0 | grep inet; ip route show table all | grep -v '^local\\|^broadcast\\|^fe80\\|^ff00\\|^multicast\\|^anycast'")

	pinger := a.Spawn(t, "/tmp/ping.log", nil, "ping", "-i", "0.01", "-W", "1", "192.168.101.2")
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

	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	// The host reaches its neighbour again (a fresh ping waits for it),
	// then the 10 ms pinger's count is final.
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.101.2"}, Timeout: time.Minute})
	if err := pinger.Signal(syscall.SIGINT, false); err != nil {
		t.Fatal(err)
	}
	if _, err := pinger.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	out := a.Run(t, "cat", "/tmp/ping.log")
	m := regexp.MustCompile(`(\d+) packets transmitted, (\d+) received`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no ping summary:\n%s", tailLines(out, 10))
	}
	sent, _ := strconv.Atoi(m[1])
	got, _ := strconv.Atoi(m[2])
	t.Logf("kernel datapath: ping 192.168.101.2 every 10 ms across the move and the give-back: %d sent, %d lost", sent, sent-got)
	if sent-got > 5 {
		t.Errorf("the host lost %d of %d pings to its neighbour across the move and the give-back:\n%s", sent-got, sent, tailLines(out, 5))
	}
	after := a.Run(t, "sh", "-c", "ip -4 addr show dev eth0 | grep inet; ip route show table all | grep -v '^local\\|^broadcast\\|^fe80\\|^ff00\\|^multicast\\|^anycast'")
	if after != before {
		t.Errorf("eth0's addresses and the routes after the stop are not as before:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if links := a.Run(t, "ip", "-o", "link", "show"); strings.Contains(links, "br-physnet1") {
		t.Errorf("br-physnet1 left after the stop:\n%s", links)
	}
}

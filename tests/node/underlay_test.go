package node_test

import (
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// The underlay network of a standalone node (--provider-networks): eth1,
// the node's only NIC, with its default route, a route in main and in
// table 100, a policy rule and a permanent neighbour, goes into
// br-physnet1 while two pings at 10 ms run through it (one to the gateway,
// one routed through it); a hand-over (SIGUSR2) and the adopting start
// change nothing; started again without the network (removed while
// ovnhost was down), the node finds the bridge and gives everything back
// as it was. eth1 is
// also the tunnel interface (the default route's): its address moves to
// the bridge and stays the encap IP.
func TestUnderlayNICMovesIntoItsBridgeAndBack(t *testing.T) {
	n := newNode(t)
	t.Cleanup(func() { killProcessesUnder(n.Dir) })
	gw := newUnderlayGateway(t, n.NS, "eth1", "192.168.210")
	run(t, "ip", "-n", n.NS, "route", "add", "default", "via", "192.168.210.1")
	run(t, "ip", "-n", n.NS, "route", "add", "10.210.0.0/16", "via", "192.168.210.1", "metric", "20")
	run(t, "ip", "-n", n.NS, "route", "add", "default", "via", "192.168.210.1", "table", "100")
	run(t, "ip", "-n", n.NS, "route", "add", "10.211.0.0/16", "via", "192.168.210.1", "table", "100")
	run(t, "ip", "-n", n.NS, "rule", "add", "iif", "eth1", "lookup", "100", "pref", "100")
	run(t, "ip", "-n", n.NS, "neigh", "add", "192.168.210.77", "lladdr", "02:00:00:00:02:77", "dev", "eth1", "nud", "permanent")
	before := hostConfig(t, n.NS)

	pings := []*pinger{startPinger(t, n.NS, "192.168.210.1"), startPinger(t, n.NS, "10.210.0.1")}
	n.Start("--provider-networks=physnet1:eth1", "--adopt-children")
	if err := n.WaitLog("underlay: NIC bridged, its configuration moved to the bridge", 5*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}

	ovs := dial(t, vswitch.FullDatabaseModel, "unix:"+n.Path("ovs-run", "db.sock"))
	ctx := context.Background()
	br := &vswitch.Bridge{Name: "br-physnet1"}
	if err := ovs.Get(ctx, br); err != nil {
		t.Fatalf("br-physnet1 not in conf.db: %v", err)
	}
	port := &vswitch.Port{Name: "eth1"}
	if err := ovs.Get(ctx, port); err != nil || !contains(br.Ports, port.UUID) {
		t.Fatalf("eth1 is not a port of br-physnet1 (%v): %+v", err, br)
	}
	var roots []vswitch.OpenvSwitch
	if err := ovs.List(ctx, &roots); err != nil || len(roots) != 1 || !strings.Contains(roots[0].ExternalIDs["ovn-bridge-mappings"], "physnet1:br-physnet1") {
		t.Fatalf("no mapping physnet1:br-physnet1: %v %+v", err, roots)
	}
	moved := hostConfig(t, n.NS)
	for _, want := range []string{
		"inet 192.168.210.2/24 scope global br-physnet1",
		"default via 192.168.210.1 dev br-physnet1 \n",
		"10.210.0.0/16 via 192.168.210.1 dev br-physnet1 metric 20 \n",
		"default via 192.168.210.1 dev br-physnet1 table 100 \n",
		"10.211.0.0/16 via 192.168.210.1 dev br-physnet1 table 100 \n",
		"100:\tfrom all iif br-physnet1 lookup 100",
		"192.168.210.77 dev br-physnet1 lladdr 02:00:00:00:02:77 PERMANENT",
	} {
		if !strings.Contains(moved, want) {
			t.Errorf("after the move, %q is missing:\n%s", want, moved)
		}
	}
	if strings.Contains(run(t, "ip", "-n", n.NS, "-o", "-4", "addr", "show", "dev", "eth1"), "inet ") {
		t.Errorf("eth1 kept an IPv4 address after the move:\n%s", moved)
	}
	if err := ping(n.NS, "10.210.0.1", 3); err != nil {
		t.Fatalf("the host cannot reach through its gateway once bridged: %v", err)
	}

	// A hand-over: the datapath and the daemons stay, nothing moves; the
	// next ovnhost finds everything in place and moves nothing.
	_ = n.Signal(syscall.SIGUSR2)
	select {
	case <-n.Exited():
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit within 60s of SIGUSR2\n%s", n.LogTail())
	}
	if code := n.ExitCode(); code != 75 {
		t.Fatalf("exit %d after SIGUSR2, want 75\n%s", code, n.LogTail())
	}
	if now := hostConfig(t, n.NS); now != moved {
		t.Errorf("the hand-over changed the host:\n%s", lineDiff(moved, now))
	}
	mark := n.Notify.Mark()
	if err := n.StartNoWait("--provider-networks=physnet1:eth1", "--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "READY=1", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready after the hand-over: %v\n%s", err, n.LogTail())
	}
	if err := n.WaitLog("underlay: NIC already bridged, nothing to move", 5*time.Second); err != nil {
		t.Fatalf("the adopting start moved again: %v\n%s", err, n.LogTail())
	}
	if now := hostConfig(t, n.NS); now != moved {
		t.Errorf("the adopting start changed the host:\n%s", lineDiff(moved, now))
	}

	// Handed over again, then started without the network (removed while
	// ovnhost was down): the start finds the bridge the earlier run left
	// and gives it back; the stop has nothing left to give.
	_ = n.Signal(syscall.SIGUSR2)
	select {
	case <-n.Exited():
	case <-time.After(60 * time.Second):
		t.Fatalf("no exit within 60s of the second SIGUSR2\n%s", n.LogTail())
	}
	mark = n.Notify.Mark()
	if err := n.StartNoWait("--adopt-children"); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Notify.WaitFor(mark, "READY=1", 60*time.Second, n.Exited()); err != nil {
		t.Fatalf("not ready after starting without the network: %v\n%s", err, n.LogTail())
	}
	if err := n.WaitLog("underlay: found a network an earlier run bridged that is no longer wanted; giving it back", 5*time.Second); err != nil {
		t.Fatalf("the leftover bridge was not found: %v\n%s", err, n.LogTail())
	}
	if err := n.WaitLog("underlay: network no longer wanted on this node, given back", 5*time.Second); err != nil {
		t.Fatalf("the leftover bridge was not given back: %v\n%s", err, n.LogTail())
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	for _, p := range pings {
		sent, lost := p.stop(t)
		// On the userspace datapath the kernel also sees what arrives on
		// eth1 (OVS reads it through a packet socket): replies counted twice.
		t.Logf("ping %s every 10 ms across the move, the hand-over, the adopting start, the second hand-over and the give-back at the start: %d sent, lost: %s, duplicates: %d",
			p.dst, sent, orNone(lost), strings.Count(p.out.String(), "DUP!"))
		if lost != "" {
			t.Errorf("ping %s: %s", p.dst, lost)
		}
	}
	if after := hostConfig(t, n.NS); after != before {
		t.Errorf("the host after the stop is not as before:\n%s", lineDiff(before, after))
	}
	if links := run(t, "ip", "-n", n.NS, "-o", "link", "show"); strings.Contains(links, "br-physnet1") {
		t.Errorf("br-physnet1 left after the stop:\n%s", links)
	}
	db := offlineQuery(t, n.Path("ovs-db", "conf.db"), `["Open_vSwitch",{"op":"select","table":"Bridge","where":[["name","==","br-physnet1"]]},{"op":"select","table":"Open_vSwitch","where":[],"columns":["external_ids"]}]`)
	if strings.Contains(db, "br-physnet1") {
		t.Errorf("conf.db still has br-physnet1 or its mapping after the stop:\n%s", db)
	}
	if entries, _ := os.ReadDir(n.Path("ovs-db", "ovnhost-underlay")); len(entries) > 0 {
		t.Errorf("journal left after the give-back: %v", entries)
	}
	_ = gw
}

// A provider NIC that is not there: the host is left untouched, the node
// is ready, degraded: /readyz names the network and the interfaces there
// are; the NIC is bridged when it appears, and given back at the stop.
func TestUnderlayMissingNICLeavesTheHostUntilItAppears(t *testing.T) {
	n := newNode(t)
	gw := newUnderlayGateway(t, n.NS, "eth1", "192.168.211")
	before := hostConfig(t, n.NS)
	n.Start("--provider-networks=physnet1:eth2")
	code, body, err := n.HTTPGet("/readyz")
	if err != nil || code != 200 || !strings.Contains(body, "ready, degraded: underlay: provider network physnet1: eth2 not found; this host has eth1") {
		t.Fatalf("/readyz with eth2 missing: %d %q %v", code, body, err)
	}
	if now := hostConfig(t, n.NS); now != before {
		t.Errorf("a missing NIC changed the host:\n%s", lineDiff(before, now))
	}
	if links := run(t, "ip", "-n", n.NS, "-o", "link", "show"); strings.Contains(links, "br-physnet1") {
		t.Fatalf("br-physnet1 created for a missing NIC:\n%s", links)
	}

	// eth2 appears (with an address): bridged without a restart.
	mark := n.Notify.Mark()
	// It is configured under another name first, then renamed: a NIC
	// that appears (or is renamed) with its address, as udev does it.
	run(t, "ip", "link", "add", "new2", "netns", n.NS, "type", "veth", "peer", "name", "gw2", "netns", gw)
	run(t, "ip", "-n", gw, "addr", "add", "192.168.212.1/24", "dev", "gw2")
	run(t, "ip", "-n", gw, "link", "set", "gw2", "up")
	run(t, "ip", "-n", n.NS, "addr", "add", "192.168.212.2/24", "dev", "new2")
	run(t, "ip", "-n", n.NS, "link", "set", "new2", "name", "eth2")
	if _, err := n.Notify.WaitFor(mark, "STATUS=ready: underlay recovered", 20*time.Second, n.Exited()); err != nil {
		t.Fatalf("eth2 not bridged once it appeared: %v\n%s", err, n.LogTail())
	}
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 || strings.TrimSpace(body) != "ready" {
		t.Fatalf("/readyz once eth2 is bridged: %d %q %v", code, body, err)
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "addr", "show", "dev", "br-physnet1"); !strings.Contains(addrs, "192.168.212.2/24") {
		t.Fatalf("br-physnet1 lacks eth2's address:\n%s", addrs)
	}
	if err := ping(n.NS, "192.168.212.1", 3); err != nil {
		t.Fatal(err)
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "addr", "show", "dev", "eth2"); !strings.Contains(addrs, "192.168.212.2/24") {
		t.Fatalf("eth2 did not get its address back:\n%s", addrs)
	}
}

// newUnderlayGateway puts nic into ns with prefix.2/24, its peer gw0 into
// a new namespace (the gateway, returned) with prefix.1/24 and 10.210.0.1
// on its loopback (a destination routed through the gateway).
func newUnderlayGateway(t *testing.T, ns, nic, prefix string) string {
	// No IPv6 link-local addresses on the node's links: one still in
	// duplicate address detection when a snapshot is taken would make it
	// differ from the next (IPv6 moves are hostlink's tests').
	run(t, "ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.default.addr_gen_mode=1")
	gw := newNetns(t, "ohg")
	run(t, "ip", "link", "add", nic, "netns", ns, "type", "veth", "peer", "name", "gw0", "netns", gw)
	run(t, "ip", "-n", ns, "link", "set", nic, "addrgenmode", "none")
	run(t, "ip", "-n", gw, "addr", "add", prefix+".1/24", "dev", "gw0")
	run(t, "ip", "-n", gw, "addr", "add", "10.210.0.1/32", "dev", "lo")
	run(t, "ip", "-n", gw, "link", "set", "gw0", "up")
	run(t, "ip", "-n", gw, "route", "add", "default", "via", prefix+".2")
	run(t, "ip", "-n", ns, "addr", "add", prefix+".2/24", "dev", nic)
	run(t, "ip", "-n", ns, "link", "set", nic, "up")
	return gw
}

// hostConfig is the node's IP configuration as ip(8) shows it: eth1's
// addresses (and the bridge's, while it has them), every route of every
// table, the rules and the permanent neighbours, with what OVS and the
// node's own devices add while ovnhost runs left out (br-int, ovn0,
// ovs-netdev) and the counters that change by themselves removed.
func hostConfig(t *testing.T, ns string) string {
	t.Helper()
	var b strings.Builder
	own := regexp.MustCompile(`\b(br-int|ovn0|ovs-netdev|mirror0|genev_sys_\d+)\b`)
	for _, c := range [][]string{
		{"-d", "addr", "show", "dev", "eth1"},
		{"addr", "show", "dev", "br-physnet1"},
		{"route", "show", "table", "all"},
		{"-6", "route", "show", "table", "all"},
		{"rule", "show"},
		{"neigh", "show", "nud", "permanent"},
	} {
		out, err := exec.Command("ip", append([]string{"-n", ns}, c...)...).CombinedOutput()
		if err != nil && !strings.Contains(string(out), "does not exist") {
			t.Fatalf("ip %v: %v\n%s", c, err, out)
		}
		b.WriteString("$ ip " + strings.Join(c, " ") + "\n")
		for _, l := range strings.Split(string(out), "\n") {
			// ip cannot name a veth peer's namespace once its id is gone.
			if own.MatchString(l) || strings.Contains(l, "does not exist") || strings.HasPrefix(l, "Error: Peer netns reference is invalid") {
				continue
			}
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// lineDiff lists the lines of want missing from got (-) and the extra
// ones (+).
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	var b strings.Builder
	for _, l := range w {
		if !contains(g, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range g {
		if !contains(w, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	if b.Len() == 0 {
		return "(same lines, another order)\n--- want\n" + want + "--- got\n" + got
	}
	return b.String()
}

func contains(s []string, v string) bool {
	for _, e := range s {
		if e == v {
			return true
		}
	}
	return false
}

// offlineQuery runs a read-only transaction on a database file whose
// server is stopped.
func offlineQuery(t *testing.T, db, txn string) string {
	t.Helper()
	out, err := exec.Command("ovsdb-tool", "query", db, txn).CombinedOutput()
	if err != nil {
		t.Fatalf("ovsdb-tool query %s: %v\n%s", db, err, out)
	}
	return string(out)
}

// pinger is a ping every 10 ms from a namespace.
type pinger struct {
	dst string
	cmd *exec.Cmd
	out strings.Builder
}

func startPinger(t *testing.T, ns, dst string) *pinger {
	p := &pinger{dst: dst, cmd: exec.Command("ip", "netns", "exec", ns, "ping", "-n", "-i", "0.01", "-W", "1", dst)}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	return p
}

// stop ends the ping and returns how many were sent and which got no
// reply ("" none; the last may have been in flight).
func (p *pinger) stop(t *testing.T) (sent int, lost string) {
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	_ = p.cmd.Wait()
	out := p.out.String()
	m := regexp.MustCompile(`(\d+) packets transmitted`).FindStringSubmatch(out)
	if m != nil {
		for _, c := range m[1] {
			sent = sent*10 + int(c-'0')
		}
	}
	return sent, pingsLost(out)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

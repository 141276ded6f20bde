package kernel

import (
	"fmt"
	"maps"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsquirks"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// underlay is the Ethernet segment between the two nodes of a Geneve
// test: each node's address on it, with the segment's prefix length.
type underlay struct {
	family string // "ipv4" or "ipv6": the subtest's name
	a, b   netip.Prefix
}

var (
	underlay4 = underlay{"ipv4", netip.MustParsePrefix("192.168.100.1/24"), netip.MustParsePrefix("192.168.100.2/24")}
	underlay6 = underlay{"ipv6", netip.MustParsePrefix("fd00:192:168:100::1/64"), netip.MustParsePrefix("fd00:192:168:100::2/64")}
)

// TestTwoNodesKernelGeneve: two VMs joined by a qemu socket network (one
// Ethernet segment), once with an IPv4 and once with an IPv6 underlay
// (issue 25: Geneve over IPv6 on the kernel datapath). node-a runs
// all-in-one and also serves its NB/SB on the underlay; node-b joins it
// with OVN_DB_IPS (an IPv6 address in the IPv6 case), both standalone (no
// Kubernetes). Asserted: the SB's geneve encaps are exactly the nodes'
// underlay addresses; each node's tunnel port is the flow-based kernel
// device genev_sys_6081; pods on each node ping and carry TCP across; and
// node-b's kernel datapath has a flow matching on a tunnel from node-a's
// address to its own, in the underlay's family. The pods are IPv4 in both
// cases (the standalone default range); dual-stack pods across this
// tunnel are BenchmarkKernelGeneveIPv6Throughput's, IPv6 pods over
// Geneve-over-IPv6 with Kubernetes tests/node's TestIPv6OnlyCluster.
func TestTwoNodesKernelGeneve(t *testing.T) {
	bn := programs(t)
	for _, u := range []underlay{underlay4, underlay6} {
		t.Run(u.family, func(t *testing.T) {
			// Kept datapath: the restarts below must find it in place.
			c := startGeneveNodes(t, bn, u, "node", "OVNHOST_KEEP_DATAPATH=true")
			a, bnode := c.a, c.b

			encaps := a.Run(t, "ovn-sbctl", "--db=unix:/run/ovn/ovnsb_db.sock", "--bare", "--columns=ip", "find", "encap", "type=geneve")
			var got []netip.Addr
			for _, l := range strings.Fields(encaps) {
				ip, err := netip.ParseAddr(l)
				if err != nil {
					t.Fatalf("SB encap ip %q: %v\n%s", l, err, encaps)
				}
				got = append(got, ip)
			}
			slices.SortFunc(got, netip.Addr.Compare)
			if want := []netip.Addr{u.a.Addr(), u.b.Addr()}; !slices.Equal(got, want) {
				t.Errorf("SB geneve encaps are %v, want the nodes' underlay addresses %v:\n%s", got, want,
					a.Run(t, "ovn-sbctl", "--db=unix:/run/ovn/ovnsb_db.sock", "list", "encap"))
			}
			// Each node's OVS has a geneve port to the other, in the kernel.
			for _, vm := range []*qemuvm.VM{a, bnode} {
				if out := vm.Run(t, "ip", "-d", "link", "show", "genev_sys_6081"); !strings.Contains(out, "geneve external") {
					t.Errorf("%s: no flow-based kernel geneve device:\n%s", vm.Name, out)
				}
			}
			// startGeneveNodes warmed the tunnel up (its first packets may
			// go while the remote's neighbour entry resolves): a clean run.
			out := a.MustExec(t, qemuvm.Cmd{Argv: inPod(c.pa, "ping", "-c", "5", "-i", "0.3", "-W", "5", c.pb.ip.String()), Timeout: time.Minute})
			if !strings.Contains(out, " 0% packet loss") {
				t.Errorf("steady cross-node ping lost packets:\n%s", out)
			}
			probeServer(t, bnode, bn, c.pb, 5201)
			var r tcpResult
			probeJSON(t, a, bn, c.pa, 2*time.Minute, &r, "tcp", "-to", fmt.Sprintf("%s:5201", c.pb.ip), "-n", "64", "-size", "8192")
			if r.Rounds != 64 {
				t.Errorf("TCP across the tunnel: %d round trips, want 64", r.Rounds)
			}
			// The traffic crossed the underlay encapsulated, in its family:
			// node-b's kernel datapath has a flow matching on a tunnel from
			// node-a to node-b.
			if flows := bnode.Run(t, "ovs-dpctl", "dump-flows"); !hasTunnelFlow(flows, u.a.Addr(), u.b.Addr()) {
				t.Errorf("node-b's kernel datapath has no flow on a tunnel from %s to %s:\n%s", u.a.Addr(), u.b.Addr(), flows)
			}
			if u.family == "ipv4" { // the same code path in both families: once is enough
				t.Run("restarts recreate nothing on the datapath", func(t *testing.T) { restartsKeepTheDatapath(t, bn, c) })
			}
		})
	}
}

// geneveNodes are two standalone nodes on one underlay link with a pod
// each: a runs all-in-one and serves its NB/SB on the link, b joins it.
type geneveNodes struct {
	a, b   *qemuvm.VM
	na, nb *guestNode
	pa, pb pod
}

// startGeneveNodes boots two VMs (<prefix>-a, <prefix>-b) on a new link
// with u's addresses, starts ovnhost on both, waits until node-b's chassis
// is in node-a's SB, wires a pod on each with the installed plugin and
// warms the tunnel up with a ping from pod-a to pod-b. env is given to
// both nodes besides IFACE (e.g. POD_CIDR/JOIN_CIDR, which must be the
// same on both).
func startGeneveNodes(t testing.TB, bn bins, u underlay, prefix string, env ...string) *geneveNodes {
	t.Helper()
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: prefix + "-a", Memory: 1536, NICs: []qemuvm.NIC{link.End(0, u.a.String())}},
		qemuvm.Config{Name: prefix + "-b", Memory: 1024, NICs: []qemuvm.NIC{link.End(1, u.b.String())}})
	c := &geneveNodes{a: vms[0], b: vms[1]}
	c.a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", u.b.Addr().String()}, Timeout: time.Minute})

	c.na = startNode(t, c.a, bn, append([]string{"IFACE=eth0"}, env...))
	// The product has no setting for an all-in-one node to serve its
	// databases on the network: added to its ovsdb-servers at run time
	// (an IPv6 address in brackets, ovsdb's syntax).
	host := u.a.Addr().String()
	if u.a.Addr().Is6() {
		host = "[" + host + "]"
	}
	for _, db := range []struct{ ctl, remote string }{
		{"/run/ovn/ovnnb_db.ctl", "ptcp:6641:" + host},
		{"/run/ovn/ovnsb_db.ctl", "ptcp:6642:" + host},
	} {
		c.a.Run(t, "ovs-appctl", "-t", db.ctl, "ovsdb-server/add-remote", db.remote)
	}
	// Without Kubernetes each node allocates from its own IPAM, rebuilt
	// from the NB when it starts: pod-a exists before node-b starts, so
	// node-b does not hand out its address again.
	c.pa = addPod(t, c.a, cniConf(t, c.a), "pod-a")
	c.nb = startNode(t, c.b, bn, append([]string{"IFACE=eth0", "OVN_DB_IPS=" + u.a.Addr().String()}, env...))
	sysB := strings.TrimSpace(c.b.Run(t, "cat", "/var/lib/openvswitch/system-id.conf"))
	c.a.MustExec(t, qemuvm.Cmd{Argv: []string{"ovn-sbctl", "--db=unix:/run/ovn/ovnsb_db.sock", "--timeout=120",
		"wait-until", "chassis", sysB}, Timeout: 3 * time.Minute})
	c.pb = addPod(t, c.b, cniConf(t, c.b), "pod-b")
	t.Logf("%s underlay: pod-a %s %s on %s, pod-b %s %s on %s", u.family, c.pa.ip, c.pa.ip6, c.a.Name, c.pb.ip, c.pb.ip6, c.b.Name)
	if c.pa.ip == c.pb.ip {
		t.Fatalf("both pods got %s", c.pa.ip)
	}
	_, _ = c.a.Exec(qemuvm.Cmd{Argv: inPod(c.pa, "ping", "-c", "5", "-i", "0.5", "-W", "5", c.pb.ip.String()), Timeout: time.Minute})
	if c.pb.ip6.IsValid() && c.pb.ip6 != c.pb.ip {
		_, _ = c.a.Exec(qemuvm.Cmd{Argv: inPod(c.pa, "ping", "-c", "5", "-i", "0.5", "-W", "5", c.pb.ip6.String()), Timeout: time.Minute})
	}
	return c
}

// hasTunnelFlow reports whether a datapath flow (ovs-dpctl dump-flows)
// matches on a tunnel from src to dst: `tunnel(...,src=A,dst=B,...)` for
// IPv4, `tunnel(...,ipv6_src=A,ipv6_dst=B,...)` for IPv6.
func hasTunnelFlow(flows string, src, dst netip.Addr) bool {
	key := ""
	if src.Is6() {
		key = "ipv6_"
	}
	re := regexp.MustCompile(`tunnel\((?:[^(),]*,)*?` + key + `src=` + regexp.QuoteMeta(src.String()) + `,` + key + `dst=` + regexp.QuoteMeta(dst.String()) + `,`)
	return re.MatchString(flows)
}

// restartsKeepTheDatapath restarts node-b's components one event at a
// time (kill -9 of ovn-controller, kill -9 of ovs-vswitchd, a SIGTERM
// restart of ovnhost with the datapath kept, kill -9 of ovsdb-server, an
// upgrade's SIGUSR2 hand-over and a kill -9 of ovnhost, both with the
// children adopted) while pod-a holds a TCP
// stream to pod-b (pod-b's server from the test above) with a message every
// millisecond. After each event the tunnel device genev_sys_6081, br-int
// and the kernel datapath's ports are the same objects as before (ifindex
// and port number: Kube-OVN issue 2291 is a Geneve device recreated on
// restart), the stream is intact, and a new connection works.
func restartsKeepTheDatapath(t *testing.T, bn bins, c *geneveNodes) {
	vm, n := c.b, c.nb
	to := fmt.Sprintf("%s:5201", c.pb.ip)
	// A release with this defect re-creates genev_sys_6081 whenever
	// ovs-vswitchd starts (doctor's vswitchd-tunnel-restart warns of it);
	// its datapath port number must survive all the same.
	release := ovsquirks.Version(vm.Run(t, "ovs-vswitchd", "--version"))
	recreates := ovsquirks.RecreatesTunnelBackers(release)
	readies := 1 // "msg=ready child=ovn-controller" lines in node-b's current log
	for i, ev := range []struct {
		name     string
		vswitchd bool // ovs-vswitchd starts again
		do       func(t *testing.T)
	}{
		// No event: the emulated VMs' own stalls over a few seconds, the
		// floor the events' figures are read against.
		{"baseline, no event", false, func(t *testing.T) {
			c.a.MustExec(t, qemuvm.Cmd{Argv: inPod(c.pa, "ping", "-c", "20", "-i", "0.2", "-W", "5", c.pb.ip.String()), Timeout: time.Minute})
		}},
		{"kill -9 of ovn-controller", false, func(t *testing.T) {
			vm.Run(t, "pkill", "-9", "-x", "ovn-controller")
			readies++
			if err := n.proc.WaitLogCount("msg=ready child=ovn-controller", readies, 3*time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{"kill -9 of ovs-vswitchd", true, func(t *testing.T) {
			vm.Run(t, "pkill", "-9", "-x", "ovs-vswitchd")
			// ovnhost restarts ovs-vswitchd, then ovn-controller.
			readies++
			if err := n.proc.WaitLogCount("msg=ready child=ovn-controller", readies, 3*time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		{"ovnhost SIGTERM restart, datapath kept", true, func(t *testing.T) {
			if code := n.stop(t); code != 0 {
				t.Fatalf("ovnhost exited %d on SIGTERM\n%s", code, tailLines(n.log(t), 30))
			}
			// From here on as in the systemd home: the daemons outlive a
			// crash or hand-over of ovnhost (the events below).
			n.args = append(n.args, "--adopt-children")
			n.start(t)
			readies = 1
		}},
		// ovnhost restarts the switch's database; ovs-vswitchd and
		// ovn-controller reconnect to it and keep their flows.
		{"kill -9 of ovsdb-server", false, func(t *testing.T) {
			vm.Run(t, "pkill", "-9", "-x", "ovsdb-server")
			if err := n.proc.WaitLogCount("msg=ready child=ovsdb-server", 2, 3*time.Minute); err != nil {
				t.Fatal(err)
			}
		}},
		// An upgrade's hand-over (the RPM's SIGUSR2): ovnhost exits 75
		// leaving its children, the next one adopts them.
		{"ovnhost SIGUSR2 hand-over, children adopted", false, func(t *testing.T) {
			if err := n.proc.Signal(syscall.SIGUSR2, false); err != nil {
				t.Fatal(err)
			}
			if r, err := n.proc.Wait(3 * time.Minute); err != nil || r.Exit != 75 {
				t.Fatalf("hand-over: %v %+v\n%s", err, r, tailLines(n.log(t), 30))
			}
			n.start(t)
			if err := n.proc.WaitLog("adopted the running child", time.Second); err != nil {
				t.Errorf("the start after the hand-over adopted nothing: %v\n%s", err, tailLines(n.log(t), 30))
			}
		}},
		// The systemd home's crash: ovnhost killed, its adoptable children
		// run on and the restarted ovnhost adopts them.
		{"ovnhost kill -9, children adopted", false, func(t *testing.T) {
			if err := n.proc.Signal(syscall.SIGKILL, false); err != nil {
				t.Fatal(err)
			}
			if _, err := n.proc.Wait(time.Minute); err != nil {
				t.Fatal(err)
			}
			n.start(t)
			if err := n.proc.WaitLog("adopted the running child", time.Second); err != nil {
				t.Errorf("the start after kill -9 adopted nothing: %v\n%s", err, tailLines(n.log(t), 30))
			}
		}},
	} {
		t.Run(ev.name, func(t *testing.T) {
			s := c.a.Spawn(t, fmt.Sprintf("/var/log/stream-restart-%d.log", i), nil,
				inPod(c.pa, bn.probe, "tcpstream", "-to", to, "-for", "30m", "-every", "1ms")...)
			if err := s.WaitLog("established", time.Minute); err != nil {
				t.Fatal(err)
			}
			before := datapathIdentity(t, vm)
			if before["genev_sys_6081"] == "" {
				t.Fatalf("node-b has no tunnel device before the event: %v", before)
			}
			ev.do(t)
			after := datapathIdentity(t, vm)
			if ev.vswitchd && recreates {
				if before["genev_sys_6081"] != after["genev_sys_6081"] {
					t.Logf("Open vSwitch %s re-created genev_sys_6081 (%s, now %s): the known defect, fixed in 3.1.1", release, before["genev_sys_6081"], after["genev_sys_6081"])
				}
				delete(before, "genev_sys_6081")
				delete(after, "genev_sys_6081")
			}
			if !maps.Equal(before, after) {
				t.Errorf("%s recreated part of the datapath: before %v, after %v", ev.name, before, after)
			}
			var nr tcpResult
			probeJSON(t, c.a, bn, c.pa, 2*time.Minute, &nr, "tcp", "-to", to, "-n", "8", "-size", "512")
			if nr.Rounds != 8 {
				t.Errorf("a new connection after %s: %d of 8 round trips", ev.name, nr.Rounds)
			}
			if err := s.Signal(syscall.SIGTERM, false); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Wait(time.Minute); err != nil {
				t.Fatal(err)
			}
			var r streamResult
			readJSONLine(t, c.a, s.Log, &r)
			t.Logf("%s: established TCP stream at 1 ms: %d messages, %d unanswered, longest wait for an echo %.0f ms (from %s)",
				ev.name, r.Sent, r.Lost, r.MaxGapMS, r.GapStart)
			// Emulated guests on a loaded machine stall for seconds at
			// random (TestKernelNode): only a broken stream or a gross
			// stall fails here; the figures are issue 28's benchmark's.
			if r.Lost != 0 || r.MaxGapMS > grossStallMS {
				t.Errorf("the established stream across %s: %d unanswered, longest wait %.0f ms", ev.name, r.Lost, r.MaxGapMS)
			}
		})
	}
}

// datapathIdentity names what a restart must not recreate on a node's
// kernel datapath: the ifindex of genev_sys_6081, br-int and ovs-system,
// and the port number of each of the datapath's ports.
func datapathIdentity(t testing.TB, vm *qemuvm.VM) map[string]string {
	t.Helper()
	out := vm.Run(t, "sh", "-c", `for l in genev_sys_6081 br-int ovs-system; do
  [ -e /sys/class/net/$l/ifindex ] && echo "$l ifindex=$(cat /sys/class/net/$l/ifindex)"
done
ovs-dpctl show | sed -n 's/^[[:space:]]*port \([0-9]*\): \([^ ]*\).*/port:\2 number=\1/p'`)
	id := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			id[k] = v
		}
	}
	return id
}

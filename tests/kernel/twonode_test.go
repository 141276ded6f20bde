package kernel

import (
	"fmt"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

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
			c := startGeneveNodes(t, bn, u, "node")
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
		})
	}
}

// geneveNodes are two standalone nodes on one underlay link with a pod
// each: a runs all-in-one and serves its NB/SB on the link, b joins it.
type geneveNodes struct {
	a, b   *qemuvm.VM
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

	startNode(t, c.a, bn, append([]string{"IFACE=eth0"}, env...))
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
	startNode(t, c.b, bn, append([]string{"IFACE=eth0", "OVN_DB_IPS=" + u.a.Addr().String()}, env...))
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

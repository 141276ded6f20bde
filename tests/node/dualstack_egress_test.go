package node_test

import (
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/testenv"
)

// In a dual-stack cluster (IPv4 tunnel) a pod of a natOutgoing Subnet
// leaves through its own node in each family, masqueraded to that node's
// address of the family: the outside, which has no route to any pod
// subnet, sees node-a's 192.168.207.2 and fd00:207::2 for node-a's pod and
// node-b's fd00:208::2 for node-b's. Each NAT backend keeps its IPv6
// rules (nft's ip6 table, ip6tables-legacy) and removes them on stop.
func TestDualStackPodEgressLeavesMasqueradedThroughItsNode(t *testing.T) {
	for _, be := range natBackends {
		t.Run(be.name, func(t *testing.T) {
			list := [][]string{be.list}
			if be.name == "iptables-legacy" {
				testenv.RequireCommands(t, "iptables-legacy", "ip6tables-legacy", "ip6tables-legacy-save")
				list = append(list, []string{"ip6tables-legacy-save", "-t", "nat"})
			} else {
				testenv.RequireCommands(t, "nft")
			}
			testDualStackEgress(t, "--nat-backend="+be.name, list)
		})
	}
}

func testDualStackEgress(t *testing.T, backend string, natLists [][]string) {
	testenv.Binary(t, "ovnhost-cni")
	c := startClusterWith(t, clusterSpec{nodes: 2, dualStack: true}, backend)
	c.ensureNamespace(t, "egress6", nil)
	pods := []*clusterPod{c.addPod(t, 0, "egress6", "pa", nil, nil), c.addPod(t, 1, "egress6", "pb", nil, nil)}
	for _, p := range pods {
		if len(p.ips) != 2 || !strings.HasPrefix(p.ips[0], "10.16.") || !strings.HasPrefix(p.ips[1], "fd00:10:16::") {
			t.Fatalf("pod %s's addresses %v: want one of 10.16.0.0/16 and one of fd00:10:16::/64", p.name, p.ips)
		}
	}
	v4 := &outside{ns: c.world.ns, addr: "192.168.207.1:7000"}
	for i, p := range pods {
		v6 := &outside{ns: c.world.ns, addr: fmt.Sprintf("[fd00:%d::1]:7000", 207+i)}
		want6 := fmt.Sprintf("fd00:%d::2", 207+i)
		// The first connection may come before the node's NAT and the
		// chassis' flows for the pod are in place: retried until a deadline.
		deadline := time.Now().Add(20 * time.Second)
		var src string
		var err error
		for {
			if src, err = v6.sourceSeen(p.netns, 2*time.Second); err == nil && src == want6 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("pod %s (%s) to the outside over IPv6: saw source %q (%v), want its node's %s\n%s",
					p.name, p.ips[1], src, err, want6, dualStackEgressState(c, p.node.NS))
			}
		}
		if i == 0 {
			if src, err := v4.sourceSeen(p.netns, 5*time.Second); err != nil || src != "192.168.207.2" {
				t.Fatalf("pod %s to the outside over IPv4: saw source %q (%v), want node-a's 192.168.207.2\n%s", p.name, src, err, dualStackEgressState(c, p.node.NS))
			}
		}
		if out, err := exec.Command("ip", "netns", "exec", p.node.NS, "cat", "/proc/sys/net/ipv6/conf/all/forwarding").CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "1" {
			t.Errorf("%s: IPv6 forwarding %q (%v), want 1", c.names[i], out, err)
		}
	}
	// A pod-to-pod connection across nodes in IPv6 is not masqueraded: it
	// stays in the cluster (the cluster set holds the pod CIDR).
	ln := listenIn(t, pods[1].netns, net.JoinHostPort(pods[1].ips[1], "7001"))
	var seen string
	if err := inNetns(pods[0].netns, func() error {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(pods[1].ips[1], "7001"), 5*time.Second)
		if err != nil {
			return err
		}
		return conn.Close()
	}); err != nil {
		t.Fatalf("pod pa to pod pb over IPv6: %v\n%s", err, dualStackEgressState(c, pods[0].node.NS))
	}
	select {
	case seen = <-ln:
	case <-time.After(5 * time.Second):
		t.Fatal("pb saw no connection from pa")
	}
	if seen != pods[0].ips[1] {
		t.Errorf("pb saw pa's IPv6 connection from %s, want pa's own %s (not masqueraded)", seen, pods[0].ips[1])
	}
	// Stopped, a node leaves no NAT rule of either family behind.
	n := c.nodes[0]
	if code := n.Stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.LogTail())
	}
	for _, l := range natLists {
		rules, err := exec.Command("ip", append([]string{"netns", "exec", n.NS}, l...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(l, " "), err, rules)
		}
		if strings.Contains(strings.ToLower(string(rules)), "ovnhost") {
			t.Fatalf("NAT rules left after stop (%s), %s:\n%s", backend, strings.Join(l, " "), rules)
		}
	}
}

// listenIn accepts connections on addr in a pod's namespace and sends each
// peer's address on the channel.
func listenIn(t *testing.T, ns, addr string) <-chan string {
	t.Helper()
	seen := make(chan string, 4)
	var l net.Listener
	if err := inNetns(ns, func() (err error) { l, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			seen <- host
			c.Close()
		}
	}()
	return seen
}

// dualStackEgressState is what a user would look at when IPv6 egress fails.
func dualStackEgressState(c *cluster, nodeNS string) string {
	var b strings.Builder
	for _, cmd := range [][]string{
		{"ip", "netns", "exec", nodeNS, "nft", "list", "ruleset"},
		{"ip", "netns", "exec", nodeNS, "ip6tables-legacy-save", "-c", "-t", "nat"},
		{"ip", "netns", "exec", nodeNS, "sysctl", "net.ipv6.conf.all.forwarding", "net.ipv4.ip_forward"},
		{"ip", "-n", nodeNS, "-6", "addr"},
		{"ip", "-n", nodeNS, "-6", "route"},
		{"ovn-nbctl", "--db=" + c.cp.central.NB(), "lr-policy-list", "ovn-cluster"},
		{"ovn-nbctl", "--db=" + c.cp.central.NB(), "lr-route-list", "ovn-cluster"},
		{"ovn-nbctl", "--db=" + c.cp.central.NB(), "--columns=name,addresses", "list", "address_set"},
	} {
		out, _ := exec.Command(cmd[0], cmd[1:]...).CombinedOutput()
		b.WriteString("$ " + strings.Join(cmd, " ") + "\n" + string(out))
	}
	return b.String()
}

package node_test

import (
	"bufio"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// outside is a network namespace behind the node's underlay standing in for
// the internet: it answers TCP with the source address it saw, and it has
// no route to any pod subnet, so only masqueraded traffic gets an answer.
type outside struct {
	ns   string
	addr string // host:port of the responder
}

func newOutside(t testing.TB, n *node) *outside {
	t.Helper()
	o := &outside{ns: newNetns(t, "ohx"), addr: "192.168.206.1:7000"}
	run(t, "ip", "link", "add", "ul0", "netns", n.NS, "type", "veth", "peer", "name", "wan0", "netns", o.ns)
	run(t, "ip", "-n", n.NS, "addr", "add", "192.168.206.2/24", "dev", "ul0")
	run(t, "ip", "-n", n.NS, "link", "set", "ul0", "up")
	run(t, "ip", "-n", n.NS, "route", "add", "default", "via", "192.168.206.1")
	run(t, "ip", "-n", o.ns, "addr", "add", "192.168.206.1/24", "dev", "wan0")
	run(t, "ip", "-n", o.ns, "link", "set", "wan0", "up")
	o.serve(t)
	return o
}

// serve answers each connection with its source address.
func (o *outside) serve(t testing.TB) {
	t.Helper()
	_, port, _ := net.SplitHostPort(o.addr)
	netns.ServeTCP(t, o.ns, ":"+port, func(c net.Conn) {
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		_, _ = c.Write([]byte(host + "\n"))
		c.Close()
	})
}

// sourceSeen connects from a pod's namespace to the outside and returns the
// source address the outside saw.
func (o *outside) sourceSeen(podNS string, timeout time.Duration) (string, error) {
	var c net.Conn
	err := inNetns(podNS, func() (err error) {
		c, err = net.DialTimeout("tcp", o.addr, timeout)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// natBackend is one way the node masquerades: how another agent wipes its
// rules and how a user lists what is left of them.
type natBackend struct {
	name  string
	flush [][]string // run in the node's namespace
	list  []string   // the NAT state, in the node's namespace
}

var natBackends = []natBackend{
	// firewall-cmd --reload (nftables backend) flushes the whole ruleset.
	{name: "nft", flush: [][]string{{"nft", "flush", "ruleset"}}, list: []string{"nft", "list", "ruleset"}},
	// An iptables-legacy agent (firewalld's iptables backend, a script doing
	// iptables -t nat -F) flushes ovnhost's chain and POSTROUTING's jump.
	{name: "iptables-legacy", flush: [][]string{
		{"iptables-legacy", "-t", "nat", "-F", "OVNHOST-POSTROUTING"},
		{"iptables-legacy", "-t", "nat", "-F", "POSTROUTING"},
	}, list: []string{"iptables-legacy-save", "-t", "nat"}},
}

// A pod on a natOutgoing subnet (standalone's ovn-default, as Kube-OVN's)
// reaches the outside through its own node, masqueraded to the node's
// address; flushed NAT rules come back; stop and cleanup leave no rule.
// Once per NAT backend (--nat-backend).
func TestPodEgressLeavesMasqueradedThroughItsNode(t *testing.T) {
	for _, be := range natBackends {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "iptables-legacy" {
				testenv.RequireCommands(t, "iptables-legacy", "iptables-legacy-save")
			} else {
				testenv.RequireCommands(t, "nft")
			}
			testPodEgress(t, be)
		})
	}
}

func testPodEgress(t *testing.T, be natBackend) {
	n := newNode(t)
	testenv.Binary(t, "ovnhost-cni")
	out := newOutside(t, n)
	n.Env = append(n.Env, "IFACE=ul0")
	n.Start("--nat-backend=" + be.name)
	pod := newNetns(t, "ohe")
	if res, err := cni(n, "ADD", pod, "egress"); err != nil {
		t.Fatalf("ADD: %v\n%s\n%s", err, res, n.LogTail())
	}
	t.Cleanup(func() { _, _ = cni(n, "DEL", pod, "egress") })

	src, err := out.sourceSeen(pod, 5*time.Second)
	if err != nil || src != "192.168.206.2" {
		t.Fatalf("pod to outside: saw source %q (%v), want the node's 192.168.206.2\n%s\n%s", src, err, n.LogTail(), egressState(n))
	}
	// The rules are where the backend keeps them, and only there.
	rules, _ := exec.Command("ip", append([]string{"netns", "exec", n.NS}, be.list...)...).CombinedOutput()
	if !strings.Contains(strings.ToLower(string(rules)), "ovnhost") {
		t.Fatalf("--nat-backend=%s: no ovnhost rule in %s:\n%s", be.name, strings.Join(be.list, " "), rules)
	}

	// Another agent flushes the NAT rules (as firewall-cmd --reload does):
	// they are back within a second.
	for _, c := range be.flush {
		if out, err := exec.Command("ip", append([]string{"netns", "exec", n.NS}, c...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v %s", strings.Join(c, " "), err, out)
		}
	}
	flushed := time.Now()
	deadline := flushed.Add(time.Second)
	for {
		src, err = out.sourceSeen(pod, 200*time.Millisecond)
		if err == nil && src == "192.168.206.2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("egress not restored within 1s of a flush: %q %v\n%s\n%s", src, err, n.LogTail(), egressState(n))
		}
	}
	t.Logf("%s: egress masqueraded again %v after the flush", be.name, time.Since(flushed).Round(time.Millisecond))

	if code := n.Stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.LogTail())
	}
	for _, l := range natBackends {
		rules, err := exec.Command("ip", append([]string{"netns", "exec", n.NS}, l.list...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(l.list, " "), err, rules)
		}
		if strings.Contains(strings.ToLower(string(rules)), "ovnhost") {
			t.Fatalf("NAT rules left after stop (--nat-backend=%s), %s:\n%s", be.name, strings.Join(l.list, " "), rules)
		}
	}
}

// egressState is what a user would look at when egress fails.
func egressState(n *node) string {
	var b strings.Builder
	for _, c := range [][]string{
		{"ip", "netns", "exec", n.NS, "nft", "list", "ruleset"},
		{"ip", "netns", "exec", n.NS, "iptables-legacy-save", "-c", "-t", "nat"},
		{"ip", "netns", "exec", n.NS, "iptables-legacy-save", "-c", "-t", "filter"},
		{"ip", "netns", "exec", n.NS, "sysctl", "net.ipv4.conf.all.rp_filter", "net.ipv4.conf.ovn0.rp_filter", "net.ipv4.ip_forward"},
		{"ip", "-n", n.NS, "route"},
		{"ip", "netns", "exec", n.NS, "cat", "/proc/sys/net/ipv4/ip_forward"},
		{"ovn-nbctl", "--db=unix:" + n.Path("ovn-run", "ovnnb_db.sock"), "lr-policy-list", "ovn-cluster"},
		{"ovn-nbctl", "--db=unix:" + n.Path("ovn-run", "ovnnb_db.sock"), "lr-route-list", "ovn-cluster"},
		{"ovn-nbctl", "--db=unix:" + n.Path("ovn-run", "ovnnb_db.sock"), "list", "address_set"},
	} {
		out, _ := exec.Command(c[0], c[1:]...).CombinedOutput()
		b.WriteString("$ " + strings.Join(c, " ") + "\n" + string(out))
	}
	return b.String()
}

package node_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Issue 23 items 3 and 8: a pod cannot reach the OVN databases (NB/SB,
// Raft), the node API or the tunnel ports through its node, whatever it
// sends; the node and its pods keep working. Once per NAT backend: the
// guard lives where the masquerade rules live (nft table inet
// ovnhost-guard, or the iptables-legacy chain filter OVNHOST-GUARD).
func TestPodCannotReachDatabaseOrTunnelPorts(t *testing.T) {
	for _, be := range natBackends {
		t.Run(be.name, func(t *testing.T) {
			if be.name == "iptables-legacy" {
				testenv.RequireCommands(t, "iptables-legacy", "iptables-legacy-save")
			} else {
				testenv.RequireCommands(t, "nft")
			}
			testGuard(t, be)
		})
	}
}

// guardPresent and guardDrops read the guard as a user would: nft list /
// iptables-legacy -L with counters, in the node's namespace.
func guardState(t *testing.T, n *node, be natBackend) (present bool, drops int) {
	t.Helper()
	var cmd []string
	if be.name == "nft" {
		cmd = []string{"nft", "list", "ruleset"}
	} else {
		cmd = []string{"iptables-legacy", "-L", "OVNHOST-GUARD", "-v", "-x", "-n"}
	}
	out, err := exec.Command("ip", append([]string{"netns", "exec", n.NS}, cmd...)...).CombinedOutput()
	s := string(out)
	if be.name == "nft" {
		if err != nil {
			t.Fatalf("nft list ruleset: %v %s", err, out)
		}
		i := strings.Index(s, "table inet ovnhost-guard")
		if i < 0 {
			return false, 0
		}
		for _, m := range regexp.MustCompile(`counter packets (\d+) bytes \d+ drop`).FindAllStringSubmatch(s[i:], -1) {
			v, _ := strconv.Atoi(m[1])
			drops += v
		}
		return true, drops
	}
	if err != nil { // no such chain
		return false, 0
	}
	for _, line := range strings.Split(s, "\n") {
		f := strings.Fields(line)
		if len(f) > 2 && f[2] == "DROP" {
			v, _ := strconv.Atoi(f[0])
			drops += v
		}
	}
	// The jumps from INPUT and FORWARD are the guard too.
	save, _ := exec.Command("ip", "netns", "exec", n.NS, "iptables-legacy-save", "-t", "filter").CombinedOutput()
	for _, h := range []string{"INPUT", "FORWARD"} {
		if !regexp.MustCompile(`(?m)^-A ` + h + ` .*-j OVNHOST-GUARD`).Match(save) {
			t.Errorf("OVNHOST-GUARD exists but %s does not jump to it:\n%s", h, save)
		}
	}
	return true, drops
}

// leftovers is any trace of the guard in either backend.
func guardLeftovers(n *node) string {
	var b strings.Builder
	nft, _ := exec.Command("ip", "netns", "exec", n.NS, "nft", "list", "ruleset").CombinedOutput()
	if strings.Contains(string(nft), "ovnhost-guard") {
		b.WriteString("nft:\n" + string(nft))
	}
	for _, p := range []string{"iptables-legacy-save", "ip6tables-legacy-save"} {
		if _, err := exec.LookPath(p); err != nil {
			continue
		}
		out, _ := exec.Command("ip", "netns", "exec", n.NS, p, "-t", "filter").CombinedOutput()
		if strings.Contains(string(out), "OVNHOST-GUARD") {
			b.WriteString(p + ":\n" + string(out))
		}
	}
	return b.String()
}

// blocked: a TCP connection from ns to addr gets no answer at all (a
// dropped SYN: a timeout, neither a refusal nor a connection).
func tcpBlocked(ns, addr string) error {
	c, err := netns.Dial(ns, addr, 800*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Errorf("connected to %s", addr)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return nil
	}
	return fmt.Errorf("%s: %v, want a timeout (dropped)", addr, err)
}

// udpAnswered sends datagrams from ns to addr until one is echoed or d
// passes.
func udpAnswered(ns, addr string, d time.Duration) bool {
	answered := false
	_ = netns.Do(ns, func() error {
		c, err := net.Dial("udp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		for end := time.Now().Add(d); time.Now().Before(end) && !answered; {
			if _, err := c.Write([]byte("geneve?")); err != nil {
				return err
			}
			_ = c.SetReadDeadline(time.Now().Add(150 * time.Millisecond)) // resend while ARP settles
			if _, err := c.Read(make([]byte, 64)); err == nil {
				answered = true
			}
		}
		return nil
	})
	return answered
}

func testGuard(t *testing.T, be natBackend) {
	n := newNode(t)
	testenv.Binary(t, "ovnhost-cni")
	out := newOutside(t, n)
	n.Env = append(n.Env, "IFACE=ul0")
	// Another node's tunnel endpoint (Geneve 6081) and a plain UDP echo.
	for _, p := range []string{"6081", "7001"} {
		netns.ServeUDP(t, out.ns, "udp4", "192.168.206.1:"+p, func(b []byte) []byte { return b })
	}
	const nodeIP = "192.168.206.2"
	n.Start("--nat-backend="+be.name, "--keep-datapath")
	// The node's OVN/node API ports: a listener where the daemon has none
	// on the node address (all-in-one serves NB/SB on unix sockets).
	guarded := []string{"6641", "6642", "6643", "10666"}
	for _, p := range guarded {
		if l, err := netns.Listen(n.NS, nodeIP+":"+p); err == nil {
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					c.Close()
				}
			}()
		} else if !errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("listen on %s:%s in the node: %v", nodeIP, p, err)
		}
		// The node itself reaches its ports (the listeners are there).
		c, err := netns.Dial(n.NS, nodeIP+":"+p, 3*time.Second)
		if err != nil {
			t.Fatalf("node -> its own %s:%s: %v", nodeIP, p, err)
		}
		c.Close()
	}
	pod := newNetns(t, "ohg")
	res, err := cni(n, "ADD", pod, "tenant")
	if err != nil {
		t.Fatalf("ADD: %v\n%s\n%s", err, res, n.LogTail())
	}
	t.Cleanup(func() { _, _ = cni(n, "DEL", pod, "tenant") })
	var added struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(res, &added); err != nil || len(added.IPs) == 0 {
		t.Fatalf("ADD result %s: %v", res, err)
	}
	podIP := strings.Split(added.IPs[0].Address, "/")[0]
	netns.ServeTCP(t, pod, ":9000", func(c net.Conn) { _, _ = c.Write([]byte("pod\n")); c.Close() })

	// The pod's way out works: its egress is not what is blocked.
	if src, err := out.sourceSeen(pod, 5*time.Second); err != nil || src != nodeIP {
		t.Fatalf("pod to outside: saw %q (%v), want the node's %s\n%s\n%s", src, err, nodeIP, n.LogTail(), egressState(n))
	}
	if !udpAnswered(pod, "192.168.206.1:7001", 3*time.Second) {
		t.Fatalf("pod -> 192.168.206.1:7001/udp: no answer (over-blocked)\n%s", egressState(n))
	}
	present, before := guardState(t, n, be)
	if !present {
		t.Fatalf("no guard in the %s backend\n%s", be.name, egressState(n))
	}

	// The attacks: the node's OVN central, Raft and node API ports, and
	// another node's Geneve port through this node.
	for _, p := range guarded {
		if err := tcpBlocked(pod, nodeIP+":"+p); err != nil {
			t.Errorf("pod -> node %v\n%s", err, egressState(n))
		}
	}
	if udpAnswered(pod, "192.168.206.1:6081", time.Second) {
		t.Errorf("pod -> 192.168.206.1:6081/udp (another node's Geneve port): answered through the node")
	}
	_, after := guardState(t, n, be)
	if after-before < len(guarded)+1 {
		t.Errorf("the guard counted %d drops, want at least %d (one SYN per port and a Geneve datagram)", after-before, len(guarded)+1)
	}
	t.Logf("%s: the guard dropped %d packets", be.name, after-before)
	// An admin sees it in the node's metrics.
	if code, body, err := n.HTTPGet("/metrics"); err != nil || code != 200 {
		t.Errorf("/metrics: %d %v", code, err)
	} else if m := regexp.MustCompile(`(?m)^ovnhost_guard_dropped_packets_total (\d+)`).FindStringSubmatch(body); m == nil {
		t.Errorf("no ovnhost_guard_dropped_packets_total in /metrics")
	} else if v, _ := strconv.Atoi(m[1]); v < len(guarded)+1 {
		t.Errorf("ovnhost_guard_dropped_packets_total = %d, want at least %d", v, len(guarded)+1)
	}

	// The node still reaches its pod (kubelet probes), also from a
	// guarded source port (6644: no listener of ours holds it): replies
	// to the host's connections pass.
	for _, lport := range []int{0, 6644} {
		err := netns.Do(n.NS, func() error {
			d := net.Dialer{Timeout: 3 * time.Second}
			if lport != 0 {
				d.LocalAddr = &net.TCPAddr{Port: lport}
			}
			c, err := d.Dial("tcp4", podIP+":9000")
			if err != nil {
				return err
			}
			defer c.Close()
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			_, err = c.Read(make([]byte, 8))
			return err
		})
		if err != nil {
			t.Errorf("node -> pod %s:9000 (source port %d): %v", podIP, lport, err)
		}
	}
	if code, body, err := n.HTTPGet("/readyz"); err != nil || code != 200 {
		t.Errorf("/readyz with the guard: %d %v %q", code, err, body)
	}

	// --keep-datapath: the pods keep running, so the guard stays.
	if code := n.Stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.LogTail())
	}
	if present, _ := guardState(t, n, be); !present {
		t.Errorf("guard removed by a --keep-datapath stop although the pods run on")
	}
	if err := tcpBlocked(pod, nodeIP+":6641"); err != nil {
		t.Errorf("with the daemon stopped (--keep-datapath): pod -> node %v", err)
	}
	// `ovnhost cleanup` removes it.
	cl := exec.Command("ip", append([]string{"netns", "exec", n.NS, testenv.Binary(t, "ovnhost"), "cleanup"}, n.Args...)...)
	if out, err := cl.CombinedOutput(); err != nil {
		t.Fatalf("ovnhost cleanup: %v\n%s", err, out)
	}
	if left := guardLeftovers(n); left != "" {
		t.Errorf("guard left after ovnhost cleanup:\n%s", left)
	}
	// A normal start puts it back, a normal stop removes it.
	n.ListenNotifyAgain()
	n.Start("--nat-backend=" + be.name)
	if present, _ := guardState(t, n, be); !present {
		t.Errorf("no guard after the second start")
	}
	if code := n.Stop(); code != 0 {
		t.Fatalf("stop: exit %d\n%s", code, n.LogTail())
	}
	if left := guardLeftovers(n); left != "" {
		t.Errorf("guard left after a normal stop:\n%s", left)
	}
}

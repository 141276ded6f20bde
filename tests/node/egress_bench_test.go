package node_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// BenchmarkEgressThroughput: a pod on a standalone node (ovn-default,
// natOutgoing) talking to the "outside" namespace, against the node's own
// namespace talking to the same outside over the same underlay, in the same
// run: TCP throughput with iperf3 (the two alternating, a few seconds each)
// and the rate of short TCP connections (connect, read one line, close).
func BenchmarkEgressThroughput(b *testing.B) {
	testenv.RequireCommands(b, "iperf3")
	n := newNode(b)
	testenv.Binary(b, "ovnhost-cni")
	out := newOutside(b, n)
	n.Env = append(n.Env, "IFACE=ul0")
	n.Start()
	pod := newNetns(b, "ohe")
	if res, err := cni(n, "ADD", pod, "egress-bench"); err != nil {
		b.Fatalf("ADD: %v\n%s\n%s", err, res, n.LogTail())
	}
	b.Cleanup(func() { _, _ = cni(n, "DEL", pod, "egress-bench") })
	if src, err := out.sourceSeen(pod, 5*time.Second); err != nil || src != "192.168.206.2" {
		b.Fatalf("pod to outside: saw source %q (%v), want the node's 192.168.206.2\n%s", src, err, egressState(n))
	}

	server := startIperfServer(b, out.ns)
	host, _, _ := net.SplitHostPort(out.addr)
	// Where the time goes: the pod to its node's ovn0 crosses the same OVS
	// datapath without the forwarding and masquerade.
	ovn0 := strings.Fields(run(b, "ip", "-n", n.NS, "-4", "-o", "addr", "show", "dev", "ovn0"))
	if len(ovn0) < 4 {
		b.Fatalf("no IPv4 address on ovn0: %v", ovn0)
	}
	ovn0IP := strings.Split(ovn0[3], "/")[0]
	nodeServer := startIperfServer(b, n.NS)
	const rounds, secs = 2, 3
	var podBps, nodeBps, podNodeBps []float64
	for i := 0; i < rounds; i++ {
		podBps = append(podBps, iperfClient(b, pod, host, secs, server))
		nodeBps = append(nodeBps, iperfClient(b, n.NS, host, secs, server))
		podNodeBps = append(podNodeBps, iperfClient(b, pod, ovn0IP, secs, nodeServer))
	}
	pm, nm, pnm := meanOf(podBps)/1e6, meanOf(nodeBps)/1e6, meanOf(podNodeBps)/1e6

	const connFor = 2 * time.Second
	connAddr := serveUntilClosed(b, out.ns, net.JoinHostPort(host, "7001"))
	// The clients close first, so TIME_WAIT stays on their side, where it
	// may be reused (timestamps) instead of running out of ports.
	for _, ns := range []string{pod, n.NS} {
		run(b, "ip", "netns", "exec", ns, "sysctl", "-q", "-w", "net.ipv4.tcp_tw_reuse=1", "net.ipv4.ip_local_port_range=1024 65000")
	}
	var podRate, nodeRate []float64
	for i := 0; i < rounds; i++ {
		podRate = append(podRate, connRate(b, pod, connAddr, "192.168.206.2", connFor))
		nodeRate = append(nodeRate, connRate(b, n.NS, connAddr, "192.168.206.2", connFor))
	}
	pr, nr := meanOf(podRate), meanOf(nodeRate)

	b.ReportMetric(pm, "pod-Mbit/s")
	b.ReportMetric(nm, "node-Mbit/s")
	b.ReportMetric(pm/nm, "throughput-ratio")
	b.ReportMetric(pnm, "pod-to-ovn0-Mbit/s")
	b.ReportMetric(pr, "pod-conn/s")
	b.ReportMetric(nr, "node-conn/s")
	b.ReportMetric(pr/nr, "conn-ratio")
	b.Logf("TCP to the outside, iperf3 %d s x %d alternating: pod (masqueraded, through OVS) %.0f Mbit/s %v, node's own namespace %.0f Mbit/s %v, ratio %.2f (target >= 0.7)",
		secs, rounds, pm, mbits(podBps), nm, mbits(nodeBps), pm/nm)
	b.Logf("pod to its node's ovn0 (%s, same OVS datapath, no forwarding or NAT): %.0f Mbit/s %v", ovn0IP, pnm, mbits(podNodeBps))
	b.Logf("short TCP connections to the outside, %v x %d alternating, %d clients each: pod %.0f/s %v, node %.0f/s %v, ratio %.2f",
		connFor, rounds, connClients, pr, rounded(podRate), nr, rounded(nodeRate), pr/nr)
	benchresult.Figure(b, "TCP throughput to the outside from a pod (masqueraded), userspace datapath", pm, "Mbit/s").
		Against("the node's own namespace, alternating", nm).
		Target(benchresult.RatioAtLeast(0.7, "at least 0.7x the node's own (issue 10)")).Report()
	benchresult.Figure(b, "TCP throughput from a pod to its node's ovn0 only (same datapath, no forwarding, no NAT)", pnm, "Mbit/s").Report()
	benchresult.Figure(b, "short TCP connections per second to the outside from a pod", pr, "conn/s").
		Against("the node's own namespace, alternating", nr).Report()
}

func meanOf(v []float64) float64 {
	var s float64
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

func mbits(v []float64) []string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x/1e6))
	}
	return s
}

func rounded(v []float64) []string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.0f", x))
	}
	return s
}

// iperfServer is an iperf3 server in a namespace, stopped at cleanup.
type iperfServer struct {
	port int
	log  string
}

func startIperfServer(b testing.TB, ns string) *iperfServer {
	b.Helper()
	s := &iperfServer{port: 5201, log: filepath.Join(b.TempDir(), "iperf3-server.log")}
	logf, err := os.Create(s.log)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, "iperf3", "-s", "-p", fmt.Sprint(s.port))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	b.Cleanup(func() {
		_ = cmd.Process.Kill() // ip netns exec execs iperf3: this is iperf3's pid
		<-done
		logf.Close()
	})
	// Ready once it accepts a connection from inside its namespace.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := dialInNetns(ns, fmt.Sprintf("127.0.0.1:%d", s.port))
		if err == nil {
			c.Close()
			break
		}
		select {
		case <-done:
			raw, _ := os.ReadFile(s.log)
			b.Fatalf("iperf3 server exited: %s", raw)
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("iperf3 server not answering: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

// iperfClient runs a TCP iperf3 client from ns for secs seconds and
// returns what the receiver got, in bit/s.
func iperfClient(b testing.TB, ns, host string, secs int, s *iperfServer) float64 {
	b.Helper()
	var raw []byte
	var err error
	// The server may still be closing the previous test: retry "busy".
	for try := 0; try < 20; try++ {
		raw, err = exec.Command("ip", "netns", "exec", ns, "iperf3", "-c", host, "-p", fmt.Sprint(s.port), "-t", fmt.Sprint(secs), "-J").Output()
		if err == nil || !strings.Contains(string(raw), "busy") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		b.Fatalf("iperf3 -c %s from %s: %v\n%s", host, ns, err, raw)
	}
	var res struct {
		End struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(raw, &res); err != nil || res.Error != "" || res.End.SumReceived.BitsPerSecond == 0 {
		b.Fatalf("iperf3 from %s: %v %s\n%s", ns, err, res.Error, raw)
	}
	return res.End.SumReceived.BitsPerSecond
}

const connClients = 4

// serveUntilClosed listens on addr in ns and answers each connection with
// its source address, then waits for the client to close before closing.
func serveUntilClosed(b testing.TB, ns, addr string) string {
	b.Helper()
	netns.ServeTCP(b, ns, addr, func(c net.Conn) {
		defer c.Close()
		host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(host + "\n")); err != nil {
			return
		}
		_, _ = io.Copy(io.Discard, c)
	})
	return addr
}

// connRate opens short TCP connections from ns to addr with connClients
// clients for d, each reading the source line the outside answers, and
// returns completed connections per second. Every answer must name want.
func connRate(b testing.TB, ns, addr, want string, d time.Duration) float64 {
	b.Helper()
	var mu sync.Mutex
	var total int
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(d)
	for i := 0; i < connClients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			count := 0
			err := inNetns(ns, func() error {
				for time.Now().Before(end) {
					c, err := net.DialTimeout("tcp", addr, 5*time.Second)
					if err != nil {
						return err
					}
					_ = c.SetDeadline(time.Now().Add(2 * time.Second))
					line, err := bufio.NewReader(c).ReadString('\n')
					c.Close()
					if err != nil {
						return err
					}
					if got := strings.TrimSpace(line); got != want {
						return fmt.Errorf("outside saw source %q, want %q", got, want)
					}
					count++
				}
				return nil
			})
			mu.Lock()
			total += count
			if err != nil && firstErr == nil {
				firstErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if firstErr != nil {
		b.Fatalf("connections from %s to %s: %v (after %d)", ns, addr, firstErr, total)
	}
	return float64(total) / elapsed.Seconds()
}

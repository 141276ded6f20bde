package node_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// waitChassis waits until node publishes its chassis (system-id) on its
// Node and returns it.
func waitChassis(t testing.TB, c *cluster, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := c.cp.kc.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	n, _ := c.cp.kc.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	for n == nil || n.Annotations[annotations.Chassis] == "" {
		ev, ok := <-w.ResultChan()
		if !ok {
			t.Fatalf("node %s did not publish %s within 30 s", name, annotations.Chassis)
		}
		n, _ = ev.Object.(*corev1.Node)
	}
	return n.Annotations[annotations.Chassis]
}

// udpServer answers each datagram to :8001 in a netns with its name until stopped.
type udpServer struct{ pc net.PacketConn }

func serveAs(t testing.TB, ns, name string) *udpServer {
	t.Helper()
	s := &udpServer{}
	if err := netns.Do(ns, func() (err error) { s.pc, err = net.ListenPacket("udp4", ":8001"); return err }); err != nil {
		t.Fatalf("listen on udp :8001 in %s: %v", ns, err)
	}
	t.Cleanup(func() { s.pc.Close() })
	go func() {
		b := make([]byte, 64)
		for {
			_, from, err := s.pc.ReadFrom(b)
			if err != nil {
				return
			}
			_, _ = s.pc.WriteTo([]byte(name), from)
		}
	}()
	return s
}

// reply is one answer the peer got: when, and who answered.
type reply struct {
	at  time.Time
	who string
}

// prober sends a UDP datagram to addr:8001 every 2 ms from netns ns and
// records the answers until stopped.
type prober struct {
	mu      sync.Mutex
	replies []reply
	got     chan struct{} // signalled at each answer
	stop    chan struct{}
	done    sync.WaitGroup
}

func startProber(t testing.TB, ns, addr string) *prober {
	t.Helper()
	var conn net.PacketConn
	if err := netns.Do(ns, func() (err error) { conn, err = net.ListenPacket("udp4", ":0"); return err }); err != nil {
		t.Fatal(err)
	}
	p := &prober{stop: make(chan struct{}), got: make(chan struct{}, 1)}
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		b := make([]byte, 64)
		for {
			n, _, err := conn.ReadFrom(b)
			if err != nil {
				return
			}
			p.mu.Lock()
			p.replies = append(p.replies, reply{time.Now(), string(b[:n])})
			p.mu.Unlock()
			select {
			case p.got <- struct{}{}:
			default:
			}
		}
	}()
	go func() {
		defer p.done.Done()
		dst := &net.UDPAddr{IP: net.ParseIP(addr), Port: 8001}
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			_, _ = conn.WriteTo([]byte("probe"), dst)
			select {
			case <-p.stop:
				conn.Close()
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(p.halt)
	return p
}

func (p *prober) halt() {
	select {
	case <-p.stop:
	default:
		close(p.stop)
		p.done.Wait()
	}
}

// await waits, answer by answer, until ok holds of the answers so far, or limit passes.
func (p *prober) await(what string, limit time.Duration, ok func([]reply) bool) error {
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		done := ok(p.replies)
		p.mu.Unlock()
		if done {
			return nil
		}
		select {
		case <-p.got:
		case <-deadline.C:
			return fmt.Errorf("%s: not within %s", what, limit)
		}
	}
}

// awaitFrom waits until the latest answer is who's.
func (p *prober) awaitFrom(who string, limit time.Duration) error {
	return p.await("an answer from "+who, limit, func(rs []reply) bool { return len(rs) > 0 && rs[len(rs)-1].who == who })
}

// gaps are the longest interval without an answer over the whole run and
// the switch: from the last answer of from to the first of to.
func (p *prober) gaps(from, to string) (longest, switchover time.Duration, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var lastFrom, firstTo time.Time
	for i, r := range p.replies {
		if i > 0 {
			longest = max(longest, r.at.Sub(p.replies[i-1].at))
		}
		if r.who == from {
			lastFrom = r.at
		}
		if r.who == to && firstTo.IsZero() {
			firstTo = r.at
		}
	}
	if lastFrom.IsZero() || firstTo.IsZero() || firstTo.Before(lastFrom) {
		return 0, 0, fmt.Errorf("answers do not move from %s to %s (last %s %v, first %s %v, %d answers)", from, to, from, lastFrom, to, firstTo, len(p.replies))
	}
	return longest, firstTo.Sub(lastFrom), nil
}

// sendRARP sends what QEMU sends from a VM resumed on its new host
// (qemu_announce_self): a broadcast RARP request (ethertype 0x8035,
// operation 3) with the VM's MAC as sender and target, from interface
// ifName of netns ns.
func sendRARP(ns, ifName string, mac net.HardwareAddr) error {
	return netns.Do(ns, func() error {
		ifi, err := net.InterfaceByName(ifName)
		if err != nil {
			return err
		}
		const ethRARP = 0x8035
		proto := int(ethRARP>>8 | (ethRARP&0xff)<<8) // network byte order
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, proto)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		frame := make([]byte, 0, 60)
		frame = append(frame, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
		frame = append(frame, mac...)
		frame = binary.BigEndian.AppendUint16(frame, ethRARP)
		frame = binary.BigEndian.AppendUint16(frame, 1)      // Ethernet
		frame = binary.BigEndian.AppendUint16(frame, 0x0800) // IPv4
		frame = append(frame, 6, 4)
		frame = binary.BigEndian.AppendUint16(frame, 3) // reverse request
		frame = append(frame, mac...)
		frame = append(frame, 0, 0, 0, 0)
		frame = append(frame, mac...)
		frame = append(frame, 0, 0, 0, 0)
		for len(frame) < 60 {
			frame = append(frame, 0)
		}
		sa := &syscall.SockaddrLinklayer{Protocol: uint16(proto), Ifindex: ifi.Index, Halen: 6}
		copy(sa.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
		return syscall.Sendto(fd, frame, 0, sa)
	})
}

// nbctl runs ovn-nbctl against the cluster's northbound database.
func (c *cluster) nbctl(t testing.TB, args ...string) string {
	t.Helper()
	return run(t, "ovn-nbctl", append([]string{"--db=" + c.cp.central.NB(), "--timeout=20"}, args...)...)
}

// Issue 27, KubeVirt's fixed IP and live migration, played without
// KubeVirt as virt-controller and virt-handler would: a VM's
// virt-launcher pod on node-a answering UDP, a peer pod probing it every
// 2 ms; the migration's target pod (label kubevirt.io/migrationJobUID) on
// node-b gets the VM's address, MAC and port at once (its ADD does not
// wait for a port OVN holds back until the RARP); the source stops
// answering, the target announces the VM's MAC with a RARP and answers;
// the source pod is deleted. The address and MAC are unchanged, the peer
// reaches the target, the port is bound to node-b's chassis alone, and the
// peer's longest gap is logged.
func TestVirtualMachineLiveMigrationKeepsAddressAndMAC(t *testing.T) {
	switchover, longest := liveMigration(t)
	t.Logf("traffic gap the peer saw (UDP probe every 2 ms): switch-over %s (last answer from node-a to first from node-b), longest over the run %s",
		switchover.Round(time.Millisecond), longest.Round(time.Millisecond))
}

// BenchmarkVirtualMachineLiveMigrationGap: the gap a peer sees (UDP probe
// every 2 ms) when a VM moves between two nodes as in
// TestVirtualMachineLiveMigrationKeepsAddressAndMAC: from the source's last
// answer to the target's first, the target activated by its RARP
// (activation-strategy=rarp); and the longest gap over the whole run,
// which includes the source pod's deletion (the port then requested on the
// target's chassis alone).
func BenchmarkVirtualMachineLiveMigrationGap(b *testing.B) {
	switchover, longest := liveMigration(b)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(switchover), "switchover-ms")
	b.ReportMetric(ms(longest), "longest-gap-ms")
	benchresult.Figure(b, "VM live migration traffic gap: the source's last answer to the target's first after its RARP (UDP probe every 2 ms)", ms(switchover), "ms").
		Quoted("Harvester asks under 0.5 s", "../shared/BRIEF.md section 5").
		Target(benchresult.Below(500, "under 0.5 s (BRIEF 5)")).
		Report()
	benchresult.Figure(b, "VM live migration: longest gap over the run, the source pod's deletion included", ms(longest), "ms").
		Quoted("Harvester asks under 0.5 s", "../shared/BRIEF.md section 5").
		Target(benchresult.Below(500, "under 0.5 s (BRIEF 5)")).
		Report()
}

// liveMigration plays the migration on a fresh two-node cluster, asserts
// what a user checks, and returns the switch-over gap and the longest gap.
func liveMigration(t testing.TB) (switchover, longest time.Duration) {
	c := startCluster(t, 2)
	chassisA, chassisB := waitChassis(t, c, c.names[0]), waitChassis(t, c, c.names[1])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	vmAnn := map[string]string{annotations.VirtualMachine: "vm1"}
	src := c.addPod(t, 0, "default", "virt-launcher-vm1-src", map[string]string{"kubevirt.io": "virt-launcher"}, vmAnn)
	peer := c.addPod(t, 0, "default", "peer", nil, nil)
	srcPod, err := c.cp.kc.CoreV1().Pods("default").Get(ctx, src.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mac, err := net.ParseMAC(srcPod.Annotations[annotations.MACAddress])
	if err != nil || srcPod.Annotations[annotations.VirtualMachine] != "vm1" {
		t.Fatalf("source pod annotations %v", srcPod.Annotations)
	}
	if got := c.nbctl(t, "--bare", "--columns=name", "find", "Logical_Switch_Port", "external_ids:vm=vm1"); strings.TrimSpace(got) != "vm1.default" {
		t.Fatalf("VM port: %q, want vm1.default", got)
	}
	serveAs(t, src.netns, "source")
	pr := startProber(t, peer.netns, src.ip)
	if err := pr.awaitFrom("source", 10*time.Second); err != nil {
		t.Fatalf("peer to the VM on node-a: %v\n%s", err, src.node.LogTail())
	}

	// The target, as virt-controller creates it: the migration's label, the VM's annotation.
	t0 := time.Now()
	dst := c.addPod(t, 1, "default", "virt-launcher-vm1-dst",
		map[string]string{"kubevirt.io": "virt-launcher", annotations.KubeVirtMigrationJobUID: "6f1c"},
		map[string]string{annotations.VirtualMachine: "vm1", annotations.KubeVirtMigrationJobName: "vm1-migration"})
	addTook := time.Since(t0)
	t.Logf("target pod's CNI ADD (create to result) took %s", addTook.Round(time.Millisecond))
	if dst.ip != src.ip {
		t.Fatalf("target got %s, the VM has %s", dst.ip, src.ip)
	}
	if got := run(t, "ip", "-n", dst.netns, "link", "show", "eth0"); !strings.Contains(got, mac.String()) {
		t.Fatalf("target's eth0 has not the VM's MAC %s:\n%s", mac, got)
	}
	opts := c.nbctl(t, "get", "Logical_Switch_Port", "vm1.default", "options")
	if !strings.Contains(opts, fmt.Sprintf(`requested-chassis="%s,%s"`, chassisA, chassisB)) || !strings.Contains(opts, "activation-strategy=rarp") {
		t.Fatalf("VM port options during the migration: %s; want requested-chassis=%s,%s and activation-strategy=rarp", opts, chassisA, chassisB)
	}
	t.Logf("SB Port_Binding vm1.default during the migration: %s", run(t, "ovn-sbctl", "--db="+c.cp.central.SB(), "--columns=chassis,additional_chassis,requested_chassis,requested_additional_chassis,options", "list", "Port_Binding", "vm1.default"))
	serveAs(t, dst.netns, "target")
	// Held back until the RARP: over the next 100 answers (about 200 ms)
	// the source answers alone, though the target listens too.
	pr.mu.Lock()
	seen := len(pr.replies)
	pr.mu.Unlock()
	if err := pr.await("100 answers during the migration", 10*time.Second, func(rs []reply) bool { return len(rs) >= seen+100 }); err != nil {
		t.Fatalf("the VM on node-a during the migration: %v", err)
	}
	pr.mu.Lock()
	for _, r := range pr.replies[seen:] {
		if r.who != "source" {
			t.Errorf("answer from %s before the target's RARP: activation-strategy=rarp does not hold it back", r.who)
			break
		}
	}
	pr.mu.Unlock()

	// virt-handler's switch-over: the source pauses, the VM resumes on node-b and announces itself.
	run(t, "ip", "-n", src.netns, "link", "set", "eth0", "down")
	if err := sendRARP(dst.netns, "eth0", mac); err != nil {
		t.Fatalf("RARP from the target: %v", err)
	}
	if err := pr.awaitFrom("target", 10*time.Second); err != nil {
		t.Fatalf("peer to the VM on node-b after its RARP: %v\n%s\n%s", err, dst.node.LogTail(),
			run(t, "ovn-sbctl", "--db="+c.cp.central.SB(), "list", "Port_Binding", "vm1.default"))
	}

	// The source pod ends: the port is the target's chassis alone.
	c.deletePod(t, src)
	c.nbctl(t, "wait-until", "Logical_Switch_Port", "vm1.default", fmt.Sprintf("options:requested-chassis=%q", chassisB))
	if opts := c.nbctl(t, "get", "Logical_Switch_Port", "vm1.default", "options"); strings.Contains(opts, "activation-strategy") {
		t.Fatalf("VM port options after the migration: %s; want no activation-strategy", opts)
	}
	// Still answering from node-b once the port moved there alone: 50 fresh answers, all the target's.
	pr.mu.Lock()
	seen = len(pr.replies)
	pr.mu.Unlock()
	if err := pr.await("50 answers after the source pod went", 10*time.Second, func(rs []reply) bool { return len(rs) >= seen+50 }); err != nil {
		t.Fatal(err)
	}
	pr.mu.Lock()
	for _, r := range pr.replies[seen:] {
		if r.who != "target" {
			t.Errorf("answer from %s after the migration", r.who)
		}
	}
	pr.mu.Unlock()
	pr.halt()
	longest, switchover, err = pr.gaps("source", "target")
	if err != nil {
		t.Fatal(err)
	}

	dstPod, err := c.cp.kc.CoreV1().Pods("default").Get(ctx, dst.name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dstPod.Annotations[annotations.IPAddress] != src.ip || dstPod.Annotations[annotations.MACAddress] != mac.String() {
		t.Fatalf("target annotations %v, want the VM's %s %s", dstPod.Annotations, src.ip, mac)
	}
	if out, err := exec.Command("ip", "netns", "exec", peer.netns, "ping", "-c", "3", "-i", "0.2", "-W", "1", src.ip).CombinedOutput(); err != nil {
		t.Fatalf("peer pings the VM on node-b: %v\n%s", err, out)
	}
	return switchover, longest
}

package node_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sort"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/tests/harness/benchresult"
	"github.com/ovnhost/ovnhost/tests/harness/netns"
)

// BenchmarkEIPProgramming: how long from writing a pod's
// ovn.kubernetes.io/eip annotation to the first packet through, outside ->
// EIP -> pod -> outside. Two nodes in Kubernetes mode (real apiserver,
// controller, OVN central): pods on node-a, node-b the external gateway
// (ext0 into br-external). Each round moves the EIP of one pod to a fresh
// address and the outside sends a UDP probe to it every 2 ms until the pod
// answers. The outside's neighbour entry for the address is set to the
// gateway port's MAC beforehand, so ARP's one-second retry does not
// quantise the figure. Reference in the same run, interleaved: the same NAT
// rule and policy written straight into the NB (one libovsdb transaction,
// as the controller writes it) for another pod: OVN's own NB -> northd ->
// SB -> ovn-controller -> flows path, the floor for any controller; the
// ratio is what the API server, the watch and the controller add.
func BenchmarkEIPProgramming(b *testing.B) {
	c := startCluster(b, 2)
	c.addExternalNetwork(b, "ext0", 1)
	c.setExternalConfig(b, extConfig("node-b"))
	c.waitEvent(b, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 60*time.Second, "node-b")
	c.ensureNamespace(b, "bench", nil)
	viaCtl := c.addPod(b, 0, "bench", "via-controller", nil, nil)
	direct := c.addPod(b, 0, "bench", "direct-nb", nil, nil)
	for _, p := range []*clusterPod{viaCtl, direct} {
		udpEcho(b, p)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.cp.central.NB()})
	if err != nil {
		b.Fatal(err)
	}
	defer nb.Close()
	refIDs := map[string]string{"bench": "reference"}
	const mac = "16:52:f3:13:6a:25"
	rounds := 8
	var ctl, ref []time.Duration
	for i := 0; i <= rounds; i++ {
		// Controller: annotation -> first answer.
		addr := fmt.Sprintf("172.56.1.%d", 10+i)
		run(b, "ip", "-n", c.world.ns, "neigh", "replace", addr, "lladdr", mac, "dev", "brext")
		t0 := time.Now()
		c.annotatePod(b, viaCtl, "ovn.kubernetes.io/eip", ptr(addr))
		if err := probeUntil(c.world.ns, addr, "via-controller", 30*time.Second); err != nil {
			b.Fatalf("round %d: EIP %s via the controller: %v\n%s", i, addr, err, c.diag())
		}
		d := time.Since(t0)
		// Reference: the same rows written straight into the NB.
		raddr := fmt.Sprintf("172.56.2.%d", 10+i)
		run(b, "ip", "-n", c.world.ns, "neigh", "replace", raddr, "lladdr", mac, "dev", "brext")
		t1 := time.Now()
		if err := nb.SetRouterNAT(ctx, "ovn-cluster", refIDs,
			[]ovnnb.NAT{{Type: "dnat_and_snat", ExternalIP: raddr, LogicalIP: direct.ip, GatewayPort: "ovn-cluster-ovn-external", ExternalIDs: refIDs}},
			[]ovnnb.Policy{{Priority: 29750, Match: "ip4.src == " + direct.ip, Nexthop: netip.MustParseAddr("172.56.0.1"), ExternalIDs: refIDs}}); err != nil {
			b.Fatal(err)
		}
		if err := probeUntil(c.world.ns, raddr, "direct-nb", 30*time.Second); err != nil {
			b.Fatalf("round %d: reference EIP %s written into the NB: %v\n%s", i, raddr, err, c.diag())
		}
		r := time.Since(t1)
		if i == 0 {
			continue // warm-up: MAC learning on the outside's bridge, the gateway's MAC binding of 172.56.0.1
		}
		ctl, ref = append(ctl, d), append(ref, r)
	}
	mc, mr := medianOf(ctl), medianOf(ref)
	b.ReportMetric(float64(mc.Microseconds())/1000, "ms-annotation-to-packet")
	b.ReportMetric(float64(mr.Microseconds())/1000, "ms-nb-write-to-packet")
	b.ReportMetric(float64(mc)/float64(mr), "ratio")
	b.Logf("EIP annotation -> first packet through: median %s (all %v); NB write -> first packet: median %s (all %v); ratio %.2f",
		mc.Round(time.Millisecond), roundAll(ctl), mr.Round(time.Millisecond), roundAll(ref), float64(mc)/float64(mr))
	benchresult.Figure(b, fmt.Sprintf("EIP moved to a new address: annotation to first packet through, median of %d", len(ctl)), benchresult.Ms(mc), "ms").
		Against("the same NAT rule and policy written straight into the NB (the floor for any controller), interleaved", benchresult.Ms(mr)).
		Report()
}

func medianOf(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// udpEcho answers each datagram to the pod's :8001 with its name.
func udpEcho(t testing.TB, p *clusterPod) {
	t.Helper()
	netns.ServeUDP(t, p.netns, "udp4", ":8001", func([]byte) []byte { return []byte(p.name) })
}

// probeUntil sends a UDP probe from netns to addr:8001 every 2 ms until
// want answers (the reply to any probe counts) or the limit passes.
func probeUntil(netns, addr, want string, limit time.Duration) error {
	var conn net.PacketConn
	if err := inNetns(netns, func() (err error) { conn, err = net.ListenPacket("udp4", ":0"); return err }); err != nil {
		return err
	}
	defer conn.Close()
	dst := &net.UDPAddr{IP: net.ParseIP(addr), Port: 8001}
	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 64)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return
			}
			if string(buf[:n]) == want {
				got <- want
				return
			}
		}
	}()
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		_, _ = conn.WriteTo([]byte("probe"), dst)
		select {
		case <-got:
			return nil
		case <-ctx.Done():
			return fmt.Errorf("no answer from %s at %s within %s", want, addr, limit)
		case <-tick.C:
		}
	}
}

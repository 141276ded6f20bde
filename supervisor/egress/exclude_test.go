package egress

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/hostnat"
)

func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	var out []netip.Addr
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// Item 8: pod traffic to a chassis' encap address or a node's address is
// never masqueraded to this node (where another chassis would take it
// for this node's tunnel traffic).
func TestNATRulesExcludeEncapAndNodeAddresses(t *testing.T) {
	plan := Plan{NATOutgoing: prefixes("10.16.0.0/16"), Cluster: prefixes("10.16.0.0/16", "100.64.0.0/16", "10.96.0.0/12")}
	r := natRules(plan, addrs("172.30.0.12", "fd00:30::12"), addrs("192.168.1.11", "::ffff:192.168.1.12"))
	for _, want := range prefixes("10.16.0.0/16", "100.64.0.0/16", "10.96.0.0/12", "172.30.0.12/32", "fd00:30::12/128", "192.168.1.11/32", "192.168.1.12/32") {
		if !slices.Contains(r.Exclude, want) {
			t.Errorf("Exclude %v lacks %s", r.Exclude, want)
		}
	}
	if !slices.Equal(r.NATOutgoing, plan.NATOutgoing) {
		t.Errorf("NATOutgoing = %v", r.NATOutgoing)
	}
	// The plan itself is not modified.
	if len(plan.Cluster) != 3 {
		t.Errorf("plan.Cluster changed: %v", plan.Cluster)
	}
}

// gatewayNode "node:IP": the gateway's CIDRs of the address's family leave
// with it; a gateway without natOutgoing or without an address gets none.
func TestGatewaySNAT(t *testing.T) {
	ip := netip.MustParseAddr("192.0.2.9")
	plan := Plan{NATOutgoing: prefixes("10.17.0.0/16", "10.18.0.0/16"), Gateways: []Gateway{
		{Subnet: "s1", CIDRs: prefixes("10.17.0.0/16", "fd00:17::/64"), NATOutgoing: true, EgressIP: ip},
		{Subnet: "s2", CIDRs: prefixes("10.18.0.0/16"), NATOutgoing: true},
		{Subnet: "s3", CIDRs: prefixes("10.19.0.0/16"), EgressIP: ip},
	}}
	r := natRules(plan, nil, nil)
	want := []hostnat.SNAT{{From: netip.MustParsePrefix("10.17.0.0/16"), To: ip}}
	if !slices.Equal(r.SNAT, want) {
		t.Errorf("SNAT = %v, want %v", r.SNAT, want)
	}
}

// An egress address the host does not hold is dropped (the subnet is
// masqueraded), one it holds is kept.
func TestLocalEgressIPs(t *testing.T) {
	u := &Unit{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	gws := []Gateway{
		{Subnet: "held", NATOutgoing: true, EgressIP: netip.MustParseAddr("127.0.0.1")},
		{Subnet: "foreign", NATOutgoing: true, EgressIP: netip.MustParseAddr("192.0.2.250")},
	}
	got := u.localEgressIPs(gws)
	if !got[0].EgressIP.IsValid() || got[1].EgressIP.IsValid() {
		t.Errorf("localEgressIPs = %+v: want 127.0.0.1 kept and 192.0.2.250 dropped", got)
	}
	if !gws[1].EgressIP.IsValid() {
		t.Error("localEgressIPs changed its argument")
	}
}

func TestEncapAndNodeAddrs(t *testing.T) {
	got := encapAddrs([]sbdb.Encap{{IP: "172.30.0.12"}, {IP: "172.30.0.11"}, {IP: "172.30.0.12"}, {IP: "not-an-ip"}, {IP: "::ffff:172.30.0.13"}})
	if want := addrs("172.30.0.11", "172.30.0.12", "172.30.0.13"); !slices.Equal(got, want) {
		t.Errorf("encapAddrs = %v, want %v", got, want)
	}
	n := func(as ...corev1.NodeAddress) *corev1.Node {
		return &corev1.Node{Status: corev1.NodeStatus{Addresses: as}}
	}
	got = nodeAddrs([]*corev1.Node{
		n(corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.1.11"}, corev1.NodeAddress{Type: corev1.NodeHostName, Address: "n1"}),
		n(corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.5"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.168.1.11"}),
	})
	if want := addrs("192.168.1.11", "203.0.113.5"); !slices.Equal(got, want) {
		t.Errorf("nodeAddrs = %v, want %v", got, want)
	}
}

func TestGuardPorts(t *testing.T) {
	for addr, want := range map[string]uint16{"": 0, ":10666": 10666, "0.0.0.0:11666": 11666, "[::]:12666": 12666, "bogus": 0} {
		if got := nodeAPIPort(addr); got != want {
			t.Errorf("nodeAPIPort(%q) = %d, want %d", addr, got, want)
		}
	}
	u := New(Options{Config: &nodeconfig.NodeConfig{NodeAPI: nodeconfig.NodeAPI{Addr: ":11666"}}, Log: slog.New(slog.DiscardHandler)})
	for _, p := range []uint16{6641, 6642, 6643, 6644, 11666} {
		if !slices.Contains(u.guard.TCPPorts, p) {
			t.Errorf("TCP %d not guarded: %v", p, u.guard.TCPPorts)
		}
	}
	if !slices.Contains(u.guard.UDPPorts, 6081) || !slices.Contains(u.guard.UDPPorts, 4789) {
		t.Errorf("tunnel ports not guarded: %v", u.guard.UDPPorts)
	}
	if !slices.Equal(u.guard.Interfaces, []string{"ovn0", GatewayBridge}) {
		t.Errorf("interfaces %v", u.guard.Interfaces)
	}
}

type nodeStub struct{}

func (nodeStub) OVS() *ovsdbconn.Conn  { return nil }
func (nodeStub) SystemID() string      { return "n1" }
func (nodeStub) KeepingDatapath() bool { return false }

// Fail closed: a guard that cannot be installed keeps the unit starting
// (so the node is not ready), reports why each time it tries, and the
// start ends with the error when it is given up.
func TestStartFailsClosedWithoutGuard(t *testing.T) {
	u := New(Options{Config: &nodeconfig.NodeConfig{NATBackend: hostnat.BackendNFT}, Node: nodeStub{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// An interface name the kernel would refuse: the guard cannot be built.
	u.guard.Interfaces = []string{"an-interface-name-too-long"}
	saved := GuardRetry
	GuardRetry = time.Millisecond
	defer func() { GuardRetry = saved }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan error, 16)
	u.guardState = func(err error) {
		select {
		case reports <- err:
		default:
		}
	}
	done := make(chan error, 1)
	go func() { done <- u.Start(ctx) }()
	for i := 0; i < 2; i++ { // reported, and tried again
		err := <-reports
		if err == nil || !strings.Contains(err.Error(), "host firewall guard, which cannot be installed") || !strings.Contains(err.Error(), "an-interface-name-too-long") {
			t.Fatalf("report %d: %v", i, err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("Start returned while the guard is missing: %v", err)
	default:
	}
	cancel()
	err := <-done
	if err == nil || !strings.Contains(err.Error(), "host firewall guard") {
		t.Fatalf("Start = %v, want the guard's error", err)
	}
	if u.mgr != nil {
		t.Error("a unit that did not start holds a manager")
	}
	if err := u.Stop(context.Background()); err != nil {
		t.Errorf("Stop after a failed Start: %v", err)
	}
}

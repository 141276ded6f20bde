package hostnat

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/expr"
)

func TestDefaultGuardPorts(t *testing.T) {
	g := DefaultGuard(0, "ovn0", "br-egw")
	for _, p := range []uint16{6641, 6642, 6643, 6644, 10666, 7471} {
		if !slices.Contains(g.TCPPorts, p) {
			t.Errorf("TCP port %d not guarded: %v", p, g.TCPPorts)
		}
	}
	for _, p := range []uint16{6081, 4789, 7471} {
		if !slices.Contains(g.UDPPorts, p) {
			t.Errorf("UDP port %d not guarded: %v", p, g.UDPPorts)
		}
	}
	// The node API moved to another port: that port is guarded.
	if g := DefaultGuard(11666, "ovn0"); !slices.Contains(g.TCPPorts, 11666) {
		t.Errorf("node API port 11666 not guarded: %v", g.TCPPorts)
	}
}

func TestNormalizeGuard(t *testing.T) {
	r, err := normalizeGuard(Guard{Interfaces: []string{"ovn0", "br-egw", "ovn0"}, TCPPorts: []uint16{6642, 6641, 6642}, UDPPorts: []uint16{6081}})
	if err != nil {
		t.Fatal(err)
	}
	want := guardRules{ifaces: []string{"br-egw", "ovn0"}, tcp: []uint16{6641, 6642}, udp: []uint16{6081}}
	if !reflect.DeepEqual(r, want) {
		t.Errorf("normalizeGuard = %+v, want %+v", r, want)
	}
	for _, tc := range []struct {
		g    Guard
		want string
	}{
		{Guard{TCPPorts: []uint16{6641}}, "no interface"},
		{Guard{Interfaces: []string{"ovn0"}}, "no port"},
		{Guard{Interfaces: []string{"a-name-longer-than-15"}, TCPPorts: []uint16{1}}, "not a valid Linux interface name"},
		{Guard{Interfaces: []string{"ovn0"}, UDPPorts: []uint16{0}}, "port 0"},
		{Guard{Interfaces: []string{"ovn0"}, TCPPorts: []uint16{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}}, "at most 15"},
	} {
		if _, err := normalizeGuard(tc.g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("normalizeGuard(%+v) = %v, want an error with %q", tc.g, err, tc.want)
		}
	}
}

// The legacy chain: per interface one DROP per protocol; for TCP only
// connection attempts (SYN without ACK), so replies to the host's own
// connections (the kubelet's probes) pass; no conntrack match (it would
// turn tracking on before the masquerade rules exist). The listing is exactly what iptables-legacy -S
// prints (checked against the kernel by TestGuardPackets).
func TestLegacyGuardRules(t *testing.T) {
	g, err := normalizeGuard(DefaultGuard(0, "ovn0", "br-egw"))
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"-N OVNHOST-GUARD",
		"-A OVNHOST-GUARD -i br-egw -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 6641,6642,6643,6644,7471,10666 -j DROP",
		"-A OVNHOST-GUARD -i br-egw -p udp -m multiport --dports 4789,6081,7471 -j DROP",
		"-A OVNHOST-GUARD -i ovn0 -p tcp -m tcp --tcp-flags SYN,ACK SYN -m multiport --dports 6641,6642,6643,6644,7471,10666 -j DROP",
		"-A OVNHOST-GUARD -i ovn0 -p udp -m multiport --dports 4789,6081,7471 -j DROP",
	}
	if got := legacyGuardListing(g); !reflect.DeepEqual(got, want) {
		t.Errorf("listing:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// Only UDP ports: no TCP rule.
	g, _ = normalizeGuard(Guard{Interfaces: []string{"ovn0"}, UDPPorts: []uint16{6081}})
	if got := legacyGuardSpecs(g); len(got) != 1 || !slices.Contains(got[0], "udp") {
		t.Errorf("UDP-only specs = %v", got)
	}
	if got := guardJumpSpec(); got[len(got)-1] != GuardChain {
		t.Errorf("jump = %v", got)
	}
}

// The nft rules: drops that match the interface set, the protocol and the
// port set, with counters; for TCP only SYN without ACK; nothing that
// needs connection tracking.
func TestNFTGuardRules(t *testing.T) {
	tb := nftGuardTable()
	rules := nftGuardRules(nftGuardSet(tb, guardSetIfaces), nftGuardSet(tb, guardSetTCP), nftGuardSet(tb, guardSetUDP))
	if len(rules) != 2 {
		t.Fatalf("%d rules", len(rules))
	}
	verdict := func(r []expr.Any) expr.VerdictKind { return r[len(r)-1].(*expr.Verdict).Kind }
	for i, proto := range []byte{6, 17} {
		r := rules[i]
		sig := guardSignature(r)
		if verdict(r) != expr.VerdictDrop {
			t.Errorf("rule %d does not drop: %s", i, sig)
		}
		if !strings.Contains(sig, "lookup(ifaces") || !strings.Contains(sig, []string{"lookup(tcp", "lookup(udp"}[i]) {
			t.Errorf("rule %d lookups: %s", i, sig)
		}
		if !slices.ContainsFunc(r, func(e expr.Any) bool { c, ok := e.(*expr.Cmp); return ok && reflect.DeepEqual(c.Data, []byte{proto}) }) {
			t.Errorf("rule %d does not match protocol %d: %s", i, proto, sig)
		}
		if !slices.ContainsFunc(r, func(e expr.Any) bool { _, ok := e.(*expr.Counter); return ok }) {
			t.Errorf("rule %d has no counter: %s", i, sig)
		}
		if slices.ContainsFunc(r, func(e expr.Any) bool { _, ok := e.(*expr.Ct); return ok }) {
			t.Errorf("rule %d uses conntrack: %s", i, sig)
		}
	}
	if sig := guardSignature(rules[0]); !strings.Contains(sig, "bitwise(12,00)") || !strings.Contains(sig, "cmp(0,02)") {
		t.Errorf("TCP rule does not match SYN without ACK: %s", sig)
	}
	el := guardSetElements(guardRules{ifaces: []string{"ovn0"}, tcp: []uint16{6641}, udp: []uint16{6081}})
	if k := el[guardSetIfaces][0]; len(k) != 16 || string(k[:4]) != "ovn0" || k[4] != 0 {
		t.Errorf("ifname key %q", k)
	}
	if k := el[guardSetTCP][0]; !reflect.DeepEqual(k, []byte{0x19, 0xf1}) { // 6641 big-endian
		t.Errorf("port key %x", k)
	}
}

// Our own guard is not "another agent's rules" for backend detection.
func TestDetectIgnoresGuard(t *testing.T) {
	save := "*filter\n:OVNHOST-GUARD - [0:0]\n-A INPUT -m comment --comment \"x\" -j OVNHOST-GUARD\n-A OVNHOST-GUARD -i ovn0 -p tcp -j DROP\nCOMMIT\n"
	if got := countRules(save); got != 0 {
		t.Errorf("countRules = %d, want 0 (the guard is ours)", got)
	}
}

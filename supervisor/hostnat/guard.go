package hostnat

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// The host firewall guard (issue 23 items 3 and 8). Pods reach the node's
// addresses through ovn0 (and, on a centralized gateway, br-egw), so
// without it any pod can connect to the OVN central's ports (NB/SB 6641,
// 6642, Raft 6643, 6644) on a node address, to the node API (10666), and
// can send tunnel packets (Geneve 6081, VXLAN 4789, STT 7471) to this or,
// forwarded and masqueraded, to another node's tunnel endpoint. The guard
// drops packets that arrive on those interfaces for those ports, in the
// input and forward paths, whatever the payload (plain or SSL): every UDP
// datagram, and every TCP connection attempt (SYN without ACK). Replies to
// connections the host opened (the kubelet's probes, the node's own calls
// to pods, even from a guarded source port) carry ACK and pass.
//
// Not conntrack state: a ct match turns connection tracking on in the
// namespace from the node's start, before the masquerade rules exist, and
// a pod connection opened in that window would be tracked without NAT for
// its whole life (seen as egress that never leaves); matching the TCP
// flags needs no tracking and drops the same connections.
//
// nft: table inet ovnhost-guard (one table for both families), chains
// input and forward (filter hooks), named sets ifaces/tcp/udp:
//
//	iifname @ifaces meta l4proto tcp th dport @tcp tcp flags & (syn|ack) == syn counter drop
//	iifname @ifaces meta l4proto udp th dport @udp counter drop
//
// iptables-legacy (and ip6tables-legacy): chain OVNHOST-GUARD in the filter
// table, jumped to from the top of INPUT and FORWARD.

// Guard is the desired guard: drop TCP connection attempts and UDP
// datagrams that arrive on one of Interfaces for one of TCPPorts or
// UDPPorts.
type Guard struct {
	// Interfaces are where pod traffic enters the host (ovn0, br-egw).
	Interfaces []string
	TCPPorts   []uint16
	UDPPorts   []uint16
}

// The ports guarded by default.
const (
	PortNB       = 6641
	PortSB       = 6642
	PortNBRaft   = 6643
	PortSBRaft   = 6644
	PortNodeAPI  = 10666
	PortGeneve   = 6081
	PortVXLAN    = 4789
	PortSTT      = 7471 // STT runs over TCP (its own use of the TCP header)
	maxPortsRule = 15   // iptables multiport takes at most 15 ports
)

// DefaultGuard guards the OVN central's ports, the node API on
// nodeAPIPort (0: the default 10666) and the tunnel ports, on the given
// interfaces.
func DefaultGuard(nodeAPIPort uint16, interfaces ...string) Guard {
	if nodeAPIPort == 0 {
		nodeAPIPort = PortNodeAPI
	}
	return Guard{
		Interfaces: interfaces,
		TCPPorts:   []uint16{PortNB, PortSB, PortNBRaft, PortSBRaft, nodeAPIPort, PortSTT},
		UDPPorts:   []uint16{PortGeneve, PortVXLAN, PortSTT},
	}
}

// guardRules is a Guard in canonical form: sorted, deduplicated.
type guardRules struct {
	ifaces []string
	tcp    []uint16
	udp    []uint16
}

// normalizeGuard validates and canonicalizes g.
func normalizeGuard(g Guard) (guardRules, error) {
	var r guardRules
	if len(g.Interfaces) == 0 {
		return r, fmt.Errorf("hostnat guard: no interface to guard: name the interfaces pod traffic enters the host on (ovn0)")
	}
	for _, i := range g.Interfaces {
		if i == "" || len(i) > 15 || strings.ContainsAny(i, " /\t\n") {
			return r, fmt.Errorf("hostnat guard: interface name %q is not a valid Linux interface name (1-15 characters, no spaces or slashes)", i)
		}
	}
	if len(g.TCPPorts)+len(g.UDPPorts) == 0 {
		return r, fmt.Errorf("hostnat guard: no port to guard: pass the TCP and UDP ports pods must not reach")
	}
	for _, p := range append(slices.Clone(g.TCPPorts), g.UDPPorts...) {
		if p == 0 {
			return r, fmt.Errorf("hostnat guard: port 0 cannot be guarded: pass ports 1-65535")
		}
	}
	r.ifaces = slices.Compact(slices.Sorted(slices.Values(g.Interfaces)))
	r.tcp = slices.Compact(slices.Sorted(slices.Values(g.TCPPorts)))
	r.udp = slices.Compact(slices.Sorted(slices.Values(g.UDPPorts)))
	if len(r.tcp) > maxPortsRule || len(r.udp) > maxPortsRule {
		return r, fmt.Errorf("hostnat guard: at most %d TCP and %d UDP ports (iptables multiport): got %d and %d", maxPortsRule, maxPortsRule, len(r.tcp), len(r.udp))
	}
	return r, nil
}

func (g guardRules) equal(o guardRules) bool {
	return slices.Equal(g.ifaces, o.ifaces) && slices.Equal(g.tcp, o.tcp) && slices.Equal(g.udp, o.udp)
}

// Names of what the guard creates.
const (
	// GuardTable is the nft table (family inet).
	GuardTable = "ovnhost-guard"
	// nft chains and sets of the guard table.
	guardChainInput   = "input"
	guardChainForward = "forward"
	guardSetIfaces    = "ifaces"
	guardSetTCP       = "tcp"
	guardSetUDP       = "udp"
	// GuardChain is the iptables-legacy chain in the filter table.
	GuardChain = "OVNHOST-GUARD"
	// guardComment marks the jumps from INPUT and FORWARD.
	guardComment = "ovnhost: drop pod traffic to the OVN, node API and tunnel ports"
)

// guardHooks are the filter chains that jump to GuardChain.
var guardHooks = []string{"INPUT", "FORWARD"}

// guardJumpSpec is the rule in INPUT or FORWARD that jumps to GuardChain.
func guardJumpSpec() []string {
	return []string{"-m", "comment", "--comment", guardComment, "-j", GuardChain}
}

func portList(ps []uint16) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = strconv.Itoa(int(p))
	}
	return strings.Join(s, ",")
}

// legacyGuardSpecs are the rules of GuardChain: per interface a DROP for
// connection attempts (SYN without ACK) to the TCP ports and one for
// datagrams to the UDP ports.
func legacyGuardSpecs(g guardRules) [][]string {
	var out [][]string
	for _, i := range g.ifaces {
		if len(g.tcp) > 0 {
			out = append(out, []string{"-i", i, "-p", "tcp", "-m", "tcp", "--tcp-flags", "SYN,ACK", "SYN", "-m", "multiport", "--dports", portList(g.tcp), "-j", "DROP"})
		}
		if len(g.udp) > 0 {
			out = append(out, []string{"-i", i, "-p", "udp", "-m", "multiport", "--dports", portList(g.udp), "-j", "DROP"})
		}
	}
	return out
}

// legacyGuardListing is what `iptables -S OVNHOST-GUARD` prints for g.
func legacyGuardListing(g guardRules) []string {
	out := []string{"-N " + GuardChain}
	for _, spec := range legacyGuardSpecs(g) {
		out = append(out, "-A "+GuardChain+" "+strings.Join(spec, " "))
	}
	return out
}

// ifnameKey is an interface name as an nft ifname set key: 16 bytes,
// NUL-padded.
func ifnameKey(name string) []byte {
	b := make([]byte, 16)
	copy(b, name)
	return b
}

// portKey is a port as an nft inet_service key (network byte order).
func portKey(p uint16) []byte { return []byte{byte(p >> 8), byte(p)} }

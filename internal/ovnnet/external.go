package ovnnet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// EIP and SNAT on the default VPC, as Kube-OVN does it: the ConfigMap
// ovn-external-gw-config (kube-system) names the gateway nodes, the NIC
// each of them bridges into br-external, the external network's gateway
// (external-gw-addr) and the cluster router's own address on it (nic-ip,
// nic-mac). The controller gives ovn-cluster a distributed gateway port on
// the switch ovn-external, whose localnet port (network "external") reaches
// br-external on the gateway nodes; the port's HA chassis group ranks the
// gateway nodes in external-gw-nodes order, so OVN moves the NAT to the next
// node by itself (BFD) when the active one fails. A pod annotated
// ovn.kubernetes.io/eip gets a dnat_and_snat rule (reached at, and leaving
// from, the EIP); ovn.kubernetes.io/snat an snat rule. A router policy
// (EIPPriority) sends such a pod's traffic to outside the cluster to
// external-gw-addr, through the gateway port, instead of its node.
//
// With type: distributed every node bridges the NIC and every such node is
// in the HA chassis group (external-gw-nodes first, when given, then the
// others by name). A pod's dnat_and_snat rule then names the pod's logical
// switch port and a MAC of its own (EIPMAC), so OVN does that NAT on the
// pod's node and the packets enter and leave through that node's NIC. snat
// rules cannot be distributed in OVN (they have no logical port): as in
// Kube-OVN they stay on the active gateway chassis. A pod whose node has
// not bridged the NIC gets a centralized dnat_and_snat rule instead (the
// controller says so in an event), so its EIP still works.

// Names of Kube-OVN's default-VPC external gateway.
const (
	ExternalGatewayConfigMap = "ovn-external-gw-config"
	ExternalGatewayNamespace = "kube-system"
	ExternalSwitch           = "ovn-external" // the router port is ovn-cluster-ovn-external
	ExternalNetwork          = "external"     // localnet network_name (Kube-OVN's --external-gateway-net)
	ExternalBridge           = "br-external"  // the gateway node's bridge holding external-gw-nic
)

// EIPPriority is the policy of a pod with an EIP or SNAT: above the
// centralized gateways (29500) and the per-node reroute (29000), below the
// cluster destinations (31000), which stay routed inside.
const EIPPriority = 29750

// ExternalDigestAnnotation on the ConfigMap is the digest
// (ExternalGatewayDigest) of the data the controller validated and
// programmed. Gateway nodes act on the ConfigMap only when it matches: an
// edit the controller has not accepted (or refused) changes nothing on them.
const ExternalDigestAnnotation = "ovnhost.io/external-gw-validated"

// Configuration keys of ovn-external-gw-config.
const (
	KeyEnable      = "enable-external-gw"
	KeyType        = "type"
	KeyNodes       = "external-gw-nodes"
	KeyNIC         = "external-gw-nic"
	KeyGatewayAddr = "external-gw-addr"
	KeyNICIP       = "nic-ip"
	KeyNICMAC      = "nic-mac"
	KeySwitch      = "external-gw-switch"
)

// ExternalGatewayConfig is a validated ovn-external-gw-config.
type ExternalGatewayConfig struct {
	Enabled     bool
	Distributed bool         // type: distributed (EIPs NATed on their pod's node)
	Nodes       []string     // external-gw-nodes, in priority order (optional when Distributed)
	NIC         string       // external-gw-nic
	GatewayIP   netip.Addr   // external-gw-addr: the next hop outside
	PortIP      netip.Prefix // nic-ip: the router's address and the external subnet
	PortMAC     string       // nic-mac, else derived from the port name
	// Policy is who may take which EIP/SNAT address (external_policy.go).
	Policy ExternalAddressPolicy
	// Ignored lists keys that are present but mean nothing here.
	Ignored []string
}

// ConfigError is one refused key of the ConfigMap.
type ConfigError struct {
	Key, Value, Msg string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("%s/%s: %s=%q: %s", ExternalGatewayNamespace, ExternalGatewayConfigMap, e.Key, e.Value, e.Msg)
}

// reservedDevices are ovnhost's and OVS's own devices: never an external NIC.
var reservedDevices = []string{"br-int", ExternalBridge, "ovn0", "br-phy", "br-egw", "ovs-netdev", "ovs-system", "lo", "genev_sys_6081", "vxlan_sys_4789", "stt_sys_7471"}

// ParseExternalGatewayConfig validates the ConfigMap's data. Every problem
// is reported (errors.Join of *ConfigError), each naming the key, the value
// and the fix.
func ParseExternalGatewayConfig(data map[string]string) (ExternalGatewayConfig, error) {
	var c ExternalGatewayConfig
	var errs []error
	bad := func(key, msg string) { errs = append(errs, &ConfigError{Key: key, Value: data[key], Msg: msg}) }
	// As in Kube-OVN, only "false" disables; a ConfigMap without the key enables.
	switch v := strings.TrimSpace(data[KeyEnable]); v {
	case "false":
		return c, nil
	case "true", "":
		c.Enabled = true
	default:
		bad(KeyEnable, `not "true" or "false"`)
	}
	switch v := strings.TrimSpace(data[KeyType]); v {
	case "", "centralized":
	case "distributed":
		c.Distributed = true
	default:
		bad(KeyType, "not centralized or distributed; remove the key or write centralized")
	}
	if v := strings.TrimSpace(data[KeySwitch]); v != "" {
		bad(KeySwitch, "reusing an underlay Subnet as the external network is not supported by ovnhost; remove the key and give "+KeyNIC+", "+KeyGatewayAddr+" and "+KeyNICIP)
	}
	seen := map[string]bool{}
	for _, n := range strings.Split(data[KeyNodes], ",") {
		if n = strings.TrimSpace(n); n == "" {
			continue
		}
		if seen[n] {
			bad(KeyNodes, fmt.Sprintf("node %q is listed twice; list each gateway node once", n))
			continue
		}
		seen[n] = true
		c.Nodes = append(c.Nodes, n)
	}
	if len(c.Nodes) == 0 && !c.Distributed {
		bad(KeyNodes, `names no node; list the gateway nodes, comma-separated ("node1,node2"), first = preferred`)
	}
	c.NIC = strings.TrimSpace(data[KeyNIC])
	switch {
	case c.NIC == "":
		bad(KeyNIC, "missing; name the gateway nodes' NIC on the external network (it is moved into "+ExternalBridge+"; with type distributed every node needs it)")
	case !validIfName(c.NIC):
		bad(KeyNIC, "not an interface name (1-15 characters, no '/', ':' or white space)")
	case slices.Contains(reservedDevices, c.NIC):
		bad(KeyNIC, "is a device of OVS or ovnhost itself; name the NIC that is cabled to the external network")
	}
	var gwBits int
	if v := strings.TrimSpace(data[KeyGatewayAddr]); v == "" {
		bad(KeyGatewayAddr, "missing; give the external network's gateway, e.g. 172.56.0.1/16")
	} else {
		a, bits, err := parseAddrMaybePrefix(firstIPv4(v))
		switch {
		case err != nil:
			bad(KeyGatewayAddr, "not an IPv4 address (with an optional /prefix); IPv6 is not supported")
		default:
			c.GatewayIP, gwBits = a, bits
		}
	}
	if v := strings.TrimSpace(data[KeyNICIP]); v == "" {
		bad(KeyNICIP, "missing; give the cluster router's own address on the external network with its prefix, e.g. 172.56.0.254/16")
	} else {
		p, err := netip.ParsePrefix(firstIPv4(v))
		switch {
		case err != nil || !p.Addr().Is4():
			bad(KeyNICIP, "not an IPv4 address with a /prefix, e.g. 172.56.0.254/16; IPv6 is not supported")
		case p.Bits() < 1 || p.Bits() > 30:
			bad(KeyNICIP, "the prefix must leave room for hosts (/1 to /30)")
		case p.Addr() == p.Masked().Addr() || p.Addr() == lastAddr(p):
			bad(KeyNICIP, "is the network or broadcast address of its subnet; give a host address")
		default:
			c.PortIP = p
		}
	}
	if c.PortIP.IsValid() && c.GatewayIP.IsValid() {
		switch {
		case !c.PortIP.Masked().Contains(c.GatewayIP):
			bad(KeyGatewayAddr, fmt.Sprintf("is not in nic-ip's subnet %s; the gateway must be on the external network", c.PortIP.Masked()))
		case gwBits != 0 && gwBits != c.PortIP.Bits():
			bad(KeyGatewayAddr, fmt.Sprintf("has prefix /%d but nic-ip has /%d; give both the external network's prefix", gwBits, c.PortIP.Bits()))
		case c.GatewayIP == c.PortIP.Addr():
			bad(KeyNICIP, "is external-gw-addr itself; give the router an unused address of the external network")
		}
	}
	if v := strings.TrimSpace(data[KeyNICMAC]); v != "" {
		m, err := net.ParseMAC(v)
		switch {
		case err != nil || len(m) != 6:
			bad(KeyNICMAC, "not a MAC address like 16:52:f3:13:6a:25")
		case m[0]&1 == 1:
			bad(KeyNICMAC, "is a multicast address; give a unicast MAC")
		case m.String() == "00:00:00:00:00:00":
			bad(KeyNICMAC, "is all zeros; give an unused unicast MAC or remove the key")
		default:
			c.PortMAC = m.String()
		}
	}
	if c.PortMAC == "" {
		c.PortMAC = ovnnb.RouterPortMAC(ExternalRouterPort(DefaultRouter))
	}
	pol, perrs := parseAddressPolicy(data, c.PortIP.Masked())
	c.Policy, errs = pol, append(errs, perrs...)
	known := []string{KeyEnable, KeyType, KeyNodes, KeyNIC, KeyGatewayAddr, KeyNICIP, KeyNICMAC, KeySwitch, KeyNamespaceAddresses, KeyReservedAddresses}
	for k := range data {
		if !slices.Contains(known, k) {
			c.Ignored = append(c.Ignored, k)
		}
	}
	sort.Strings(c.Ignored)
	return c, errors.Join(errs...)
}

// firstIPv4 picks the IPv4 part of Kube-OVN's dual-stack "v4,v6" values.
func firstIPv4(v string) string {
	parts := strings.Split(v, ",")
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, ":") {
			return p
		}
	}
	return strings.TrimSpace(parts[0])
}

func parseAddrMaybePrefix(s string) (netip.Addr, int, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || !p.Addr().Is4() {
			return netip.Addr{}, 0, errors.New("not IPv4")
		}
		return p.Addr(), p.Bits(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		return netip.Addr{}, 0, errors.New("not IPv4")
	}
	return a, 0, nil
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// validIfName follows the kernel's dev_valid_name.
func validIfName(s string) bool {
	if s == "" || len(s) > 15 || s == "." || s == ".." {
		return false
	}
	return !strings.ContainsAny(s, "/: \t\n\r\v\f")
}

// ExternalGatewayDigest is the digest of a ConfigMap's data (order-free).
func ExternalGatewayDigest(data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// CheckExternalAddress validates an EIP or SNAT address a pod asks for
// (from the annotation named key): an IPv4 host address of the external
// subnet other than the router's and the gateway's own.
func (c ExternalGatewayConfig) CheckExternalAddress(key, s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil || !a.Is4() {
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: not an IPv4 address; write an address of the external subnet %s", key, s, c.PortIP.Masked())
	}
	sub := c.PortIP.Masked()
	switch {
	case !sub.Contains(a):
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: outside the external subnet %s (nic-ip of %s/%s); choose an address in it", key, s, sub, ExternalGatewayNamespace, ExternalGatewayConfigMap)
	case a == sub.Addr() || a == lastAddr(c.PortIP):
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: the network or broadcast address of %s; choose a host address", key, s, sub)
	case a == c.PortIP.Addr():
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: the cluster router's own address on the external network (nic-ip); choose another", key, s)
	case a == c.GatewayIP:
		return netip.Addr{}, fmt.Errorf("annotation %s=%q: the external network's gateway (external-gw-addr); choose another", key, s)
	}
	return a, nil
}

// BridgeAction is what a node does with br-external.
type BridgeAction int

const (
	BridgeKeep   BridgeAction = iota // leave as it is (nothing confirmed to act on)
	BridgeRemove                     // no bridge on this node
	BridgeEnsure                     // bridge NIC
)

// ExternalBridgePlan is a node's decision about br-external.
type ExternalBridgePlan struct {
	Action      BridgeAction
	NIC         string
	Why         string
	Distributed bool // type: distributed (every node bridges NIC)
}

// PlanExternalBridge decides for node from the ConfigMap (found false: there
// is none). The node trusts only data whose digest the controller wrote.
func PlanExternalBridge(node string, found bool, data, ann map[string]string) ExternalBridgePlan {
	if !found {
		return ExternalBridgePlan{Action: BridgeRemove, Why: "no ConfigMap " + ExternalGatewayNamespace + "/" + ExternalGatewayConfigMap}
	}
	if ann[ExternalDigestAnnotation] != ExternalGatewayDigest(data) {
		return ExternalBridgePlan{Action: BridgeKeep, Why: "the ConfigMap's current data is not validated by ovnhost-controller (see its events)"}
	}
	cfg, err := ParseExternalGatewayConfig(data)
	switch {
	case err != nil:
		return ExternalBridgePlan{Action: BridgeKeep, Why: err.Error()}
	case !cfg.Enabled:
		return ExternalBridgePlan{Action: BridgeRemove, Why: KeyEnable + " is false"}
	case cfg.Distributed:
		return ExternalBridgePlan{Action: BridgeEnsure, NIC: cfg.NIC, Why: KeyType + " is distributed: every node bridges " + KeyNIC, Distributed: true}
	case !slices.Contains(cfg.Nodes, node):
		return ExternalBridgePlan{Action: BridgeRemove, Why: "not listed in " + KeyNodes}
	}
	return ExternalBridgePlan{Action: BridgeEnsure, NIC: cfg.NIC, Why: "listed in " + KeyNodes}
}

// ExternalRouterPort is the router's gateway port on ovn-external.
func ExternalRouterPort(router string) string { return ovnnb.RouterPortName(router, ExternalSwitch) }

// EnsureExternalGateway programs the external switch, the router's gateway
// port (nic-ip, nic-mac) and its HA chassis group over nodes (highest
// priority first).
func (n *Network) EnsureExternalGateway(ctx context.Context, cfg ExternalGatewayConfig, nodes []GatewayNode) error {
	if err := n.NB.SetBFDOptions(ctx, BFDMinRx, BFDMinTx, BFDMult); err != nil {
		return err
	}
	var chassis []ovnnb.HAChassis
	for i, g := range nodes {
		chassis = append(chassis, ovnnb.HAChassis{Name: g.Chassis, Priority: haPriority(i, len(nodes))})
	}
	if err := n.NB.EnsureGatewayPort(ctx, ovnnb.GatewayPort{Router: n.cfg.Router, Switch: ExternalSwitch, Network: ExternalNetwork,
		Addresses: []netip.Prefix{cfg.PortIP}, Chassis: chassis, IDs: map[string]string{keyEgress: "external"}}); err != nil {
		return err
	}
	return n.NB.SetGatewayPortAddressing(ctx, n.cfg.Router, ExternalSwitch, cfg.PortMAC)
}

// haPriority is the HA chassis priority of the i-th of n gateway nodes:
// 100, 90, ... as before for up to ten (centralized lists are short), one
// step apart from n down to 1 for more (type distributed ranks every node;
// OVN's priorities are 0 to 32767).
func haPriority(i, n int) int {
	if n <= 10 {
		return 100 - 10*i
	}
	return min(n, 32767) - i
}

// GatewayOrder ranks the candidate gateway nodes: external-gw-nodes in
// their order, then (type distributed only) every other node of all by
// name. Listed nodes that are not in all are left out.
func (c ExternalGatewayConfig) GatewayOrder(all []string) []string {
	var out []string
	for _, n := range c.Nodes {
		if slices.Contains(all, n) {
			out = append(out, n)
		}
	}
	if !c.Distributed {
		return out
	}
	rest := slices.DeleteFunc(slices.Clone(all), func(n string) bool { return slices.Contains(c.Nodes, n) })
	slices.Sort(rest)
	return append(out, slices.Compact(rest)...)
}

// EIPMAC is the MAC of a distributed EIP on the external network: 02:e1
// (unicast, locally administered) followed by the address's four bytes, so
// 172.56.0.10 is 02:e1:ac:38:00:0a. It depends on the EIP alone: when the
// EIP moves to a pod on another node, the outside's ARP caches stay right
// and only its switches relearn the port (from the new node's gratuitous
// ARP or its first packet). OVN wants it unique on ovn-external: EIPs are.
func EIPMAC(eip netip.Addr) string {
	b := eip.As4()
	return net.HardwareAddr{0x02, 0xe1, b[0], b[1], b[2], b[3]}.String()
}

// ExternalGatewayProgrammed reports whether the external gateway port exists.
func (n *Network) ExternalGatewayProgrammed(ctx context.Context) (bool, error) {
	ports, err := n.NB.GatewayPorts(ctx, map[string]string{keyEgress: "external"})
	if err != nil {
		return false, err
	}
	_, ok := ports[ExternalRouterPort(n.cfg.Router)]
	return ok, nil
}

// RemoveExternalGateway removes every pod's EIP/SNAT rules and policies,
// then the gateway port, switch and HA group; absent parts are fine.
func (n *Network) RemoveExternalGateway(ctx context.Context) error {
	if err := n.NB.SetRouterNAT(ctx, n.cfg.Router, map[string]string{keyEgress: "eip"}, nil, nil); err != nil {
		return err
	}
	return n.NB.DeleteGatewayPort(ctx, n.cfg.Router, ExternalSwitch)
}

// PodNAT is what one pod gets on the external network.
type PodNAT struct {
	Pod  string     // "namespace/name"
	IP   netip.Addr // the pod's IPv4 address
	EIP  netip.Addr // invalid: none
	SNAT netip.Addr // invalid: none
	// Port is the pod's logical switch port when its EIP is distributed
	// (NATed on the pod's node); "" keeps it on the gateway chassis.
	Port string
}

// PodNATRows are the NAT rules and policy of p on router (nil, nil: none).
func PodNATRows(router string, cfg ExternalGatewayConfig, p PodNAT) ([]ovnnb.NAT, []ovnnb.Policy) {
	ids := map[string]string{keyEgress: "eip", ovnnb.KeyPod: p.Pod}
	var nats []ovnnb.NAT
	gw := ExternalRouterPort(router)
	if p.EIP.IsValid() {
		r := ovnnb.NAT{Type: nbdb.NATTypeDNATAndSNAT, ExternalIP: p.EIP.String(), LogicalIP: p.IP.String(), GatewayPort: gw, ExternalIDs: ids}
		if p.Port != "" {
			r.LogicalPort, r.ExternalMAC = p.Port, EIPMAC(p.EIP)
		}
		nats = append(nats, r)
	}
	if p.SNAT.IsValid() {
		nats = append(nats, ovnnb.NAT{Type: nbdb.NATTypeSNAT, ExternalIP: p.SNAT.String(), LogicalIP: p.IP.String(), GatewayPort: gw, ExternalIDs: ids})
	}
	if len(nats) == 0 {
		return nil, nil
	}
	return nats, []ovnnb.Policy{{Router: router, Priority: EIPPriority, Match: "ip4.src == " + p.IP.String(), Nexthop: cfg.GatewayIP, ExternalIDs: ids}}
}

// EnsurePodNAT makes the pod's NAT rules and policy be p's (one
// transaction); a PodNAT without EIP and SNAT removes them.
func (n *Network) EnsurePodNAT(ctx context.Context, cfg ExternalGatewayConfig, p PodNAT) error {
	nats, pols := PodNATRows(n.cfg.Router, cfg, p)
	return n.NB.SetRouterNAT(ctx, n.cfg.Router, map[string]string{keyEgress: "eip", ovnnb.KeyPod: p.Pod}, nats, pols)
}

// RemovePodNAT removes a pod's EIP/SNAT rules and policy.
func (n *Network) RemovePodNAT(ctx context.Context, pod string) error {
	return n.NB.SetRouterNAT(ctx, n.cfg.Router, map[string]string{keyEgress: "eip", ovnnb.KeyPod: pod}, nil, nil)
}

// PodNATs reads the pods' EIP/SNAT rules back from the NB (a restarted
// controller learns which pod holds which EIP).
func (n *Network) PodNATs(ctx context.Context) ([]PodNAT, error) {
	rows, err := n.NB.NATs(ctx, n.cfg.Router, map[string]string{keyEgress: "eip"})
	if err != nil {
		return nil, err
	}
	by := map[string]*PodNAT{}
	for _, r := range rows {
		pod := r.ExternalIDs[ovnnb.KeyPod]
		if pod == "" {
			continue
		}
		p := by[pod]
		if p == nil {
			p = &PodNAT{Pod: pod}
			by[pod] = p
		}
		p.IP, _ = netip.ParseAddr(r.LogicalIP)
		ext, _ := netip.ParseAddr(r.ExternalIP)
		switch r.Type {
		case nbdb.NATTypeDNATAndSNAT:
			p.EIP = ext
			// A distributed rule written by hand with another MAC reads
			// back as not distributed: the next sync rewrites it.
			if r.LogicalPort != "" && ext.IsValid() && r.ExternalMAC == EIPMAC(ext) {
				p.Port = r.LogicalPort
			}
		case nbdb.NATTypeSNAT:
			p.SNAT = ext
		}
	}
	out := make([]PodNAT, 0, len(by))
	for _, p := range by {
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Pod < out[j].Pod })
	return out, nil
}

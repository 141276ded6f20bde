// Package ipam allocates pod and node addresses from subnets. It is pure
// logic: no Kubernetes, no OVSDB, no I/O, safe for concurrent use.
//
// The controller runs it against Subnets and pod annotations; the node daemon
// runs the same code in standalone mode (no Kubernetes) through package
// internal/ovnnet, which pairs it with the northbound programming.
//
// Usage:
//
//	m := ipam.New()
//	cfg, err := ipam.ParseSubnet("ovn-default", "10.16.0.0/16", "", []string{"10.16.0.1..10.16.0.10"})
//	err = m.AddSubnet(cfg)
//	a, err := m.Allocate("ovn-default", "default/web-0", ipam.Request{})   // dynamic
//	a, err = m.Allocate("ovn-default", "default/db-0", ipam.Request{IPs: []netip.Addr{ip}}) // static
//	m.Release("default/web-0")
//
// Allocation is lowest-free-first per family, so a released address is handed
// out again before higher ones. An owner (any string: "namespace/pod",
// "node:<name>") holds at most one allocation. Rebuilding after a restart is
// calling Allocate with the recorded addresses as a static request for every
// known owner, oldest first; conflicts come back as *Error with KindConflict.
//
// Dual stack: a subnet may carry one IPv4 and one IPv6 CIDR ("10.16.0.0/16,fd00:10:16::/64");
// an allocation then holds one address of each family.
package ipam

import (
	"crypto/rand"
	"fmt"
	"math/big"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
)

// Kind classifies an allocation failure; the controller turns it into an event reason.
type Kind string

const (
	KindUnknownSubnet Kind = "UnknownSubnet"
	KindExhausted     Kind = "SubnetExhausted"
	KindOutOfRange    Kind = "IPOutOfRange"
	KindReserved      Kind = "IPReserved" // gateway, excluded, network or broadcast address
	KindConflict      Kind = "IPConflict" // held by another owner
	KindMACConflict   Kind = "MACConflict"
	KindInvalid       Kind = "InvalidInput"
)

// Error is an allocation failure with its kind, the input at fault and how to fix it.
type Error struct {
	Kind   Kind
	Subnet string
	Input  string // the address, MAC or subnet name at fault
	Holder string // for conflicts: the owner holding the address
	Msg    string // what is wrong and what to do
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s", e.Kind, e.Msg)
}

// KindOf returns the Kind of err if it is an *Error, else "".
func KindOf(err error) Kind {
	if e, ok := err.(*Error); ok {
		return e.Kind
	}
	return ""
}

// Range is an inclusive address range, one family.
type Range struct{ Start, End netip.Addr }

func (r Range) String() string {
	if r.Start == r.End {
		return r.Start.String()
	}
	return r.Start.String() + "-" + r.End.String()
}

// SubnetConfig describes one subnet. Build it with ParseSubnet.
type SubnetConfig struct {
	Name     string
	CIDRs    []netip.Prefix // at most one per family, masked
	Gateways []netip.Addr   // one per CIDR, same order
	Exclude  []Range        // excluded ranges (gateway excluded implicitly)
	// VPC is the address space the subnet is in ("" is the default VPC):
	// subnets may overlap only with subnets of other VPCs.
	VPC string
}

// sameVPC: the two VPC names are one address space ("" is the default).
func sameVPC(a, b string) bool {
	norm := func(s string) string {
		if s == DefaultVPC {
			return ""
		}
		return s
	}
	return norm(a) == norm(b)
}

// DefaultVPC is Kube-OVN's default VPC, the same as "".
const DefaultVPC = "ovn-cluster"

// CIDRString is the CIDR in Kube-OVN's annotation format ("10.16.0.0/16" or "v4,v6").
func (c SubnetConfig) CIDRString() string {
	s := make([]string, len(c.CIDRs))
	for i, p := range c.CIDRs {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// GatewayString is the gateway in annotation format.
func (c SubnetConfig) GatewayString() string { return joinAddrs(c.Gateways) }

// ParseSubnet validates Kube-OVN style fields: cidrBlock "a/n[,b/m]", gateway
// "" (first usable address) or "ip[,ip]", excludeIps entries "ip" or "ip..ip".
func ParseSubnet(name, cidrBlock, gateway string, excludeIps []string) (SubnetConfig, error) {
	cfg := SubnetConfig{Name: name}
	bad := func(input, msg string) (SubnetConfig, error) {
		return SubnetConfig{}, &Error{Kind: KindInvalid, Subnet: name, Input: input, Msg: fmt.Sprintf("subnet %q: %s", name, msg)}
	}
	if name == "" {
		return bad("", "empty subnet name; give the subnet a name")
	}
	if strings.TrimSpace(cidrBlock) == "" {
		return bad("", "cidrBlock is empty; set it to a CIDR such as 10.16.0.0/16 (or v4,v6 for dual stack)")
	}
	for _, s := range strings.Split(cidrBlock, ",") {
		s = strings.TrimSpace(s)
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return bad(s, fmt.Sprintf("cidrBlock %q is not a CIDR (%v); write it as address/prefix-length, e.g. 10.16.0.0/16", s, err))
		}
		if p.Addr().Zone() != "" {
			return bad(s, fmt.Sprintf("cidrBlock %q has a zone; remove it", s))
		}
		for _, q := range cfg.CIDRs {
			if q.Addr().Is4() == p.Addr().Is4() {
				return bad(s, fmt.Sprintf("cidrBlock %q has two CIDRs of the same family; give at most one IPv4 and one IPv6", cidrBlock))
			}
		}
		usable := p.Bits() < p.Addr().BitLen()-1
		if !usable {
			return bad(s, fmt.Sprintf("cidrBlock %q is too small to hold a gateway and a pod; use a prefix of at most /%d", s, p.Addr().BitLen()-2))
		}
		cfg.CIDRs = append(cfg.CIDRs, p.Masked())
	}
	if strings.TrimSpace(gateway) == "" {
		for _, p := range cfg.CIDRs {
			cfg.Gateways = append(cfg.Gateways, p.Addr().Next())
		}
	} else {
		gws := strings.Split(gateway, ",")
		if len(gws) != len(cfg.CIDRs) {
			return bad(gateway, fmt.Sprintf("gateway %q has %d addresses but cidrBlock %q has %d CIDRs; give one gateway per CIDR, in the same order", gateway, len(gws), cidrBlock, len(cfg.CIDRs)))
		}
		for i, g := range gws {
			g = strings.TrimSpace(g)
			a, err := netip.ParseAddr(g)
			if err != nil {
				return bad(g, fmt.Sprintf("gateway %q is not an IP address; use an address inside %s", g, cfg.CIDRs[i]))
			}
			if !cfg.CIDRs[i].Contains(a) {
				return bad(g, fmt.Sprintf("gateway %s is outside cidrBlock %s; use an address inside it (usually %s)", g, cfg.CIDRs[i], cfg.CIDRs[i].Addr().Next()))
			}
			if a == cfg.CIDRs[i].Addr() || (a.Is4() && a == lastAddr(cfg.CIDRs[i])) {
				return bad(g, fmt.Sprintf("gateway %s is the network or broadcast address of %s; use %s", g, cfg.CIDRs[i], cfg.CIDRs[i].Addr().Next()))
			}
			cfg.Gateways = append(cfg.Gateways, a)
		}
	}
	for _, e := range excludeIps {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		var r Range
		if a, b, ok := strings.Cut(e, ".."); ok {
			s, err1 := netip.ParseAddr(a)
			t, err2 := netip.ParseAddr(b)
			if err1 != nil || err2 != nil || s.Is4() != t.Is4() || t.Less(s) {
				return bad(e, fmt.Sprintf("excludeIps entry %q is not a range; write start..end with start <= end, same family, e.g. 10.16.0.1..10.16.0.10", e))
			}
			r = Range{s, t}
		} else {
			s, err := netip.ParseAddr(e)
			if err != nil {
				return bad(e, fmt.Sprintf("excludeIps entry %q is not an IP address or range; write 10.16.0.5 or 10.16.0.1..10.16.0.10", e))
			}
			r = Range{s, s}
		}
		cfg.Exclude = append(cfg.Exclude, r)
	}
	cfg.Exclude = mergeRanges(cfg.Exclude)
	return cfg, nil
}

// Request asks for specific addresses (static IP, one per family of the
// subnet) and/or a specific MAC; empty fields are allocated.
type Request struct {
	IPs []netip.Addr
	MAC string
}

// Allocation is what an owner holds.
type Allocation struct {
	Subnet string
	IPs    []netip.Addr
	MAC    string
	// CIDR and Gateway of the subnet, in annotation format.
	CIDR    string
	Gateway string
}

// IPString is the addresses in annotation format ("10.16.0.2" or "10.16.0.2,fd00::2").
func (a Allocation) IPString() string { return joinAddrs(a.IPs) }

// Usage is a subnet's accounting, per family.
type Usage struct {
	V4Available, V4Using float64
	V6Available, V6Using float64
	V4AvailableRange     string
	V4UsingRange         string
	V6AvailableRange     string
	V6UsingRange         string
}

type family struct {
	cidr    netip.Prefix
	gateway netip.Addr
	first   netip.Addr // first allocatable candidate (network+1; gateway skipped by lookup)
	last    netip.Addr // last candidate (broadcast-1 for v4)
	exclude []Range    // merged, clipped to [first,last], including the gateway
	total   *big.Int   // allocatable addresses (candidates minus excluded)
	used    map[netip.Addr]string
	cursor  netip.Addr // no free address below it
}

type subnet struct {
	cfg  SubnetConfig
	fams []*family
}

type holding struct {
	subnet string
	ips    []netip.Addr
	mac    string
}

// IPAM holds all subnets and allocations.
type IPAM struct {
	mu      sync.Mutex
	subnets map[string]*subnet
	owners  map[string]*holding
	macs    map[string]string // MAC -> owner (or the holder of a reserved MAC)
	// reserved: MAC -> holder of MACs no allocation may take (ReserveMAC).
	reserved map[string]string
}

// New returns an empty IPAM.
func New() *IPAM {
	return &IPAM{subnets: map[string]*subnet{}, owners: map[string]*holding{}, macs: map[string]string{}}
}

// AddSubnet adds or updates a subnet. Allocations that still fit are kept;
// ones that no longer do (CIDR changed, newly excluded) stay recorded to
// their owner and count as used until released, so nothing is handed out twice.
func (m *IPAM) AddSubnet(cfg SubnetConfig) error {
	if len(cfg.CIDRs) == 0 || len(cfg.CIDRs) != len(cfg.Gateways) {
		return &Error{Kind: KindInvalid, Subnet: cfg.Name, Msg: fmt.Sprintf("subnet %q: needs one gateway per CIDR; build the config with ParseSubnet", cfg.Name)}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, o := range m.subnets {
		if name == cfg.Name || !sameVPC(cfg.VPC, o.cfg.VPC) {
			continue
		}
		for _, p := range cfg.CIDRs {
			for _, q := range o.cfg.CIDRs {
				if p.Overlaps(q) {
					return &Error{Kind: KindInvalid, Subnet: cfg.Name, Input: p.String(), Msg: fmt.Sprintf("subnet %q: cidrBlock %s overlaps %s of subnet %q in the same VPC; choose a CIDR that does not overlap, or put the subnet in another VPC", cfg.Name, p, q, name)}
				}
			}
		}
	}
	s := &subnet{cfg: cfg}
	for i, p := range cfg.CIDRs {
		f := &family{cidr: p, gateway: cfg.Gateways[i], used: map[netip.Addr]string{}}
		f.first = p.Addr().Next()
		f.last = lastAddr(p)
		if p.Addr().Is4() {
			f.last = f.last.Prev()
		}
		ex := []Range{{cfg.Gateways[i], cfg.Gateways[i]}}
		for _, r := range cfg.Exclude {
			if r.Start.Is4() != p.Addr().Is4() {
				continue
			}
			if c, ok := clip(r, f.first, f.last); ok {
				ex = append(ex, c)
			}
		}
		f.exclude = mergeRanges(ex)
		f.total = rangeSize(f.first, f.last)
		for _, r := range f.exclude {
			f.total.Sub(f.total, rangeSize(r.Start, r.End))
		}
		f.cursor = f.first
		s.fams = append(s.fams, f)
	}
	// Carry over existing allocations of this subnet.
	for owner, h := range m.owners {
		if h.subnet != cfg.Name {
			continue
		}
		for _, ip := range h.ips {
			if f := s.family(ip); f != nil {
				f.used[ip] = owner
			}
		}
	}
	m.subnets[cfg.Name] = s
	return nil
}

// RemoveSubnet forgets a subnet; its allocations are released.
func (m *IPAM) RemoveSubnet(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.subnets, name)
	for owner, h := range m.owners {
		if h.subnet == name {
			m.releaseLocked(owner)
		}
	}
}

// Subnet returns a subnet's config.
func (m *IPAM) Subnet(name string) (SubnetConfig, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subnets[name]
	if !ok {
		return SubnetConfig{}, false
	}
	return s.cfg, true
}

// SubnetNames lists the subnets, sorted.
func (m *IPAM) SubnetNames() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var n []string
	for k := range m.subnets {
		n = append(n, k)
	}
	sort.Strings(n)
	return n
}

// SubnetFor returns the subnet of the default VPC whose CIDR contains ip
// (an address alone names no subnet of a custom VPC: they may overlap).
func (m *IPAM) SubnetFor(ip netip.Addr) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for name, s := range m.subnets {
		if sameVPC(s.cfg.VPC, "") && s.family(ip) != nil {
			return name, true
		}
	}
	return "", false
}

func (s *subnet) family(ip netip.Addr) *family {
	for _, f := range s.fams {
		if f.cidr.Contains(ip) {
			return f
		}
	}
	return nil
}

// Allocate gives owner addresses in subnet. If owner already holds an
// allocation in that subnet that satisfies req, it is returned unchanged; if
// it holds one elsewhere or one that does not match req, the old one is
// released only after the new one succeeded.
func (m *IPAM) Allocate(subnetName, owner string, req Request) (Allocation, error) {
	if owner == "" {
		return Allocation{}, &Error{Kind: KindInvalid, Subnet: subnetName, Msg: "empty owner; pass the pod's namespace/name"}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subnets[subnetName]
	if !ok {
		return Allocation{}, &Error{Kind: KindUnknownSubnet, Subnet: subnetName, Input: subnetName,
			Msg: fmt.Sprintf("subnet %q does not exist; create the Subnet or fix the logical_switch annotation", subnetName)}
	}
	var mac string
	if req.MAC != "" {
		hw, err := net.ParseMAC(req.MAC)
		if err != nil || len(hw) != 6 || hw[0]&1 == 1 {
			return Allocation{}, &Error{Kind: KindInvalid, Subnet: subnetName, Input: req.MAC,
				Msg: fmt.Sprintf("MAC address %q is not a unicast Ethernet address; use the form 0a:58:0a:10:00:05", req.MAC)}
		}
		mac = hw.String()
		if h, ok := m.macs[mac]; ok && h != owner {
			return Allocation{}, &Error{Kind: KindMACConflict, Subnet: subnetName, Input: mac, Holder: h,
				Msg: fmt.Sprintf("MAC address %s is already used by %s; choose another MAC or remove the mac_address annotation", mac, h)}
		}
	}
	// Static addresses: validate all before taking any.
	want := make([]netip.Addr, len(s.fams))
	for _, ip := range req.IPs {
		ip = ip.Unmap()
		f := s.family(ip)
		if f == nil {
			if !slices.ContainsFunc(s.fams, func(f *family) bool { return f.cidr.Addr().Is4() == ip.Is4() }) {
				fam := "IPv4"
				if ip.Is6() {
					fam = "IPv6"
				}
				return Allocation{}, &Error{Kind: KindOutOfRange, Subnet: subnetName, Input: ip.String(),
					Msg: fmt.Sprintf("IP %s is %s but subnet %q has no %s CIDR (cidrBlock %s); request an address of the subnet's family, or make the subnet dual-stack", ip, fam, subnetName, fam, s.cfg.CIDRString())}
			}
			return Allocation{}, &Error{Kind: KindOutOfRange, Subnet: subnetName, Input: ip.String(),
				Msg: fmt.Sprintf("IP %s is outside subnet %q (%s); choose an address inside it or another subnet", ip, subnetName, s.cfg.CIDRString())}
		}
		i := slices.Index(s.fams, f)
		if want[i].IsValid() {
			return Allocation{}, &Error{Kind: KindInvalid, Subnet: subnetName, Input: ip.String(),
				Msg: fmt.Sprintf("two addresses of the same family (%s, %s) requested; give at most one per family", want[i], ip)}
		}
		if ip == f.cidr.Addr() || (ip.Is4() && ip == lastAddr(f.cidr)) {
			return Allocation{}, &Error{Kind: KindReserved, Subnet: subnetName, Input: ip.String(),
				Msg: fmt.Sprintf("IP %s is the network or broadcast address of %s; choose another address", ip, f.cidr)}
		}
		if r, ok := findRange(f.exclude, ip); ok {
			what := "excluded (excludeIps " + r.String() + ")"
			if ip == f.gateway {
				what = "the gateway"
			}
			return Allocation{}, &Error{Kind: KindReserved, Subnet: subnetName, Input: ip.String(),
				Msg: fmt.Sprintf("IP %s is %s in subnet %q; choose another address", ip, what, subnetName)}
		}
		if h, ok := f.used[ip]; ok && h != owner {
			return Allocation{}, &Error{Kind: KindConflict, Subnet: subnetName, Input: ip.String(), Holder: h,
				Msg: fmt.Sprintf("IP %s is already held by %s; choose a free address or remove the ip_address annotation", ip, h)}
		}
		want[i] = ip
	}
	old := m.owners[owner]
	// Reuse what owner holds in this subnet for families not requested.
	if old != nil && old.subnet == subnetName {
		for i, f := range s.fams {
			if want[i].IsValid() {
				continue
			}
			for _, ip := range old.ips {
				if f.cidr.Contains(ip) && f.used[ip] == owner {
					if _, ex := findRange(f.exclude, ip); !ex {
						want[i] = ip
					}
				}
			}
		}
		if mac == "" {
			mac = old.mac
		}
	}
	for i, f := range s.fams {
		if want[i].IsValid() {
			continue
		}
		ip, ok := f.next()
		if !ok {
			return Allocation{}, &Error{Kind: KindExhausted, Subnet: subnetName, Input: subnetName,
				Msg: fmt.Sprintf("subnet %q (%s) has no free address; widen its cidrBlock, shrink excludeIps, or delete pods", subnetName, f.cidr)}
		}
		want[i] = ip
	}
	if mac == "" {
		mac = m.newMAC()
	}
	// Commit: drop what the owner held before, then take the new set.
	if old != nil {
		m.releaseLocked(owner)
	}
	for i, f := range s.fams {
		f.used[want[i]] = owner
		if want[i] == f.cursor {
			f.cursor = want[i].Next()
		}
	}
	m.owners[owner] = &holding{subnet: subnetName, ips: want, mac: mac}
	m.macs[mac] = owner
	return Allocation{Subnet: subnetName, IPs: slices.Clone(want), MAC: mac, CIDR: s.cfg.CIDRString(), Gateway: s.cfg.GatewayString()}, nil
}

// ReserveMAC keeps mac for holder, something that is not an allocation (a
// router port, the gateway of a subnet): no allocation may take it, and a
// request for it is a MACConflict naming holder. An allocation that holds
// it already keeps it (returned as a MACConflict error for the caller to
// log) until released; then the reservation has it.
func (m *IPAM) ReserveMAC(mac, holder string) error {
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 {
		return &Error{Kind: KindInvalid, Input: mac, Msg: fmt.Sprintf("MAC address %q of %s is not an Ethernet address", mac, holder)}
	}
	mac = hw.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved == nil {
		m.reserved = map[string]string{}
	}
	m.reserved[mac] = holder
	if h, ok := m.macs[mac]; ok && h != holder {
		if _, isOwner := m.owners[h]; isOwner {
			return &Error{Kind: KindMACConflict, Input: mac, Holder: h,
				Msg: fmt.Sprintf("MAC address %s of %s is held by %s; it keeps it until released", mac, holder, h)}
		}
	}
	m.macs[mac] = holder
	return nil
}

// UnreserveMAC drops holder's reservation of mac.
func (m *IPAM) UnreserveMAC(mac, holder string) {
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return
	}
	mac = hw.String()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.reserved[mac] == holder {
		delete(m.reserved, mac)
		if m.macs[mac] == holder {
			delete(m.macs, mac)
		}
	}
}

// Release frees what owner holds; unknown owners are ignored.
func (m *IPAM) Release(owner string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.releaseLocked(owner)
}

func (m *IPAM) releaseLocked(owner string) {
	h, ok := m.owners[owner]
	if !ok {
		return
	}
	delete(m.owners, owner)
	if m.macs[h.mac] == owner {
		delete(m.macs, h.mac)
		if r, ok := m.reserved[h.mac]; ok {
			m.macs[h.mac] = r
		}
	}
	s, ok := m.subnets[h.subnet]
	if !ok {
		return
	}
	for _, ip := range h.ips {
		f := s.family(ip)
		if f == nil || f.used[ip] != owner {
			continue
		}
		delete(f.used, ip)
		if ip.Less(f.cursor) && !ip.Less(f.first) {
			f.cursor = ip
		}
	}
}

// Lookup returns what owner holds.
func (m *IPAM) Lookup(owner string) (Allocation, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.owners[owner]
	if !ok {
		return Allocation{}, false
	}
	a := Allocation{Subnet: h.subnet, IPs: slices.Clone(h.ips), MAC: h.mac}
	if s, ok := m.subnets[h.subnet]; ok {
		a.CIDR, a.Gateway = s.cfg.CIDRString(), s.cfg.GatewayString()
	}
	return a, true
}

// Holder returns the owner of ip in the default VPC, if any (custom VPCs
// may hold the same address: ask HolderIn).
func (m *IPAM) Holder(ip netip.Addr) (string, bool) {
	return m.HolderIn("", ip)
}

// HolderIn returns the owner of ip in the VPC vpc ("" the default), if any.
func (m *IPAM) HolderIn(vpc string, ip netip.Addr) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.subnets {
		if !sameVPC(s.cfg.VPC, vpc) {
			continue
		}
		if f := s.family(ip); f != nil {
			o, ok := f.used[ip]
			return o, ok
		}
	}
	return "", false
}

// Owners lists every owner, sorted.
func (m *IPAM) Owners() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	o := make([]string, 0, len(m.owners))
	for k := range m.owners {
		o = append(o, k)
	}
	sort.Strings(o)
	return o
}

// Usage reports a subnet's counts and ranges.
func (m *IPAM) Usage(name string) (Usage, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.subnets[name]
	if !ok {
		return Usage{}, false
	}
	var u Usage
	for _, f := range s.fams {
		used := make([]netip.Addr, 0, len(f.used))
		inRange := 0
		for ip := range f.used {
			used = append(used, ip)
			if _, ex := findRange(f.exclude, ip); !ex && !ip.Less(f.first) && !f.last.Less(ip) {
				inRange++
			}
		}
		slices.SortFunc(used, func(a, b netip.Addr) int { return a.Compare(b) })
		avail := new(big.Int).Sub(f.total, big.NewInt(int64(inRange)))
		af, _ := new(big.Float).SetInt(avail).Float64()
		usingR := formatRanges(addrsToRanges(used))
		availR := formatRanges(f.freeRanges(used))
		if f.cidr.Addr().Is4() {
			u.V4Available, u.V4Using, u.V4UsingRange, u.V4AvailableRange = af, float64(len(used)), usingR, availR
		} else {
			u.V6Available, u.V6Using, u.V6UsingRange, u.V6AvailableRange = af, float64(len(used)), usingR, availR
		}
	}
	return u, true
}

// next finds the lowest free address at or above the cursor.
func (f *family) next() (netip.Addr, bool) {
	ip := f.cursor
	if ip.Less(f.first) {
		ip = f.first
	}
	for !f.last.Less(ip) {
		if r, ok := findRange(f.exclude, ip); ok {
			ip = r.End.Next()
			if !ip.IsValid() {
				break
			}
			continue
		}
		if _, taken := f.used[ip]; !taken {
			f.cursor = ip
			return ip, true
		}
		ip = ip.Next()
	}
	f.cursor = ip
	return netip.Addr{}, false
}

// freeRanges is [first,last] minus excluded and used (used sorted).
func (f *family) freeRanges(used []netip.Addr) []Range {
	var taken []Range
	taken = append(taken, f.exclude...)
	taken = append(taken, addrsToRanges(used)...)
	taken = mergeRanges(taken)
	var out []Range
	cur := f.first
	for _, r := range taken {
		if r.End.Less(cur) {
			continue
		}
		if f.last.Less(r.Start) {
			break
		}
		if cur.Less(r.Start) {
			out = append(out, Range{cur, r.Start.Prev()})
		}
		cur = r.End.Next()
		if !cur.IsValid() {
			return out
		}
	}
	if !f.last.Less(cur) {
		out = append(out, Range{cur, f.last})
	}
	return out
}

func (m *IPAM) newMAC() string {
	for {
		var b [6]byte
		_, _ = rand.Read(b[:])
		b[0] = (b[0] &^ 1) | 2 // unicast, locally administered
		mac := net.HardwareAddr(b[:]).String()
		if _, used := m.macs[mac]; !used {
			return mac
		}
	}
}

// NewMAC returns a random locally administered unicast MAC address.
func NewMAC() string { return New().newMAC() }

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	bits := p.Bits()
	for i := range b {
		for j := 0; j < 8; j++ {
			if i*8+j >= bits {
				b[i] |= 0x80 >> j
			}
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func rangeSize(a, b netip.Addr) *big.Int {
	x := new(big.Int).SetBytes(a.AsSlice())
	y := new(big.Int).SetBytes(b.AsSlice())
	y.Sub(y, x)
	return y.Add(y, big.NewInt(1))
}

func clip(r Range, lo, hi netip.Addr) (Range, bool) {
	if r.End.Less(lo) || hi.Less(r.Start) {
		return Range{}, false
	}
	if r.Start.Less(lo) {
		r.Start = lo
	}
	if hi.Less(r.End) {
		r.End = hi
	}
	return r, true
}

// mergeRanges sorts and merges overlapping or adjacent ranges.
func mergeRanges(in []Range) []Range {
	if len(in) == 0 {
		return nil
	}
	rs := slices.Clone(in)
	slices.SortFunc(rs, func(a, b Range) int {
		if a.Start.Is4() != b.Start.Is4() {
			if a.Start.Is4() {
				return -1
			}
			return 1
		}
		return a.Start.Compare(b.Start)
	})
	out := []Range{rs[0]}
	for _, r := range rs[1:] {
		l := &out[len(out)-1]
		n := l.End.Next()
		if r.Start.Is4() == l.Start.Is4() && (n.IsValid() && !n.Less(r.Start) || !l.End.Less(r.Start)) {
			if l.End.Less(r.End) {
				l.End = r.End
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

func findRange(rs []Range, ip netip.Addr) (Range, bool) {
	i := sort.Search(len(rs), func(i int) bool { return !rs[i].End.Less(ip) })
	if i < len(rs) && !ip.Less(rs[i].Start) && rs[i].Start.Is4() == ip.Is4() {
		return rs[i], true
	}
	return Range{}, false
}

func addrsToRanges(sorted []netip.Addr) []Range {
	var out []Range
	for _, ip := range sorted {
		if n := len(out); n > 0 && out[n-1].End.Next() == ip {
			out[n-1].End = ip
			continue
		}
		out = append(out, Range{ip, ip})
	}
	return out
}

func formatRanges(rs []Range) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

// ParseIPs parses an annotation value "ip[,ip]".
func ParseIPs(s string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		// Accept "ip/len" as Kube-OVN users sometimes write it.
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Addr())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, &Error{Kind: KindInvalid, Input: f, Msg: fmt.Sprintf("%q is not an IP address; write 10.16.0.5 (or v4,v6 for dual stack)", f)}
		}
		out = append(out, a.Unmap())
	}
	if len(out) == 0 {
		return nil, &Error{Kind: KindInvalid, Input: s, Msg: "empty address list; write 10.16.0.5"}
	}
	return out, nil
}

// ParsePool parses Kube-OVN's ip_pool annotation: addresses separated by
// commas ("10.16.0.10,10.16.0.11": one address per pod), or, for dual
// stack, groups separated by semicolons, each "v4,v6"
// ("10.16.0.10,fd00::a;10.16.0.11,fd00::b").
func ParsePool(s string) ([][]netip.Addr, error) {
	var groups []string
	if strings.Contains(s, ";") {
		groups = strings.Split(s, ";")
	} else {
		groups = strings.Split(s, ",")
	}
	var out [][]netip.Addr
	for _, g := range groups {
		if strings.TrimSpace(g) == "" {
			continue
		}
		ips, err := ParseIPs(g)
		if err != nil {
			return nil, &Error{Kind: KindInvalid, Input: g, Msg: fmt.Sprintf("ip_pool entry %q is not an IP address (or v4,v6 pair); IPPool objects are not supported, list the addresses", strings.TrimSpace(g))}
		}
		if len(ips) > 2 || (len(ips) == 2 && ips[0].Is4() == ips[1].Is4()) {
			return nil, &Error{Kind: KindInvalid, Input: g, Msg: fmt.Sprintf("ip_pool entry %q: give one address, or one IPv4 and one IPv6 separated by a comma (groups separated by ;)", strings.TrimSpace(g))}
		}
		out = append(out, ips)
	}
	if len(out) == 0 {
		return nil, &Error{Kind: KindInvalid, Input: s, Msg: "ip_pool is empty; list addresses such as 10.16.0.10,10.16.0.11"}
	}
	return out, nil
}

// OwnersIn lists, sorted, the owners holding addresses in subnet.
func (m *IPAM) OwnersIn(subnet string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var o []string
	for k, h := range m.owners {
		if h.subnet == subnet {
			o = append(o, k)
		}
	}
	sort.Strings(o)
	return o
}

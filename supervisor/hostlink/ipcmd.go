package hostlink

import (
	"fmt"
	"net"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The ip(8) commands an error asks to run by hand when a rollback fails:
// complete enough to put back exactly what the step would have (flags,
// lifetimes, tables, metrics), and the descriptions in errors.

// linkNames names link indexes for messages: the two links of a move, and
// any other (a multipath route's other nexthops) looked up when needed.
type linkNames map[int]string

func (n linkNames) name(index int) string {
	if s, ok := n[index]; ok {
		return s
	}
	if l, err := netlink.LinkByIndex(index); err == nil {
		return l.Attrs().Name
	}
	return fmt.Sprintf("if%d", index)
}

func ipFamily(ip net.IP) string {
	if ip.To4() == nil {
		return "ip -6"
	}
	return "ip"
}

const foreverLft = 0xffffffff

// addrSpec writes a as ip-address(8) takes it for the link dev, without
// the device.
func addrSpec(a netlink.Addr, dev string) string {
	var b strings.Builder
	if a.Peer != nil {
		fmt.Fprintf(&b, "%s peer %s", a.IP, a.Peer)
	} else {
		b.WriteString(a.IPNet.String())
	}
	if a.Broadcast != nil && !a.Broadcast.IsUnspecified() {
		fmt.Fprintf(&b, " broadcast %s", a.Broadcast)
	}
	if a.Label != "" && a.Label != dev {
		fmt.Fprintf(&b, " label %s", a.Label)
	}
	if a.Scope != int(netlink.SCOPE_UNIVERSE) {
		fmt.Fprintf(&b, " scope %s", scopeName(netlink.Scope(a.Scope)))
	}
	if a.ValidLft != 0 && (a.ValidLft != foreverLft || a.PreferedLft != foreverLft) {
		fmt.Fprintf(&b, " valid_lft %s preferred_lft %s", lifetime(a.ValidLft), lifetime(a.PreferedLft))
	}
	for _, f := range []struct {
		bit  int
		name string
	}{
		{unix.IFA_F_HOMEADDRESS, "home"}, {unix.IFA_F_MANAGETEMPADDR, "mngtmpaddr"}, {unix.IFA_F_NODAD, "nodad"},
		{unix.IFA_F_OPTIMISTIC, "optimistic"}, {unix.IFA_F_NOPREFIXROUTE, "noprefixroute"}, {unix.IFA_F_MCAUTOJOIN, "autojoin"},
	} {
		if a.Flags&f.bit != 0 {
			b.WriteString(" " + f.name)
		}
	}
	return b.String()
}

func lifetime(s int) string {
	if s == foreverLft {
		return "forever"
	}
	return fmt.Sprint(s)
}

func addrCmd(verb string, a netlink.Addr, dev string) string {
	spec := a.IPNet.String()
	if verb != "del" {
		spec = addrSpec(a, dev)
	}
	return fmt.Sprintf("%s address %s %s dev %s", ipFamily(a.IP), verb, spec, dev)
}

func scopeName(s netlink.Scope) string {
	switch s {
	case netlink.SCOPE_UNIVERSE:
		return "global"
	case netlink.SCOPE_SITE, netlink.SCOPE_LINK, netlink.SCOPE_HOST, netlink.SCOPE_NOWHERE:
		return s.String()
	}
	return fmt.Sprint(int(s))
}

func protoName(p netlink.RouteProtocol) string {
	switch int(p) {
	case unix.RTPROT_KERNEL, unix.RTPROT_BOOT, unix.RTPROT_STATIC, unix.RTPROT_RA, unix.RTPROT_DHCP:
		return p.String()
	}
	return fmt.Sprint(int(p))
}

var routeTypes = map[int]string{
	unix.RTN_LOCAL: "local", unix.RTN_BROADCAST: "broadcast", unix.RTN_ANYCAST: "anycast", unix.RTN_MULTICAST: "multicast",
	unix.RTN_BLACKHOLE: "blackhole", unix.RTN_UNREACHABLE: "unreachable", unix.RTN_PROHIBIT: "prohibit", unix.RTN_THROW: "throw", unix.RTN_NAT: "nat",
}

// routeSpec writes r the way ip-route(8) takes it, naming its links with
// names (nil: no device).
func routeSpec(r netlink.Route, names linkNames) string {
	var b strings.Builder
	if t, ok := routeTypes[r.Type]; ok {
		b.WriteString(t + " ")
	}
	dst := "default"
	if r.Dst != nil {
		if ones, _ := r.Dst.Mask.Size(); ones != 0 || !r.Dst.IP.IsUnspecified() {
			dst = r.Dst.String()
		}
	}
	b.WriteString(dst)
	if r.Tos != 0 {
		fmt.Fprintf(&b, " tos %#x", r.Tos)
	}
	if r.Gw != nil {
		fmt.Fprintf(&b, " via %s", r.Gw)
	}
	if v, ok := r.Via.(*netlink.Via); ok && v != nil {
		fam := "inet"
		if v.AddrFamily == unix.AF_INET6 {
			fam = "inet6"
		}
		fmt.Fprintf(&b, " via %s %s", fam, v.Addr)
	}
	if names != nil && r.LinkIndex != 0 {
		fmt.Fprintf(&b, " dev %s", names.name(r.LinkIndex))
	}
	if r.Flags&unix.RTNH_F_ONLINK != 0 {
		b.WriteString(" onlink")
	}
	if r.Protocol != 0 {
		fmt.Fprintf(&b, " proto %s", protoName(r.Protocol))
	}
	if r.Scope != netlink.SCOPE_UNIVERSE {
		fmt.Fprintf(&b, " scope %s", scopeName(r.Scope))
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " src %s", r.Src)
	}
	if r.Priority != 0 {
		fmt.Fprintf(&b, " metric %d", r.Priority)
	}
	if r.Table != 0 && r.Table != unix.RT_TABLE_MAIN {
		fmt.Fprintf(&b, " table %d", r.Table)
	}
	if r.Realm != 0 {
		fmt.Fprintf(&b, " realm %d", r.Realm)
	}
	lock := func(l bool) string {
		if l {
			return "lock "
		}
		return ""
	}
	for _, m := range []struct {
		name string
		v    int
		lock bool
	}{
		{"mtu", r.MTU, r.MTULock}, {"advmss", r.AdvMSS, false}, {"window", r.Window, false}, {"rtt", r.Rtt, false},
		{"rttvar", r.RttVar, false}, {"ssthresh", r.Ssthresh, false}, {"cwnd", r.Cwnd, false}, {"reordering", r.Reordering, false},
		{"hoplimit", r.Hoplimit, false}, {"initcwnd", r.InitCwnd, false}, {"features", r.Features, false},
		{"rto_min", r.RtoMin, r.RtoMinLock}, {"initrwnd", r.InitRwnd, false}, {"quickack", r.QuickACK, false},
		{"fastopen_no_cookie", r.FastOpenNoCookie, false},
	} {
		if m.v != 0 {
			fmt.Fprintf(&b, " %s %s%d", m.name, lock(m.lock), m.v)
		}
	}
	if r.Congctl != "" {
		fmt.Fprintf(&b, " congctl %s", r.Congctl)
	}
	for _, nh := range r.MultiPath {
		b.WriteString(" nexthop")
		if nh.Gw != nil {
			fmt.Fprintf(&b, " via %s", nh.Gw)
		}
		if names != nil && nh.LinkIndex != 0 {
			fmt.Fprintf(&b, " dev %s", names.name(nh.LinkIndex))
		}
		fmt.Fprintf(&b, " weight %d", nh.Hops+1)
		if nh.Flags&unix.RTNH_F_ONLINK != 0 {
			b.WriteString(" onlink")
		}
	}
	return b.String()
}

// routeCmd is the ip(8) command that does verb (add, del, replace) to r.
func routeCmd(verb string, r netlink.Route, names linkNames) string {
	ip := "ip"
	if r.Family == netlink.FAMILY_V6 {
		ip = "ip -6"
	}
	return fmt.Sprintf("%s route %s %s", ip, verb, routeSpec(r, names))
}

// Rule actions (linux/fib_rules.h).
const (
	frActNop       = 3
	frActBlackhole = 6
	frActUnreach   = 7
	frActProhibit  = 8
)

// ruleSpec writes r as ip-rule(8) takes it.
func ruleSpec(r netlink.Rule) string {
	var b strings.Builder
	fmt.Fprintf(&b, "priority %d", r.Priority)
	if r.Invert {
		b.WriteString(" not")
	}
	if r.Src != nil {
		fmt.Fprintf(&b, " from %s", r.Src)
	} else {
		b.WriteString(" from all")
	}
	if r.Dst != nil {
		fmt.Fprintf(&b, " to %s", r.Dst)
	}
	if r.Tos != 0 {
		fmt.Fprintf(&b, " tos %#x", r.Tos)
	}
	if r.Mark != 0 || r.Mask != nil {
		fmt.Fprintf(&b, " fwmark %#x", r.Mark)
		if r.Mask != nil {
			fmt.Fprintf(&b, "/%#x", *r.Mask)
		}
	}
	if r.IifName != "" {
		fmt.Fprintf(&b, " iif %s", r.IifName)
	}
	if r.OifName != "" {
		fmt.Fprintf(&b, " oif %s", r.OifName)
	}
	if r.UIDRange != nil {
		fmt.Fprintf(&b, " uidrange %d-%d", r.UIDRange.Start, r.UIDRange.End)
	}
	if r.IPProto != 0 {
		fmt.Fprintf(&b, " ipproto %d", r.IPProto)
	}
	if r.Sport != nil {
		fmt.Fprintf(&b, " sport %d-%d", r.Sport.Start, r.Sport.End)
	}
	if r.Dport != nil {
		fmt.Fprintf(&b, " dport %d-%d", r.Dport.Start, r.Dport.End)
	}
	if r.Flow >= 0 {
		fmt.Fprintf(&b, " realms %d", r.Flow)
	}
	if r.Protocol != 0 {
		fmt.Fprintf(&b, " protocol %d", r.Protocol)
	}
	switch {
	case r.Goto >= 0:
		fmt.Fprintf(&b, " goto %d", r.Goto)
	case r.Type == frActNop:
		b.WriteString(" nop")
	case r.Type == frActBlackhole:
		b.WriteString(" blackhole")
	case r.Type == frActUnreach:
		b.WriteString(" unreachable")
	case r.Type == frActProhibit:
		b.WriteString(" prohibit")
	default:
		fmt.Fprintf(&b, " lookup %d", r.Table)
		if r.SuppressPrefixlen >= 0 {
			fmt.Fprintf(&b, " suppress_prefixlength %d", r.SuppressPrefixlen)
		}
		if r.SuppressIfgroup >= 0 {
			fmt.Fprintf(&b, " suppress_ifgroup %d", r.SuppressIfgroup)
		}
	}
	return b.String()
}

func ruleCmd(verb string, r netlink.Rule) string {
	ip := "ip"
	if r.Family == unix.AF_INET6 {
		ip = "ip -6"
	}
	return fmt.Sprintf("%s rule %s %s", ip, verb, ruleSpec(r))
}

func neighCmd(verb string, n netlink.Neigh, dev string) string {
	if verb == "del" {
		return fmt.Sprintf("ip neigh del %s dev %s", n.IP, dev)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "ip neigh %s %s", verb, n.IP)
	if n.HardwareAddr != nil {
		fmt.Fprintf(&b, " lladdr %s", n.HardwareAddr)
	}
	fmt.Fprintf(&b, " dev %s nud permanent", dev)
	if n.Flags&unix.NTF_ROUTER != 0 {
		b.WriteString(" router")
	}
	return b.String()
}

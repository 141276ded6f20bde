package hostlink

import (
	"encoding/binary"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// What vishvananda/netlink drops when it reads a route or a rule, read
// here from the raw dumps: moving a route or a rule without it would
// change what it does, so Move skips or refuses it instead.

// rtaNHID is RTA_NH_ID (linux/rtnetlink.h), missing from x/sys.
const rtaNHID = 30

// routeExtra is what netlink.Route does not carry.
type routeExtra struct {
	nhID      bool // uses a nexthop object
	encap     bool // lightweight tunnel, on the route or a nexthop
	srcPrefix bool // IPv6 source-specific route (from PREFIX)
	expires   bool // has a lifetime (RA routes, IPv6 prefixes)
	pref      bool // IPv6 router preference other than medium
}

// routeExtras reads every route of every table (a second dump beside the
// library's: a route added or removed between the two is read without its
// extras, a race Move shares with any reader) and keys the extras by
// routeKey.
func routeExtras() (map[string]routeExtra, error) {
	msgs, err := nldump.Retry(func() ([][]byte, error) {
		req := nl.NewNetlinkRequest(unix.RTM_GETROUTE, unix.NLM_F_DUMP)
		req.AddData(&nl.RtMsg{})
		return req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWROUTE)
	})
	if err != nil {
		return nil, err
	}
	out := map[string]routeExtra{}
	for _, m := range msgs {
		msg := nl.DeserializeRtMsg(m)
		if msg.Flags&unix.RTM_F_CLONED != 0 {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[msg.Len():])
		if err != nil {
			return nil, fmt.Errorf("reading a route: %w", err)
		}
		var ex routeExtra
		table, priority := int(msg.Table), 0
		var dst *net.IPNet
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.RTA_TABLE:
				table = int(native.Uint32(a.Value))
			case unix.RTA_PRIORITY:
				priority = int(native.Uint32(a.Value))
			case unix.RTA_DST:
				dst = &net.IPNet{IP: net.IP(a.Value), Mask: net.CIDRMask(int(msg.Dst_len), 8*len(a.Value))}
			case rtaNHID:
				ex.nhID = true
			case unix.RTA_ENCAP:
				ex.encap = true
			case unix.RTA_SRC:
				ex.srcPrefix = msg.Src_len > 0
			case unix.RTA_EXPIRES:
				ex.expires = true
			case unix.RTA_CACHEINFO:
				// struct rta_cacheinfo: clntref, lastuse, expires (clock_t).
				if len(a.Value) >= 12 && native.Uint32(a.Value[8:12]) != 0 {
					ex.expires = true
				}
			case unix.RTA_PREF:
				ex.pref = len(a.Value) > 0 && a.Value[0] != 0 // ICMPV6_ROUTER_PREF_MEDIUM
			case unix.RTA_MULTIPATH:
				ex.encap = ex.encap || nexthopEncap(a.Value)
			}
		}
		if dst == nil {
			dst = zeroNet(int(msg.Family))
		}
		out[keyOf(int(msg.Family), table, dst, int(msg.Tos), priority, int(msg.Type))] = ex
	}
	return out, nil
}

var native = binary.NativeEndian

// nexthopEncap reports whether one of the struct rtnexthop in b carries an
// encapsulation.
func nexthopEncap(b []byte) bool {
	for len(b) >= unix.SizeofRtNexthop {
		n := int(native.Uint16(b[0:2]))
		if n < unix.SizeofRtNexthop || n > len(b) {
			return false
		}
		attrs, err := nl.ParseRouteAttr(b[unix.SizeofRtNexthop:n])
		if err == nil {
			for _, a := range attrs {
				if a.Attr.Type == unix.RTA_ENCAP {
					return true
				}
			}
		}
		b = b[nlAlign(n):]
	}
	return false
}

func nlAlign(n int) int { return (n + unix.RTA_ALIGNTO - 1) &^ (unix.RTA_ALIGNTO - 1) }

func zeroNet(family int) *net.IPNet {
	if family == unix.AF_INET6 {
		return &net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
	}
	return &net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
}

// rawRule is a rule with what netlink.RuleList leaves out: its action
// (Type: blackhole, unreachable, prohibit, nop are lost otherwise) and the
// attributes the library can neither read nor write.
type rawRule struct {
	netlink.Rule
	unknown []int // attribute types not carried (l3mdev, dscp, ...)
}

// listRules dumps the rules of both families.
func listRules() ([]rawRule, error) {
	msgs, err := nldump.Retry(func() ([][]byte, error) {
		req := nl.NewNetlinkRequest(unix.RTM_GETRULE, unix.NLM_F_DUMP|unix.NLM_F_REQUEST)
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		return req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWRULE)
	})
	if err != nil {
		return nil, fmt.Errorf("listing the policy rules: %w", err)
	}
	var out []rawRule
	for _, m := range msgs {
		msg := nl.DeserializeRtMsg(m)
		attrs, err := nl.ParseRouteAttr(m[msg.Len():])
		if err != nil {
			return nil, fmt.Errorf("reading a policy rule: %w", err)
		}
		r := rawRule{Rule: *netlink.NewRule()}
		r.Priority = 0 // absent for priority 0 (the local rule)
		r.Family = int(msg.Family)
		r.Tos = uint(msg.Tos)
		r.Type = msg.Type
		r.Invert = msg.Flags&netlink.FibRuleInvert != 0
		r.Table = int(msg.Table)
		for _, a := range attrs {
			v := a.Value
			switch a.Attr.Type {
			case nl.FRA_TABLE:
				r.Table = int(native.Uint32(v))
			case nl.FRA_SRC:
				r.Src = &net.IPNet{IP: net.IP(v), Mask: net.CIDRMask(int(msg.Src_len), 8*len(v))}
			case nl.FRA_DST:
				r.Dst = &net.IPNet{IP: net.IP(v), Mask: net.CIDRMask(int(msg.Dst_len), 8*len(v))}
			case nl.FRA_FWMARK:
				r.Mark = native.Uint32(v)
			case nl.FRA_FWMASK:
				mask := native.Uint32(v)
				r.Mask = &mask
			case nl.FRA_TUN_ID:
				r.TunID = uint(binary.BigEndian.Uint64(v))
			case nl.FRA_IIFNAME:
				r.IifName = cString(v)
			case nl.FRA_OIFNAME:
				r.OifName = cString(v)
			case nl.FRA_SUPPRESS_PREFIXLEN:
				if i := native.Uint32(v); i != 0xffffffff {
					r.SuppressPrefixlen = int(i)
				}
			case nl.FRA_SUPPRESS_IFGROUP:
				if i := native.Uint32(v); i != 0xffffffff {
					r.SuppressIfgroup = int(i)
				}
			case nl.FRA_FLOW:
				r.Flow = int(native.Uint32(v))
			case nl.FRA_GOTO:
				r.Goto = int(native.Uint32(v))
			case nl.FRA_PRIORITY:
				r.Priority = int(native.Uint32(v))
			case nl.FRA_IP_PROTO:
				r.IPProto = int(v[0])
			case nl.FRA_DPORT_RANGE:
				r.Dport = netlink.NewRulePortRange(native.Uint16(v[0:2]), native.Uint16(v[2:4]))
			case nl.FRA_SPORT_RANGE:
				r.Sport = netlink.NewRulePortRange(native.Uint16(v[0:2]), native.Uint16(v[2:4]))
			case nl.FRA_UID_RANGE:
				r.UIDRange = netlink.NewRuleUIDRange(native.Uint32(v[0:4]), native.Uint32(v[4:8]))
			case nl.FRA_PROTOCOL:
				r.Protocol = v[0]
			case nl.FRA_PAD:
			default:
				r.unknown = append(r.unknown, int(a.Attr.Type))
			}
		}
		out = append(out, r)
	}
	return out, nil
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// ruleMovable refuses, before any change, a rule naming from that the
// library cannot write back as it is.
func ruleMovable(r rawRule, from string) error {
	what := ""
	switch {
	case len(r.unknown) > 0:
		what = fmt.Sprintf("has attributes this code cannot write (types %v: l3mdev, dscp, flowlabel or newer)", r.unknown)
	case r.TunID != 0:
		what = "matches a tunnel id (tun_id)"
	case r.Table >= 256 && (r.SuppressPrefixlen >= 0 || r.SuppressIfgroup >= 0):
		what = "combines a table above 255 with suppress_prefixlength or suppress_ifgroup"
	}
	if what == "" {
		return nil
	}
	return fmt.Errorf("the policy rule %q naming %s %s; move it by hand (ip rule) or remove it, then move again", ruleSpec(r.Rule), from, what)
}

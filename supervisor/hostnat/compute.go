package hostnat

import (
	"bytes"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// family is one IP version: the nft table family (ip or ip6) and the
// iptables program (iptables or ip6tables).
type family int

const (
	v4 family = iota
	v6
)

func (f family) String() string {
	if f == v6 {
		return "ip6"
	}
	return "ip"
}

var families = []family{v4, v6}

// familyRules is the desired state of one IP family: canonical prefixes
// (masked, deduplicated, sorted, none contained in another).
type familyRules struct {
	natOutgoing []netip.Prefix
	exclude     []netip.Prefix
	snat        []SNAT // sorted by From, one per From
}

// needed reports whether the family has anything to translate; a family
// without NATOutgoing prefixes or SNAT gets no table or chain at all.
func (fr familyRules) needed() bool { return len(fr.natOutgoing) > 0 || len(fr.snat) > 0 }

// normalized is Rules split by family.
type normalized [2]familyRules

// normalize validates and canonicalizes r. IPv4-mapped IPv6 prefixes are
// rejected: they match neither family's packets.
func normalize(r Rules) (normalized, error) {
	var n normalized
	for _, l := range []struct {
		name string
		in   []netip.Prefix
		out  func(f family) *[]netip.Prefix
	}{
		{"NATOutgoing", r.NATOutgoing, func(f family) *[]netip.Prefix { return &n[f].natOutgoing }},
		{"Exclude", r.Exclude, func(f family) *[]netip.Prefix { return &n[f].exclude }},
	} {
		for _, p := range l.in {
			if !p.IsValid() {
				return n, fmt.Errorf("hostnat: %s holds an invalid prefix (%v): pass CIDRs such as 10.16.0.0/16 or fd00:10:16::/64", l.name, p)
			}
			if p.Addr().Is4In6() {
				return n, fmt.Errorf("hostnat: %s prefix %s is IPv4-mapped IPv6: write it as an IPv4 CIDR", l.name, p)
			}
			f := v4
			if p.Addr().Is6() {
				f = v6
			}
			dst := l.out(f)
			*dst = append(*dst, p.Masked())
		}
	}
	for _, sn := range r.SNAT {
		if !sn.From.IsValid() || !sn.To.IsValid() {
			return n, fmt.Errorf("hostnat: SNAT %s to %s: both a source CIDR and an address are needed", sn.From, sn.To)
		}
		if sn.From.Addr().Is4In6() || sn.To.Is4In6() {
			return n, fmt.Errorf("hostnat: SNAT %s to %s: write IPv4 as IPv4, not IPv4-mapped IPv6", sn.From, sn.To)
		}
		if sn.From.Addr().Is4() != sn.To.Is4() {
			return n, fmt.Errorf("hostnat: SNAT %s to %s: the source CIDR and the address are of different families; give an address of the CIDR's family", sn.From, sn.To)
		}
		f := v4
		if sn.To.Is6() {
			f = v6
		}
		sn.From = sn.From.Masked()
		if i := slices.IndexFunc(n[f].snat, func(o SNAT) bool { return o.From == sn.From }); i >= 0 {
			if n[f].snat[i].To != sn.To {
				return n, fmt.Errorf("hostnat: SNAT of %s asked to both %s and %s: one source CIDR leaves with one address", sn.From, n[f].snat[i].To, sn.To)
			}
			continue
		}
		n[f].snat = append(n[f].snat, sn)
	}
	for f := range n {
		n[f].natOutgoing = canonical(n[f].natOutgoing)
		n[f].exclude = canonical(n[f].exclude)
		// Longest source first: the first matching rule decides.
		slices.SortFunc(n[f].snat, func(a, b SNAT) int {
			if a.From.Bits() != b.From.Bits() {
				return b.From.Bits() - a.From.Bits()
			}
			return a.From.Addr().Compare(b.From.Addr())
		})
	}
	return n, nil
}

// canonical sorts masked prefixes by address then length, and drops
// duplicates and prefixes contained in an earlier (shorter) one.
func canonical(ps []netip.Prefix) []netip.Prefix {
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	out := ps[:0]
	for _, p := range ps {
		if len(out) > 0 {
			last := out[len(out)-1]
			if last.Bits() <= p.Bits() && last.Contains(p.Addr()) {
				continue
			}
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// interval is a half-open address range [start, end); end is invalid when
// the range runs to the last address of the family.
type interval struct {
	start, end netip.Addr
}

// lastAddr is the highest address of a prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// intervals turns canonical prefixes into merged, sorted ranges: the
// kernel's interval (rbtree) sets reject overlapping elements, and adjacent
// prefixes (10.0.0.0/24 + 10.0.1.0/24) become one range.
func intervals(ps []netip.Prefix) []interval {
	var out []interval
	for _, p := range ps {
		start := p.Addr()
		end := lastAddr(p).Next() // invalid past the top of the space
		if n := len(out); n > 0 && out[n-1].end.IsValid() && out[n-1].end.Compare(start) >= 0 {
			if !end.IsValid() || end.Compare(out[n-1].end) > 0 {
				out[n-1].end = end
			}
			continue
		}
		if n := len(out); n > 0 && !out[n-1].end.IsValid() {
			continue // the previous range already runs to the end
		}
		out = append(out, interval{start, end})
	}
	return out
}

// setElement is one element of an nft interval set as the kernel stores
// it: a start key, or an end key (the first address after the range).
type setElement struct {
	key []byte
	end bool
}

func (e setElement) String() string {
	a, _ := netip.AddrFromSlice(e.key)
	if e.end {
		return "end:" + a.String()
	}
	return a.String()
}

// setElements is what an nft interval set holds for prefixes: per range
// a start element and, unless it runs to the top, an end element. Sorted by
// key, ends before starts of the same key (never both after merging).
func setElements(ps []netip.Prefix) []setElement {
	var out []setElement
	for _, iv := range intervals(ps) {
		out = append(out, setElement{key: iv.start.AsSlice()})
		if iv.end.IsValid() {
			out = append(out, setElement{key: iv.end.AsSlice(), end: true})
		}
	}
	sortElements(out)
	return out
}

func sortElements(es []setElement) {
	slices.SortFunc(es, func(a, b setElement) int {
		if c := bytes.Compare(a.key, b.key); c != 0 {
			return c
		}
		switch {
		case a.end == b.end:
			return 0
		case a.end:
			return -1
		}
		return 1
	})
}

// sameElements compares two element lists regardless of order.
func sameElements(a, b []setElement) bool {
	if len(a) != len(b) {
		return false
	}
	a, b = slices.Clone(a), slices.Clone(b)
	sortElements(a)
	sortElements(b)
	for i := range a {
		if a[i].end != b[i].end || !bytes.Equal(a[i].key, b[i].key) {
			return false
		}
	}
	return true
}

// Names of what the backends create.
const (
	// TableName is the nft table (one of family ip, one of family ip6).
	TableName = "ovnhost"
	// nftChain is the nat chain of the nft tables.
	nftChain = "postrouting"
	// nftSetNAT and nftSetExclude are the named interval sets.
	nftSetNAT     = "natoutgoing"
	nftSetExclude = "exclude"
	// ChainName is the iptables-legacy chain in the nat table.
	ChainName = "OVNHOST-POSTROUTING"
	// jumpComment marks the jump from POSTROUTING.
	jumpComment = "ovnhost: egress NAT for natOutgoing pod subnets"
)

// jumpSpec is the rule in nat POSTROUTING that jumps to ChainName.
func jumpSpec() []string {
	return []string{"-m", "comment", "--comment", jumpComment, "-j", ChainName}
}

// legacyRuleSpecs are the rules of ChainName, in order: RETURN for each
// excluded destination first, then SNAT per given source, then MASQUERADE
// per NATOutgoing source.
func legacyRuleSpecs(fr familyRules) [][]string {
	var out [][]string
	for _, p := range fr.exclude {
		out = append(out, []string{"-d", p.String(), "-j", "RETURN"})
	}
	for _, sn := range fr.snat {
		out = append(out, []string{"-s", sn.From.String(), "-j", "SNAT", "--to-source", sn.To.String()})
	}
	for _, p := range fr.natOutgoing {
		out = append(out, []string{"-s", p.String(), "-j", "MASQUERADE"})
	}
	return out
}

// legacyListing is what `iptables -t nat -S ChainName` prints for fr.
func legacyListing(fr familyRules) []string {
	out := []string{"-N " + ChainName}
	for _, spec := range legacyRuleSpecs(fr) {
		out = append(out, "-A "+ChainName+" "+strings.Join(spec, " "))
	}
	return out
}

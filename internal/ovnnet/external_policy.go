package ovnnet

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
)

// Who may take which external address. Kube-OVN lets any pod take any
// free EIP or SNAT address; with several tenants that lets one namespace
// squat another's EIP, leave from another tenant's SNAT address, or claim
// the address of a live host on the external LAN. The administrator
// therefore says, in the same admin-owned ConfigMap (kube-system, which no
// tenant can write), which addresses each namespace may use and which
// addresses nobody may:
//
//	namespace-external-addresses: |
//	  team-a: 172.56.0.10-172.56.0.19, 172.56.1.0/28
//	  team-b: 172.56.0.20
//	reserved-external-addresses: 172.56.0.1-172.56.0.9, 172.56.0.200/29
//
// A namespace not listed may use none (deny by default); "*" lists every
// namespace (a single-tenant cluster). Reserved wins over allowed. Two
// namespaces share an SNAT address only when both are listed by name for
// it: "*" lets a namespace take a free address, never one another
// namespace already leaves from.

// Keys of the address policy in ovn-external-gw-config.
const (
	KeyNamespaceAddresses = "namespace-external-addresses"
	KeyReservedAddresses  = "reserved-external-addresses"
)

// AnyNamespace in namespace-external-addresses stands for every namespace.
const AnyNamespace = "*"

// AddrRange is an inclusive range of IPv4 addresses, as the admin wrote it.
type AddrRange struct {
	From, To netip.Addr
	Text     string // "172.56.0.10-172.56.0.19", "172.56.1.0/28", "172.56.0.20"
}

// Contains reports whether a is in r.
func (r AddrRange) Contains(a netip.Addr) bool {
	return a.Is4() && r.From.Compare(a) <= 0 && a.Compare(r.To) <= 0
}

// AddrRanges is a list of ranges.
type AddrRanges []AddrRange

// Find returns the range holding a.
func (rs AddrRanges) Find(a netip.Addr) (AddrRange, bool) {
	for _, r := range rs {
		if r.Contains(a) {
			return r, true
		}
	}
	return AddrRange{}, false
}

func (rs AddrRanges) String() string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.Text
	}
	return strings.Join(s, ", ")
}

// ExternalAddressPolicy is the parsed address policy.
type ExternalAddressPolicy struct {
	Allowed  map[string]AddrRanges // namespace (or "*") -> its addresses
	Reserved AddrRanges
}

// parseAddrRanges reads "a.b.c.d, a.b.c.d-e.f.g.h, a.b.c.d/nn" (commas or
// white space), each inside sub.
func parseAddrRanges(s string, sub netip.Prefix) (AddrRanges, error) {
	var out AddrRanges
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		var r AddrRange
		r.Text = f
		switch {
		case strings.Contains(f, "/"):
			p, err := netip.ParsePrefix(f)
			if err != nil || !p.Addr().Is4() {
				return nil, fmt.Errorf("%q is not an IPv4 address, range (a-b) or CIDR", f)
			}
			r.From, r.To = p.Masked().Addr(), lastAddr(p)
		case strings.Contains(f, "-"):
			a, b, _ := strings.Cut(f, "-")
			from, err1 := netip.ParseAddr(strings.TrimSpace(a))
			to, err2 := netip.ParseAddr(strings.TrimSpace(b))
			if err1 != nil || err2 != nil || !from.Is4() || !to.Is4() {
				return nil, fmt.Errorf("%q is not an IPv4 address, range (a-b) or CIDR", f)
			}
			if to.Less(from) {
				return nil, fmt.Errorf("range %q ends before it starts; write the lower address first", f)
			}
			r.From, r.To = from, to
		default:
			a, err := netip.ParseAddr(f)
			if err != nil || !a.Is4() {
				return nil, fmt.Errorf("%q is not an IPv4 address, range (a-b) or CIDR", f)
			}
			r.From, r.To = a, a
		}
		if sub.IsValid() && (!sub.Contains(r.From) || !sub.Contains(r.To)) {
			return nil, fmt.Errorf("%q is not inside the external subnet %s (nic-ip); list addresses of the external network", f, sub)
		}
		out = append(out, r)
	}
	return out, nil
}

// validNamespace is a DNS-1123 label (a namespace name).
func validNamespace(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for i, c := range s {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// parseAddressPolicy reads the two policy keys; every problem is returned
// as a *ConfigError naming the key, the line and the fix.
func parseAddressPolicy(data map[string]string, sub netip.Prefix) (ExternalAddressPolicy, []error) {
	p := ExternalAddressPolicy{Allowed: map[string]AddrRanges{}}
	var errs []error
	bad := func(key, msg string) { errs = append(errs, &ConfigError{Key: key, Value: data[key], Msg: msg}) }
	for n, line := range strings.Split(data[KeyNamespaceAddresses], "\n") {
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line == "" {
			continue
		}
		ns, list, ok := strings.Cut(line, ":")
		ns = strings.Trim(strings.TrimSpace(ns), `"'`)
		if !ok {
			bad(KeyNamespaceAddresses, fmt.Sprintf("line %d %q: write \"<namespace>: <addresses>\" (addresses: a.b.c.d, a.b.c.d-e.f.g.h or a CIDR, comma-separated)", n+1, line))
			continue
		}
		if ns != AnyNamespace && !validNamespace(ns) {
			bad(KeyNamespaceAddresses, fmt.Sprintf("line %d: %q is not a namespace name (or %q for every namespace)", n+1, ns, AnyNamespace))
			continue
		}
		if _, dup := p.Allowed[ns]; dup {
			bad(KeyNamespaceAddresses, fmt.Sprintf("line %d: namespace %q is listed twice; give each namespace one line", n+1, ns))
			continue
		}
		rs, err := parseAddrRanges(list, sub)
		if err != nil {
			bad(KeyNamespaceAddresses, fmt.Sprintf("line %d (%s): %v", n+1, ns, err))
			continue
		}
		if len(rs) == 0 {
			bad(KeyNamespaceAddresses, fmt.Sprintf("line %d: namespace %q has no address; list its addresses or remove the line", n+1, ns))
			continue
		}
		p.Allowed[ns] = rs
	}
	rs, err := parseAddrRanges(strings.ReplaceAll(data[KeyReservedAddresses], "\n", ","), sub)
	if err != nil {
		bad(KeyReservedAddresses, err.Error())
	}
	p.Reserved = rs
	return p, errs
}

// Namespaces lists the namespaces named (without "*"), sorted.
func (p ExternalAddressPolicy) Namespaces() []string {
	var out []string
	for ns := range p.Allowed {
		if ns != AnyNamespace {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// Reasons of a refused address (the event's reason).
const (
	ReasonAddressReserved   = "ExternalAddressReserved"
	ReasonAddressNotAllowed = "ExternalAddressNotAllowed"
	ReasonSNATShared        = "SNATAddressShared"
)

// PolicyError is an address the policy refuses to a namespace.
type PolicyError struct {
	Reason string // one of the Reason* constants
	Msg    string
}

func (e *PolicyError) Error() string { return e.Msg }

func cmRef(key string) string {
	return fmt.Sprintf("%s/%s key %s", ExternalGatewayNamespace, ExternalGatewayConfigMap, key)
}

// AuthorizeExternalAddress says whether namespace ns may take address a
// (asked with annotation key): nil, or a *PolicyError naming the address,
// the rule and the fix.
func (p ExternalAddressPolicy) AuthorizeExternalAddress(ns, key string, a netip.Addr) error {
	if r, ok := p.Reserved.Find(a); ok {
		return &PolicyError{Reason: ReasonAddressReserved, Msg: fmt.Sprintf(
			"annotation %s=%s: %s is reserved by the cluster administrator (%s in %s: the external gateway, hosts on the external network); no namespace may take it. Choose an address namespace %s may use (%s)",
			key, a, a, r.Text, cmRef(KeyReservedAddresses), ns, p.allowedTo(ns))}
	}
	if _, ok := p.allowedBy(ns, a); ok {
		return nil
	}
	return &PolicyError{Reason: ReasonAddressNotAllowed, Msg: fmt.Sprintf(
		"annotation %s=%s: namespace %s may not use external address %s: %s lists for %s only %s. Choose one of those, or ask the cluster administrator to add a line \"%s: %s\" to %s",
		key, a, ns, a, cmRef(KeyNamespaceAddresses), ns, p.allowedTo(ns), ns, a, cmRef(KeyNamespaceAddresses))}
}

// allowedBy is the entry that lets ns use a: its own line first, then "*".
func (p ExternalAddressPolicy) allowedBy(ns string, a netip.Addr) (string, bool) {
	if _, ok := p.Allowed[ns].Find(a); ok {
		return ns, true
	}
	if _, ok := p.Allowed[AnyNamespace].Find(a); ok {
		return AnyNamespace, true
	}
	return "", false
}

// NamedFor reports whether ns is listed by name (not through "*") for a.
func (p ExternalAddressPolicy) NamedFor(ns string, a netip.Addr) bool {
	_, ok := p.Allowed[ns].Find(a)
	return ok
}

func (p ExternalAddressPolicy) allowedTo(ns string) string {
	rs := append(AddrRanges{}, p.Allowed[ns]...)
	rs = append(rs, p.Allowed[AnyNamespace]...)
	return rs.String()
}

// AuthorizeSharedSNAT says whether ns may leave from SNAT address a that
// pods of the namespaces others already leave from: only when ns and each
// of them are listed by name for a.
func (p ExternalAddressPolicy) AuthorizeSharedSNAT(ns string, a netip.Addr, others []string) error {
	var foreign []string
	for _, o := range others {
		if o != ns {
			foreign = append(foreign, o)
		}
	}
	if len(foreign) == 0 {
		return nil
	}
	sort.Strings(foreign)
	var unnamed []string
	for _, o := range append([]string{ns}, foreign...) {
		if !p.NamedFor(o, a) {
			unnamed = append(unnamed, o)
		}
	}
	if len(unnamed) == 0 {
		return nil
	}
	return &PolicyError{Reason: ReasonSNATShared, Msg: fmt.Sprintf(
		"annotation ovn.kubernetes.io/snat=%s: pods of namespace(s) %s already leave from %s; two namespaces share an SNAT address only when %s lists each of them by name for it (not listed so: %s). Choose another address, or ask the cluster administrator to list both namespaces for %s",
		a, strings.Join(foreign, ", "), a, cmRef(KeyNamespaceAddresses), strings.Join(unnamed, ", "), a)}
}

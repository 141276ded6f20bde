package hostnat

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func pfx(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestNormalizeSplitsDedupsSorts(t *testing.T) {
	n, err := normalize(Rules{
		NATOutgoing: pfx("10.17.0.5/16", "fd00:10:16::/64", "10.16.0.0/16", "10.16.0.0/16", "10.16.4.0/24", "fd00:10:16::1/64"),
		Exclude:     pfx("100.64.0.0/16", "10.96.0.0/12", "192.168.1.10/32", "fd00:100:64::/64"),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := n[v4].natOutgoing, pfx("10.16.0.0/16", "10.17.0.0/16"); !reflect.DeepEqual(got, want) {
		t.Errorf("v4 natOutgoing = %v, want %v", got, want)
	}
	if got, want := n[v6].natOutgoing, pfx("fd00:10:16::/64"); !reflect.DeepEqual(got, want) {
		t.Errorf("v6 natOutgoing = %v, want %v", got, want)
	}
	if got, want := n[v4].exclude, pfx("10.96.0.0/12", "100.64.0.0/16", "192.168.1.10/32"); !reflect.DeepEqual(got, want) {
		t.Errorf("v4 exclude = %v, want %v", got, want)
	}
	if !n[v4].needed() || !n[v6].needed() {
		t.Error("both families have NATOutgoing prefixes")
	}
	n, _ = normalize(Rules{NATOutgoing: pfx("10.16.0.0/16"), Exclude: pfx("fd00::/8")})
	if n[v6].needed() {
		t.Error("v6 needed without v6 NATOutgoing")
	}
}

func TestNormalizeRejects(t *testing.T) {
	if _, err := normalize(Rules{NATOutgoing: []netip.Prefix{{}}}); err == nil || !strings.Contains(err.Error(), "NATOutgoing") {
		t.Errorf("invalid prefix: %v", err)
	}
	if _, err := normalize(Rules{Exclude: pfx("::ffff:10.0.0.0/104")}); err == nil || !strings.Contains(err.Error(), "IPv4 CIDR") {
		t.Errorf("4in6 prefix: %v", err)
	}
}

func TestNormalizeSNAT(t *testing.T) {
	sn := func(from, to string) SNAT {
		return SNAT{From: netip.MustParsePrefix(from), To: netip.MustParseAddr(to)}
	}
	n, err := normalize(Rules{SNAT: []SNAT{sn("10.16.0.0/16", "192.0.2.9"), sn("10.16.5.7/24", "192.0.2.10"), sn("fd00::/64", "2001:db8::9"), sn("10.16.0.0/16", "192.0.2.9")}})
	if err != nil {
		t.Fatal(err)
	}
	want := []SNAT{sn("10.16.5.0/24", "192.0.2.10"), sn("10.16.0.0/16", "192.0.2.9")}
	if !reflect.DeepEqual(n[v4].snat, want) {
		t.Errorf("v4 SNAT = %v, want the longest source first, masked and deduplicated: %v", n[v4].snat, want)
	}
	if !n[v6].needed() || len(n[v6].snat) != 1 {
		t.Errorf("v6 SNAT alone must make the family needed: %+v", n[v6])
	}
	for _, tc := range []struct {
		in   SNAT
		want string
	}{
		{sn("10.16.0.0/16", "2001:db8::9"), "different families"},
		{SNAT{From: netip.MustParsePrefix("10.16.0.0/16")}, "both a source CIDR and an address"},
		{sn("10.16.0.0/16", "::ffff:192.0.2.9"), "IPv4-mapped"},
	} {
		if _, err := normalize(Rules{SNAT: []SNAT{tc.in}}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("SNAT %v: err %v, want one saying %q", tc.in, err, tc.want)
		}
	}
	if _, err := normalize(Rules{SNAT: []SNAT{sn("10.16.0.0/16", "192.0.2.9"), sn("10.16.0.0/16", "192.0.2.10")}}); err == nil || !strings.Contains(err.Error(), "one source CIDR leaves with one address") {
		t.Errorf("one source to two addresses: %v", err)
	}
}

func elemStrings(es []setElement) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.String())
	}
	return out
}

func TestSetElements(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want []string
	}{
		{[]string{"10.16.0.0/16"}, []string{"10.16.0.0", "end:10.17.0.0"}},
		// adjacent prefixes merge into one interval
		{[]string{"10.0.0.0/24", "10.0.1.0/24", "10.0.3.0/24"}, []string{"10.0.0.0", "end:10.0.2.0", "10.0.3.0", "end:10.0.4.0"}},
		{[]string{"192.168.1.10/32"}, []string{"192.168.1.10", "end:192.168.1.11"}},
		// a range reaching the top of the space has no end element
		{[]string{"255.255.255.0/24", "10.0.0.0/8"}, []string{"10.0.0.0", "end:11.0.0.0", "255.255.255.0"}},
		{[]string{"0.0.0.0/0", "10.0.0.0/8"}, []string{"0.0.0.0"}},
		{[]string{"fd00:10:16::/64", "fd00:10:16:0:1::/80"}, []string{"fd00:10:16::", "end:fd00:10:16:1::"}},
		{[]string{"fd00::1/128", "2001:db8::/32"}, []string{"2001:db8::", "end:2001:db9::", "fd00::1", "end:fd00::2"}},
		{[]string{"ffff::/16"}, []string{"ffff::"}},
		{nil, nil},
	} {
		got := elemStrings(setElements(canonical(pfx(tc.in...))))
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("setElements(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	for _, es := range [][]setElement{setElements(pfx("10.16.0.0/16")), setElements(pfx("fd00::/64"))} {
		for _, e := range es {
			if l := len(e.key); l != 4 && l != 16 {
				t.Errorf("key length %d", l)
			}
		}
	}
	if len(setElements(pfx("10.16.0.0/16"))[0].key) != 4 || len(setElements(pfx("fd00::/64"))[0].key) != 16 {
		t.Error("keys must be 4 bytes for IPv4 and 16 for IPv6")
	}
	a := setElements(pfx("10.0.0.0/24", "10.2.0.0/24"))
	b := []setElement{a[3], a[1], a[2], a[0]}
	if !sameElements(a, b) || sameElements(a, a[:2]) {
		t.Error("sameElements must ignore order and see differences")
	}
}

func TestLegacyRules(t *testing.T) {
	n, err := normalize(Rules{
		NATOutgoing: pfx("10.16.0.0/16", "fd00:10:16::/64"),
		Exclude:     pfx("10.96.0.0/12", "10.16.0.0/16", "100.64.0.0/16", "fd00:10:96::/108"),
	})
	if err != nil {
		t.Fatal(err)
	}
	want4 := []string{
		"-N OVNHOST-POSTROUTING",
		"-A OVNHOST-POSTROUTING -d 10.16.0.0/16 -j RETURN",
		"-A OVNHOST-POSTROUTING -d 10.96.0.0/12 -j RETURN",
		"-A OVNHOST-POSTROUTING -d 100.64.0.0/16 -j RETURN",
		"-A OVNHOST-POSTROUTING -s 10.16.0.0/16 -j MASQUERADE",
	}
	if got := legacyListing(n[v4]); !reflect.DeepEqual(got, want4) {
		t.Errorf("v4 listing:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want4, "\n"))
	}
	n, err = normalize(Rules{
		NATOutgoing: pfx("10.16.0.0/16"),
		Exclude:     pfx("10.16.0.0/16"),
		SNAT:        []SNAT{{From: netip.MustParsePrefix("10.16.0.0/24"), To: netip.MustParseAddr("192.0.2.9")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	wantSNAT := []string{
		"-N OVNHOST-POSTROUTING",
		"-A OVNHOST-POSTROUTING -d 10.16.0.0/16 -j RETURN",
		"-A OVNHOST-POSTROUTING -s 10.16.0.0/24 -j SNAT --to-source 192.0.2.9",
		"-A OVNHOST-POSTROUTING -s 10.16.0.0/16 -j MASQUERADE",
	}
	if got := legacyListing(n[v4]); !reflect.DeepEqual(got, wantSNAT) {
		t.Errorf("v4 listing with SNAT:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(wantSNAT, "\n"))
	}
	n, _ = normalize(Rules{NATOutgoing: pfx("fd00:10:16::/64"), Exclude: pfx("fd00:10:96::/108")})
	want6 := [][]string{{"-d", "fd00:10:96::/108", "-j", "RETURN"}, {"-s", "fd00:10:16::/64", "-j", "MASQUERADE"}}
	if got := legacyRuleSpecs(n[v6]); !reflect.DeepEqual(got, want6) {
		t.Errorf("v6 specs = %v, want %v", got, want6)
	}
}

func TestCountRules(t *testing.T) {
	save := `# Generated by iptables-save
*nat
:POSTROUTING ACCEPT [0:0]
:OVNHOST-POSTROUTING - [0:0]
-A POSTROUTING -m comment --comment "ovnhost" -j OVNHOST-POSTROUTING
-A POSTROUTING -s 172.17.0.0/16 -j MASQUERADE
-A OVNHOST-POSTROUTING -s 10.16.0.0/16 -j MASQUERADE
COMMIT
*filter
-A INPUT -j ACCEPT
COMMIT
`
	if got := countRules(save); got != 2 {
		t.Errorf("countRules = %d, want 2 (ours left out)", got)
	}
}

func TestDecide(t *testing.T) {
	for _, tc := range []struct {
		name string
		s    hostSignals
		want string
	}{
		{"iptables-nft", hostSignals{iptablesMode: "nf_tables", legacyRules: 5, legacyProg: true, nftUsable: true}, BackendNFT},
		{"nft tables (Talos)", hostSignals{nftUsable: true, nftTables: []string{"inet filter"}}, BackendNFT},
		{"CentOS 7 firewalld", hostSignals{iptablesMode: "legacy", legacyRules: 40, legacyProg: true, nftUsable: true}, BackendLegacy},
		{"empty host", hostSignals{iptablesMode: "legacy", legacyProg: true, nftUsable: true}, BackendNFT},
		{"no nf_tables", hostSignals{iptablesMode: "legacy", legacyProg: true, nftErr: errors.New("protocol not supported")}, BackendLegacy},
	} {
		d, err := decide(tc.s)
		if err != nil || d.Backend != tc.want || d.Reason == "" {
			t.Errorf("%s: %+v, %v; want %s", tc.name, d, err, tc.want)
		}
	}
	if _, err := decide(hostSignals{nftErr: errors.New("protocol not supported")}); err == nil || !strings.Contains(err.Error(), "modprobe nf_tables") {
		t.Errorf("nothing usable: %v", err)
	}
}

func TestNewRejectsUnknownBackend(t *testing.T) {
	if _, err := New("ipset", nil); err == nil || !strings.Contains(err.Error(), "auto, nft or iptables-legacy") {
		t.Errorf("New(ipset) = %v", err)
	}
}

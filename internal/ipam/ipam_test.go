package ipam

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

func mustSubnet(t testing.TB, m *IPAM, name, cidr, gw string, ex ...string) {
	t.Helper()
	cfg, err := ParseSubnet(name, cidr, gw, ex)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.AddSubnet(cfg); err != nil {
		t.Fatal(err)
	}
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func TestParseSubnetErrorsNameInputAndFix(t *testing.T) {
	cases := []struct {
		cidr, gw string
		ex       []string
		want     string
	}{
		{"10.16.0.0/33", "", nil, `cidrBlock "10.16.0.0/33" is not a CIDR`},
		{"banana", "", nil, `cidrBlock "banana" is not a CIDR`},
		{"", "", nil, "cidrBlock is empty"},
		{"10.16.0.0/16", "10.17.0.1", nil, "gateway 10.17.0.1 is outside cidrBlock 10.16.0.0/16"},
		{"10.16.0.0/16", "x", nil, `gateway "x" is not an IP address`},
		{"10.16.0.0/16", "10.16.0.0", nil, "network or broadcast"},
		{"10.16.0.0/16,10.17.0.0/16", "", nil, "two CIDRs of the same family"},
		{"10.16.0.0/16", "", []string{"10.16.0.9..10.16.0.1"}, "is not a range"},
		{"10.16.0.0/16", "", []string{"nope"}, "is not an IP address or range"},
		{"10.16.0.0/31", "", nil, "too small"},
	}
	for _, c := range cases {
		_, err := ParseSubnet("s1", c.cidr, c.gw, c.ex)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseSubnet(%q,%q,%v) = %v, want error containing %q", c.cidr, c.gw, c.ex, err, c.want)
		}
		if err != nil && !strings.Contains(err.Error(), `subnet "s1"`) {
			t.Errorf("error %q does not name the subnet", err)
		}
	}
}

func TestAllocateSkipsGatewayExcludedAndReusesLowest(t *testing.T) {
	m := New()
	mustSubnet(t, m, "s", "10.0.0.0/29", "", "10.0.0.3")
	// usable: .1-.6; gateway .1, excluded .3 => .2 .4 .5 .6
	var got []string
	for i := 0; i < 4; i++ {
		a, err := m.Allocate("s", fmt.Sprintf("p%d", i), Request{})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.IPString())
		if a.CIDR != "10.0.0.0/29" || a.Gateway != "10.0.0.1" || a.MAC == "" {
			t.Fatalf("allocation %+v lacks cidr/gateway/mac", a)
		}
	}
	if strings.Join(got, " ") != "10.0.0.2 10.0.0.4 10.0.0.5 10.0.0.6" {
		t.Fatalf("allocated %v", got)
	}
	_, err := m.Allocate("s", "p4", Request{})
	if KindOf(err) != KindExhausted {
		t.Fatalf("want exhausted, got %v", err)
	}
	u, _ := m.Usage("s")
	if u.V4Available != 0 || u.V4Using != 4 || u.V4UsingRange != "10.0.0.2,10.0.0.4-10.0.0.6" || u.V4AvailableRange != "" {
		t.Fatalf("usage %+v", u)
	}
	m.Release("p2") // .5
	a, err := m.Allocate("s", "p5", Request{})
	if err != nil || a.IPString() != "10.0.0.5" {
		t.Fatalf("released address not reused: %v %v", a, err)
	}
}

func TestStaticAllocation(t *testing.T) {
	m := New()
	mustSubnet(t, m, "s", "10.16.0.0/16", "", "10.16.0.10..10.16.0.20")
	if _, err := m.Allocate("s", "a", Request{IPs: []netip.Addr{ip("10.16.5.5")}, MAC: "0a:00:00:00:00:01"}); err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		ip   string
		mac  string
		kind Kind
	}{
		{"10.16.5.5", "", KindConflict},
		{"10.17.0.1", "", KindOutOfRange},
		{"10.16.0.1", "", KindReserved},
		{"10.16.0.15", "", KindReserved},
		{"10.16.255.255", "", KindReserved},
		{"10.16.5.6", "0a:00:00:00:00:01", KindMACConflict},
		{"10.16.5.6", "01:00:00:00:00:01", KindInvalid},
	}
	for _, c := range checks {
		_, err := m.Allocate("s", "b", Request{IPs: []netip.Addr{ip(c.ip)}, MAC: c.mac})
		if KindOf(err) != c.kind {
			t.Errorf("static %s mac %q: got %v, want %s", c.ip, c.mac, err, c.kind)
		}
	}
	if h, _ := m.Holder(ip("10.16.5.5")); h != "a" {
		t.Fatalf("holder %q", h)
	}
	// Idempotent for the same owner.
	a1, _ := m.Lookup("a")
	a2, err := m.Allocate("s", "a", Request{})
	if err != nil || a2.IPString() != a1.IPString() || a2.MAC != a1.MAC {
		t.Fatalf("re-allocate changed %v -> %v (%v)", a1, a2, err)
	}
	if _, err := m.Allocate("nope", "x", Request{}); KindOf(err) != KindUnknownSubnet {
		t.Fatalf("unknown subnet: %v", err)
	}
}

func TestOverlapRejected(t *testing.T) {
	m := New()
	mustSubnet(t, m, "a", "10.16.0.0/16", "")
	cfg, _ := ParseSubnet("b", "10.16.128.0/24", "", nil)
	if err := m.AddSubnet(cfg); err == nil || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("overlap: %v", err)
	}
}

func TestDualStack(t *testing.T) {
	m := New()
	mustSubnet(t, m, "d", "10.16.0.0/24,fd00:10:16::/120", "")
	a, err := m.Allocate("d", "p", Request{})
	if err != nil {
		t.Fatal(err)
	}
	if a.IPString() != "10.16.0.2,fd00:10:16::2" || a.Gateway != "10.16.0.1,fd00:10:16::1" {
		t.Fatalf("dual stack %+v", a)
	}
	u, _ := m.Usage("d")
	if u.V6Using != 1 || u.V6Available != 253 || u.V4Available != 252 {
		t.Fatalf("usage %+v", u)
	}
	// An IPv6 address on an IPv4-only subnet: the family is named.
	mustSubnet(t, m, "v4", "10.17.0.0/24", "")
	_, err = m.Allocate("v4", "q", Request{IPs: []netip.Addr{ip("fd00:17::5")}})
	if KindOf(err) != KindOutOfRange || !strings.Contains(err.Error(), `IP fd00:17::5 is IPv6 but subnet "v4" has no IPv6 CIDR (cidrBlock 10.17.0.0/24)`) {
		t.Fatalf("IPv6 address on an IPv4 subnet: %v", err)
	}
	if _, ok := m.Lookup("q"); ok {
		t.Fatal("the refused request holds an address")
	}
}

func TestSubnetUpdateKeepsAllocations(t *testing.T) {
	m := New()
	mustSubnet(t, m, "s", "10.0.0.0/24", "")
	a, _ := m.Allocate("s", "p", Request{})
	mustSubnet(t, m, "s", "10.0.0.0/24", "", "10.0.0.100")
	if h, ok := m.Holder(a.IPs[0]); !ok || h != "p" {
		t.Fatal("allocation lost on subnet update")
	}
	b, _ := m.Allocate("s", "q", Request{})
	if b.IPs[0] == a.IPs[0] {
		t.Fatal("double allocation after update")
	}
}

// BenchmarkRebuild10k measures re-claiming 10k recorded addresses, the IPAM
// part of a controller restart.
func BenchmarkRebuild10k(b *testing.B) {
	src := New()
	mustSubnet(b, src, "s", "10.16.0.0/16", "")
	type rec struct {
		owner string
		ip    netip.Addr
		mac   string
	}
	recs := make([]rec, 10000)
	for i := range recs {
		a, _ := src.Allocate("s", fmt.Sprintf("ns/p%d", i), Request{})
		recs[i] = rec{fmt.Sprintf("ns/p%d", i), a.IPs[0], a.MAC}
	}
	cfg, _ := src.Subnet("s")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m := New()
		_ = m.AddSubnet(cfg)
		for _, r := range recs {
			if _, err := m.Allocate("s", r.owner, Request{IPs: []netip.Addr{r.ip}, MAC: r.mac}); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkAllocate(b *testing.B) {
	m := New()
	mustSubnet(b, m, "s", "10.0.0.0/8", "")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := m.Allocate("s", fmt.Sprint(i), Request{}); err != nil {
			b.Fatal(err)
		}
	}
}

func TestParsePool(t *testing.T) {
	for in, want := range map[string]string{
		"10.16.0.10,10.16.0.11":                 "[[10.16.0.10] [10.16.0.11]]",
		" 10.16.0.10 , 10.16.0.11 ,":            "[[10.16.0.10] [10.16.0.11]]",
		"10.16.0.10,fd00::a;10.16.0.11,fd00::b": "[[10.16.0.10 fd00::a] [10.16.0.11 fd00::b]]",
	} {
		got, err := ParsePool(in)
		if err != nil || fmt.Sprint(got) != want {
			t.Errorf("ParsePool(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ",", "my-ippool", "10.16.0.10,10.16.0.11;10.16.0.12", "10.16.0.1,10.16.0.2,fd00::1;1.2.3.4"} {
		if _, err := ParsePool(bad); KindOf(err) != KindInvalid || !strings.Contains(err.Error(), "ip_pool") {
			t.Errorf("ParsePool(%q): %v, want an InvalidInput error naming ip_pool", bad, err)
		}
	}
}

func TestReservedMACIsNoPodsToTake(t *testing.T) {
	m := New()
	mustSubnet(t, m, "s", "10.16.0.0/24", "")
	const gw = "da:f8:75:56:90:6c"
	// A pod took it before it was reserved (an older controller): it keeps
	// it until released, then the reservation has it.
	if _, err := m.Allocate("s", "ns/old", Request{MAC: gw}); err != nil {
		t.Fatal(err)
	}
	err := m.ReserveMAC(strings.ToUpper(gw), "router port r-s")
	if KindOf(err) != KindMACConflict || !strings.Contains(err.Error(), "ns/old") {
		t.Fatalf("ReserveMAC over a pod's MAC: %v", err)
	}
	m.Release("ns/old")
	_, err = m.Allocate("s", "ns/p", Request{MAC: gw})
	if KindOf(err) != KindMACConflict || !strings.Contains(err.Error(), "router port r-s") || !strings.Contains(err.Error(), "remove the mac_address annotation") {
		t.Fatalf("a pod asking for the reserved MAC: %v", err)
	}
	// Unreserved (the subnet went): free again.
	m.UnreserveMAC(gw, "router port r-s")
	if a, err := m.Allocate("s", "ns/p", Request{MAC: gw}); err != nil || a.MAC != gw {
		t.Fatalf("after UnreserveMAC: %+v %v", a, err)
	}
	if err := m.ReserveMAC("nope", "router port r-s"); KindOf(err) != KindInvalid {
		t.Fatalf("ReserveMAC of a bad MAC: %v", err)
	}
}

// Subnets of different VPCs may overlap; inside one VPC they may not, and
// the refusal names both subnets, the VPC rule and the fix.
func TestOverlapOnlyInsideOneVPC(t *testing.T) {
	m := New()
	mk := func(name, cidr, vpc string) SubnetConfig {
		c, err := ParseSubnet(name, cidr, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		c.VPC = vpc
		return c
	}
	for _, c := range []SubnetConfig{mk("a1", "10.200.0.0/24", "vpc-a"), mk("b1", "10.200.0.0/24", "vpc-b"), mk("def", "10.200.0.0/16", "")} {
		if err := m.AddSubnet(c); err != nil {
			t.Fatalf("%s in %q: %v", c.Name, c.VPC, err)
		}
	}
	err := m.AddSubnet(mk("a2", "10.200.0.128/25", "vpc-a"))
	if KindOf(err) != KindInvalid || !strings.Contains(err.Error(), `subnet "a1" in the same VPC`) || !strings.Contains(err.Error(), "another VPC") {
		t.Fatalf("overlap inside vpc-a: got %v", err)
	}
	// "ovn-cluster" is the default VPC.
	if err := m.AddSubnet(mk("def2", "10.200.1.0/24", DefaultVPC)); KindOf(err) != KindInvalid {
		t.Fatalf("overlap inside the default VPC named ovn-cluster: got %v", err)
	}
	// The same address in both VPCs, each held once.
	a, err := m.Allocate("a1", "ns/pa", Request{IPs: []netip.Addr{netip.MustParseAddr("10.200.0.5")}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.Allocate("b1", "ns/pb", Request{IPs: []netip.Addr{netip.MustParseAddr("10.200.0.5")}})
	if err != nil || a.IPs[0] != b.IPs[0] {
		t.Fatalf("same address in vpc-b: %v %v", b, err)
	}
	if h, ok := m.HolderIn("vpc-b", a.IPs[0]); !ok || h != "ns/pb" {
		t.Fatalf("HolderIn(vpc-b) = %q %v", h, ok)
	}
	if h, ok := m.Holder(a.IPs[0]); ok {
		t.Fatalf("default VPC holder of 10.200.0.5 = %q, want none", h)
	}
	if s, _ := m.SubnetFor(a.IPs[0]); s != "def" {
		t.Fatalf("SubnetFor = %q, want the default VPC's def", s)
	}
}

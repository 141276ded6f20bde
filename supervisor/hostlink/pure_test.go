package hostlink

import (
	"encoding/json"
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The parts that need no kernel.

func TestRelabel(t *testing.T) {
	for _, tc := range []struct{ label, want string }{
		{"eth0", "br-eth0"}, {"eth0:dhcp", "br-eth0:dhcp"}, {"other", "other"}, {"eth01", "eth01"}, {"", ""},
	} {
		if got := relabel(tc.label, "eth0", "br-eth0"); got != tc.want {
			t.Errorf("relabel(%q) = %q, want %q", tc.label, got, tc.want)
		}
	}
}

func mustAddr(t *testing.T, s string) netlink.Addr {
	t.Helper()
	a, err := netlink.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return *a
}

// The kernel appends IPv4 addresses and puts a new IPv6 one first: the
// order to add them in is IPv4 as listed, IPv6 backwards.
func TestAddOrder(t *testing.T) {
	var in []netlink.Addr
	for _, s := range []string{"2001:db8::1/64", "10.0.0.1/24", "2001:db8::2/64", "10.0.0.2/24"} {
		in = append(in, mustAddr(t, s))
	}
	var got []string
	for _, a := range addOrder(in) {
		got = append(got, a.IPNet.String())
	}
	want := []string{"10.0.0.1/24", "10.0.0.2/24", "2001:db8::2/64", "2001:db8::1/64"}
	if len(got) != len(want) {
		t.Fatalf("addOrder = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("addOrder = %v, want %v", got, want)
		}
	}
}

func TestAddrCmd(t *testing.T) {
	a := mustAddr(t, "192.0.2.10/24")
	a.Label, a.ValidLft, a.PreferedLft = "eth0:dhcp", 3600, 1800
	a.Flags = unix.IFA_F_NOPREFIXROUTE
	if got, want := addrCmd("add", addrReq(a, "eth0:dhcp"), "eth0"),
		"ip address add 192.0.2.10/24 label eth0:dhcp valid_lft 3600 preferred_lft 1800 noprefixroute dev eth0"; got != want {
		t.Errorf("addrCmd = %q\nwant      %q", got, want)
	}
	p := mustAddr(t, "2001:db8::5/64")
	p.ValidLft, p.PreferedLft = foreverLft, foreverLft
	if got, want := addrCmd("add", p, "eth0"), "ip -6 address add 2001:db8::5/64 dev eth0"; got != want {
		t.Errorf("addrCmd = %q, want %q", got, want)
	}
}

func TestRuleSpec(t *testing.T) {
	r := *netlink.NewRule()
	r.Priority, r.IifName, r.Table = 100, "eth0", 100
	if got, want := ruleCmd("del", r), "ip rule del priority 100 from all iif eth0 lookup 100"; got != want {
		t.Errorf("ruleCmd = %q, want %q", got, want)
	}
	b := *netlink.NewRule()
	b.Family, b.Priority, b.OifName, b.Type = unix.AF_INET6, 7, "eth0", frActBlackhole
	if got, want := ruleCmd("add", b), "ip -6 rule add priority 7 from all oif eth0 blackhole"; got != want {
		t.Errorf("ruleCmd = %q, want %q", got, want)
	}
}

func TestRouteSpec(t *testing.T) {
	_, dst, _ := net.ParseCIDR("192.0.2.128/25")
	r := netlink.Route{Family: netlink.FAMILY_V4, Dst: dst, Protocol: unix.RTPROT_STATIC, Table: 100, Priority: 5,
		MultiPath: []*netlink.NexthopInfo{{LinkIndex: 2, Gw: net.ParseIP("10.0.0.1"), Hops: 1}, {LinkIndex: 3, Gw: net.ParseIP("10.1.0.1")}}}
	names := linkNames{2: "eth0", 3: "eth1"}
	if got, want := routeCmd("replace", r, names),
		"ip route replace 192.0.2.128/25 proto static metric 5 table 100 nexthop via 10.0.0.1 dev eth0 weight 2 nexthop via 10.1.0.1 dev eth1 weight 1"; got != want {
		t.Errorf("routeCmd = %q\nwant        %q", got, want)
	}
	v := netlink.Route{Family: netlink.FAMILY_V4, Dst: dst, LinkIndex: 2, Via: &netlink.Via{AddrFamily: unix.AF_INET6, Addr: net.ParseIP("fe80::1")}}
	if got, want := routeSpec(v, names), "192.0.2.128/25 via inet6 fe80::1 dev eth0"; got != want {
		t.Errorf("routeSpec = %q, want %q", got, want)
	}
}

// A journal read after a crash does not renew a lease: the lifetimes are
// deadlines, and an address whose lease ran out is left out.
func TestSavedAddrLifetimes(t *testing.T) {
	a := mustAddr(t, "192.0.2.10/24")
	a.ValidLft, a.PreferedLft = 3600, 1800
	then := time.Now()
	s := saveAddr(a, then)
	if got, live := s.addr(then.Add(1000 * time.Second)); !live || got.ValidLft != 2600 || got.PreferedLft != 800 {
		t.Errorf("after 1000s: %d/%d live %v, want 2600/800 live", got.ValidLft, got.PreferedLft, live)
	}
	if got, live := s.addr(then.Add(2000 * time.Second)); !live || got.PreferedLft != 0 {
		t.Errorf("after 2000s: preferred %d live %v, want 0 (deprecated), live", got.PreferedLft, live)
	}
	if _, live := s.addr(then.Add(3600 * time.Second)); live {
		t.Error("after 3600s the lease is over, but the address would come back")
	}
	a.ValidLft, a.PreferedLft = foreverLft, foreverLft
	if got, live := saveAddr(a, then).addr(then.Add(time.Hour)); !live || got.ValidLft != foreverLft {
		t.Errorf("a permanent address: %d live %v", got.ValidLft, live)
	}
}

// What a journal holds reads back the same, the Via of a route included
// (an interface in netlink.Route).
func TestJournalRoundTrip(t *testing.T) {
	_, dst, _ := net.ParseCIDR("10.99.7.0/24")
	r := netlink.Route{Family: netlink.FAMILY_V4, Dst: dst, LinkIndex: 4, Protocol: unix.RTPROT_STATIC,
		Via: &netlink.Via{AddrFamily: unix.AF_INET6, Addr: net.ParseIP("fe80::1")}}
	a := mustAddr(t, "10.99.0.2/24")
	a.Broadcast = net.ParseIP("10.99.0.255").To4()
	j := journal{From: "eth0", To: "br-eth0", Phase: phaseMoved,
		Source: savedLink{Addrs: []savedAddr{saveAddr(a, time.Now())}, Routes: []savedRoute{saveRoute(r)}}}
	raw, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	var back journal
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if got, want := routeSpec(back.Source.Routes[0].route(), nil), routeSpec(r, nil); got != want {
		t.Errorf("route read back as %q, want %q", got, want)
	}
	if got := addrReq(back.Source.Addrs[0].Addr, "eth0"); len(got.Broadcast) != 4 || got.Broadcast.String() != "10.99.0.255" {
		t.Errorf("broadcast read back as %v (%d bytes), want 10.99.0.255 in 4 bytes", got.Broadcast, len(got.Broadcast))
	}
}

package ovnnet

import (
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestIsolationACLs(t *testing.T) {
	p := netip.MustParsePrefix
	if acls := IsolationACLs([]netip.Prefix{p("10.69.0.0/16")}, nil, Isolation{}); acls != nil {
		t.Fatalf("not private: %v", acls)
	}
	acls := IsolationACLs([]netip.Prefix{p("10.69.0.0/16"), p("fd00:69::/64")}, []netip.Prefix{p("100.64.0.0/16")},
		Isolation{Private: true, AllowSubnets: []netip.Prefix{p("10.16.0.0/16"), p("fd00:16::/64")}})
	var got []string
	for _, a := range acls {
		if a.Direction != "to-lport" {
			t.Errorf("%+v: isolation ACLs are to-lport", a)
		}
		got = append(got, a.Action+" "+strconv.Itoa(a.Priority)+" "+a.Match)
	}
	want := []string{
		"drop 1000 ip",
		"allow-related 1001 ip4.src == 10.69.0.0/16 && ip4.dst == 10.69.0.0/16",
		"allow-related 3000 ip4.src == 100.64.0.0/16",
		"allow-related 1002 (ip4.src == 10.69.0.0/16 && ip4.dst == 10.16.0.0/16) || (ip4.src == 10.16.0.0/16 && ip4.dst == 10.69.0.0/16)",
		"allow-related 1001 ip6.src == fd00:69::/64 && ip6.dst == fd00:69::/64",
		"allow-related 1002 (ip6.src == fd00:69::/64 && ip6.dst == fd00:16::/64) || (ip6.src == fd00:16::/64 && ip6.dst == fd00:69::/64)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("ACLs:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := ParseAllowSubnets("s", []string{"10.16.0.0/16", " ", "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("bad allowSubnets entry: %v", err)
	}
}

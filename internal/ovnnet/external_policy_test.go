package ovnnet

import (
	"net/netip"
	"strings"
	"testing"
)

func TestAddressPolicyParsesAndDecides(t *testing.T) {
	d := goodExternalData()
	d[KeyNamespaceAddresses] = "# who may take what\nteam-a: 172.56.0.10-172.56.0.19, 172.56.1.0/30\n\"team-b\": 172.56.0.20\n*: 172.56.2.0/24\n"
	d[KeyReservedAddresses] = "172.56.0.2-172.56.0.9\n172.56.0.12"
	c, err := ParseExternalGatewayConfig(d)
	if err != nil || len(c.Ignored) != 0 {
		t.Fatalf("parsed %+v, %v", c, err)
	}
	for _, tc := range []struct {
		ns, addr, reason string
	}{
		{"team-a", "172.56.0.10", ""},
		{"team-a", "172.56.1.3", ""},
		{"team-a", "172.56.1.4", ReasonAddressNotAllowed},
		{"team-a", "172.56.0.12", ReasonAddressReserved}, // reserved wins over allowed
		{"team-a", "172.56.0.20", ReasonAddressNotAllowed},
		{"team-b", "172.56.0.20", ""},
		{"team-b", "172.56.0.5", ReasonAddressReserved},
		{"team-z", "172.56.2.7", ""}, // "*"
		{"team-z", "172.56.0.10", ReasonAddressNotAllowed},
	} {
		err := c.Policy.AuthorizeExternalAddress(tc.ns, "ovn.kubernetes.io/eip", netip.MustParseAddr(tc.addr))
		got := ""
		if pe, ok := err.(*PolicyError); ok {
			got = pe.Reason
			if !strings.Contains(pe.Msg, tc.addr) || !strings.Contains(pe.Msg, ExternalGatewayConfigMap) {
				t.Errorf("%s %s: message %q does not name the address and the ConfigMap", tc.ns, tc.addr, pe.Msg)
			}
		} else if err != nil {
			t.Fatalf("%s %s: %T %v", tc.ns, tc.addr, err, err)
		}
		if got != tc.reason {
			t.Errorf("%s %s: %q, want %q (%v)", tc.ns, tc.addr, got, tc.reason, err)
		}
	}
	// Sharing an SNAT address: only between namespaces listed by name.
	two := netip.MustParseAddr("172.56.2.7")
	if err := c.Policy.AuthorizeSharedSNAT("team-z", two, []string{"team-y"}); err == nil {
		t.Error(`"*" let team-z share team-y's SNAT address`)
	}
	if err := c.Policy.AuthorizeSharedSNAT("team-z", two, []string{"team-z"}); err != nil {
		t.Errorf("a namespace's own pods may share: %v", err)
	}
	d[KeyNamespaceAddresses] = "team-a: 172.56.0.20\nteam-b: 172.56.0.20"
	c, _ = ParseExternalGatewayConfig(d)
	if err := c.Policy.AuthorizeSharedSNAT("team-b", netip.MustParseAddr("172.56.0.20"), []string{"team-a"}); err != nil {
		t.Errorf("both listed: %v", err)
	}
}

func TestAddressPolicyNamesEachBadLine(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
	}{
		{KeyNamespaceAddresses, "team-a 172.56.0.10", `line 1 "team-a 172.56.0.10": write "<namespace>: <addresses>"`},
		{KeyNamespaceAddresses, "Team_A: 172.56.0.10", `"Team_A" is not a namespace name`},
		{KeyNamespaceAddresses, "a: 172.56.0.10\na: 172.56.0.11", `line 2: namespace "a" is listed twice`},
		{KeyNamespaceAddresses, "a: 10.0.0.1", `"10.0.0.1" is not inside the external subnet 172.56.0.0/16`},
		{KeyNamespaceAddresses, "a: 172.56.0.19-172.56.0.10", "ends before it starts"},
		{KeyNamespaceAddresses, "a:", `namespace "a" has no address`},
		{KeyReservedAddresses, "172.56.0.x", `"172.56.0.x" is not an IPv4 address, range (a-b) or CIDR`},
	} {
		d := goodExternalData()
		d[tc.key] = tc.value
		_, err := ParseExternalGatewayConfig(d)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s=%q: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}

package ovnnet

import (
	"slices"
	"testing"
)

func TestRankGatewaysKeepsTheActiveFirstUnlessFailback(t *testing.T) {
	gw := []GatewayNode{{Node: "b"}, {Node: "c"}, {Node: "d"}}
	names := func(gs []GatewayNode) []string {
		var out []string
		for _, g := range gs {
			out = append(out, g.Node)
		}
		return out
	}
	for _, tc := range []struct {
		active   string
		failback bool
		want     []string
	}{
		{"", false, []string{"b", "c", "d"}},
		{"b", false, []string{"b", "c", "d"}},
		{"d", false, []string{"d", "b", "c"}},
		{"d", true, []string{"b", "c", "d"}},
		{"gone", false, []string{"b", "c", "d"}}, // not a gateway any more
	} {
		if got := names(RankGateways(gw, tc.active, tc.failback)); !slices.Equal(got, tc.want) {
			t.Errorf("RankGateways(b,c,d; active %q, failback %v) = %v, want %v", tc.active, tc.failback, got, tc.want)
		}
	}
	if got := names(gw); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("RankGateways changed its input: %v", got)
	}
}

func TestParseGatewayNodeForms(t *testing.T) {
	got, err := ParseGatewayNode(" n1:192.168.0.9 , n2 ")
	if err != nil || len(got) != 2 || got[0].Node != "n1" || got[0].EgressIP.String() != "192.168.0.9" || got[1].Node != "n2" || got[1].EgressIP.IsValid() {
		t.Fatalf("ParseGatewayNode = %+v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "n1,n1", "n1:notanip", ":1.2.3.4", "n1:fd00::1"} {
		if _, err := ParseGatewayNode(bad); err == nil {
			t.Errorf("ParseGatewayNode(%q) accepted", bad)
		}
	}
}

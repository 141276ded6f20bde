package hostnat

import (
	"net"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// Which tracked flows are deleted after the masquerade rules are written:
// only a pod's flow to the outside that was tracked without source NAT.
func TestStaleFlowMatchesOnlyUntranslatedPodEgress(t *testing.T) {
	n, err := normalize(Rules{NATOutgoing: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")},
		Exclude: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16"), netip.MustParsePrefix("10.96.0.0/12")}})
	if err != nil {
		t.Fatal(err)
	}
	flow := func(src, dst, replyDst string) *netlink.ConntrackFlow {
		return &netlink.ConntrackFlow{Forward: netlink.IPTuple{SrcIP: net.ParseIP(src), DstIP: net.ParseIP(dst)},
			Reverse: netlink.IPTuple{SrcIP: net.ParseIP(dst), DstIP: net.ParseIP(replyDst)}}
	}
	for _, c := range []struct {
		name string
		f    *netlink.ConntrackFlow
		want bool
	}{
		{"pod to outside, untranslated (the first SYN before the rules)", flow("10.16.0.5", "192.168.206.10", "10.16.0.5"), true},
		{"pod to outside, masqueraded to the node", flow("10.16.0.5", "192.168.206.10", "192.168.206.2"), false},
		{"pod to a Service (never masqueraded)", flow("10.16.0.5", "10.96.0.10", "10.16.0.5"), false},
		{"pod to pod", flow("10.16.0.5", "10.16.0.6", "10.16.0.5"), false},
		{"the node's own connection", flow("192.168.206.2", "192.168.206.10", "192.168.206.2"), false},
		{"a pod's flow in an OVN conntrack zone (OVS datapath)", inZone(flow("10.16.0.5", "192.168.206.10", "10.16.0.5"), 5), false},
	} {
		if got := (staleFlow{n[v4]}).MatchConntrackFlow(c.f); got != c.want {
			t.Errorf("%s: match %v, want %v", c.name, got, c.want)
		}
	}
}

func inZone(f *netlink.ConntrackFlow, zone uint16) *netlink.ConntrackFlow {
	f.Zone = zone
	return f
}

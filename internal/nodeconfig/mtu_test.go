package nodeconfig

import "testing"

func TestPodMTU(t *testing.T) {
	for _, c := range []struct {
		configured, underlay int
		tunnel               string
		encap6               bool
		want                 int
	}{
		{0, 1500, "geneve", false, 1400},
		{0, 1500, "geneve", true, 1400}, // 100 covers Geneve's 78 over IPv6
		{0, 1500, "vxlan", false, 1450},
		{0, 1500, "vxlan", true, 1430}, // IPv6 outer header: 20 more
		{0, 1500, "stt", true, 1402},
		{0, 9000, "", false, 8900},
		{1300, 1500, "vxlan", true, 1300}, // configured wins
		{0, 0, "vxlan", true, FallbackPodMTU},
	} {
		if got := PodMTU(c.configured, c.underlay, c.tunnel, c.encap6); got != c.want {
			t.Errorf("PodMTU(%d, %d, %q, v6=%v) = %d, want %d", c.configured, c.underlay, c.tunnel, c.encap6, got, c.want)
		}
	}
	for addr, want := range map[string]bool{"fd00::1": true, "10.0.0.1": false, "::ffff:10.0.0.1": false, "": false, "x": false} {
		if IsIPv6(addr) != want {
			t.Errorf("IsIPv6(%q) = %v", addr, !want)
		}
	}
}

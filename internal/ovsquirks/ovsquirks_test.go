package ovsquirks

import (
	"testing"
	"time"
)

func TestBootWaitHoldsBackOnlyOpenVSwitch310BeforeTenSeconds(t *testing.T) {
	const debian12 = "ovs-vswitchd (Open vSwitch) 3.1.0\n"
	for _, c := range []struct {
		version string
		up      time.Duration
		want    time.Duration
	}{
		{debian12, 3 * time.Second, 7 * time.Second},
		{debian12, 9900 * time.Millisecond, 100 * time.Millisecond},
		{debian12, 10 * time.Second, 0},
		{debian12, time.Hour, 0},
		{"ovs-vswitchd (Open vSwitch) 3.1.1\n", 3 * time.Second, 0},
		{"ovs-vswitchd (Open vSwitch) 3.1.0.1\n", 3 * time.Second, 0},
		{"ovs-vswitchd (Open vSwitch) 3.3.0\nDPDK 23.11.0\n", 3 * time.Second, 0},
		{"ovs-vswitchd (Open vSwitch) 2.17.9\n", 3 * time.Second, 0},
		{"garbage", 3 * time.Second, 0},
	} {
		if got := BootWait(Version(c.version), c.up); got != c.want {
			t.Errorf("BootWait(Version(%q), %v) = %v, want %v", c.version, c.up, got, c.want)
		}
	}
}

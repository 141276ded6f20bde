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

func TestRecreatesTunnelBackersUntilTheFixedReleases(t *testing.T) {
	for release, want := range map[string]bool{
		"3.1.0": true, "3.1.1": false, "3.1.0.1": true, "3.0.3": true, "3.0.4": false,
		"2.17.5": true, "2.17.6": false, "2.16.9": true, "2.13.0": true,
		"3.2.0": false, "3.5.0": false, "4.0.0": false, "": false, "garbage": false,
	} {
		if got := RecreatesTunnelBackers(release); got != want {
			t.Errorf("RecreatesTunnelBackers(%q) = %v, want %v", release, got, want)
		}
	}
}

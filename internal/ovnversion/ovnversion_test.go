package ovnversion

import "testing"

func TestCompareAndMatchNorthd(t *testing.T) {
	for _, tc := range []struct {
		northd, controller string
		skew               Skew
		match              bool
	}{
		{"23.03.1-20.27.0-70.6", "23.03.1", Same, false},
		{"23.03.1-20.27.0-70.6", "23.03.0-20.27.0-70.5", Same, false},
		// Kube-OVN 1.15's central (25.03) with Debian 12's controller.
		{"25.03.0-20.41.0-78.0", "23.03.1", ControllerOlder, true},
		{"23.03.1-20.27.0-70.6", "22.03.3", ControllerOlder, true},
		{"22.03.3-20.21.0-59.1", "23.03.1", ControllerNewer, false},
		{"22.03.3-20.21.0-59.1", "24.03.2", ControllerNewer, false},
		{"22.03.3-20.21.0-59.1", "25.03.0", ControllerTooNew, true},
		{"", "23.03.1", Unknown, false},
		{"23.03.1-20.27.0-70.6", "", Unknown, false},
	} {
		s := Compare(tc.northd, tc.controller)
		if s != tc.skew || s.MatchNorthd() != tc.match {
			t.Errorf("northd %q controller %q: %v (match %v), want %v (match %v)", tc.northd, tc.controller, s, s.MatchNorthd(), tc.skew, tc.match)
		}
	}
}

func TestParse(t *testing.T) {
	if v := Controller("ovn-controller 23.03.1\nOpen vSwitch Library 3.1.0\n"); v != "23.03.1" {
		t.Fatal(v)
	}
	if v := Controller("ovn-controller (Open vSwitch) 22.03.0\n"); v != "22.03.0" {
		t.Fatal(v)
	}
	if v := InternalFromLog("2026-01-01T00:00:00Z|00010|main|INFO|OVN internal version is : [23.03.1-20.27.0-70.6]"); v != "23.03.1-20.27.0-70.6" {
		t.Fatal(v)
	}
	if y, m := LTSBefore(25, 3); y != 24 || m != 3 {
		t.Fatal(y, m)
	}
}

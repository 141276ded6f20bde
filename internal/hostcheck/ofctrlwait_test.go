package hostcheck

import (
	"strings"
	"testing"
	"time"
)

func TestOfctrlWait(t *testing.T) {
	out := "Statistics for 'flow-generation'\n  Total samples: 4\n  Maximum: 1300 msec\n  Minimum: 2 msec\n"
	if d, ok := FlowGenerationMax(out); !ok || d != 1300*time.Millisecond {
		t.Fatalf("FlowGenerationMax = %v %v", d, ok)
	}
	if _, ok := FlowGenerationMax("Statistics for 'flow-generation'\n  Total samples: 0\n  Maximum: 0 msec\n"); ok {
		t.Fatal("no samples read as a measurement")
	}
	for _, tc := range []struct {
		configured time.Duration
		written    string
		maxGen     time.Duration
		known      bool
		status     Status
		found, fix string
	}{
		{2 * time.Second, "2000", 40 * time.Millisecond, true, Pass, "up to 2000 ms", ""},
		{2 * time.Second, "0", 40 * time.Millisecond, true, Pass, "ovs-vswitchd was started afresh", ""},
		{2 * time.Second, "2000", 1300 * time.Millisecond, true, Warn, "longest flow generation: 1300 ms", "raise --ovn-ofctrl-wait-before-clear to 3000"},
		{0, "0", 0, false, Warn, "deletes every flow", "twice the longest flow generation"},
		{2 * time.Second, "", 0, false, Pass, "not in conf.db yet", ""},
	} {
		c := CheckOfctrlWait(tc.configured, tc.written, tc.maxGen, tc.known)
		if c.Status != tc.status || !strings.Contains(c.Found, tc.found) || !strings.Contains(c.Fix, tc.fix) {
			t.Errorf("%+v: %+v", tc, c)
		}
	}
}

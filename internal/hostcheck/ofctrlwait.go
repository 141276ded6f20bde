package hostcheck

import (
	"fmt"
	"regexp"
	"strconv"
	"time"
)

// FlowGenerationMax reads "Maximum: 12 msec" from ovn-controller's
// `stopwatch/show flow-generation`; false before any sample.
func FlowGenerationMax(out string) (time.Duration, bool) {
	total := regexp.MustCompile(`Total samples:\s*(\d+)`).FindStringSubmatch(out)
	m := regexp.MustCompile(`Maximum:\s*([0-9.]+)\s*msec`).FindStringSubmatch(out)
	if m == nil || (total != nil && total[1] == "0") {
		return 0, false
	}
	ms, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, false
	}
	return time.Duration(ms * float64(time.Millisecond)), true
}

// CheckOfctrlWait reports how long a restarted ovn-controller keeps
// br-int's flows (the setting, and what conf.db holds now: 0 after
// ovs-vswitchd itself started, with nothing to keep) against OVN's rule
// of thumb, twice ovn-controller's longest flow generation: a wait that
// ends before the computation installs a partial table in place of the
// old one (OVN 23.03's ofctrl), and the node is dark for the rest of it.
func CheckOfctrlWait(configured time.Duration, written string, maxGen time.Duration, known bool) Check {
	const name = "ofctrl-wait-before-clear"
	ms := configured.Milliseconds()
	found := fmt.Sprintf("a restarted ovn-controller keeps br-int's flows for up to %d ms (--ovn-ofctrl-wait-before-clear)", ms)
	switch {
	case written == "":
		found += "; not in conf.db yet (ovn-controller not started by this ovnhost)"
	case written != strconv.FormatInt(ms, 10):
		found += "; conf.db has " + written + " ms now: ovs-vswitchd was started afresh, with no flows to keep"
	}
	if known {
		found += fmt.Sprintf("; ovn-controller's longest flow generation: %d ms", maxGen.Milliseconds())
	} else {
		found += "; ovn-controller's flow generation not measured (not running, or no sample yet)"
	}
	if ms == 0 {
		return Check{Name: name, Status: Warn, Found: found + ": a restart of ovn-controller deletes every flow before it has computed new ones",
			Fix: "set --ovn-ofctrl-wait-before-clear to twice the longest flow generation (ovn-appctl -t ovn-controller stopwatch/show flow-generation)"}
	}
	if known && configured < 2*maxGen {
		want := (2*maxGen.Milliseconds() + 999) / 1000 * 1000
		return Check{Name: name, Status: Warn, Found: found + ": less than twice that, so a restart can replace the flows with a partial table",
			Fix: fmt.Sprintf("raise --ovn-ofctrl-wait-before-clear to %d or more (OVN: twice the longest flow generation)", want)}
	}
	return Check{Name: name, Status: Pass, Found: found}
}

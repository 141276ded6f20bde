// Package ovnversion reads OVN release numbers and judges the skew between
// a node's ovn-controller and the central's ovn-northd, for netctl doctor
// and for the node, which sets ovn-match-northd-version from the same
// verdict.
package ovnversion

import (
	"fmt"
	"regexp"
	"strconv"
)

var (
	releaseRe    = regexp.MustCompile(`(\d+)\.(\d+)`)
	controllerRe = regexp.MustCompile(`ovn-controller\S*\s+(?:\(Open vSwitch\)\s+)?(\d+\.\d+(?:\.\d+)?)`)
	internalRe   = regexp.MustCompile(`OVN internal version is : \[([^\]]+)\]`)
)

// Release reads year and month ("23.03") from a version or an internal
// version ("23.03.1-20.27.0-70.6").
func Release(s string) (year, month int, ok bool) {
	m := releaseRe.FindStringSubmatch(s)
	if m == nil {
		return 0, 0, false
	}
	year, _ = strconv.Atoi(m[1])
	month, _ = strconv.Atoi(m[2])
	return year, month, true
}

// Controller reads "ovn-controller 23.03.1" from the output of the control
// socket's version command (or ovn-controller --version).
func Controller(out string) string {
	m := controllerRe.FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// InternalFromLog reads the internal version ovn-controller logs when it
// starts ("OVN internal version is : [23.03.1-20.27.0-70.6]").
func InternalFromLog(line string) string {
	m := internalRe.FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1]
}

// LTSBefore is the newest OVN long-term-support release before y.m: LTS
// releases are YY.03 of even years from 22.03 on.
func LTSBefore(y, m int) (int, int) {
	for ly := y; ly >= 22; ly-- {
		if ly%2 == 0 && (ly < y || (ly == y && 3 < m)) {
			return ly, 3
		}
	}
	return 22, 3
}

// Skew is how a node's ovn-controller relates to ovn-northd.
type Skew int

// The skews. OVN's upgrade guide (Documentation/intro/install/
// ovn-upgrades.rst): ovn-controllers are upgraded first, then northd and
// the databases, and a rolling upgrade is supported from one LTS to the
// next; beyond that span, or against that order, ovn-controller may not
// understand northd's database and flows.
const (
	Unknown Skew = iota
	Same
	// ControllerNewer: within OVN's rolling-upgrade span.
	ControllerNewer
	// ControllerTooNew: northd older than the LTS before the controller.
	ControllerTooNew
	// ControllerOlder: against OVN's upgrade order.
	ControllerOlder
)

// Compare judges northd's version (SB_Global options:
// northd_internal_version) against the controller's, by release.
func Compare(northd, controller string) Skew {
	ny, nm, nok := Release(northd)
	cy, cm, cok := Release(controller)
	if !nok || !cok {
		return Unknown
	}
	ly, lm := LTSBefore(cy, cm)
	switch {
	case ny == cy && nm == cm:
		return Same
	case ny > cy || (ny == cy && nm > cm):
		return ControllerOlder
	case ny < ly || (ny == ly && nm < lm):
		return ControllerTooNew
	}
	return ControllerNewer
}

// MatchNorthd says whether ovn-controller should run with
// external_ids:ovn-match-northd-version=true: exactly where OVN supports
// no mixed operation (an older controller, or one newer than the span).
// There the option makes ovn-controller process no database change while
// the internal versions differ, keeping the flows it installed, instead
// of misreading the other side's database and flows. Within the rolling
// span (and for the same release) it stays off: OVN supports that mix,
// and the option would freeze the node's flows for nothing.
func (s Skew) MatchNorthd() bool { return s == ControllerOlder || s == ControllerTooNew }

func (s Skew) String() string {
	switch s {
	case Same:
		return "same release"
	case ControllerNewer:
		return "ovn-controller newer than ovn-northd, within OVN's rolling-upgrade span"
	case ControllerTooNew:
		return "ovn-controller newer than ovn-northd beyond OVN's rolling-upgrade span"
	case ControllerOlder:
		return "ovn-controller older than ovn-northd, against OVN's upgrade order"
	}
	return "unknown"
}

// ReleaseString is "23.03" for a version.
func ReleaseString(v string) string {
	y, m, ok := Release(v)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d.%02d", y, m)
}

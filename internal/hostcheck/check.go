// Package hostcheck is the node's host checks as data, shared by the node
// daemon and netctl doctor. Every check says what it found and gives a
// one-line fix, and every failure is reported, not just the first.
//
// Preflight runs before the node daemon starts anything: the datapath,
// capabilities (of the process and of every binary it will exec), the
// directories it writes to, and the tunnel interface; what it finds
// (Findings) resolves the node's configuration (NodeConfig). Doctor runs the
// preflight checks without changing the host, then what needs the resolved
// node and running daemons: CNI, firewall, OVSDB, clock (doctor.go).
//
// Checks are data-driven: each one reads the host only through a small
// interface (see Facts and DoctorFacts), so its logic is unit-tested with
// fake facts and the real collectors (Host, DoctorHost) are tested as root.
package hostcheck

import (
	"fmt"
	"io"
	"strings"
)

// Status is the outcome of one check.
type Status string

// Check outcomes.
const (
	Pass Status = "pass"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is the result of one check: what was looked at, what was found and,
// unless it passed, the one-line fix.
type Check struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Found  string `json:"found"`
	Fix    string `json:"fix,omitempty"`
}

// Worst is the most severe status among checks (Pass when there are none).
func Worst(cs []Check) Status {
	w := Pass
	for _, c := range cs {
		switch c.Status {
		case Fail:
			return Fail
		case Warn:
			w = Warn
		}
	}
	return w
}

// PrintChecks writes checks in the format of PreflightResult.Print.
func PrintChecks(w io.Writer, cs []Check) {
	width := 0
	for _, c := range cs {
		width = max(width, len(c.Name))
	}
	for _, c := range cs {
		fmt.Fprintf(w, "%-4s  %-*s  %s\n", strings.ToUpper(string(c.Status)), width, c.Name, c.Found)
		if c.Status != Pass && c.Fix != "" {
			fmt.Fprintf(w, "      %-*s  fix: %s\n", width, "", c.Fix)
		}
	}
	var nf, nw int
	for _, c := range cs {
		switch c.Status {
		case Fail:
			nf++
		case Warn:
			nw++
		}
	}
	fmt.Fprintf(w, "%d checks: %d failed, %d warnings\n", len(cs), nf, nw)
}

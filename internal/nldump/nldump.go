// Package nldump retries netlink dumps the kernel interrupted. A dump
// (links, addresses, routes, rules) that races a change of the same table
// ends with NLM_F_DUMP_INTR, and vishvananda/netlink returns what it read
// with ErrDumpInterrupted: a partial list. On a node that is creating
// interfaces (pods, taps, ovn0) that is routine, so one reading must not
// fail a check or act on half a table.
package nldump

import (
	"errors"

	"github.com/vishvananda/netlink"
)

// attempts bounds the retries: each dump is one syscall round, and an
// interruption needs a change of the table during it.
const attempts = 10

// Retry runs dump until it completes uninterrupted, at most attempts
// times; after that it returns the last result with ErrDumpInterrupted.
func Retry[T any](dump func() ([]T, error)) ([]T, error) {
	var out []T
	var err error
	for range attempts {
		out, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return out, err
}

package status

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// writeCentral prints a central member's Raft state: one line per
// database, then its members and whether this member reaches them.
func writeCentral(w io.Writer, c *api.CentralStatus) {
	fmt.Fprintf(w, "\nOVN central member %s", c.Address)
	if c.Northd != "" {
		fmt.Fprintf(w, ", ovn-northd %s", c.Northd)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "DATABASE\tSTATUS\tROLE\tTERM\tLEADER\tLOG ENTRIES\tFILE\tMEMBERS")
	for _, db := range c.Databases {
		if db.Error != "" {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t%s\n", db.Name, db.Status, db.Error)
			continue
		}
		leader := db.Leader
		if leader == "" {
			leader = "unknown"
		}
		var ms []string
		for _, m := range db.Members {
			state := "down"
			switch {
			case m.Self:
				state = "self"
			case m.Connected:
				state = "connected"
			}
			ms = append(ms, fmt.Sprintf("%s %s (%s)", m.ID, m.Address, state))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%.1f KiB\t%s\n", db.Name, db.Status, db.Role, db.Term, leader, db.LogEntries, float64(db.LogBytes)/1024, strings.Join(ms, ", "))
	}
	_ = tw.Flush()
}

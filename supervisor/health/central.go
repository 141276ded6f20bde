package health

import (
	"fmt"
	"io"
)

// SetCentral makes /status and /readyz?verbose include fn's report.
func (r *Reporter) SetCentral(fn func() *CentralStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.central = fn
}

func (r *Reporter) centralStatus() *CentralStatus {
	r.mu.Lock()
	fn := r.central
	r.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn()
}

// WriteCentral prints the Raft state for people (/readyz?verbose, netctl status).
func WriteCentral(w io.Writer, c *CentralStatus) {
	if c == nil {
		return
	}
	for _, db := range c.Databases {
		if db.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", db.Name, db.Error)
			continue
		}
		leader := db.Leader
		if leader == "" {
			leader = "unknown"
		}
		up := 0
		for _, m := range db.Members {
			if m.Self || m.Connected {
				up++
			}
		}
		fmt.Fprintf(w, "%s %s role=%s term=%d leader=%s members=%d/%d connected log_entries=%d log_bytes=%d\n",
			db.Name, db.Status, db.Role, db.Term, leader, up, len(db.Members), db.LogEntries, db.LogBytes)
	}
	if c.Northd != "" {
		fmt.Fprintf(w, "ovn-northd %s\n", c.Northd)
	}
}

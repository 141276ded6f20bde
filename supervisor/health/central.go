package health

import (
	"fmt"
	"io"
)

// CentralStatus is what a member of the clustered OVN central reports
// beside its children: each Raft database as the member sees it, and
// whether its ovn-northd is the active one.
type CentralStatus struct {
	Address   string   `json:"address"`
	Databases []RaftDB `json:"databases"`
	// Northd is ovn-northd's own word: "active", "standby", "paused" or "".
	Northd string `json:"northd,omitempty"`
}

// RaftDB is one clustered database (cluster/status of this member).
type RaftDB struct {
	Name      string `json:"name"`
	ClusterID string `json:"cluster_id,omitempty"`
	ServerID  string `json:"server_id,omitempty"`
	Address   string `json:"address,omitempty"`
	// Status is "cluster member", "joining cluster", "leaving cluster"...
	Status string `json:"status"`
	Role   string `json:"role,omitempty"`
	Term   uint64 `json:"term"`
	// Leader is the leader's server ID, "self", or "" when unknown.
	Leader          string `json:"leader,omitempty"`
	ElectionTimerMS int    `json:"election_timer_ms,omitempty"`
	// LogEntries are the entries since the last snapshot; LogBytes the
	// database file's size on disk.
	LogEntries uint64       `json:"log_entries"`
	LogBytes   int64        `json:"log_bytes"`
	Members    []RaftMember `json:"members"`
	// Error is why the status could not be read ("" when it was).
	Error string `json:"error,omitempty"`
}

// RaftMember is one server of a database's cluster configuration.
type RaftMember struct {
	ID        string `json:"id"`
	Address   string `json:"address"`
	Self      bool   `json:"self,omitempty"`
	Connected bool   `json:"connected"`
}

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

package nodeapi

// Snapshot is the node daemon's state: GET /v1/status here, and GET
// /status on its health address (`netctl status`).
type Snapshot struct {
	Ready    bool          `json:"ready"`
	Status   string        `json:"status"`
	Version  string        `json:"version"`
	Uptime   string        `json:"uptime"`
	Children []ChildStatus `json:"children"`
	// Central is a central member's Raft state (role=central only).
	Central *CentralStatus `json:"central,omitempty"`
}

// ChildStatus is one child in a Snapshot.
type ChildStatus struct {
	Name      string `json:"name"`
	Pid       int    `json:"pid,omitempty"`
	Up        bool   `json:"up"`
	Ready     bool   `json:"ready"`
	Waiting   string `json:"waiting,omitempty"`
	Restarts  int    `json:"restarts"`
	LastExit  string `json:"last_exit,omitempty"`
	CrashLoop bool   `json:"crash_loop,omitempty"`
	// Degraded: ready, but without part of what it serves (an underlay
	// network whose NIC is missing), and why.
	Degraded string `json:"degraded,omitempty"`
	RSSBytes int64  `json:"rss_bytes,omitempty"`
}

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

package health

import "github.com/ovnhost/ovnhost/internal/nodeapi"

// The /status body and a central member's Raft report are wire types of the
// node API (internal/nodeapi), which netctl decodes; these names are the
// same types for the daemon's side.
type (
	Snapshot      = nodeapi.Snapshot
	ChildStatus   = nodeapi.ChildStatus
	CentralStatus = nodeapi.CentralStatus
	RaftDB        = nodeapi.RaftDB
	RaftMember    = nodeapi.RaftMember
)

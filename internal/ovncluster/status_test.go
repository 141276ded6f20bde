package ovncluster

import (
	"testing"
)

const leaderStatus = `ae26
Name: OVN_Northbound
Cluster ID: 93ff (93ff2c73-4cf3-4c6c-97e0-4f742cf8625b)
Server ID: ae26 (ae2648c8-1a02-44e1-ab27-12bf29d24f1a)
Address: tcp:127.0.0.1:16643
Status: cluster member
Role: leader
Term: 3
Leader: self
Vote: self

Last Election started 3139 ms ago, reason: timeout
Last Election won: 3139 ms ago
Election timer: 1000
Log: [2, 8]
Entries not yet committed: 0
Entries not yet applied: 0
Connections: <-51a4 ->51a4 <-5a76 ->5a76
Disconnections: 0
Servers:
    85b0 (85b0 at tcp:127.0.0.1:26643) next_index=8 match_index=6 last msg 3819 ms ago
    51a4 (51a4 at tcp:127.0.0.1:36643) next_index=8 match_index=7 last msg 326 ms ago
    ae26 (ae26 at tcp:127.0.0.1:16643) (self) next_index=6 match_index=7
    5a76 (5a76 at tcp:127.0.0.1:26643) next_index=8 match_index=7 last msg 326 ms ago
`

const rejoinedStatus = `5a76
Name: OVN_Northbound
Cluster ID: 93ff (93ff2c73-4cf3-4c6c-97e0-4f742cf8625b)
Server ID: 5a76 (5a768683-7e28-4ba6-8f18-8dcc9469f2f7)
Address: tcp:127.0.0.1:26643
Status: cluster member
Role: follower
Term: 3
Leader: ae26
Vote: unknown

Election timer: 1000
Log: [2, 8]
Connections: ->0000 ->0000 <-ae26 <-51a4
Servers:
    85b0 (85b0 at tcp:127.0.0.1:26643)
    ae26 (ae26 at tcp:127.0.0.1:16643) last msg 290 ms ago
    51a4 (51a4 at tcp:127.0.0.1:36643)
    5a76 (5a76 at tcp:127.0.0.1:26643) (self)
`

func TestParseStatus(t *testing.T) {
	s, err := ParseStatus(leaderStatus)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "OVN_Northbound" || s.ClusterID != "93ff2c73-4cf3-4c6c-97e0-4f742cf8625b" || s.ServerID != "ae2648c8-1a02-44e1-ab27-12bf29d24f1a" || s.SelfShort != "ae26" {
		t.Fatalf("identity: %+v", s)
	}
	if !s.Member() || !s.LeaderKnown() || s.Role != "leader" || s.Term != 3 || s.ElectionTimer != 1000 || s.LogStart != 2 || s.LogEnd != 8 {
		t.Fatalf("state: %+v", s)
	}
	if len(s.Servers) != 4 || !s.Servers[2].Self || s.Servers[0].Address != "tcp:127.0.0.1:26643" {
		t.Fatalf("servers: %+v", s.Servers)
	}
	r := s.Report(1234)
	conn := map[string]bool{}
	for _, m := range r.Members {
		conn[m.ID] = m.Connected
	}
	if conn["85b0"] || !conn["51a4"] || !conn["ae26"] || !conn["5a76"] || r.LogEntries != 6 || r.LogBytes != 1234 {
		t.Fatalf("report: %+v", r)
	}
	if st := s.StaleServers(); len(st) != 0 {
		t.Fatalf("the leader has no stale incarnation of itself: %+v", st)
	}
}

func TestStaleServersAreEarlierIncarnations(t *testing.T) {
	s, err := ParseStatus(rejoinedStatus)
	if err != nil {
		t.Fatal(err)
	}
	st := s.StaleServers()
	if len(st) != 1 || st[0].ID != "85b0" {
		t.Fatalf("stale = %+v, want 85b0 (same address, other ID)", st)
	}
}

func TestParseLeaderUnknownAndJoining(t *testing.T) {
	s, err := ParseStatus("Name: OVN_Southbound\nCluster ID: not yet known\nServer ID: 1234 (12345678-0000-0000-0000-000000000000)\nAddress: tcp:10.0.0.2:6644\nStatus: joining cluster\nRole: follower\nTerm: 0\nLeader: unknown\n")
	if err != nil {
		t.Fatal(err)
	}
	if s.Member() || s.LeaderKnown() || s.ClusterID != "" {
		t.Fatalf("joining server read as %+v", s)
	}
	if _, err := ParseStatus("unknown cluster"); err == nil {
		t.Fatal("garbage parsed")
	}
}

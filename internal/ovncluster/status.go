// Package ovncluster reads what a clustered (Raft) ovsdb-server says about
// itself: the text of `ovs-appctl cluster/status DB`. Pure: the central's
// supervisor (supervisor/central) and netctl doctor's central checks parse
// the same answer the same way.
package ovncluster

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"

	"github.com/ovnhost/ovnhost/internal/nodeapi"
)

// Status is what `cluster/status DB` of one ovsdb-server says.
type Status struct {
	Name      string
	ClusterID string // full UUID, "" while joining
	ServerID  string // full UUID
	SelfShort string // the 4-digit form the server list uses
	Address   string // this server's Raft address, e.g. tcp:10.0.0.1:6643
	// Status: "cluster member", "joining cluster", "leaving cluster",
	// "left cluster", "failed" (OVS's words).
	Status        string
	Role          string // leader, follower, candidate
	Term          uint64
	Leader        string // short ID, "self", or "" when unknown
	ElectionTimer int    // milliseconds
	LogStart      uint64
	LogEnd        uint64
	Servers       []Server
	// connections are the short IDs with a live Raft connection.
	connections map[string]bool
}

// Server is one entry of the cluster configuration.
type Server struct {
	ID      string // short ID
	Address string
	Self    bool
}

// Member reports whether this server has joined and is in the configuration.
func (s *Status) Member() bool { return s.Status == "cluster member" }

// LeaderKnown reports whether this server knows who leads the cluster.
func (s *Status) LeaderKnown() bool { return s.Leader != "" }

// Connected reports whether this server has a Raft connection to server id.
func (s *Status) Connected(id string) bool { return s.connections[id] }

// ParseStatus reads the text of `cluster/status`.
func ParseStatus(text string) (*Status, error) {
	s := &Status{connections: map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	inServers := false
	for sc.Scan() {
		line := sc.Text()
		if inServers && strings.HasPrefix(line, " ") {
			if srv, ok := parseServer(strings.TrimSpace(line)); ok {
				s.Servers = append(s.Servers, srv)
			}
			continue
		}
		inServers = false
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch key {
		case "Name":
			s.Name = val
		case "Cluster ID":
			s.ClusterID = fullID(val)
		case "Server ID":
			s.ServerID = fullID(val)
			s.SelfShort, _, _ = strings.Cut(val, " ")
		case "Address":
			s.Address = val
		case "Status":
			s.Status = val
		case "Role":
			s.Role = val
		case "Term":
			s.Term, _ = strconv.ParseUint(val, 10, 64)
		case "Leader":
			if val != "unknown" {
				s.Leader = val
			}
		case "Election timer":
			s.ElectionTimer, _ = strconv.Atoi(val)
		case "Log":
			// "[2, 5]"
			a, b, ok := strings.Cut(strings.Trim(val, "[]"), ",")
			if ok {
				s.LogStart, _ = strconv.ParseUint(strings.TrimSpace(a), 10, 64)
				s.LogEnd, _ = strconv.ParseUint(strings.TrimSpace(b), 10, 64)
			}
		case "Connections":
			for _, f := range strings.Fields(val) {
				id := strings.TrimLeft(f, "<->")
				if id != "" && id != "0000" {
					s.connections[id] = true
				}
			}
		case "Servers":
			inServers = true
		}
	}
	if s.Name == "" || s.Status == "" {
		return nil, fmt.Errorf("not the output of cluster/status: %q", firstLine(text))
	}
	return s, nil
}

// fullID takes "93ff (93ff2c73-4cf3-...)" to the UUID in brackets.
func fullID(v string) string {
	if i, j := strings.IndexByte(v, '('), strings.IndexByte(v, ')'); i >= 0 && j > i {
		return v[i+1 : j]
	}
	return ""
}

// parseServer reads "51a4 (51a4 at tcp:127.0.0.1:36643) (self) next_index=...".
func parseServer(line string) (Server, bool) {
	id, rest, ok := strings.Cut(line, " ")
	if !ok {
		return Server{}, false
	}
	i, j := strings.IndexByte(rest, '('), strings.IndexByte(rest, ')')
	if i < 0 || j < i {
		return Server{}, false
	}
	_, addr, ok := strings.Cut(rest[i+1:j], " at ")
	if !ok {
		return Server{}, false
	}
	return Server{ID: id, Address: addr, Self: strings.Contains(rest[j:], "(self)")}, true
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}

// StaleServers are servers of the configuration at this server's own
// address but with another ID: an earlier incarnation of this member whose
// database was lost. They count towards the quorum and never come back.
func (s *Status) StaleServers() []Server {
	var out []Server
	for _, srv := range s.Servers {
		if !srv.Self && srv.Address == s.Address && srv.ID != s.SelfShort {
			out = append(out, srv)
		}
	}
	return out
}

// Report turns the status into what the node daemon publishes (/status).
func (s *Status) Report(fileBytes int64) nodeapi.RaftDB {
	r := nodeapi.RaftDB{Name: s.Name, ClusterID: s.ClusterID, ServerID: s.ServerID, Address: s.Address, Status: s.Status,
		Role: s.Role, Term: s.Term, Leader: s.Leader, ElectionTimerMS: s.ElectionTimer, LogBytes: fileBytes}
	if s.LogEnd > s.LogStart {
		r.LogEntries = s.LogEnd - s.LogStart
	}
	for _, srv := range s.Servers {
		r.Members = append(r.Members, nodeapi.RaftMember{ID: srv.ID, Address: srv.Address, Self: srv.Self, Connected: srv.Self || s.Connected(srv.ID)})
	}
	return r
}

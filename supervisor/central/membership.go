package central

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// The ports of Kube-OVN's ovn-central: OVSDB clients on 6641 (NB) and 6642
// (SB), Raft between the members on 6643 (NB) and 6644 (SB).
const (
	NBRaftPort = 6643
	SBRaftPort = 6644
)

// raftAddress is a member's Raft address ("tcp:10.0.0.1:6643").
func raftAddress(ip string, port int, ssl bool) string {
	scheme := "tcp:"
	if ssl {
		scheme = "ssl:"
	}
	return scheme + net.JoinHostPort(ip, strconv.Itoa(port))
}

// clientRemote is the OVSDB remote of a member's client port
// ("tcp:10.0.0.1:6641"): the same form as a Raft address.
func clientRemote(ip string, port int, ssl bool) string { return raftAddress(ip, port, ssl) }

// listenRemote is ovsdb-server's passive remote for clients on ip:port.
func listenRemote(ip string, port int, ssl bool) string {
	scheme := "ptcp:"
	if ssl {
		scheme = "pssl:"
	}
	if strings.Contains(ip, ":") {
		ip = "[" + ip + "]"
	}
	return fmt.Sprintf("%s%d:%s", scheme, port, ip)
}

// Action is what a member does with a database before starting its server.
type Action string

const (
	// Open: the database file exists; run it as it is.
	Open Action = "open"
	// Create a new cluster whose first member is this one.
	Create Action = "create"
	// Join the existing cluster (or the one the bootstrap member creates).
	Join Action = "join"
	// Wait: not decided yet; ask the peers again.
	Wait Action = "wait"
)

// PeerDB is what a peer's ovsdb-server says about one database.
type PeerDB struct {
	IP       string
	Answered bool
	// ClusterID is the cluster the peer belongs to ("" while it is
	// joining, or when it has no such database).
	ClusterID string
}

// Decision is a membership decision with its reason, for the log.
type Decision struct {
	Action    Action
	ClusterID string // for Join: the cluster to join, when a peer named it
	Reason    string
}

// DecideMissing decides what a member without a database file does.
// members is OVN_DB_IPS in its order; its first address is the bootstrap
// member, the only one that may create the cluster, and only when every
// other member answers without one: a member that does not answer may hold
// the cluster's data (a reboot of the others, a wiped disk here), and a
// second cluster would split the central in two. Everyone else joins; a
// cluster ID a peer reports is passed on so that a member never joins a
// stranger's cluster.
func DecideMissing(self string, members []string, peers []PeerDB) (Decision, error) {
	ids := map[string][]string{}
	var silent []string
	for _, p := range peers {
		switch {
		case !p.Answered:
			silent = append(silent, p.IP)
		case p.ClusterID != "":
			ids[p.ClusterID] = append(ids[p.ClusterID], p.IP)
		}
	}
	if len(ids) > 1 {
		var parts []string
		for id, ips := range ids {
			parts = append(parts, fmt.Sprintf("%s on %s", id, strings.Join(ips, ",")))
		}
		return Decision{}, fmt.Errorf("the members of OVN_DB_IPS belong to different clusters (%s): a split central; keep the cluster with the data, delete the other members' databases so they rejoin it", strings.Join(parts, "; "))
	}
	for id, ips := range ids {
		return Decision{Action: Join, ClusterID: id, Reason: fmt.Sprintf("no local database; %s serve cluster %s", strings.Join(ips, ","), id)}, nil
	}
	if len(members) == 0 || members[0] != self {
		return Decision{Action: Join, Reason: fmt.Sprintf("no local database; the bootstrap member %s creates the cluster, this member joins it", first(members))}, nil
	}
	if len(members) == 1 {
		return Decision{Action: Create, Reason: "no local database; the only member of OVN_DB_IPS creates the cluster"}, nil
	}
	if len(silent) > 0 {
		return Decision{Action: Wait, Reason: fmt.Sprintf("no local database; as bootstrap member, waiting for %s to answer before creating a cluster (they may hold its data)", strings.Join(silent, ","))}, nil
	}
	return Decision{Action: Create, Reason: "no local database and no member has a cluster: the bootstrap member (first of OVN_DB_IPS) creates it"}, nil
}

func first(ss []string) string {
	if len(ss) == 0 {
		return ""
	}
	return ss[0]
}

// Leaving reports whether a member with a database must leave: its
// address is no longer in OVN_DB_IPS.
func Leaving(self string, members []string) bool {
	return !contains(members, self)
}

// sameIP compares two addresses as addresses (::ffff:10.0.0.1 is 10.0.0.1).
func sameIP(a, b string) bool { return contains([]string{a}, b) }

func contains(ips []string, ip string) bool {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return false
	}
	for _, m := range ips {
		if b, err := netip.ParseAddr(m); err == nil && a.Unmap() == b.Unmap() {
			return true
		}
	}
	return false
}

// ipOfRaftAddress takes "tcp:10.0.0.1:6643" to "10.0.0.1".
func ipOfRaftAddress(addr string) string {
	_, hp, ok := strings.Cut(addr, ":")
	if !ok {
		return ""
	}
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return ""
	}
	return host
}

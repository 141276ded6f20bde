package doctor

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb/serverdb"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/ovncluster"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// CentralFacts is what the central's checks read (role=central).
type CentralFacts interface {
	// ClusterStatus is `cluster/status db` on the local server's ctl.
	ClusterStatus(ctx context.Context, ctl, db string) (string, error)
	// ServerDatabases reads the _Server database of the OVSDB server at remote.
	ServerDatabases(ctx context.Context, remote string) ([]serverdb.Database, error)
	// Disk is the size and free space of the file system holding path.
	Disk(path string) (total, free uint64, err error)
	FileSize(path string) (int64, error)
	// TLSHandshake completes a TLS handshake with addr (ssl members).
	TLSHandshake(ctx context.Context, addr string) error
	Now() time.Time
	ClockSync() (synced bool, maxError time.Duration, err error)
	CertValidity(path string) (notBefore, notAfter time.Time, err error)
}

// centralHost is the real central member: the node's questions (OVSDB,
// TLS, clock) and the central's own.
type centralHost struct{ *hostcheck.DoctorHost }

var _ CentralFacts = centralHost{}

// ClusterStatus calls cluster/status on the server's control socket.
func (centralHost) ClusterStatus(ctx context.Context, ctl, db string) (string, error) {
	return unixctl.Call(ctx, ctl, "cluster/status", db)
}

// Disk reads the file system's size and the space left to unprivileged use.
func (centralHost) Disk(path string) (uint64, uint64, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		return 0, 0, err
	}
	return st.Blocks * uint64(st.Bsize), st.Bavail * uint64(st.Bsize), nil
}

// FileSize is the size of a file.
func (centralHost) FileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// centralDBs are the two clustered databases and their ports.
var centralDBs = []struct {
	name       string
	clientPort int
	ctl        func(layout.Layout) string
	file       func(layout.Layout) string
}{
	{"OVN_Northbound", ovsdbconn.NBPort, func(l layout.Layout) string { return l.NBCtl }, func(l layout.Layout) string { return l.NBDB }},
	{"OVN_Southbound", ovsdbconn.SBPort, func(l layout.Layout) string { return l.SBCtl }, func(l layout.Layout) string { return l.SBDB }},
}

// RunCentral is doctor on a central member: the local Raft state of both
// databases, the members of OVN_DB_IPS against the cluster configuration
// (one missing, one down, one extra), a split brain (members that answer
// with different clusters, or two leaders), the disk under the databases,
// and under SSL the clock and the members' TLS handshakes.
func RunCentral(ctx context.Context, cfg *config.Config, opts Options) *hostcheck.Report {
	f, _ := opts.Facts.(CentralFacts)
	if f == nil {
		f = centralHost{hostcheck.NewDoctorHost(cfg.HostSettings())}
	}
	to := opts.Timeout
	if to <= 0 {
		to = 3 * time.Second
	}
	lay := layout.New(cfg.Paths)
	r := &hostcheck.Report{}
	var dbBytes int64
	for _, db := range centralDBs {
		cx, cancel := context.WithTimeout(ctx, to)
		text, err := f.ClusterStatus(cx, db.ctl(lay), db.name)
		cancel()
		var st *ovncluster.Status
		if err == nil {
			st, err = ovncluster.ParseStatus(text)
		}
		r.Checks = append(r.Checks, CheckRaft(db.name, st, err))
		if st != nil {
			r.Checks = append(r.Checks, CheckMembers(db.name, cfg.OVNDBIPs, st))
		}
		var answers []MemberAnswer
		for _, ip := range cfg.OVNDBIPs {
			remote := clientRemote(ip, db.clientPort, cfg.EnableSSL)
			cx, cancel := context.WithTimeout(ctx, to)
			rows, err := f.ServerDatabases(cx, remote)
			cancel()
			answers = append(answers, memberAnswer(ip, db.name, rows, err))
		}
		r.Checks = append(r.Checks, CheckSplitBrain(db.name, answers))
		if n, err := f.FileSize(db.file(lay)); err == nil {
			dbBytes += n
		}
	}
	total, free, err := f.Disk(cfg.Paths.OVNDBDir)
	r.Checks = append(r.Checks, CheckCentralDisk(cfg.Paths.OVNDBDir, total, free, dbBytes, err))
	r.Checks = append(r.Checks, CheckCentralClock(ctx, cfg, f, to))
	r.Status = hostcheck.Worst(r.Checks)
	return r
}

func clientRemote(ip string, port int, ssl bool) string {
	s := "tcp:"
	if ssl {
		s = "ssl:"
	}
	return s + net.JoinHostPort(ip, strconv.Itoa(port))
}

// CheckRaft: this member's server is in its cluster and knows the leader.
func CheckRaft(db string, st *ovncluster.Status, err error) hostcheck.Check {
	c := hostcheck.Check{Name: "raft:" + db}
	switch {
	case err != nil:
		c.Status, c.Found, c.Fix = hostcheck.Fail, "cluster/status does not answer: "+err.Error(), "start the central (ovnhost run --role=central) or check its log"
	case !st.Member():
		c.Status, c.Found, c.Fix = hostcheck.Fail, fmt.Sprintf("status %q (server %s at %s)", st.Status, st.SelfShort, st.Address), "a joining member needs a majority of OVN_DB_IPS up and reachable on the Raft port"
	case !st.LeaderKnown():
		c.Status, c.Found, c.Fix = hostcheck.Fail, fmt.Sprintf("no leader known (role %s, term %d): the cluster has no quorum as seen from here", st.Role, st.Term), "bring a majority of the members up, and check the Raft ports 6643/6644 between them"
	default:
		leader := st.Leader
		if leader == "self" {
			leader = "this member"
		}
		c.Status, c.Found = hostcheck.Pass, fmt.Sprintf("%s, term %d, leader %s, %d servers, log [%d, %d]", st.Role, st.Term, leader, len(st.Servers), st.LogStart, st.LogEnd)
	}
	return c
}

// CheckMembers compares OVN_DB_IPS with the cluster configuration: a listed
// member absent from it (missing: never joined, or kicked), a server this
// member has no connection to (down), and a server not listed (extra: a
// stale ID or a member that was not removed).
func CheckMembers(db string, members []string, st *ovncluster.Status) hostcheck.Check {
	c := hostcheck.Check{Name: "members:" + db, Status: hostcheck.Pass}
	byIP := map[string][]ovncluster.Server{}
	for _, s := range st.Servers {
		ip := ipOf(s.Address)
		byIP[ip] = append(byIP[ip], s)
	}
	var missing, down, extra []string
	for _, ip := range members {
		ss := byIP[ip]
		if len(ss) == 0 {
			missing = append(missing, ip)
			continue
		}
		for _, s := range ss {
			if !s.Self && !st.Connected(s.ID) {
				down = append(down, fmt.Sprintf("%s (%s)", ip, s.ID))
			}
		}
		delete(byIP, ip)
	}
	for ip, ss := range byIP {
		for _, s := range ss {
			extra = append(extra, fmt.Sprintf("%s (%s)", ip, s.ID))
		}
	}
	sort.Strings(extra)
	var found, fixes []string
	if len(missing) > 0 {
		c.Status = hostcheck.Fail
		found = append(found, "missing from the cluster: "+strings.Join(missing, ", "))
		fixes = append(fixes, "start the central on the missing members (they join), or remove them from OVN_DB_IPS")
	}
	if len(down) > 0 {
		c.Status = hostcheck.Fail
		found = append(found, "not connected: "+strings.Join(down, ", "))
		fixes = append(fixes, "start the member or open the Raft ports 6643/6644 to it; a cluster of 3 survives one member down, not two")
	}
	if len(extra) > 0 {
		if c.Status == hostcheck.Pass {
			c.Status = hostcheck.Warn
		}
		found = append(found, "in the cluster but not in OVN_DB_IPS: "+strings.Join(extra, ", "))
		fixes = append(fixes, "list them in OVN_DB_IPS, or remove them: ovs-appctl -t <ctl> cluster/kick "+db+" <id>")
	}
	if len(found) == 0 {
		found = append(found, fmt.Sprintf("all %d members of OVN_DB_IPS are in the cluster and connected", len(members)))
	}
	c.Found, c.Fix = strings.Join(found, "; "), strings.Join(fixes, "; ")
	return c
}

func ipOf(addr string) string {
	_, hp, _ := strings.Cut(addr, ":")
	host, _, err := net.SplitHostPort(hp)
	if err != nil {
		return hp
	}
	return host
}

// MemberAnswer is one member's _Server row for a database.
type MemberAnswer struct {
	IP        string
	Err       error
	ClusterID string
	Leader    bool
	Connected bool
}

func memberAnswer(ip, db string, rows []serverdb.Database, err error) MemberAnswer {
	a := MemberAnswer{IP: ip, Err: err}
	if err != nil {
		return a
	}
	for _, r := range rows {
		if r.Name != db {
			continue
		}
		if r.Cid != nil {
			a.ClusterID = *r.Cid
		}
		a.Leader, a.Connected = r.Leader, r.Connected
		return a
	}
	a.Err = errors.New("does not serve " + db)
	return a
}

// CheckSplitBrain asks every member which cluster it is in and whether it
// leads: members in different clusters, or more than one leader among
// connected members, is a split central.
func CheckSplitBrain(db string, answers []MemberAnswer) hostcheck.Check {
	c := hostcheck.Check{Name: "split-brain:" + db, Status: hostcheck.Pass}
	clusters := map[string][]string{}
	var leaders, silent []string
	for _, a := range answers {
		if a.Err != nil {
			silent = append(silent, a.IP)
			continue
		}
		if a.ClusterID != "" && a.ClusterID != "00000000-0000-0000-0000-000000000000" {
			clusters[a.ClusterID] = append(clusters[a.ClusterID], a.IP)
		}
		if a.Leader && a.Connected {
			leaders = append(leaders, a.IP)
		}
	}
	var found []string
	switch {
	case len(clusters) > 1:
		var parts []string
		for id, ips := range clusters {
			parts = append(parts, fmt.Sprintf("%s: %s", id, strings.Join(ips, ",")))
		}
		sort.Strings(parts)
		c.Status = hostcheck.Fail
		found = append(found, "members are in different clusters ("+strings.Join(parts, "; ")+")")
		c.Fix = "keep the cluster with the data; stop the members of the other, delete their databases and start them: they join the right one"
	case len(leaders) > 1:
		c.Status = hostcheck.Fail
		found = append(found, "more than one member leads: "+strings.Join(leaders, ", "))
		c.Fix = "a partition: check connectivity between the members on 6643/6644; the leader of the older term steps down once it hears the newer"
	case len(leaders) == 0 && len(answers) > len(silent):
		c.Status = hostcheck.Fail
		found = append(found, "no member leads: the cluster has no quorum")
		c.Fix = "bring a majority of the members up"
	default:
		for id, ips := range clusters {
			found = append(found, fmt.Sprintf("one cluster %s (%d members answering), leader %s", id, len(ips), strings.Join(leaders, ",")))
		}
	}
	if len(silent) > 0 {
		if c.Status == hostcheck.Pass {
			c.Status = hostcheck.Warn
			c.Fix = "start the central there, or check that port is reachable from here"
		}
		found = append(found, "no answer from "+strings.Join(silent, ", "))
	}
	c.Found = strings.Join(found, "; ")
	return c
}

// CheckCentralDisk warns at 85% and fails at 95% use, or when the free
// space cannot hold a snapshot of the databases (a compaction writes a
// new file beside the old one) plus a conversion's backup.
func CheckCentralDisk(dir string, total, free uint64, dbBytes int64, err error) hostcheck.Check {
	c := hostcheck.Check{Name: "disk:" + dir}
	if err != nil {
		c.Status, c.Found, c.Fix = hostcheck.Warn, "cannot read the file system: "+err.Error(), "check --ovn-db-dir (OVN_DIR)"
		return c
	}
	used := 0.0
	if total > 0 {
		used = float64(total-free) / float64(total) * 100
	}
	need := uint64(2 * dbBytes)
	c.Found = fmt.Sprintf("%.0f%% used, %s free, databases %s", used, bytesText(free), bytesText(uint64(dbBytes)))
	switch {
	case used >= 95 || free < need:
		c.Status, c.Fix = hostcheck.Fail, "free space: a database that cannot write its log or snapshot stops the member; compaction needs twice the database size"
	case used >= 85:
		c.Status, c.Fix = hostcheck.Warn, "free space before the databases fill the disk (see --db-compact-size)"
	default:
		c.Status = hostcheck.Pass
	}
	return c
}

func bytesText(n uint64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// CheckCentralClock, under SSL: the local clock and certificates (as on a
// node) and a TLS handshake with every other member: a certificate that is
// "expired or not yet valid" by one member's clock is the symptom of skew
// between them. Without SSL a skewed clock breaks nothing here.
func CheckCentralClock(ctx context.Context, cfg *config.Config, f CentralFacts, to time.Duration) hostcheck.Check {
	c := hostcheck.CheckClock(cfg.HostSettings(), f)
	if !cfg.EnableSSL {
		return c
	}
	var bad []string
	for _, ip := range cfg.OVNDBIPs {
		cx, cancel := context.WithTimeout(ctx, to)
		err := f.TLSHandshake(cx, net.JoinHostPort(ip, strconv.Itoa(ovsdbconn.NBPort)))
		cancel()
		var inv x509.CertificateInvalidError
		switch {
		case err == nil:
		case errors.As(err, &inv) && inv.Reason == x509.Expired:
			bad = append(bad, fmt.Sprintf("%s: %v (clock skew between the members, or an expired certificate)", ip, err))
		case strings.Contains(err.Error(), "expired") || strings.Contains(err.Error(), "not yet valid") || strings.Contains(err.Error(), "bad certificate"):
			bad = append(bad, fmt.Sprintf("%s: %v (the member rejects our certificate: clock skew or expiry)", ip, err))
		}
	}
	if len(bad) > 0 {
		c.Status = hostcheck.Fail
		c.Found += "; TLS with members fails on validity: " + strings.Join(bad, "; ")
		c.Fix = strings.TrimPrefix(c.Fix+"; synchronise every member's clock (NTP) and check the certificates' validity", "; ")
	} else {
		c.Found += fmt.Sprintf("; TLS handshakes with the %d members pass", len(cfg.OVNDBIPs))
	}
	return c
}

package central

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb/serverdb"

	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/ovncluster"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

const zeroUUID = "00000000-0000-0000-0000-000000000000"

// database is one clustered database of this member and its ovsdb-server.
type database struct {
	c                         *Central
	child                     *daemon.Daemon
	schemaName                string // OVN_Northbound
	schemaFile                string // the installed .ovsschema
	file, sock, ctl, pid, log string
	port, raftPort            int

	mu          sync.Mutex
	st          *ovncluster.Status
	stErr       error
	fileBytes   int64
	lastCompact time.Time
	compactions int
	kicked      map[string]bool
}

func (c *Central) newDatabase(name, schemaName, schema, file, sock, ctl, pid, log string, port, raftPort int) *database {
	db := &database{c: c, schemaName: schemaName, schemaFile: filepath.Join(c.cfg.Daemons.OVNSchema, schema),
		file: file, sock: sock, ctl: ctl, pid: pid, log: log, port: port, raftPort: raftPort, kicked: map[string]bool{}}
	ch := c.daemons.New(name)
	ch.Prepare = db.prepare
	ch.Spec = func() (process.Spec, error) { return db.spec(), nil }
	ch.Gate = db.gate
	// Joining and electing need the other members: however long they take
	// to come up, the member waits (not ready, STATUS saying for what)
	// rather than failing its start.
	ch.Untimed = true
	ch.Graceful = func(ctx context.Context, _ *process.Child, _ bool) error {
		_, err := unixctl.Call(ctx, db.ctl, "exit")
		return err
	}
	db.child = ch
	return db
}

func (db *database) raftAddress() string { return raftAddress(db.c.self, db.raftPort, db.c.ssl()) }

func (db *database) tool(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, db.c.bins["ovsdb-tool"], args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("ovsdb-tool %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// localAddress is the Raft address the database file was created with.
func (db *database) localAddress(ctx context.Context) (string, error) {
	if !exists(db.file) {
		return "", os.ErrNotExist
	}
	return db.tool(ctx, "db-local-address", db.file)
}

// prepare clears a crashed run's leftovers and makes sure there is a
// clustered database file: the existing one (checked to be this member's),
// or a new cluster, or a join, as DecideMissing says.
func (db *database) prepare(ctx context.Context, restart bool) error {
	if err := daemon.ClearStale("ovsdb-server", db.pid, db.sock, db.ctl, layout.LockFile(db.file)); err != nil {
		return err
	}
	if exists(db.file) {
		return db.checkExisting(ctx)
	}
	if restart {
		db.c.log.Warn("database file disappeared while the member ran; it rejoins the cluster under a new server ID", "db", db.schemaName, "file", db.file)
	}
	for {
		d, err := db.decide(ctx)
		if err != nil {
			return err
		}
		if d.Action != Wait {
			db.c.log.Info("membership decision", "db", db.schemaName, "action", d.Action, "reason", d.Reason)
			return db.materialise(ctx, d)
		}
		db.c.health.Waiting(db.child.Name(), d.Reason)
		// Asking again is cheap (one connection per peer); the peers
		// that are starting answer within a few hundred milliseconds.
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %s: %w", db.schemaName, d.Reason, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkExisting refuses a database that is not this member's: a standalone
// file (all-in-one's) or one made for another address.
func (db *database) checkExisting(ctx context.Context) error {
	if _, err := db.tool(ctx, "db-is-clustered", db.file); err != nil {
		if db.c.self == first(db.c.members) {
			return db.clusterStandalone(ctx)
		}
		return fmt.Errorf("%s is a standalone database (all-in-one mode's?), not a clustered one; only the bootstrap member %s turns one into the cluster: move it away here so this member joins", db.file, first(db.c.members))
	}
	addr, err := db.localAddress(ctx)
	if err != nil {
		return err
	}
	if want := db.raftAddress(); addr != want {
		return fmt.Errorf("%s belongs to the member at %s, not %s; a Raft member cannot change its address: move the file away so this member rejoins under a new ID (the old one is kicked), or set --central-ip to %s", db.file, addr, want, ipOfRaftAddress(addr))
	}
	return nil
}

// clusterStandalone makes a standalone database (all-in-one mode) the
// contents of a new cluster, keeping the file as a backup.
func (db *database) clusterStandalone(ctx context.Context) error {
	backup := db.file + ".standalone-" + time.Now().UTC().Format("20060102T150405Z")
	if err := os.Rename(db.file, backup); err != nil {
		return err
	}
	if _, err := db.tool(ctx, append(db.electionArg(), "create-cluster", db.file, backup, db.raftAddress())...); err != nil {
		_ = os.Rename(backup, db.file)
		return err
	}
	db.c.log.Info("turned a standalone database into a new cluster", "db", db.schemaName, "backup", backup)
	return nil
}

func (db *database) electionArg() []string {
	return []string{fmt.Sprintf("--election-timer=%d", db.c.cfg.ElectionTimer.Milliseconds())}
}

// decide asks every other member what it has and applies DecideMissing.
func (db *database) decide(ctx context.Context) (Decision, error) {
	var peers []PeerDB
	for _, ip := range db.c.members {
		if sameIP(ip, db.c.self) {
			continue
		}
		peers = append(peers, db.askPeer(ctx, ip))
	}
	return DecideMissing(db.c.self, db.c.members, peers)
}

// askPeer reads the peer's _Server database: does it serve this database,
// in which cluster.
func (db *database) askPeer(ctx context.Context, ip string) PeerDB {
	p := PeerDB{IP: ip}
	// The client port: a joining member serves _Server there too.
	remote := clientRemote(ip, db.port, db.c.ssl())
	m, err := serverdb.FullDatabaseModel()
	if err != nil {
		return p
	}
	tlsCfg := db.c.tlsConfig()
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := ovsdbconn.Dial(qctx, m, remote, ovsdbconn.Options{Once: true, Timeout: time.Second, TLS: tlsCfg, Log: db.c.log, Name: "_Server of " + ip})
	if err != nil {
		return p
	}
	defer conn.Close()
	p.Answered = true
	var rows []serverdb.Database
	if err := conn.List(qctx, &rows); err != nil {
		p.Answered = false
		return p
	}
	for _, r := range rows {
		// A joining server reports the all-zero ID: no cluster yet.
		if r.Name == db.schemaName && r.Model == serverdb.DatabaseModelClustered && r.Cid != nil && *r.Cid != zeroUUID {
			p.ClusterID = *r.Cid
		}
	}
	return p
}

// materialise creates or joins as decided.
func (db *database) materialise(ctx context.Context, d Decision) error {
	switch d.Action {
	case Create:
		_, err := db.tool(ctx, append(db.electionArg(), "create-cluster", db.file, db.schemaFile, db.raftAddress())...)
		return err
	case Join:
		args := []string{"join-cluster"}
		if d.ClusterID != "" {
			args = []string{"--cid=" + d.ClusterID, "join-cluster"}
		}
		args = append(args, db.file, db.schemaName, db.raftAddress())
		for _, ip := range db.c.members {
			if !sameIP(ip, db.c.self) {
				args = append(args, raftAddress(ip, db.raftPort, db.c.ssl()))
			}
		}
		_, err := db.tool(ctx, args...)
		return err
	}
	return fmt.Errorf("%s: nothing to do for %q", db.schemaName, d.Action)
}

func (db *database) spec() process.Spec {
	args := []string{db.file, "--remote=punix:" + db.sock, "--pidfile=" + db.pid, "--unixctl=" + db.ctl}
	if !db.c.leaving {
		// A leaving member serves no clients: they go to the others.
		args = append(args, "--remote="+listenRemote(db.c.self, db.port, db.c.ssl()))
	}
	args = append(args, db.c.sslArgs()...)
	args = append(args, "--no-chdir", "-vconsole:info", "-vsyslog:off", "-vfile:info", "--log-file="+db.log)
	return process.Spec{Name: db.child.Name(), Path: db.c.bins["ovsdb-server"], Args: args, Env: db.c.childEnv()}
}

// gate waits until cluster/status says this server is a member that knows
// its leader, then converts the database if the installed schema is newer.
func (db *database) gate(ctx context.Context, p *process.Child) error {
	db.c.health.Waiting(db.child.Name(), "unix:"+db.sock+" to answer")
	if err := waitSocket(ctx, db.ctl, p); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	last := ""
	for {
		st, err := db.clusterStatus(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case st.Member() && st.LeaderKnown():
			db.store(st, nil)
			if err := db.upgrade(ctx); err != nil {
				return err
			}
			return nil
		case st.Status == "joining cluster":
			last = fmt.Sprintf("%s to join the cluster through %s", db.schemaName, strings.Join(db.c.members, ","))
		default:
			// "disconnected from the cluster (election timeout)": no
			// majority of the members is up yet.
			last = fmt.Sprintf("a Raft leader of %s (status %s, role %s, term %d; needs a majority of %s up)", db.schemaName, st.Status, st.Role, st.Term, strings.Join(db.c.members, ","))
		}
		db.c.health.Waiting(db.child.Name(), last)
		select {
		case <-tick.C:
		case <-p.Exited():
			return errors.New("exited while waiting for " + last)
		case <-ctx.Done():
			return fmt.Errorf("gave up waiting for %s: %w", last, ctx.Err())
		}
	}
}

func (db *database) clusterStatus(ctx context.Context) (*ovncluster.Status, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := unixctl.Call(qctx, db.ctl, "cluster/status", db.schemaName)
	if err != nil {
		return nil, err
	}
	return ovncluster.ParseStatus(out)
}

func (db *database) store(st *ovncluster.Status, err error) {
	var size int64
	if fi, serr := os.Stat(db.file); serr == nil {
		size = fi.Size()
	}
	db.mu.Lock()
	db.st, db.stErr, db.fileBytes = st, err, size
	db.mu.Unlock()
}

func (db *database) report() health.RaftDB {
	db.mu.Lock()
	defer db.mu.Unlock()
	switch {
	case db.st != nil && db.stErr == nil:
		return db.st.Report(db.fileBytes)
	case db.stErr != nil:
		return health.RaftDB{Name: db.schemaName, Status: "unknown", Error: db.stErr.Error(), LogBytes: db.fileBytes}
	}
	return health.RaftDB{Name: db.schemaName, Status: "not started"}
}

func (db *database) status() *ovncluster.Status {
	db.mu.Lock()
	defer db.mu.Unlock()
	if db.stErr != nil {
		return nil
	}
	return db.st
}

// kickStale removes the earlier incarnations of this member (its address,
// another server ID) from the cluster: they count towards the quorum and
// never come back.
func (db *database) kickStale(ctx context.Context, st *ovncluster.Status) {
	for _, s := range st.StaleServers() {
		out, err := unixctl.Call(ctx, db.ctl, "cluster/kick", db.schemaName, s.ID)
		if err != nil {
			db.c.log.Warn("cannot kick the stale server ID of this member", "db", db.schemaName, "server", s.ID, "address", s.Address, "err", err)
			continue
		}
		db.mu.Lock()
		first := !db.kicked[s.ID]
		db.kicked[s.ID] = true
		db.mu.Unlock()
		if first {
			db.c.log.Info("kicked this member's stale server ID (its database was lost and it rejoined)", "db", db.schemaName, "stale", s.ID, "new", st.SelfShort, "address", s.Address, "reply", strings.TrimSpace(out))
		}
	}
}

// tuneElectionTimer moves a cluster's election timer to --election-timer,
// on the leader only and one step per reading: OVSDB refuses to more than
// double it at once (a decrease may go all the way).
func (db *database) tuneElectionTimer(ctx context.Context, st *ovncluster.Status) {
	want := int(db.c.cfg.ElectionTimer.Milliseconds())
	cur := st.ElectionTimer
	if st.Role != "leader" || want <= 0 || cur <= 0 || cur == want {
		return
	}
	next := want
	if want > 2*cur {
		next = 2 * cur
	}
	if _, err := unixctl.Call(ctx, db.ctl, "cluster/change-election-timer", db.schemaName, strconv.Itoa(next)); err != nil {
		db.c.log.Warn("cannot change the election timer", "db", db.schemaName, "from", cur, "to", next, "err", err)
		return
	}
	db.c.log.Info("changing the cluster's election timer", "db", db.schemaName, "from_ms", cur, "to_ms", next, "target_ms", want)
}

// leave runs cluster/leave and waits until the server has left.
func (db *database) leave(ctx context.Context) error {
	if _, err := unixctl.Call(ctx, db.ctl, "cluster/leave", db.schemaName); err != nil {
		return fmt.Errorf("%s: cluster/leave: %w", db.schemaName, err)
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	lctx, cancel := context.WithTimeout(ctx, db.c.cfg.Daemons.StartTimeout)
	defer cancel()
	for {
		st, err := db.clusterStatus(lctx)
		// A server that has left stops serving the database.
		if (err != nil && strings.Contains(err.Error(), "unknown cluster")) || (st != nil && st.Status == "left cluster") {
			db.c.log.Info("left the cluster", "db", db.schemaName)
			return nil
		}
		select {
		case <-tick.C:
		case <-lctx.Done():
			return fmt.Errorf("%s: did not leave the cluster in time (needs a majority of the members up): %w", db.schemaName, lctx.Err())
		}
	}
}

// compact snapshots the database when its file passed the size threshold,
// or when it has log entries and the time threshold passed.
func (db *database) maybeCompact(ctx context.Context, st *ovncluster.Status, now time.Time) {
	cfg := db.c.cfg
	db.mu.Lock()
	size, last := db.fileBytes, db.lastCompact
	if last.IsZero() {
		db.lastCompact, last = now, now
	}
	db.mu.Unlock()
	entries := uint64(0)
	if st.LogEnd > st.LogStart {
		entries = st.LogEnd - st.LogStart
	}
	why := ""
	switch {
	case cfg.CompactSize > 0 && size >= cfg.CompactSize && entries > 0:
		why = fmt.Sprintf("file is %d bytes (threshold %d)", size, cfg.CompactSize)
	case cfg.CompactInterval > 0 && now.Sub(last) >= cfg.CompactInterval && entries > 0:
		why = fmt.Sprintf("%d log entries and no snapshot for %s", entries, now.Sub(last).Round(time.Second))
	default:
		return
	}
	if _, err := unixctl.Call(ctx, db.ctl, "ovsdb-server/compact", db.schemaName); err != nil {
		db.c.log.Warn("compaction failed", "db", db.schemaName, "why", why, "err", err)
		return
	}
	var after int64
	if fi, err := os.Stat(db.file); err == nil {
		after = fi.Size()
	}
	db.mu.Lock()
	db.lastCompact = now
	db.compactions++
	db.mu.Unlock()
	db.c.log.Info("compacted database", "db", db.schemaName, "why", why, "bytes_before", size, "bytes_after", after)
}

// waitSocket waits for the control socket to accept a connection, or the
// program to exit.
func waitSocket(ctx context.Context, path string, p *process.Child) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := unixctl.Call(ctx, path, "version"); err == nil {
			return nil
		}
		select {
		case <-tick.C:
		case <-p.Exited():
			return fmt.Errorf("exited before %s answered", path)
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer: %w", path, ctx.Err())
		}
	}
}

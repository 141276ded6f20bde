package central

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// watchCluster reads every database's cluster/status (and northd's
// status) each StatusInterval: it keeps health truthful (a member that
// loses its leader is not ready until it has one again), kicks this
// member's stale server IDs, and compacts on the thresholds.
func (c *Central) watchCluster(ctx context.Context) {
	interval := c.cfg.StatusInterval
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	lost := map[*database]bool{}
	for {
		for _, db := range []*database{c.nb, c.sb} {
			p := db.child.Ready()
			if p == nil {
				continue // restarting: the child reports itself
			}
			st, err := db.clusterStatus(ctx)
			if ctx.Err() != nil {
				return
			}
			db.store(st, err)
			switch {
			case err != nil:
				continue
			case !st.Member() || !st.LeaderKnown():
				if !lost[db] {
					c.log.Warn("lost the Raft leader", "db", db.schemaName, "status", st.Status, "role", st.Role, "term", st.Term)
				}
				lost[db] = true
				c.health.Waiting(db.child.Name(), fmt.Sprintf("a Raft leader of %s (status %s, role %s, term %d)", db.schemaName, st.Status, st.Role, st.Term))
				continue
			case lost[db]:
				lost[db] = false
				c.log.Info("Raft leader known again", "db", db.schemaName, "leader", st.Leader, "term", st.Term)
				c.health.Ready(db.child.Name(), 0, time.Since(p.Started()))
			}
			db.kickStale(ctx, st)
			db.maybeCompact(ctx, st, time.Now())
			db.tuneElectionTimer(ctx, st)
		}
		if c.northd.Ready() != nil {
			_, _ = c.readNorthd(ctx)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Collector publishes the Raft state as metrics, from the last reading.
func (c *Central) Collector() prometheus.Collector { return &collector{c: c} }

type collector struct{ c *Central }

var (
	descTerm      = prometheus.NewDesc("ovnhost_raft_term", "Current Raft term of the database on this member.", []string{"db"}, nil)
	descRole      = prometheus.NewDesc("ovnhost_raft_role", "1 for this member's current Raft role of the database (leader, follower, candidate).", []string{"db", "role"}, nil)
	descLeader    = prometheus.NewDesc("ovnhost_raft_leader_known", "1 while this member is in the cluster and knows its leader.", []string{"db"}, nil)
	descEntries   = prometheus.NewDesc("ovnhost_raft_log_entries", "Raft log entries since the last snapshot.", []string{"db"}, nil)
	descBytes     = prometheus.NewDesc("ovnhost_raft_db_file_bytes", "Size of the database file on disk.", []string{"db"}, nil)
	descMembers   = prometheus.NewDesc("ovnhost_raft_members", "Servers in the database's cluster configuration.", []string{"db"}, nil)
	descConnected = prometheus.NewDesc("ovnhost_raft_member_connected", "1 while this member has a Raft connection to the server (1 for itself).", []string{"db", "server", "address"}, nil)
	descCompacts  = prometheus.NewDesc("ovnhost_raft_compactions_total", "Compactions (snapshots) ovnhost asked for.", []string{"db"}, nil)
	descNorthd    = prometheus.NewDesc("ovnhost_northd_active", "1 while this member's ovn-northd is the active one.", nil, nil)
)

func (k *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTerm, descRole, descLeader, descEntries, descBytes, descMembers, descConnected, descCompacts, descNorthd} {
		ch <- d
	}
}

func (k *collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, db := range []*database{k.c.nb, k.c.sb} {
		db.mu.Lock()
		n, size := db.compactions, db.fileBytes
		db.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(descCompacts, prometheus.CounterValue, float64(n), db.schemaName)
		gauge(descBytes, float64(size), db.schemaName)
		st := db.status()
		if st == nil {
			gauge(descLeader, 0, db.schemaName)
			continue
		}
		r := st.Report(size)
		gauge(descTerm, float64(r.Term), db.schemaName)
		for _, role := range []string{"leader", "follower", "candidate"} {
			v := 0.0
			if r.Role == role {
				v = 1
			}
			gauge(descRole, v, db.schemaName, role)
		}
		known := 0.0
		if st.Member() && st.LeaderKnown() {
			known = 1
		}
		gauge(descLeader, known, db.schemaName)
		gauge(descEntries, float64(r.LogEntries), db.schemaName)
		gauge(descMembers, float64(len(r.Members)), db.schemaName)
		for _, m := range r.Members {
			v := 0.0
			if m.Connected {
				v = 1
			}
			gauge(descConnected, v, db.schemaName, m.ID, m.Address)
		}
	}
	k.c.mu.Lock()
	active := k.c.northdStatus == "active"
	k.c.mu.Unlock()
	v := 0.0
	if active {
		v = 1
	}
	gauge(descNorthd, v)
}

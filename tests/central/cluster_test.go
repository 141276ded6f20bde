package central_test

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/ovncluster"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/harness/proc"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

const (
	nbName = "OVN_Northbound"
	sbName = "OVN_Southbound"
)

func itoa(n int) string { return strconv.Itoa(n) }

// Three members form both clusters; a node daemon and the controller's NB
// client (the libovsdb access layer) work through the three-address
// OVN_DB_IPS; /status, /metrics and netctl status show the Raft state.
func TestThreeMembersFormAClusterThatNodesAndTheControllerUse(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	c.SameCluster(sbName, 3)

	// Every member reports both databases with their three members, and
	// exactly one ovn-northd is active (the one holding the SB lock).
	for _, m := range c.Members {
		m.WaitSnapshot("both databases with 3 connected members", func(snap *nodeapi.Snapshot) bool {
			if !snap.Ready || snap.Central == nil || len(snap.Central.Databases) != 2 {
				return false
			}
			for _, db := range snap.Central.Databases {
				up := 0
				for _, mem := range db.Members {
					if mem.Self || mem.Connected {
						up++
					}
				}
				if db.Status != "cluster member" || db.Term == 0 || up != 3 || db.LogBytes == 0 || db.Leader == "" {
					return false
				}
			}
			return snap.Central.Northd == "active" || snap.Central.Northd == "standby"
		})
	}
	// Right after start two instances may both have reported "active"
	// (each member re-reads its northd's status every interval): wait for
	// the lock to settle on one.
	var active int
	for deadline := time.Now().Add(20 * time.Second); ; {
		active = 0
		for _, m := range c.Members {
			if s, err := m.Snapshot(); err == nil && s.Central.Northd == "active" {
				active++
			}
		}
		if active == 1 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // paces re-reading /status; the deadline bounds it
	}
	if active != 1 {
		t.Fatalf("%d active ovn-northd for 20 s, want 1", active)
	}
	code, metrics, err := httpGet(c.Members[0].NS, "/metrics")
	if err != nil || code != 200 {
		t.Fatal(code, err)
	}
	for _, want := range []string{`ovnhost_raft_term{db="OVN_Northbound"}`, `ovnhost_raft_members{db="OVN_Southbound"} 3`, `ovnhost_raft_leader_known{db="OVN_Northbound"} 1`, "ovnhost_raft_member_connected{", "ovnhost_northd_active"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	out, err := exec.Command("ip", "netns", "exec", c.Members[1].NS, testenv.Binary(t, "netctl"), "status", "--role=central", "--ovn-db-ips="+c.IPs()).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "OVN_Northbound") || !strings.Contains(string(out), "cluster member") || !strings.Contains(string(out), "(connected)") {
		t.Fatalf("netctl status: %v\n%s", err, out)
	}

	// The controller's NB access layer over the three addresses.
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := insertSwitch(ctx, nb, "formed"); err != nil {
		t.Fatal(err)
	}
	// A node daemon with OVN_DB_IPS: ready means its chassis is in the
	// SB and its flows are installed; --wait=hv proves the loop back.
	c.StartNode("node-a")
	if err := syncHypervisors(ctx, nb); err != nil {
		t.Fatalf("%v\n%s", err, c.Members[0].LogTail())
	}
	for _, m := range c.Members {
		if !waitSwitch(t, m, "formed") {
			t.Fatalf("%s does not serve the row written through the cluster", m.Name)
		}
	}
}

// waitSwitch waits until member m's own database has the switch.
func waitSwitch(t testing.TB, m *member, name string) bool {
	nb := dial(t, nbdb.FullDatabaseModel, "unix:"+m.Path("run", "ovnnb_db.sock"))
	defer nb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return nb.WaitUntil(ctx, "switch "+name, func() bool {
		var ls []nbdb.LogicalSwitch
		_ = nb.List(ctx, &ls)
		for _, s := range ls {
			if s.Name == name {
				return true
			}
		}
		return false
	}, nil) == nil
}

// The NB leader's member crashes: the others elect a new leader within the
// election timeout (1 s base plus up to 1 s of jitter, plus the probe of a
// dead connection), a writing client loses no acknowledged row, and the
// node daemon keeps working through the new leader.
func TestLeaderCrashElectsANewLeaderAndLosesNoRows(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	c.StartNode("node-a")
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	w := startWriter(nb, "ls")
	waitCount(t, w, 20)

	old := c.LeaderOf(nbName)
	oldSt, _ := old.Status(nbName)
	t0 := time.Now()
	old.Crash()
	var survivor *member
	for _, m := range c.Members {
		if m != old {
			survivor = m
		}
	}
	// OVN's election timer is 1 s plus up to 1 s of jitter; a crashed
	// leader's connections close at once. 5 s is the failover target.
	st := survivor.WaitStatus(nbName, "a new leader within 5 s", 5*time.Second, func(s *ovncluster.Status) bool {
		return s.LeaderKnown() && s.Term > oldSt.Term && s.Leader != oldSt.SelfShort
	})
	elected := time.Since(t0)
	t.Logf("new NB leader %s in term %d after %v", st.Leader, st.Term, elected.Round(time.Millisecond))
	before := w.count()
	waitCount(t, w, before+20)
	acked, failed, outages := w.finish()
	t.Logf("writer: %d acknowledged, %d failed, outages %v", len(acked), failed, outages)

	for _, m := range c.Members {
		if m == old {
			continue
		}
		for _, name := range []string{acked[len(acked)-1], acked[0]} {
			if !waitSwitch(t, m, name) {
				t.Fatalf("%s lacks acknowledged row %s", m.Name, name)
			}
		}
		have := switchNames(t, m)
		for _, name := range acked {
			if !have[name] {
				t.Fatalf("%s lost acknowledged row %s (of %d)", m.Name, name, len(acked))
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := syncHypervisors(ctx, nb); err != nil {
		t.Fatalf("the node does not follow the new leader: %v", err)
	}
	// The crashed member comes back with its data and rejoins.
	old.StartNoWait(c.IPs())
	old.WaitReady(60 * time.Second)
	c.SameCluster(nbName, 3)
	if !waitSwitch(t, old, acked[len(acked)-1]) {
		t.Fatal("the restarted member did not catch up")
	}
}

func waitCount(t testing.TB, w *writer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for w.count() < n {
		if time.Now().After(deadline) {
			t.Fatalf("the writer got %d rows acknowledged in 30s, waiting for %d", w.count(), n)
		}
		time.Sleep(20 * time.Millisecond) // the writer is a busy loop; this only paces the check
	}
}

// A member whose database is deleted rejoins under a new server ID, and
// its stale ID is kicked from the cluster configuration.
func TestWipedMemberRejoinsAndItsStaleIDIsKicked(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	c.SameCluster(sbName, 3)
	m := c.Members[2]
	oldNB, _ := m.Status(nbName)
	oldSB, _ := m.Status(sbName)
	if code := m.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, m.LogTail())
	}
	for _, f := range []string{m.Path("db", "ovnnb_db.db"), m.Path("db", "ovnsb_db.db")} {
		if err := os.Remove(f); err != nil {
			t.Fatal(err)
		}
	}
	m.StartNoWait(c.IPs())
	m.WaitReady(60 * time.Second)
	for _, x := range []struct {
		db  string
		old string
	}{{nbName, oldNB.SelfShort}, {sbName, oldSB.SelfShort}} {
		st, _ := m.Status(x.db)
		if st.SelfShort == x.old {
			t.Fatalf("%s rejoined %s under its old ID %s", m.Name, x.db, x.old)
		}
		for _, o := range c.Members {
			o.WaitStatus(x.db, "the stale ID "+x.old+" gone", 20*time.Second, func(s *ovncluster.Status) bool {
				for _, srv := range s.Servers {
					if srv.ID == x.old {
						return false
					}
				}
				return len(s.Servers) == 3
			})
		}
	}
	if !strings.Contains(m.LogText(), "kicked this member's stale server ID") {
		t.Fatalf("the kick was not logged\n%s", m.LogTail())
	}
	c.SameCluster(nbName, 3)
}

// The whole cluster stops and starts again in another order, and re-forms
// with its data.
func TestWholeClusterRestartsInAnyOrder(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	nb := dial(t, nbdb.FullDatabaseModel, c.NBRemote())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := insertSwitch(ctx, nb, "before-restart"); err != nil {
		t.Fatal(err)
	}
	nb.Close()
	cid, _ := c.Members[0].Status(nbName)
	for _, m := range c.Members {
		if code := m.Stop(); code != 0 {
			t.Fatalf("%s exit %d\n%s", m.Name, code, m.LogTail())
		}
	}
	// Last first; the bootstrap member last of all.
	for _, i := range []int{2, 1, 0} {
		c.Members[i].StartNoWait(c.IPs())
	}
	for _, m := range c.Members {
		m.WaitReady(90 * time.Second)
	}
	c.SameCluster(nbName, 3)
	c.SameCluster(sbName, 3)
	st, _ := c.Members[0].Status(nbName)
	if st.ClusterID != cid.ClusterID {
		t.Fatalf("a new cluster %s was formed instead of %s re-forming", st.ClusterID, cid.ClusterID)
	}
	for _, m := range c.Members {
		if !waitSwitch(t, m, "before-restart") {
			t.Fatalf("%s lost the row written before the restart", m.Name)
		}
	}
}

// A member stopped with SIGTERM hands its leadership over before it goes:
// ovnhost stops ovsdb-server with its exit command, whose raft_close sends
// the leader's "become leader" to another member, so nobody waits out an
// election timeout.
func TestSIGTERMHandsLeadershipOver(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	leader := c.LeaderOf(nbName)
	st, _ := leader.Status(nbName)
	if code := leader.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, leader.LogTail())
	}
	want := "received leadership transfer from " + st.SelfShort
	found := false
	for _, m := range c.Members {
		if m == leader {
			continue
		}
		if strings.Contains(m.LogText(), want) || waitLog(m.Path("log", "ovsdb-server-nb.log"), want, time.Second) == nil {
			found = true
		}
	}
	if !found {
		t.Fatalf("no member logged %q\n%s", want, leader.LogTail())
	}
	for _, m := range c.Members {
		if m != leader {
			m.WaitStatus(nbName, "a new leader", 5*time.Second, func(s *ovncluster.Status) bool {
				return s.LeaderKnown() && s.Leader != st.SelfShort && s.Term > st.Term
			})
		}
	}
}

// A member dropped from OVN_DB_IPS leaves the cluster (cluster/leave),
// exits 0 and keeps its database aside; the cluster shrinks to two.
func TestMemberDroppedFromOVNDBIPSLeaves(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	m := c.Members[2]
	if code := m.Stop(); code != 0 {
		t.Fatalf("exit %d", code)
	}
	two := c.Members[0].IP + "," + c.Members[1].IP
	m.StartNoWait(two)
	if code := m.Wait(60 * time.Second); code != 0 {
		t.Fatalf("the leaving member exited %d\n%s", code, m.LogTail())
	}
	if !strings.Contains(m.LogText(), "left the cluster") {
		t.Fatalf("no word of leaving\n%s", m.LogTail())
	}
	if _, err := os.Stat(m.Path("db", "ovnnb_db.db")); !os.IsNotExist(err) {
		t.Fatalf("the database is still in place: %v", err)
	}
	for _, o := range c.Members[:2] {
		for _, db := range []string{nbName, sbName} {
			o.WaitStatus(db, "two servers", 20*time.Second, func(s *ovncluster.Status) bool {
				return len(s.Servers) == 2 && s.LeaderKnown()
			})
		}
	}
	// Without a database and not listed, it refuses to start (exit 2).
	m.StartNoWait(two)
	if code := m.Wait(30 * time.Second); code != 2 || !strings.Contains(m.LogText(), "OVN_DB_IPS") {
		t.Fatalf("exit %d, want 2 naming OVN_DB_IPS\n%s", code, m.LogTail())
	}
}

// One member's NB ovsdb-server is killed (-9): ovnhost restarts it at once,
// it reopens its database and is a member with a leader again; /status
// counts the restart.
func TestKilledDatabaseServerIsRestartedAndRejoins(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	m := c.Members[1]
	before, _ := m.Status(nbName)
	pid := readPid(t, m.Path("run", "ovnnb_db.pid"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.WaitSnapshot("ovsdb-nb restarted and ready", func(s *nodeapi.Snapshot) bool {
		for _, ch := range s.Children {
			if ch.Name == "ovsdb-nb" {
				return ch.Restarts >= 1 && ch.Ready && ch.Pid != pid && s.Ready
			}
		}
		return false
	})
	after := m.WaitStatus(nbName, "member with a leader", 20*time.Second, func(s *ovncluster.Status) bool { return s.Member() && s.LeaderKnown() })
	if after.ServerID != before.ServerID {
		t.Fatalf("the restarted server has a new ID %s (was %s): it should reopen its database", after.ServerID, before.ServerID)
	}
}

func readPid(t testing.TB, pidfile string) int {
	t.Helper()
	pid, err := proc.ReadPidfile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// Members of a stopped cluster come back minutes apart: the first one waits
// for a quorum beyond --start-timeout (running, not ready, /readyz saying
// what it waits for) and is ready once a second member is up.
func TestLoneMemberWaitsForAQuorumBeyondTheStartTimeout(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	for _, m := range c.Members {
		if code := m.Stop(); code != 0 {
			t.Fatalf("%s exit %d", m.Name, code)
		}
	}
	first := c.Members[1]
	first.StartNoWait(c.IPs(), "--start-timeout=2s")
	first.WaitSnapshot("waiting for a Raft leader", func(s *nodeapi.Snapshot) bool {
		return !s.Ready && strings.Contains(s.Status, "a Raft leader of OVN_Northbound")
	})
	// Well past the start timeout: still running, still waiting.
	if err := waitLog(first.Path("ovnhost.log"), "start failed", 4*time.Second); err == nil {
		t.Fatalf("the lone member gave up\n%s", first.LogTail())
	}
	if !first.Running() {
		t.Fatalf("the lone member exited\n%s", first.LogTail())
	}
	code, body, err := httpGet(first.NS, "/readyz")
	if err != nil || code != 503 || !strings.Contains(body, "Raft leader") {
		t.Fatalf("/readyz %d %q %v", code, body, err)
	}
	second := c.Members[2]
	second.StartNoWait(c.IPs(), "--start-timeout=2s")
	first.WaitReady(60 * time.Second)
	second.WaitReady(60 * time.Second)
	c.Members[0].StartNoWait(c.IPs())
	c.Members[0].WaitReady(60 * time.Second)
	c.SameCluster(nbName, 3)
}

// --election-timer changed on a running cluster: the leader moves the
// cluster's timer there (in steps: OVSDB at most doubles it at once), and
// every member reports the new value.
func TestElectionTimerFollowsTheSetting(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	for _, m := range c.Members {
		if st, _ := m.Status(nbName); st.ElectionTimer != 1000 {
			t.Fatalf("%s starts with election timer %d, want 1000", m.Name, st.ElectionTimer)
		}
		if code := m.Stop(); code != 0 {
			t.Fatalf("exit %d", code)
		}
	}
	for _, m := range c.Members {
		m.StartNoWait(c.IPs(), "--election-timer=3000")
	}
	for _, m := range c.Members {
		m.WaitReady(60 * time.Second)
	}
	for _, m := range c.Members {
		for _, db := range []string{nbName, sbName} {
			m.WaitStatus(db, "election timer 3000", 30*time.Second, func(s *ovncluster.Status) bool { return s.ElectionTimer == 3000 })
		}
	}
}

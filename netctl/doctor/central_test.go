package doctor

import (
	"errors"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/ovncluster"
)

func statusOf(t *testing.T, text string) *ovncluster.Status {
	t.Helper()
	st, err := ovncluster.ParseStatus(text)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

const threeServers = `Name: OVN_Northbound
Server ID: aaaa (aaaa0000-0000-0000-0000-000000000000)
Address: tcp:10.0.0.1:6643
Status: cluster member
Role: leader
Term: 4
Leader: self
Log: [2, 9]
Connections: ->bbbb <-bbbb
Servers:
    aaaa (aaaa at tcp:10.0.0.1:6643) (self)
    bbbb (bbbb at tcp:10.0.0.2:6643)
    cccc (cccc at tcp:10.0.0.3:6643)
    dddd (dddd at tcp:10.0.0.9:6643)
`

func TestCheckMembersNamesMissingDownAndExtra(t *testing.T) {
	st := statusOf(t, threeServers)
	c := CheckMembers("OVN_Northbound", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, st)
	if c.Status != hostcheck.Fail {
		t.Fatalf("status %s: %s", c.Status, c.Found)
	}
	for _, want := range []string{"missing from the cluster: 10.0.0.4", "not connected: 10.0.0.3 (cccc)", "not in OVN_DB_IPS: 10.0.0.9 (dddd)"} {
		if !strings.Contains(c.Found, want) {
			t.Errorf("found %q lacks %q", c.Found, want)
		}
	}
	if c.Fix == "" {
		t.Error("no fix")
	}
	healthy := strings.Replace(strings.Replace(threeServers, "Connections: ->bbbb <-bbbb", "Connections: ->bbbb <-cccc", 1), "    dddd (dddd at tcp:10.0.0.9:6643)\n", "", 1)
	if c := CheckMembers("OVN_Northbound", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3"}, statusOf(t, healthy)); c.Status != hostcheck.Pass {
		t.Fatalf("healthy cluster: %s %s", c.Status, c.Found)
	}
}

func TestCheckSplitBrain(t *testing.T) {
	one := []MemberAnswer{{IP: "a", ClusterID: "c1", Leader: true, Connected: true}, {IP: "b", ClusterID: "c1", Connected: true}, {IP: "c", ClusterID: "c1", Connected: true}}
	if c := CheckSplitBrain("OVN_Northbound", one); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "leader a") {
		t.Fatalf("one cluster: %s %s", c.Status, c.Found)
	}
	two := []MemberAnswer{{IP: "a", ClusterID: "c1", Leader: true, Connected: true}, {IP: "b", ClusterID: "c1", Connected: true}, {IP: "c", ClusterID: "c2", Leader: true, Connected: true}}
	if c := CheckSplitBrain("OVN_Northbound", two); c.Status != hostcheck.Fail || !strings.Contains(c.Found, "different clusters") || !strings.Contains(c.Found, "c2: c") {
		t.Fatalf("two clusters: %s %s", c.Status, c.Found)
	}
	leaders := []MemberAnswer{{IP: "a", ClusterID: "c1", Leader: true, Connected: true}, {IP: "b", ClusterID: "c1", Leader: true, Connected: true}}
	if c := CheckSplitBrain("OVN_Northbound", leaders); c.Status != hostcheck.Fail || !strings.Contains(c.Found, "more than one member leads") {
		t.Fatalf("two leaders: %s %s", c.Status, c.Found)
	}
	silent := []MemberAnswer{{IP: "a", ClusterID: "c1", Leader: true, Connected: true}, {IP: "b", Err: errors.New("refused")}}
	if c := CheckSplitBrain("OVN_Northbound", silent); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "no answer from b") {
		t.Fatalf("silent member: %s %s", c.Status, c.Found)
	}
	noLeader := []MemberAnswer{{IP: "a", ClusterID: "c1", Connected: false}, {IP: "b", ClusterID: "c1"}}
	if c := CheckSplitBrain("OVN_Northbound", noLeader); c.Status != hostcheck.Fail || !strings.Contains(c.Found, "no quorum") {
		t.Fatalf("no leader: %s %s", c.Status, c.Found)
	}
}

func TestCheckCentralDisk(t *testing.T) {
	if c := CheckCentralDisk("/var/lib/ovn", 100<<30, 50<<30, 10<<20, nil); c.Status != hostcheck.Pass {
		t.Fatal(c)
	}
	if c := CheckCentralDisk("/var/lib/ovn", 100<<30, 10<<30, 10<<20, nil); c.Status != hostcheck.Warn || !strings.Contains(c.Found, "90% used") {
		t.Fatal(c)
	}
	if c := CheckCentralDisk("/var/lib/ovn", 100<<30, 4<<30, 10<<20, nil); c.Status != hostcheck.Fail {
		t.Fatal(c)
	}
	// Not enough room for a snapshot beside the database.
	if c := CheckCentralDisk("/var/lib/ovn", 100<<30, 30<<30, 20<<30, nil); c.Status != hostcheck.Fail {
		t.Fatal(c)
	}
}

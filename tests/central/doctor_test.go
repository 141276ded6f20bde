package central_test

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/tests/harness/centralcluster"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

type doctorReport struct {
	Status hostcheck.Status  `json:"status"`
	Checks []hostcheck.Check `json:"checks"`
}

// doctor runs `netctl doctor --role=central` in m's namespace with ips as
// OVN_DB_IPS and returns its exit code and report.
func doctor(t testing.TB, m *member, ips string) (int, map[string]hostcheck.Check) {
	t.Helper()
	return doctorArgs(t, m, ips)
}

func doctorArgs(t testing.TB, m *member, ips string, extra ...string) (int, map[string]hostcheck.Check) {
	t.Helper()
	args := append([]string{"netns", "exec", m.NS, testenv.Binary(t, "netctl"), "doctor", "--output=json"}, m.Args(ips)...)
	args = append(args, extra...)
	cmd := exec.Command("ip", args...)
	out, err := cmd.Output()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	var r doctorReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("doctor output: %v\n%s", err, out)
	}
	checks := map[string]hostcheck.Check{}
	for _, c := range r.Checks {
		checks[c.Name] = c
	}
	return code, checks
}

// doctor on a central member: all pass on a healthy cluster; a crashed
// member is named as not connected; a fourth address whose member runs a
// cluster of its own is a split brain.
func TestDoctorChecksTheCentral(t *testing.T) {
	c := centralcluster.New(t, 3)
	c.StartAll()
	c.SameCluster(nbName, 3)
	c.SameCluster(sbName, 3)
	m := c.Members[0]
	code, checks := doctor(t, m, c.IPs())
	for _, name := range []string{"raft:OVN_Northbound", "raft:OVN_Southbound", "members:OVN_Northbound", "members:OVN_Southbound", "split-brain:OVN_Northbound", "split-brain:OVN_Southbound", "clock"} {
		if checks[name].Status != hostcheck.Pass {
			t.Errorf("healthy cluster: %s = %+v", name, checks[name])
		}
	}
	if _, ok := checks["disk:"+m.Path("db")]; !ok {
		t.Errorf("no disk check: %v", checks)
	}
	if code != 0 && checks["disk:"+m.Path("db")].Status == hostcheck.Pass {
		t.Errorf("exit %d on a healthy cluster: %+v", code, checks)
	}

	down := c.Members[2]
	down.Crash()
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, checks = doctor(t, m, c.IPs())
		mc := checks["members:OVN_Northbound"]
		if mc.Status == hostcheck.Fail && strings.Contains(mc.Found, "not connected: "+down.IP) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("crashed member not reported: %+v", mc)
		}
	}
	if code != 2 {
		t.Errorf("exit %d with a member down, want 2", code)
	}
	if sb := checks["split-brain:OVN_Northbound"]; sb.Status != hostcheck.Warn || !strings.Contains(sb.Found, "no answer from "+down.IP) {
		t.Errorf("split-brain with a silent member: %+v", sb)
	}

	// A fourth host runs a cluster of its own: listing it is a split central.
	stranger := c.NewMember()
	stranger.StartNoWait(stranger.IP)
	stranger.WaitReady(60 * time.Second)
	_, checks = doctor(t, m, c.IPs()+","+stranger.IP)
	if sb := checks["split-brain:OVN_Northbound"]; sb.Status != hostcheck.Fail || !strings.Contains(sb.Found, "different clusters") {
		t.Errorf("two clusters not reported: %+v", sb)
	}
	if mc := checks["members:OVN_Northbound"]; mc.Status != hostcheck.Fail || !strings.Contains(mc.Found, "missing from the cluster: "+stranger.IP) {
		t.Errorf("missing member not reported: %+v", mc)
	}
}

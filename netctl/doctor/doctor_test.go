package doctor

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
)

func TestMainOutputAndExit(t *testing.T) {
	// Main uses the real host; only argument handling is checked here.
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"--output", "xml"}, nil, &out, &errb); code != 2 || !strings.Contains(errb.String(), "use table, wide, json or yaml") {
		t.Fatal(code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"--iface=("}, []string{"NODE_NAME=n"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "iface") {
		t.Fatal(code, errb.String())
	}
	out.Reset()
	if code := Main(context.Background(), []string{"--help"}, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), "Exit status") {
		t.Fatal(code)
	}
}

// report is a node with one warning and one failure.
func report() *hostcheck.Report {
	r := &hostcheck.Report{Datapath: "netdev", TunnelIface: "eth0", Checks: []hostcheck.Check{
		{Name: "datapath", Status: hostcheck.Pass, Found: "userspace"},
		{Name: "cni-plugin", Status: hostcheck.Warn, Found: "old build", Fix: "restart ovnhost"},
		{Name: "sb-reachable", Status: hostcheck.Fail, Found: "OVN_Southbound unreachable", Fix: "check OVN_DB_IPS"},
	}}
	r.Status = hostcheck.Worst(r.Checks)
	return r
}

func TestTable(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteTable(&buf, report()); err != nil {
		t.Fatal(err)
	}
	want := `STATUS  CHECK         FOUND
PASS    datapath      userspace
WARN    cni-plugin    old build
                      fix: restart ovnhost
FAIL    sb-reachable  OVN_Southbound unreachable
                      fix: check OVN_DB_IPS

FAIL: 3 checks, 1 failed, 1 warnings (datapath netdev, tunnel interface eth0, encap IP -)
`
	if buf.String() != want {
		t.Fatalf("got:\n%s\nwant:\n%s", buf.String(), want)
	}
}

func TestJSON(t *testing.T) {
	r := report()
	var buf bytes.Buffer
	if err := WriteJSON(&buf, r); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Status   string
		Datapath string
		Checks   []struct{ Name, Status, Found, Fix string }
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Status != "fail" || back.Datapath != "netdev" || len(back.Checks) != len(r.Checks) || r.ExitCode() != 2 {
		t.Fatalf("%s", buf.String())
	}
}

package nodeapi

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// The inputs are real ovn-trace 23.03 outputs (testdata), taken from a
// switch with two ports, a router port, a logged drop ACL and a UDP load
// balancer.
func trace(t *testing.T, name string) string {
	t.Helper()
	raw, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

func TestParseOVNTraceNamesTheDroppingACL(t *testing.T) {
	v := ParseOVNTrace(trace(t, "acl-drop.txt"))
	if v.Delivered || !strings.HasPrefix(v.DropStage, "ls_out_acl (egress of sw)") {
		t.Fatalf("%+v", v)
	}
	if !strings.Contains(v.DropFlow, `outport == "b.ns" && tcp.dst == 80`) {
		t.Errorf("drop flow %q lacks the ACL match", v.DropFlow)
	}
	joined := strings.Join(v.ACLs, "\n")
	if !strings.Contains(joined, "name=np.deny-80") || !strings.Contains(joined, "priority 2000") {
		t.Errorf("ACLs %q", joined)
	}
}

func TestParseOVNTraceDelivered(t *testing.T) {
	v := ParseOVNTrace(trace(t, "delivered.txt"))
	if !v.Delivered || v.Output != "b.ns" || v.DropStage != "" {
		t.Fatalf("%+v", v)
	}
}

func TestParseOVNTracePortSecurity(t *testing.T) {
	v := ParseOVNTrace(trace(t, "portsec-drop.txt"))
	if v.Delivered || !strings.HasPrefix(v.DropStage, "ls_in_apply_port_sec (ingress of sw)") {
		t.Fatalf("%+v", v)
	}
}

func TestParseOVNTraceLoadBalancer(t *testing.T) {
	v := ParseOVNTrace(trace(t, "lb.txt"))
	if len(v.LBs) != 1 || !strings.Contains(v.LBs[0], "ls_in_lb") || !strings.HasSuffix(v.LBs[0], "-> 10.16.0.3:53") {
		t.Fatalf("%q", v.LBs)
	}
}

func TestParseOFProtoTraceTakesTheLastVerdict(t *testing.T) {
	out := "Flow: ...\nDatapath actions: ct(zone=3),recirc(0x1)\n\n===\nresume conntrack\nDatapath actions: drop\n"
	if got := ParseOFProtoTrace(out); got != "drop" {
		t.Fatal(got)
	}
}

func TestParseMemoryAndCoverage(t *testing.T) {
	m := ParseMemoryShow("handlers:1 idl-cells-Open_vSwitch:382 ports:5 revalidators:1 rules:16 udpif keys:3\n")
	if m["handlers"] != 1 || m["idl-cells-Open_vSwitch"] != 382 || m["udpif_keys"] != 3 || len(m) != 6 {
		t.Fatal(m)
	}
	c := ParseCoverageShow("Event coverage, avg rate over last: 5 seconds, last minute, last hour,  hash=5bbd9d08:\n" +
		"bridge_reconfigure         0.0/sec     0.000/sec        0.0083/sec   total: 30\n" +
		"ofproto_flush              0.0/sec     0.000/sec        0.0000/sec   total: 1\n" +
		"122 events never hit\n")
	if c["bridge_reconfigure"] != 30 || c["ofproto_flush"] != 1 || len(c) != 2 {
		t.Fatal(c)
	}
}

// A trace's provider becomes part of the port name in ovn-trace's
// microflow: only an attachment provider's form passes, refused before
// any database is asked.
func TestTraceRefusesAProviderThatIsNotOne(t *testing.T) {
	for _, p := range []string{`a.b.ovn" || 1 == 1`, "ovn", "attnet.ovn", "A.b.ovn", "a.b.ovn\n"} {
		_, err := (&Ops{}).Trace(context.Background(), api.TraceRequest{Namespace: "ns", Pod: "p", Dst: "10.0.0.1", Provider: p})
		var br BadRequest
		if !errors.As(err, &br) || !strings.Contains(err.Error(), "want an attachment network's provider") {
			t.Errorf("provider %q: %v, want a BadRequest naming the form", p, err)
		}
	}
}

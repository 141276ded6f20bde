package nodeapi

import (
	"os"
	"strings"
	"testing"
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

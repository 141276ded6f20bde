package nodeapi

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

// A POST body past the cap is refused with 413 naming the limit (before:
// it was cut silently and the cut JSON reported as a 400 syntax error).
func TestBodyOverTheCapIs413(t *testing.T) {
	called := false
	b := Backend{Node: "n1", Appctl: func(context.Context, api.AppctlRequest) (string, error) { called = true; return "", nil }}
	h := HandlerWith(health.New(), b, &allow{}, quiet, Limits{MaxBody: 1 << 10})
	body := `{"target":"ovs-vswitchd","command":"version","args":["` + strings.Repeat("a", 4<<10) + `"]}`
	w := do(t, h, http.MethodPost, api.PathAppctl, "x", body)
	if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(errorOf(t, w), "larger than 1024 bytes") || called {
		t.Fatalf("4 KiB body under a 1 KiB cap: %d %s (backend called: %v)", w.Code, w.Body, called)
	}
	// The default cap is 1 MiB.
	h = Handler(health.New(), b, &allow{}, quiet)
	body = `{"target":"ovs-vswitchd","command":"version","args":["` + strings.Repeat("a", 2<<20) + `"]}`
	if w := do(t, h, http.MethodPost, api.PathAppctl, "x", body); w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("2 MiB body: %d %s", w.Code, w.Body)
	}
	if w := do(t, h, http.MethodPost, api.PathAppctl, "x", `{"target":"ovs-vswitchd","command":"version"}`); w.Code != http.StatusOK || !called {
		t.Fatalf("small body: %d %s", w.Code, w.Body)
	}
}

// ofproto/trace through appctl: a flow alone is passed; -generate, a
// packet in hex, and unknown options are refused with 400 naming the
// argument, before ovs-vswitchd is asked (Config is nil: asking it would
// panic).
func TestOFProtoTraceRefusesSideEffects(t *testing.T) {
	o := &Ops{}
	h := Handler(health.New(), Backend{Node: "n1", Appctl: o.Appctl}, &allow{}, quiet)
	pkt := "0a580a100001" + "0a580a100002" + "0800" + "4500001c0001000040010000"
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"br-int", "in_port=1,icmp", "-generate"}, `argument "-generate"`},
		{[]string{"br-int", "in_port=1", "--generate"}, `argument "--generate"`},
		{[]string{"br-int", "in_port=1", pkt}, "a packet (hex)"},
		{[]string{"in_port(1)", pkt}, "a packet (hex)"},
		{[]string{"br-int", "in_port=1", "extra"}, `argument "extra"`},
		{[]string{"br-int", "in_port=1", "-consistent"}, `argument "-consistent"`},
		{[]string{"br-int", "in_port=1", "--ct-next"}, "needs a value"},
		{nil, "needs a flow"},
	} {
		body := fmt.Sprintf(`{"target":"ovs-vswitchd","command":"ofproto/trace","args":%q}`, c.args)
		body = strings.ReplaceAll(body, `" "`, `","`)
		if c.args == nil {
			body = `{"target":"ovs-vswitchd","command":"ofproto/trace"}`
		}
		w := do(t, h, http.MethodPost, api.PathAppctl, "x", body)
		if w.Code != http.StatusBadRequest || !strings.Contains(errorOf(t, w), c.want) {
			t.Errorf("ofproto/trace %q: %d %s, want 400 with %q", c.args, w.Code, w.Body, c.want)
		}
	}
	for _, ok := range [][]string{
		{"br-int", "in_port=1,icmp,nw_src=10.16.0.2,nw_dst=10.16.0.3"},
		{"br-int", "in_port=1,tcp", "--ct-next", "trk,new"},
		{"in_port(1),eth(src=0a:58:0a:10:00:01,dst=0a:58:0a:10:00:02)"},
		{"br-int", "in_port=1", "--l7", "deadbeef"},
	} {
		if err := CheckOFProtoTraceArgs(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	// The trace endpoint's MACs go into both flows: only MACs pass.
	if _, err := o.Trace(context.Background(), api.TraceRequest{Namespace: "ns", Pod: "p", Dst: "10.0.0.1", DstMAC: "00:00:00:00:00:01,actions=drop"}); err == nil || !strings.Contains(err.Error(), `dstMAC "00:00:00:00:00:01,actions=drop"`) {
		t.Fatalf("a dstMAC with more than a MAC: %v", err)
	}
}

// OVSDB answers are capped in rows and bytes, and say so.
func TestOVSDBAnswersAreCapped(t *testing.T) {
	rows := make([]row, 50)
	for i := range rows {
		rows[i] = row{"_uuid": ovsdb.UUID{GoUUID: fmt.Sprintf("00000000-0000-0000-0000-%012d", i)}, "name": fmt.Sprintf("p%02d", i)}
	}
	res := capRows(rows, QueryCaps{MaxRows: 10, MaxBytes: 1 << 20})
	if len(res.Rows) != 10 || !strings.Contains(res.Truncated, "10 of 50 rows shown") || !strings.Contains(res.Text, "# truncated: 10 of 50 rows") {
		t.Fatalf("row cap: %d rows, %q", len(res.Rows), res.Truncated)
	}
	res = capRows(rows, QueryCaps{MaxRows: 1000, MaxBytes: 1000})
	if len(res.Rows) == 0 || len(res.Rows) >= 50 || !strings.Contains(res.Truncated, "at most 1000 bytes") || len(res.Text) > 1000+200 {
		t.Fatalf("byte cap: %d rows, %d bytes, %q", len(res.Rows), len(res.Text), res.Truncated)
	}
	if res := capRows(rows, QueryCaps{}); len(res.Rows) != 50 || res.Truncated != "" {
		t.Fatalf("under the caps: %d rows, %q", len(res.Rows), res.Truncated)
	}
	text := &api.OVSDBResult{Text: strings.Repeat("Port_Binding \"x\"\n", 1000)}
	capText(text, 100)
	if !strings.HasSuffix(text.Text, "\n") || !strings.Contains(text.Text, "# truncated: 85 of 17000 bytes shown") {
		t.Fatalf("show cap: %q", text.Text)
	}
}

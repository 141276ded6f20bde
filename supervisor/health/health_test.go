package health

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestReadyOnlyWhenEveryChildIsReady(t *testing.T) {
	r := New()
	var sent []string
	r.SetNotifier(func(s string) error { sent = append(sent, s); return nil })
	r.Register("ovsdb-server")
	r.Register("ovs-vswitchd")
	r.Started("ovsdb-server", 10, false)
	r.Ready("ovsdb-server", time.Millisecond, time.Millisecond)
	r.Waiting("ovs-vswitchd", "cur_cfg to reach 1")
	if ok, msg := r.Status(); ok || msg != "ovs-vswitchd: waiting for cur_cfg to reach 1" {
		t.Fatalf("Status = %v %q", ok, msg)
	}
	for _, s := range sent {
		if strings.HasPrefix(s, "READY=1") {
			t.Fatalf("READY=1 sent before every child was ready: %q", sent)
		}
	}
	r.Started("ovs-vswitchd", 11, false)
	r.Ready("ovs-vswitchd", time.Millisecond, time.Millisecond)
	last := sent[len(sent)-1]
	if !strings.HasPrefix(last, "READY=1\nSTATUS=ready: ovsdb-server pid 10, ovs-vswitchd pid 11") {
		t.Fatalf("last notification %q", last)
	}
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/readyz: %v %v", resp, err)
	}
	resp, err = http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `ovnhost_build_info{version="dev"} 1`) {
		t.Fatalf("no build info in /metrics:\n%.1500s", body)
	}
	r.Exited("ovs-vswitchd", "signal: killed", false)
	resp, _ = http.Get(srv.URL + "/readyz")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after a death = %d", resp.StatusCode)
	}
	resp, _ = http.Get(srv.URL + "/healthz")
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz after a single death = %d; only a crash loop is unhealthy", resp.StatusCode)
	}
	r.Exited("ovs-vswitchd", "exit status 1", true)
	resp, _ = http.Get(srv.URL + "/healthz")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("/healthz in a crash loop = %d", resp.StatusCode)
	}
	if !strings.Contains(sent[len(sent)-1], "STATUS=ovs-vswitchd is crash-looping: exit status 1") {
		t.Fatalf("crash loop status %q", sent[len(sent)-1])
	}
}

// A degraded unit (an underlay network without its NIC) leaves the node
// ready: READY=1 goes out, /readyz is 200 and names what is missing.
func TestDegradedStaysReadyAndSaysWhy(t *testing.T) {
	r := New()
	var sent []string
	r.SetNotifier(func(s string) error { sent = append(sent, s); return nil })
	r.Register("underlay")
	r.Degraded("underlay", "provider network physnet1: eth2 not found; this host has eth1")
	r.Ready("underlay", time.Millisecond, time.Millisecond)
	if len(sent) == 0 || !strings.HasPrefix(sent[0], "READY=1") {
		t.Fatalf("no READY=1 with a degraded unit: %q", sent)
	}
	if ok, msg := r.Status(); !ok || msg != "ready, degraded: underlay: provider network physnet1: eth2 not found; this host has eth1" {
		t.Fatalf("Status = %v %q", ok, msg)
	}
	r.Degraded("underlay", "")
	if ok, msg := r.Status(); !ok || msg != "ready" || sent[len(sent)-1] != "STATUS=ready: underlay recovered; " {
		t.Fatalf("Status = %v %q, last sent %q", ok, msg, sent[len(sent)-1])
	}
}

func TestWaitingSaysWhatHoldsItUp(t *testing.T) {
	r := New()
	r.Register("ovn-controller")
	r.Waiting("ovn-controller", "its Chassis row")
	r.Degraded("ovn-controller", "held for version skew")
	if ok, msg := r.Status(); ok || msg != "ovn-controller: waiting for its Chassis row (held for version skew)" {
		t.Fatalf("Status = %v %q", ok, msg)
	}
	r.Degraded("ovn-controller", "")
	if _, msg := r.Status(); msg != "ovn-controller: waiting for its Chassis row" {
		t.Fatalf("Status after the hold = %q", msg)
	}
}

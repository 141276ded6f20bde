package ovnnb_test

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func lbRows(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) map[string]*nbdb.LoadBalancer {
	t.Helper()
	out := map[string]*nbdb.LoadBalancer{}
	for _, lb := range nbtest.Rows[*nbdb.LoadBalancer](t, s, nb, nbdb.LoadBalancerTable) {
		if out[lb.Name] != nil {
			t.Fatalf("two load balancers named %s", lb.Name)
		}
		out[lb.Name] = lb
	}
	return out
}

func TestLoadBalancerGroupReachesEverySwitchAndRouter(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	ctx := context.Background()
	uuid, err := nb.EnsureLBGroup(ctx, "cluster-lbs")
	if err != nil {
		t.Fatal(err)
	}
	if again, err := nb.EnsureLBGroup(ctx, "cluster-lbs"); err != nil || again != uuid {
		t.Fatalf("EnsureLBGroup again: %s %v, want %s", again, err, uuid)
	}
	if err := nb.AttachLBGroup(ctx, "cluster-lbs", uuid, "ovn-cluster"); err != nil {
		t.Fatal(err)
	}
	// A switch made afterwards gets the group too.
	if err := nb.EnsureSwitch(ctx, ovnnb.Switch{Name: "late", Router: "ovn-cluster", CIDRs: []netip.Prefix{mustPrefix("10.18.0.0/16")},
		Gateways: []netip.Addr{mustAddr("10.18.0.1")}}); err != nil {
		t.Fatal(err)
	}
	for _, ls := range nbtest.Rows[*nbdb.LogicalSwitch](t, s, nb, nbdb.LogicalSwitchTable) {
		if !slices.Equal(ls.LoadBalancerGroup, []string{uuid}) {
			t.Errorf("switch %s: load_balancer_group %v, want [%s]", ls.Name, ls.LoadBalancerGroup, uuid)
		}
	}
	if r := nbtest.Rows[*nbdb.LogicalRouter](t, s, nb, nbdb.LogicalRouterTable)[0]; !slices.Equal(r.LoadBalancerGroup, []string{uuid}) {
		t.Errorf("router: load_balancer_group %v", r.LoadBalancerGroup)
	}
}

func TestSetLoadBalancersCreatesUpdatesAndDeletes(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	ctx := context.Background()
	uuid, err := nb.EnsureLBGroup(ctx, "cluster-lbs")
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"svc_web_tcp", "svc_web_udp"}
	tcp := ovnnb.LoadBalancer{Name: "svc_web_tcp", Protocol: "tcp", VIPs: map[string]string{"10.96.0.10:80": "10.16.0.5:8080"},
		Options: map[string]string{"reject": "true"}, ExternalIDs: map[string]string{"svc": "default/web"}}
	udp := ovnnb.LoadBalancer{Name: "svc_web_udp", Protocol: "udp", VIPs: map[string]string{"10.96.0.10:53": "10.16.0.5:53"},
		SelectionFields: []string{"ip_src"}, ExternalIDs: map[string]string{"svc": "default/web"}}
	if err := nb.SetLoadBalancers(ctx, "cluster-lbs", names, []ovnnb.LoadBalancer{tcp, udp}); err != nil {
		t.Fatal(err)
	}
	// Right away again (the cache may not show the rows yet): no duplicate.
	if err := nb.SetLoadBalancers(ctx, "cluster-lbs", names, []ovnnb.LoadBalancer{tcp, udp}); err != nil {
		t.Fatal(err)
	}
	lbs := lbRows(t, s, nb)
	if len(lbs) != 2 || lbs["svc_web_tcp"].Protocol == nil || *lbs["svc_web_tcp"].Protocol != "tcp" ||
		!maps.Equal(lbs["svc_web_tcp"].Vips, tcp.VIPs) || lbs["svc_web_udp"].ExternalIDs["svc"] != "default/web" {
		t.Fatalf("load balancers %+v", lbs)
	}
	group := nbtest.Rows[*nbdb.LoadBalancerGroup](t, s, nb, nbdb.LoadBalancerGroupTable)[0]
	if group.UUID != uuid || len(group.LoadBalancer) != 2 {
		t.Fatalf("group holds %v", group.LoadBalancer)
	}

	// The TCP backend moves, the UDP port goes.
	tcpUUID := lbs["svc_web_tcp"].UUID
	tcp.VIPs = map[string]string{"10.96.0.10:80": "10.16.0.6:8080,10.16.0.7:8080"}
	if err := nb.SetLoadBalancers(ctx, "cluster-lbs", names, []ovnnb.LoadBalancer{tcp}); err != nil {
		t.Fatal(err)
	}
	lbs = lbRows(t, s, nb)
	if len(lbs) != 1 || lbs["svc_web_tcp"].UUID != tcpUUID || lbs["svc_web_tcp"].Vips["10.96.0.10:80"] != "10.16.0.6:8080,10.16.0.7:8080" {
		t.Fatalf("after update: %+v", lbs)
	}
	got, err := nb.LoadBalancers(ctx, map[string]string{"svc": "default/web"})
	if err != nil || len(got) != 1 || got[0].Name != "svc_web_tcp" {
		t.Fatalf("LoadBalancers: %+v %v", got, err)
	}
	if err := nb.SetLoadBalancers(ctx, "cluster-lbs", names, nil); err != nil {
		t.Fatal(err)
	}
	if lbs := lbRows(t, s, nb); len(lbs) != 0 {
		t.Fatalf("load balancers left: %v", lbs)
	}
}

func TestSetLoadBalancersRefusesWhatItCannotWrite(t *testing.T) {
	s, nb := nbtest.Client(t)
	ctx := context.Background()
	lb := ovnnb.LoadBalancer{Name: "svc_a_tcp", Protocol: "tcp", VIPs: map[string]string{"10.96.0.1:80": ""}}
	if err := nb.SetLoadBalancers(ctx, "no-such-group", []string{"svc_a_tcp"}, []ovnnb.LoadBalancer{lb}); err == nil {
		t.Fatal("no error without the group")
	}
	if _, err := nb.EnsureLBGroup(ctx, "g"); err != nil {
		t.Fatal(err)
	}
	if err := nb.SetLoadBalancers(ctx, "g", []string{"other"}, []ovnnb.LoadBalancer{lb}); err == nil {
		t.Fatal("no error for a load balancer not among names")
	}
	bad := lb
	bad.Protocol = "icmp"
	if err := nb.SetLoadBalancers(ctx, "g", []string{"svc_a_tcp"}, []ovnnb.LoadBalancer{bad}); err == nil {
		t.Fatal("no error for protocol icmp")
	}
	if lbs := lbRows(t, s, nb); len(lbs) != 0 {
		t.Fatalf("refused calls wrote %v", lbs)
	}
}

// A router's own load balancers (a VPC's port forwards): created in its
// load_balancer column, updated, deleted; refused without the router;
// deleted alone once the router is gone.
func TestSetRouterLoadBalancers(t *testing.T) {
	s, nb := nbtest.Client(t)
	ctx := context.Background()
	names := []string{"fw-tcp", "fw-udp"}
	tcp := ovnnb.LoadBalancer{Name: "fw-tcp", Protocol: "tcp", VIPs: map[string]string{"172.56.0.21:2222": "10.200.0.5:22"}}
	if err := nb.SetRouterLoadBalancers(ctx, "vpc-a", names, []ovnnb.LoadBalancer{tcp}); err == nil || !strings.Contains(err.Error(), `router "vpc-a" does not exist`) {
		t.Fatalf("without the router: %v", err)
	}
	if lbs := lbRows(t, s, nb); len(lbs) != 0 {
		t.Fatalf("a refused call wrote %v", lbs)
	}
	if err := nb.EnsureRouter(ctx, "vpc-a"); err != nil {
		t.Fatal(err)
	}
	udp := ovnnb.LoadBalancer{Name: "fw-udp", Protocol: "udp", VIPs: map[string]string{"172.56.0.21:53": "10.200.0.7:5353"}}
	if err := nb.SetRouterLoadBalancers(ctx, "vpc-a", names, []ovnnb.LoadBalancer{tcp, udp}); err != nil {
		t.Fatal(err)
	}
	held := func() []string {
		var out []string
		lbs := lbRows(t, s, nb)
		for _, r := range nbtest.Rows[*nbdb.LogicalRouter](t, s, nb, nbdb.LogicalRouterTable) {
			for _, u := range r.LoadBalancer {
				for n, lb := range lbs {
					if lb.UUID == u {
						out = append(out, r.Name+" "+n+" "+fmt.Sprint(lb.Vips))
					}
				}
			}
		}
		slices.Sort(out)
		return out
	}
	if got := held(); !slices.Equal(got, []string{"vpc-a fw-tcp map[172.56.0.21:2222:10.200.0.5:22]", "vpc-a fw-udp map[172.56.0.21:53:10.200.0.7:5353]"}) {
		t.Fatalf("router's load balancers %q", got)
	}
	tcp.VIPs = map[string]string{"172.56.0.21:2222": "10.200.0.6:22"}
	if err := nb.SetRouterLoadBalancers(ctx, "vpc-a", names, []ovnnb.LoadBalancer{tcp}); err != nil {
		t.Fatal(err)
	}
	if got := held(); !slices.Equal(got, []string{"vpc-a fw-tcp map[172.56.0.21:2222:10.200.0.6:22]"}) {
		t.Fatalf("after the update and udp's removal %q", got)
	}
	if lbs := lbRows(t, s, nb); len(lbs) != 1 {
		t.Fatalf("rows %v, want fw-tcp alone", lbs)
	}
	// The router deleted by someone else: its rows are left (a root table)
	// and "" deletes them.
	ops, err := nb.Raw().WhereCache(func(r *nbdb.LogicalRouter) bool { return r.Name == "vpc-a" }).Delete()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nb.Raw().Transact(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	if err := nb.SetRouterLoadBalancers(ctx, "", names, []ovnnb.LoadBalancer{tcp}); err == nil {
		t.Fatal("no error for load balancers without a router")
	}
	if err := nb.SetRouterLoadBalancers(ctx, "", names, nil); err != nil {
		t.Fatal(err)
	}
	if lbs := lbRows(t, s, nb); len(lbs) != 0 {
		t.Fatalf("rows left after the router went: %v", lbs)
	}
}

func TestTemplateVarsPerChassisAndOwner(t *testing.T) {
	s, nb := nbtest.Client(t)
	ctx := context.Background()
	chassis := []string{"ch-1", "ch-2"}
	if err := nb.SetTemplateVars(ctx, "svc_a_", chassis, map[string]map[string]string{"svc_a_80": {"ch-1": "10.16.0.5:80"}}); err != nil {
		t.Fatal(err)
	}
	if err := nb.SetTemplateVars(ctx, "svc_b_", chassis, map[string]map[string]string{"svc_b_53": {"ch-2": "10.16.0.6:53"}}); err != nil {
		t.Fatal(err)
	}
	vars := func() map[string]map[string]string {
		out := map[string]map[string]string{}
		for _, r := range nbtest.Rows[*nbdb.ChassisTemplateVar](t, s, nb, nbdb.ChassisTemplateVarTable) {
			out[r.Chassis] = r.Variables
		}
		return out
	}
	got := vars()
	if !maps.Equal(got["ch-1"], map[string]string{"svc_a_80": "10.16.0.5:80", "svc_b_53": ""}) ||
		!maps.Equal(got["ch-2"], map[string]string{"svc_a_80": "", "svc_b_53": "10.16.0.6:53"}) {
		t.Fatalf("template variables %v", got)
	}
	if err := nb.SetTemplateVars(ctx, "svc_a_", chassis, nil); err != nil {
		t.Fatal(err)
	}
	got = vars()
	if !maps.Equal(got["ch-1"], map[string]string{"svc_b_53": ""}) || !maps.Equal(got["ch-2"], map[string]string{"svc_b_53": "10.16.0.6:53"}) {
		t.Fatalf("after removing svc_a_: %v", got)
	}
	if err := nb.SetTemplateVars(ctx, "svc_c_", chassis, map[string]map[string]string{"svc_a_1": {}}); err == nil {
		t.Fatal("a variable outside its owner's prefix was accepted")
	}
}

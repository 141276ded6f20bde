package controller_test

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
)

// TestNBTopologyAndPortsSurviveReconnect programs a router, a switch and a
// port through the library, restarts the NB ovsdb-server under the live
// client and checks the client carries on with the same connection object.
func TestNBTopologyAndPortsSurviveReconnect(t *testing.T) {
	c := ovncentral.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NB()})
	if err != nil {
		t.Fatal(err)
	}
	defer nb.Close()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(nb.EnsureRouter(ctx, "ovn-cluster"))
	must(nb.EnsureRouter(ctx, "ovn-cluster"))
	sw := ovnnb.Switch{Name: "ovn-default", Router: "ovn-cluster",
		CIDRs: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")}, Gateways: []netip.Addr{netip.MustParseAddr("10.16.0.1")}}
	must(nb.EnsureSwitch(ctx, sw))
	must(nb.EnsureSwitch(ctx, sw))
	p := ovnnb.Port{Name: "web.default", Switch: "ovn-default", MAC: "0a:00:00:00:00:02", IPs: []netip.Addr{netip.MustParseAddr("10.16.0.2")},
		ExternalIDs: map[string]string{ovnnb.KeyPod: "default/web"}}
	must(nb.EnsurePort(ctx, p))
	must(nb.EnsurePort(ctx, p))

	var lsps []nbdb.LogicalSwitchPort
	must(nb.Raw().List(ctx, &lsps))
	names := []string{}
	for _, l := range lsps {
		names = append(names, l.Name)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"ovn-default-ovn-cluster", "web.default"}) {
		t.Fatalf("ports %v", names)
	}
	var lrps []nbdb.LogicalRouterPort
	must(nb.Raw().List(ctx, &lrps))
	if len(lrps) != 1 || lrps[0].Name != "ovn-cluster-ovn-default" || !slices.Equal(lrps[0].Networks, []string{"10.16.0.1/16"}) {
		t.Fatalf("router ports %+v", lrps)
	}
	err = nb.EnsurePort(ctx, ovnnb.Port{Name: "x.default", Switch: "nope", MAC: "0a:00:00:00:00:03", IPs: p.IPs})
	if err == nil {
		t.Fatal("port on a missing switch accepted")
	}

	c.StopNB()
	c.StartNB(t)
	p.IPs = []netip.Addr{netip.MustParseAddr("10.16.0.9")}
	must(nb.EnsurePort(ctx, p)) // blocks until reconnected
	got, ok, err := nb.GetPort(ctx, "web.default")
	if err != nil || !ok || got.IPs[0] != p.IPs[0] {
		t.Fatalf("after reconnect: %+v %v %v", got, ok, err)
	}
	must(nb.DeletePort(ctx, "web.default", ovnnb.PodPortOwner("default", "web")))
	if _, ok, _ := nb.GetPort(ctx, "web.default"); ok {
		t.Fatal("port still in cache after delete")
	}
	must(c.WaitNorthd(ctx))
}

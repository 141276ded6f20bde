package controller_test

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
)

// TestStandaloneLibraryWithoutKubernetes drives the library the way the node
// daemon does on a host without Kubernetes: default topology, pods (one with
// a static address), a restart that restores from the NB, deletion.
func TestStandaloneLibraryWithoutKubernetes(t *testing.T) {
	c := ovncentral.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NB(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	n := ovnnet.New(nb, ovnnet.Config{})
	if err := n.EnsureDefaultTopology(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	a, err := n.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if a.IPString() != "10.16.0.2" || a.CIDR != "10.16.0.0/16" || a.Gateway != "10.16.0.1" || a.Subnet != "ovn-default" {
		t.Fatalf("first pod: %+v", a)
	}
	static := netip.MustParseAddr("10.16.9.9")
	if _, err := n.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "db", IPs: []netip.Addr{static}}); err != nil {
		t.Fatal(err)
	}
	_, err = n.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "thief", IPs: []netip.Addr{static}})
	if ipam.KindOf(err) != ipam.KindConflict {
		t.Fatalf("conflicting static address: %v", err)
	}
	if _, ok, _ := nb.GetPort(ctx, "thief.default"); ok {
		t.Fatal("refused pod got a port")
	}
	if _, err := n.AddNode(ctx, ovnnet.NodeRequest{Name: "host1", InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.1.5")}}); err != nil {
		t.Fatal(err)
	}
	nb.Close()

	// Restart: a fresh process state, restored from the NB.
	nb2, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NB(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer nb2.Close()
	n2 := ovnnet.New(nb2, ovnnet.Config{})
	if err := n2.EnsureDefaultTopology(ctx, "", ""); err != nil {
		t.Fatal(err)
	}
	if got, err := n2.RestoreFromNB(ctx); err != nil || got != 3 {
		t.Fatalf("restored %d ports (%v), want 3 (web, db, node-host1)", got, err)
	}
	b, err := n2.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "api"})
	if err != nil || b.IPString() != "10.16.0.3" {
		t.Fatalf("after restart the next pod got %v (%v), want 10.16.0.3", b.IPString(), err)
	}
	if again, _ := n2.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "web"}); again.IPString() != "10.16.0.2" || again.MAC != a.MAC {
		t.Fatalf("re-adding web changed it: %+v vs %+v", again, a)
	}
	if err := n2.DeletePod(ctx, "default", "web"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := nb2.GetPort(ctx, "web.default"); ok {
		t.Fatal("port web.default still present")
	}
	if c, err := n2.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "web2"}); err != nil || c.IPString() != "10.16.0.2" {
		t.Fatalf("freed address not reused: %v %v", c.IPString(), err)
	}
}

package ovnnb_test

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The OVN side of these tests is libovsdb's in-memory OVSDB server with
// the NB schema (nbtest); the rows are read back from the server, not
// from the client's cache. The tests of the child-row diff (port groups,
// NAT) run on a real ovsdb-server as well.

// bothServers runs f on the in-memory server and on a real ovsdb-server.
func bothServers(t *testing.T, f func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client)) {
	t.Run("inmemory", func(t *testing.T) {
		s, nb := nbtest.Client(t)
		f(t, s, nb)
	})
	t.Run("ovsdb-server", func(t *testing.T) {
		s := nbtest.StartOVSDB(t)
		f(t, s, s.Connect(t, ovnnb.Options{PortGroups: true}))
	})
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func mustAddr(s string) netip.Addr     { return netip.MustParseAddr(s) }

// topology: router ovn-cluster with switches ovn-default (10.16.0.0/16)
// and other (10.17.0.0/16) attached.
func topology(t *testing.T, nb *ovnnb.Client) {
	t.Helper()
	ctx := context.Background()
	if err := nb.EnsureRouter(ctx, "ovn-cluster"); err != nil {
		t.Fatal(err)
	}
	for _, s := range []ovnnb.Switch{
		{Name: "ovn-default", Router: "ovn-cluster", CIDRs: []netip.Prefix{mustPrefix("10.16.0.0/16")}, Gateways: []netip.Addr{mustAddr("10.16.0.1")}},
		{Name: "other", Router: "ovn-cluster", CIDRs: []netip.Prefix{mustPrefix("10.17.0.0/16")}, Gateways: []netip.Addr{mustAddr("10.17.0.1")}},
	} {
		if err := nb.EnsureSwitch(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
}

func switchNamed(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, name string) *nbdb.LogicalSwitch {
	t.Helper()
	for _, ls := range nbtest.Rows[*nbdb.LogicalSwitch](t, s, nb, nbdb.LogicalSwitchTable) {
		if ls.Name == name {
			return ls
		}
	}
	return nil
}

func portNamed(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, name string) *nbdb.LogicalSwitchPort {
	t.Helper()
	for _, p := range nbtest.Rows[*nbdb.LogicalSwitchPort](t, s, nb, nbdb.LogicalSwitchPortTable) {
		if p.Name == name {
			return p
		}
	}
	return nil
}

func TestSwitchIsAttachedToTheRouterOnce(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	topology(t, nb) // idempotent
	ls := switchNamed(t, s, nb, "ovn-default")
	if ls == nil || ls.ExternalIDs[ovnnb.KeyCIDR] != "10.16.0.0/16" || ls.ExternalIDs[ovnnb.KeyVendor] != ovnnb.Vendor {
		t.Fatalf("switch ovn-default: %+v", ls)
	}
	lsp := portNamed(t, s, nb, "ovn-default-ovn-cluster")
	if lsp == nil || lsp.Type != "router" || lsp.Options["router-port"] != "ovn-cluster-ovn-default" || !slices.Contains(ls.Ports, lsp.UUID) {
		t.Fatalf("switch-side router port: %+v (switch ports %v)", lsp, ls.Ports)
	}
	var lrps []*nbdb.LogicalRouterPort
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable) {
		if p.Name == "ovn-cluster-ovn-default" {
			lrps = append(lrps, p)
		}
	}
	if len(lrps) != 1 || !slices.Equal(lrps[0].Networks, []string{"10.16.0.1/16"}) || lrps[0].MAC != ovnnb.RouterPortMAC("ovn-cluster-ovn-default") {
		t.Fatalf("router port: %+v", lrps)
	}
	routers := nbtest.Rows[*nbdb.LogicalRouter](t, s, nb, nbdb.LogicalRouterTable)
	if len(routers) != 1 || len(routers[0].Ports) != 2 {
		t.Fatalf("routers %+v: want one, with the two switches' ports", routers)
	}
}

func TestPortIsWrittenMovedAndOnlyItsOwnerDeletesIt(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	ctx := context.Background()
	p := ovnnb.Port{Name: "web.default", Switch: "ovn-default", MAC: "0a:00:00:00:00:01", IPs: []netip.Addr{mustAddr("10.16.0.5")},
		ExternalIDs: map[string]string{ovnnb.KeyPod: "default/web"}}
	if err := nb.EnsurePort(ctx, p); err != nil {
		t.Fatal(err)
	}
	lsp := portNamed(t, s, nb, "web.default")
	if lsp == nil || !slices.Equal(lsp.Addresses, []string{"0a:00:00:00:00:01 10.16.0.5"}) || !slices.Equal(lsp.PortSecurity, lsp.Addresses) {
		t.Fatalf("port: %+v", lsp)
	}
	if !slices.Contains(switchNamed(t, s, nb, "ovn-default").Ports, lsp.UUID) {
		t.Fatal("port not on its switch")
	}

	// Another owner's port of that name is left alone.
	other := p
	other.ExternalIDs = map[string]string{ovnnb.KeyPod: "other/web"}
	err := nb.EnsurePort(ctx, other)
	var oe *ovnnb.OwnerError
	if !errors.Is(err, ovnnb.ErrNotOwner) || !errors.As(err, &oe) || oe.Holder != "pod:default/web" {
		t.Fatalf("EnsurePort by another owner: %v, want an OwnerError naming pod:default/web", err)
	}
	if err := nb.DeletePort(ctx, "web.default", "pod:other/web"); !errors.Is(err, ovnnb.ErrNotOwner) {
		t.Fatalf("DeletePort by another owner: %v", err)
	}

	// Moved to the other switch: same row, new addresses.
	p.Switch, p.IPs = "other", []netip.Addr{mustAddr("10.17.0.5")}
	if err := nb.EnsurePort(ctx, p); err != nil {
		t.Fatal(err)
	}
	moved := portNamed(t, s, nb, "web.default")
	if moved.UUID != lsp.UUID || moved.ExternalIDs[ovnnb.KeySwitch] != "other" || !slices.Contains(switchNamed(t, s, nb, "other").Ports, lsp.UUID) ||
		slices.Contains(switchNamed(t, s, nb, "ovn-default").Ports, lsp.UUID) {
		t.Fatalf("moved port: %+v", moved)
	}

	if err := nb.DeletePort(ctx, "web.default", ovnnb.PodPortOwner("default", "web")); err != nil {
		t.Fatal(err)
	}
	if got := portNamed(t, s, nb, "web.default"); got != nil {
		t.Fatalf("deleted port still there: %+v", got)
	}
}

func TestPortOnAMissingSwitchIsErrNoSwitch(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	err := nb.EnsurePort(context.Background(), ovnnb.Port{Name: "a.default", Switch: "nowhere", MAC: "0a:00:00:00:00:02",
		IPs: []netip.Addr{mustAddr("10.16.0.6")}, ExternalIDs: map[string]string{ovnnb.KeyPod: "default/a"}})
	if !errors.Is(err, ovnnb.ErrNoSwitch) {
		t.Fatalf("EnsurePort on a missing switch: %v, want ErrNoSwitch", err)
	}
	if got := portNamed(t, s, nb, "a.default"); got != nil {
		t.Fatalf("a port without a switch was left: %+v", got)
	}
}

// An underlay subnet's switch: a localnet port named as Kube-OVN names it,
// with the VLAN tag and the provider network, and no router port (its
// gateway is a physical router). Turning logicalGateway on attaches it,
// off detaches it again; a changed tag is written; an overlay switch
// again loses the localnet port.
func TestUnderlaySwitchHasALocalnetPortAndNoRouterPort(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		ctx := context.Background()
		topology(t, nb)
		sw := ovnnb.Switch{Name: "vlan100", Router: "ovn-cluster", CIDRs: []netip.Prefix{mustPrefix("10.100.0.0/24")},
			Gateways: []netip.Addr{mustAddr("10.100.0.1")}, Detached: true, Localnet: &ovnnb.Localnet{Network: "physnet1", Tag: 100}}
		ensure := func() {
			t.Helper()
			if err := nb.EnsureSwitch(ctx, sw); err != nil {
				t.Fatal(err)
			}
		}
		ensure()
		ensure() // idempotent
		ln := portNamed(t, s, nb, "localnet.vlan100")
		if ln == nil || ln.Type != "localnet" || ln.Options["network_name"] != "physnet1" || ln.Tag == nil || *ln.Tag != 100 ||
			!slices.Equal(ln.Addresses, []string{"unknown"}) {
			t.Fatalf("localnet port: %+v", ln)
		}
		ls := switchNamed(t, s, nb, "vlan100")
		if ls == nil || !slices.Equal(ls.Ports, []string{ln.UUID}) {
			t.Fatalf("switch vlan100 should hold exactly its localnet port %s: %+v", ln.UUID, ls)
		}
		routerPort := func() bool {
			return portNamed(t, s, nb, "vlan100-ovn-cluster") != nil && slices.ContainsFunc(
				nbtest.Rows[*nbdb.LogicalRouterPort](t, s, nb, nbdb.LogicalRouterPortTable),
				func(p *nbdb.LogicalRouterPort) bool { return p.Name == "ovn-cluster-vlan100" })
		}
		if routerPort() {
			t.Fatal("a detached underlay switch got a router port")
		}

		sw.Detached = false // logicalGateway: true
		ensure()
		if !routerPort() {
			t.Fatal("logicalGateway: the switch is not attached to ovn-cluster")
		}
		sw.Detached, sw.Localnet.Tag = true, 200
		ensure()
		if routerPort() {
			t.Fatal("logicalGateway off again: the router port pair is still there")
		}
		if ln := portNamed(t, s, nb, "localnet.vlan100"); ln == nil || ln.Tag == nil || *ln.Tag != 200 {
			t.Fatalf("tag not changed to 200: %+v", ln)
		}
		sw.Localnet.Tag = 0
		ensure()
		if ln := portNamed(t, s, nb, "localnet.vlan100"); ln == nil || ln.Tag != nil {
			t.Fatalf("untagged network still has tag %d: %+v", *ln.Tag, ln)
		}
		sw.Localnet, sw.Detached = nil, false
		ensure()
		if portNamed(t, s, nb, "localnet.vlan100") != nil {
			t.Fatal("an overlay switch kept its localnet port")
		}
		if ls := switchNamed(t, s, nb, "vlan100"); ls == nil || len(ls.Ports) != 1 {
			t.Fatalf("overlay switch should hold only its router port: %+v", ls)
		}
	})
}

// Ports by owner key come from the client index on external_ids (no scan
// of every port): the index follows creates, moves and deletes, and the
// other keys of the match still filter.
func TestPortsByOwnerFollowTheIndex(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		topology(t, nb)
		ctx := context.Background()
		port := func(name, ip string, ids map[string]string) ovnnb.Port {
			return ovnnb.Port{Name: name, Switch: "ovn-default", MAC: "0a:00:00:00:00:" + ip[len(ip)-2:], IPs: []netip.Addr{mustAddr(ip)}, ExternalIDs: ids}
		}
		for _, p := range []ovnnb.Port{
			port("web.default", "10.16.0.11", map[string]string{ovnnb.KeyPod: "default/web"}),
			port("web.default.net1.default.ovn", "10.16.0.12", map[string]string{ovnnb.KeyPod: "default/web", ovnnb.KeyProvider: "net1.default.ovn"}),
			port("api.default", "10.16.0.13", map[string]string{ovnnb.KeyPod: "default/api"}),
			port("node-n1", "10.16.0.14", map[string]string{ovnnb.KeyNode: "n1"}),
		} {
			if err := nb.EnsurePort(ctx, p); err != nil {
				t.Fatal(err)
			}
		}
		names := func(match map[string]string) []string {
			t.Helper()
			ps, err := nb.Ports(ctx, match)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, p := range ps {
				out = append(out, p.Name)
			}
			slices.Sort(out)
			return out
		}
		for _, tc := range []struct {
			match map[string]string
			want  []string
		}{
			{map[string]string{ovnnb.KeyPod: "default/web"}, []string{"web.default", "web.default.net1.default.ovn"}},
			{map[string]string{ovnnb.KeyPod: "default/web", ovnnb.KeyProvider: "net1.default.ovn"}, []string{"web.default.net1.default.ovn"}},
			{map[string]string{ovnnb.KeyPod: "default/api"}, []string{"api.default"}},
			{map[string]string{ovnnb.KeyPod: "default/none"}, nil},
			{map[string]string{ovnnb.KeyNode: "n1"}, []string{"node-n1"}},
			{nil, []string{"api.default", "node-n1", "web.default", "web.default.net1.default.ovn"}},
		} {
			if got := names(tc.match); !slices.Equal(got, tc.want) {
				t.Errorf("Ports(%v) = %v, want %v", tc.match, got, tc.want)
			}
		}
		// Moved to another switch: still found by its owner.
		moved := port("api.default", "10.17.0.13", map[string]string{ovnnb.KeyPod: "default/api"})
		moved.Switch = "other"
		if err := nb.EnsurePort(ctx, moved); err != nil {
			t.Fatal(err)
		}
		if got := names(map[string]string{ovnnb.KeyPod: "default/api"}); !slices.Equal(got, []string{"api.default"}) {
			t.Errorf("after the move: Ports(pod default/api) = %v", got)
		}
		if err := nb.DeletePort(ctx, "api.default", ovnnb.PodPortOwner("default", "api")); err != nil {
			t.Fatal(err)
		}
		if got := names(map[string]string{ovnnb.KeyPod: "default/api"}); got != nil {
			t.Errorf("after the delete: Ports(pod default/api) = %v, want none", got)
		}
	})
}

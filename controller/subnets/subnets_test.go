package subnets

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The Kubernetes side is client-go's fake clientsets (no apiserver in a
// unit test; tests/controller runs the real one), the OVN side libovsdb's
// in-memory NB. The pod and gateway reconcilers are stand-ins that record
// what subnets ask of them (they have their own tests).

type podsStandIn struct {
	mu        sync.Mutex
	woken     []string
	exhausted map[string]int
}

func (p *podsStandIn) Wake(subnet string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.woken = append(p.woken, subnet)
}

func (p *podsStandIn) Recheck(string) {}

func (p *podsStandIn) Exhausted(subnet string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exhausted[subnet]
}

func (p *podsStandIn) wasWoken(subnet string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Contains(p.woken, subnet)
}

type gatewaysStandIn struct {
	mu      sync.Mutex
	conds   map[string]*kubeovnv1.Condition
	queued  []string
	removed []string
}

func (g *gatewaysStandIn) Condition(subnet string) *kubeovnv1.Condition {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.conds[subnet]
}

func (g *gatewaysStandIn) Queue(subnet string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.queued = append(g.queued, subnet)
}

func (g *gatewaysStandIn) Remove(_ context.Context, subnet string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.removed = append(g.removed, subnet)
	return nil
}

type fixture struct {
	*ctltest.Env
	r    *Reconciler
	pods *podsStandIn
	gws  *gatewaysStandIn
}

func start(t *testing.T, subnets ...runtime.Object) *fixture {
	t.Helper()
	e := ctltest.New(t, nil, subnets...)
	r, err := New(Config{Log: e.Log, Recorder: e.Recorder, Dynamic: e.Dynamic, Informers: e.DInformers, Net: e.Net, IPAM: e.Net.IPAM,
		Registry: prometheus.NewRegistry(), StatusDelay: time.Millisecond, EnableLB: true,
		Vlans:            e.DInformers.ForResource(kubeovnv1.VlanGVR).Informer(),
		ProviderNetworks: e.DInformers.ForResource(kubeovnv1.ProviderNetworkGVR).Informer()})
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{Env: e, r: r, pods: &podsStandIn{exhausted: map[string]int{}}, gws: &gatewaysStandIn{conds: map[string]*kubeovnv1.Condition{}}}
	r.Use(f.pods, f.gws)
	e.Start()
	return f
}

func (f *fixture) programAll(t *testing.T) []string {
	t.Helper()
	names, err := f.r.ProgramAll(f.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func (f *fixture) switchNamed(t *testing.T, name string) *nbdb.LogicalSwitch {
	for _, ls := range nbtest.Rows[*nbdb.LogicalSwitch](t, f.NBServer, f.NB, nbdb.LogicalSwitchTable) {
		if ls.Name == name {
			return ls
		}
	}
	return nil
}

// awaitSubnet waits until the informer shows the Subnet so.
func (f *fixture) awaitSubnet(t *testing.T, name string, ok func(s *kubeovnv1.Subnet) bool) {
	t.Helper()
	ctltest.Await(t, f.r.inf, name, func(obj any) bool {
		if obj == nil {
			return ok(nil)
		}
		s, err := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
		return err == nil && ok(s)
	})
}

func condition(s *kubeovnv1.Subnet, typ string) kubeovnv1.Condition {
	if c := s.Condition(typ); c != nil {
		return *c
	}
	return kubeovnv1.Condition{}
}

func TestValidSubnetGetsItsSwitchFinalizerAndStatus(t *testing.T) {
	f := start(t, ctltest.Subnet("join", map[string]any{"cidrBlock": "100.64.0.0/16"}),
		ctltest.Subnet("blue", map[string]any{"cidrBlock": "10.50.0.0/24", "private": true}))
	names := f.programAll(t)
	if !slices.Equal(names, []string{"join", "blue"}) {
		t.Fatalf("programmed %v, want join first", names)
	}
	ls := f.switchNamed(t, "blue")
	if ls == nil || ls.ExternalIDs[ovnnb.KeyCIDR] != "10.50.0.0/24" {
		t.Fatalf("switch blue: %+v", ls)
	}
	if len(ls.ACLs) == 0 {
		t.Fatal("private subnet without isolation ACLs on its switch")
	}
	if s := f.GetSubnet("blue"); !slices.Contains(s.Finalizers, SubnetFinalizer) {
		t.Fatalf("finalizers %v, want %s", s.Finalizers, SubnetFinalizer)
	}
	if !f.pods.wasWoken("blue") || !slices.Contains(f.gws.queued, "blue") {
		t.Fatalf("blue programmed: pods woken %v, gateways queued %v", f.pods.woken, f.gws.queued)
	}
	if err := f.r.syncStatus(f.Ctx, "blue"); err != nil {
		t.Fatal(err)
	}
	s := f.GetSubnet("blue")
	usage, _ := f.Net.IPAM.Usage("blue")
	if v := condition(s, kubeovnv1.Validated); v.Status != "True" || v.Reason != kubeovnv1.ValidationSucceeded {
		t.Errorf("Validated %+v", v)
	}
	if r := condition(s, kubeovnv1.Ready); r.Status != "True" {
		t.Errorf("Ready %+v", r)
	}
	if e := condition(s, kubeovnv1.Error); e.Status != "False" {
		t.Errorf("Error %+v", e)
	}
	if s.Status.V4AvailableIPs == 0 || s.Status.V4AvailableIPs != usage.V4Available {
		t.Errorf("v4availableIPs %v, IPAM says %v", s.Status.V4AvailableIPs, usage.V4Available)
	}
}

func TestInvalidSubnetIsReportedAndNotProgrammed(t *testing.T) {
	f := start(t, ctltest.Subnet("bad", map[string]any{"cidrBlock": "10.51.0.0/24", "vlan": "v100"}))
	f.programAll(t)
	if ls := f.switchNamed(t, "bad"); ls != nil {
		t.Fatalf("invalid subnet got a switch: %+v", ls)
	}
	if p := f.r.Problem("bad"); p == nil || p.Reason != "VlanNotFound" || !strings.Contains(p.Message, `spec.vlan "v100" names no Vlan; create it`) {
		t.Fatalf("Problem %+v, want VlanNotFound naming the Vlan and the fix", p)
	}
	if err := f.r.syncStatus(f.Ctx, "bad"); err != nil {
		t.Fatal(err)
	}
	s := f.GetSubnet("bad")
	if v := condition(s, kubeovnv1.Validated); v.Status != "False" || v.Reason != "VlanNotFound" || !strings.Contains(v.Message, "v100") {
		t.Errorf("Validated %+v", v)
	}
	if r := condition(s, kubeovnv1.Ready); r.Status != "False" || r.Reason != "ValidationFailed" {
		t.Errorf("Ready %+v", r)
	}
	if f.pods.wasWoken("bad") {
		t.Error("pods woken for an invalid subnet")
	}
}

func TestNotAppliedFieldsAreAnnouncedOnce(t *testing.T) {
	f := start(t, ctltest.Subnet("vipnet", map[string]any{"cidrBlock": "10.52.0.0/24", "vips": []any{"10.52.0.100"}}))
	f.programAll(t)
	first := ctltest.Event(f.Events(), "Warning "+kubeovnv1.AcceptedNotApplied)
	if !strings.Contains(first, "vips is not applied") {
		t.Fatalf("event %q, want an AcceptedNotApplied naming vips", first)
	}
	if err := f.r.sync(f.Ctx, "vipnet"); err != nil {
		t.Fatal(err)
	}
	if again := ctltest.Event(f.Events(), "Warning "+kubeovnv1.AcceptedNotApplied); again != "" {
		t.Fatalf("announced again on an unchanged sync: %q", again)
	}
	if err := f.r.syncStatus(f.Ctx, "vipnet"); err != nil {
		t.Fatal(err)
	}
	if v := condition(f.GetSubnet("vipnet"), kubeovnv1.Validated); v.Status != "True" || v.Reason != kubeovnv1.AcceptedNotApplied {
		t.Fatalf("Validated %+v", v)
	}
}

func TestStatusCarriesWaitingPodsAndTheGatewayCondition(t *testing.T) {
	f := start(t, ctltest.Subnet("small", map[string]any{"cidrBlock": "10.53.0.0/29"}))
	f.programAll(t)
	f.pods.exhausted["small"] = 2
	f.gws.conds["small"] = &kubeovnv1.Condition{Type: "GatewayReady", Status: "True", Reason: "GatewayProgrammed", Message: "gateway nodes in priority order: n1"}
	if err := f.r.syncStatus(f.Ctx, "small"); err != nil {
		t.Fatal(err)
	}
	s := f.GetSubnet("small")
	if e := condition(s, kubeovnv1.Error); e.Status != "True" || e.Reason != "SubnetExhausted" || !strings.HasPrefix(e.Message, "2 pod(s) wait") {
		t.Errorf("Error %+v", e)
	}
	if g := condition(s, "GatewayReady"); g.Status != "True" || g.Reason != "GatewayProgrammed" {
		t.Errorf("GatewayReady %+v", g)
	}
}

func TestDeletedSubnetWaitsForItsPodsThenGoes(t *testing.T) {
	f := start(t, ctltest.Subnet("doomed", map[string]any{"cidrBlock": "10.54.0.0/24"}))
	names := f.programAll(t)
	if _, err := f.Net.AddPod(f.Ctx, ovnnet.PodRequest{Namespace: "default", Name: "user", Subnet: "doomed", Node: "n1", PoolIndex: -1}); err != nil {
		t.Fatal(err)
	}
	f.r.Start(f.Ctx, &f.WG, names)
	f.awaitSubnet(t, "doomed", func(s *kubeovnv1.Subnet) bool { return slices.Contains(s.Finalizers, SubnetFinalizer) })

	// Deleted (the apiserver would set deletionTimestamp and keep the
	// object for its finalizer; the fake keeps what it is given).
	u, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Get(f.Ctx, "doomed", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	u.SetDeletionTimestamp(&now)
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Update(f.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitSubnet(t, "doomed", func(s *kubeovnv1.Subnet) bool {
		r := condition(s, kubeovnv1.Ready)
		return r.Status == "False" && r.Reason == "DeletionWaitsForPods" && strings.Contains(r.Message, "default/user")
	})
	if f.switchNamed(t, "doomed") == nil {
		t.Fatal("switch removed while a pod holds an address")
	}
	if f.r.SubnetFor("other", labels.Set{}) == "doomed" {
		t.Fatal("a subnet being deleted is still handed out")
	}

	// The pod goes: the switch and the finalizer go.
	if err := f.Net.DeletePod(f.Ctx, "default", "user"); err != nil {
		t.Fatal(err)
	}
	f.r.Released("doomed")
	f.awaitSubnet(t, "doomed", func(s *kubeovnv1.Subnet) bool { return !slices.Contains(s.Finalizers, SubnetFinalizer) })
	if ls := f.switchNamed(t, "doomed"); ls != nil {
		t.Fatal("switch left after the last user went")
	}
	f.gws.mu.Lock()
	removed := slices.Contains(f.gws.removed, "doomed")
	f.gws.mu.Unlock()
	if !removed {
		t.Fatal("the subnet's gateway was not removed with it")
	}
}

func TestSubnetForNamespaces(t *testing.T) {
	f := start(t,
		ctltest.Subnet("ovn-default", map[string]any{"cidrBlock": "10.16.0.0/16", "default": true}),
		ctltest.Subnet("listed", map[string]any{"cidrBlock": "10.55.0.0/24", "namespaces": []any{"team-a"}}),
		ctltest.Subnet("selected", map[string]any{"cidrBlock": "10.56.0.0/24",
			"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"tier": "db"}}}}),
	)
	f.programAll(t)
	for _, c := range []struct {
		ns     string
		labels labels.Set
		want   string
	}{
		{"team-a", labels.Set{}, "listed"},
		{"team-b", labels.Set{"tier": "db"}, "selected"},
		{"team-c", labels.Set{"tier": "web"}, ovnnet.DefaultSubnet},
		{"unknown", nil, ovnnet.DefaultSubnet},
	} {
		if got := f.r.SubnetFor(c.ns, c.labels); got != c.want {
			t.Errorf("SubnetFor(%s, %v) = %s, want %s", c.ns, c.labels, got, c.want)
		}
	}
	// A Subnet listing the namespace that is not programmed yet: its pods wait for it.
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(f.Ctx, ctltest.Subnet("late", map[string]any{"cidrBlock": "10.57.0.0/24", "namespaces": []any{"team-d"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitSubnet(t, "late", func(s *kubeovnv1.Subnet) bool { return s != nil })
	if got := f.r.SubnetFor("team-d", labels.Set{}); got != "late" {
		t.Errorf("SubnetFor(team-d) = %s before late is programmed, want late (its pods wait)", got)
	}
}

// underlayObject is a Vlan or ProviderNetwork as a user applies it.
func underlayObject(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// An underlay Subnet is programmed once its Vlan and that Vlan's
// ProviderNetwork exist: a switch with the localnet port (tag, network)
// and no router port; before that it is refused naming what is missing.
func TestUnderlaySubnetWaitsForItsVlanAndProviderNetwork(t *testing.T) {
	f := start(t, ctltest.Subnet("u100", map[string]any{"cidrBlock": "10.100.0.0/24", "gateway": "10.100.0.254", "vlan": "v100"}),
		underlayObject("Vlan", "v100", map[string]any{"id": int64(100), "provider": "physnet1"}))
	f.programAll(t)
	if p := f.r.Problem("u100"); p == nil || p.Reason != "ProviderNetworkNotFound" || !strings.Contains(p.Message, `ProviderNetwork "physnet1", which does not exist; create it`) {
		t.Fatalf("Problem %+v, want ProviderNetworkNotFound naming physnet1 and the fix", p)
	}
	if ls := f.switchNamed(t, "u100"); ls != nil {
		t.Fatal("a Subnet whose ProviderNetwork is missing got a switch")
	}
	if _, err := f.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(f.Ctx, underlayObject("ProviderNetwork", "physnet1",
		map[string]any{"defaultInterface": "eth1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, f.r.providers, "physnet1", func(obj any) bool { return obj != nil })
	if err := f.r.sync(f.Ctx, "u100"); err != nil {
		t.Fatal(err)
	}
	if p := f.r.Problem("u100"); p != nil {
		t.Fatalf("still refused: %+v", p)
	}
	ul, ok := f.r.Underlay("u100")
	if !ok || ul.Provider != "physnet1" || ul.VlanID != 100 || ul.LogicalGateway {
		t.Fatalf("Underlay %+v %v", ul, ok)
	}
	ls := f.switchNamed(t, "u100")
	if ls == nil {
		t.Fatal("no switch u100")
	}
	var names []string
	for _, p := range nbtest.Rows[*nbdb.LogicalSwitchPort](t, f.NBServer, f.NB, nbdb.LogicalSwitchPortTable) {
		if slices.Contains(ls.Ports, p.UUID) {
			names = append(names, p.Name)
			if p.Name == "localnet.u100" && (p.Type != "localnet" || p.Tag == nil || *p.Tag != 100 || p.Options["network_name"] != "physnet1") {
				t.Errorf("localnet port %+v", p)
			}
		}
	}
	if !slices.Equal(names, []string{"localnet.u100"}) {
		t.Errorf("switch u100 ports %v, want only localnet.u100 (no router port: its gateway is physical)", names)
	}
}

// u2oInterconnection: once the IPAM holds every pod's address (the
// start), the router gets a port on the underlay subnet at an address of
// its own, recorded in the status; the subnet's policies send its traffic
// on to the physical gateway; the address is no user of the subnet.
func TestInterconnectedUnderlaySubnet(t *testing.T) {
	f := start(t, ctltest.Subnet("u100", map[string]any{"cidrBlock": "10.100.0.0/24", "gateway": "10.100.0.254", "vlan": "v100", "u2oInterconnection": true}),
		underlayObject("Vlan", "v100", map[string]any{"id": int64(100), "provider": "physnet1"}))
	// Created through the client: the fake's tracker would file an object
	// given at its start under a guessed plural (providernetworks).
	if _, err := f.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(f.Ctx, underlayObject("ProviderNetwork", "physnet1",
		map[string]any{"defaultInterface": "eth1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, f.r.providers, "physnet1", func(obj any) bool { return obj != nil })
	f.programAll(t)
	routerPort := func() *nbdb.LogicalRouterPort {
		for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, f.NBServer, f.NB, nbdb.LogicalRouterPortTable) {
			if p.Name == "ovn-cluster-u100" {
				return p
			}
		}
		return nil
	}
	if p := routerPort(); p != nil {
		t.Fatalf("an interconnection address was picked before the IPAM held the pods': %+v", p)
	}
	f.r.started.Store(true)
	if err := f.r.sync(f.Ctx, "u100"); err != nil {
		t.Fatal(err)
	}
	p := routerPort()
	if p == nil || len(p.Networks) != 1 || !strings.HasPrefix(p.Networks[0], "10.100.0.") || p.Networks[0] == "10.100.0.254/24" {
		t.Fatalf("router port on u100: %+v (want an address of its own, not the physical gateway's)", p)
	}
	if err := f.r.syncStatus(f.Ctx, "u100"); err != nil {
		t.Fatal(err)
	}
	st := f.GetSubnet("u100").Status
	if st.U2OInterconnectionIP+"/24" != p.Networks[0] || st.U2OInterconnectionMAC != p.MAC || st.U2OInterconnectionVPC != "ovn-cluster" {
		t.Errorf("status %+v, router port %+v", st, p)
	}
	var matches []string
	for _, pol := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, f.NBServer, f.NB, nbdb.LogicalRouterPolicyTable) {
		if slices.Equal(pol.Nexthops, []string{"10.100.0.254"}) {
			matches = append(matches, pol.Match)
		}
	}
	slices.Sort(matches)
	if want := []string{"ip4.src == 10.100.0.0/24", "ip4.src == 10.100.0.0/24 && ip4.dst == $ovnhost.nodes.ip4"}; !slices.Equal(matches, want) {
		t.Errorf("policies to the physical gateway %v, want %v", matches, want)
	}
	if u := f.r.users("u100"); len(u) != 0 {
		t.Errorf("the interconnection address counts as a user of the subnet: %v", u)
	}
}

// A Subnet on a Vlan the underlay reconciler marked as conflicting (its
// tag is another Vlan's on the same provider network) is refused, naming
// the fix; no switch is made.
func TestUnderlaySubnetOnAConflictingVlanIsRefused(t *testing.T) {
	v := underlayObject("Vlan", "v100b", map[string]any{"id": int64(100), "provider": "physnet1"})
	v.Object["status"] = map[string]any{"conflict": true}
	f := start(t, ctltest.Subnet("u100b", map[string]any{"cidrBlock": "10.101.0.0/24", "vlan": "v100b"}), v)
	if _, err := f.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(f.Ctx, underlayObject("ProviderNetwork", "physnet1",
		map[string]any{"defaultInterface": "eth1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, f.r.providers, "physnet1", func(obj any) bool { return obj != nil })
	f.programAll(t)
	if p := f.r.Problem("u100b"); p == nil || p.Reason != "VlanConflict" || !strings.Contains(p.Message, "give this one another id") {
		t.Fatalf("Problem %+v, want VlanConflict with the fix", p)
	}
	if ls := f.switchNamed(t, "u100b"); ls != nil {
		t.Fatal("a Subnet on a conflicting Vlan got a switch")
	}
}

// A dual-stack interconnected underlay subnet: the router's port gets an
// address of each family (the IPv4 one asked for, the IPv6 one allocated),
// both in the status in cidrBlock's order; each family's traffic is sent on
// to that family's physical gateway. A dual-stack underlay Subnet naming
// only its IPv4 gateway is refused, with the fix, and only that one.
func TestDualStackInterconnectedUnderlaySubnet(t *testing.T) {
	f := start(t, ctltest.Subnet("u50", map[string]any{"cidrBlock": "192.168.50.0/24,fd00:50::/64", "gateway": "192.168.50.254,fd00:50::fe",
		"vlan": "v50", "u2oInterconnection": true, "u2oInterconnectionIP": "192.168.50.253"}),
		ctltest.Subnet("u60", map[string]any{"cidrBlock": "192.168.60.0/24,fd00:60::/64", "gateway": "192.168.60.254", "vlan": "v50"}),
		underlayObject("Vlan", "v50", map[string]any{"id": int64(50), "provider": "physnet1"}))
	if _, err := f.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(f.Ctx, underlayObject("ProviderNetwork", "physnet1",
		map[string]any{"defaultInterface": "eth1"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, f.r.providers, "physnet1", func(obj any) bool { return obj != nil })
	f.r.started.Store(true)
	f.programAll(t)
	if err := f.r.syncStatus(f.Ctx, "u50"); err != nil {
		t.Fatal(err)
	}
	st := f.GetSubnet("u50").Status
	ips := strings.Split(st.U2OInterconnectionIP, ",")
	if len(ips) != 2 || ips[0] != "192.168.50.253" || !strings.HasPrefix(ips[1], "fd00:50::") || ips[1] == "fd00:50::fe" {
		t.Fatalf("status.u2oInterconnectionIP %q, want 192.168.50.253 and an IPv6 address of its own", st.U2OInterconnectionIP)
	}
	var lrp *nbdb.LogicalRouterPort
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, f.NBServer, f.NB, nbdb.LogicalRouterPortTable) {
		if p.Name == "ovn-cluster-u50" {
			lrp = p
		}
	}
	if lrp == nil || !slices.Equal(lrp.Networks, []string{"192.168.50.253/24", ips[1] + "/64"}) {
		t.Fatalf("router port on u50 %+v, want networks 192.168.50.253/24 and %s/64", lrp, ips[1])
	}
	policies := map[string][]string{}
	for _, pol := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, f.NBServer, f.NB, nbdb.LogicalRouterPolicyTable) {
		if pol.ExternalIDs["egress"] == "u2o" {
			policies[pol.Match] = pol.Nexthops
		}
	}
	want := map[string][]string{
		"ip4.src == 192.168.50.0/24 && ip4.dst == $ovnhost.nodes.ip4": {"192.168.50.254"}, "ip4.src == 192.168.50.0/24": {"192.168.50.254"},
		"ip6.src == fd00:50::/64 && ip6.dst == $ovnhost.nodes.ip6": {"fd00:50::fe"}, "ip6.src == fd00:50::/64": {"fd00:50::fe"},
	}
	if !maps.EqualFunc(policies, want, slices.Equal) {
		t.Errorf("u2o policies %v, want %v", policies, want)
	}
	if p := f.r.Problem("u60"); p == nil || p.Reason != "InvalidField" ||
		!strings.Contains(p.Message, `gateway "192.168.60.254" has no IPv6 address`) || !strings.Contains(p.Message, `gateway: "192.168.60.254,<the IPv6 gateway in fd00:60::/64>"`) {
		t.Errorf("u60 (dual-stack, IPv4 gateway only): problem %+v, want InvalidField naming the missing IPv6 gateway and the fix", p)
	}
	if f.switchNamed(t, "u60") != nil {
		t.Error("u60 got a switch")
	}
	if p := f.r.Problem("u50"); p != nil {
		t.Errorf("u50 refused along with u60: %+v", p)
	}
}

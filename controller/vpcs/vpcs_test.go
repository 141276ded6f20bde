package vpcs

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func vpcObj(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": "Vpc",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func validVpc(t *testing.T, u *unstructured.Unstructured) *kubeovnv1.Vpc {
	t.Helper()
	v, probs := kubeovnv1.ValidateVpc(u)
	if v == nil {
		t.Fatalf("unreadable: %v", probs)
	}
	return v
}

// Translate programs what it can and names each entry it leaves out:
// a next hop outside every Subnet and peering link, a peering to a VPC
// that does not exist. Static routes by source or destination, policies
// allow/drop/reroute, and Kube-OVN's peering port names.
func TestTranslate(t *testing.T) {
	v := validVpc(t, vpcObj("vpc-a", map[string]any{
		"staticRoutes": []any{
			map[string]any{"cidr": "0.0.0.0/0", "nextHopIP": "10.200.0.254", "policy": "policyDst"},
			map[string]any{"cidr": "10.200.0.8/29", "nextHopIP": "10.200.0.253", "policy": "policySrc"},
			map[string]any{"cidr": "172.31.0.0/16", "nextHopIP": "169.254.0.2"},
			map[string]any{"cidr": "192.0.2.0/24", "nextHopIP": "192.168.9.9"},
		},
		"policyRoutes": []any{
			map[string]any{"priority": int64(31000), "match": "ip4.dst == 10.200.0.99", "action": "drop"},
			map[string]any{"priority": int64(30000), "match": "ip4.src == 10.200.0.0/24", "action": "reroute", "nextHopIP": "10.200.0.254"},
			map[string]any{"priority": int64(29000), "match": "ip4", "action": "reroute", "nextHopIP": "8.8.8.8"},
		},
		"vpcPeerings": []any{
			map[string]any{"remoteVpc": "vpc-c", "localConnectIP": "169.254.0.1/30"},
			map[string]any{"remoteVpc": "vpc-gone", "localConnectIP": "169.254.1.1/30"},
		},
	}))
	exists := func(n string) bool { return n == "vpc-c" }
	plan, probs := Translate(v, map[string][]netip.Prefix{"a1": {netip.MustParsePrefix("10.200.0.0/24")}}, exists)
	var routes []string
	for _, r := range plan.Routes {
		routes = append(routes, r.Prefix.String()+" via "+r.Nexthop.String()+map[bool]string{true: " src", false: ""}[r.SrcIP])
	}
	if want := []string{"0.0.0.0/0 via 10.200.0.254", "10.200.0.8/29 via 10.200.0.253 src", "172.31.0.0/16 via 169.254.0.2"}; !slices.Equal(routes, want) {
		t.Errorf("routes %v, want %v", routes, want)
	}
	var pols []string
	for _, p := range plan.Policies {
		var nh []string
		for _, a := range p.Nexthops {
			nh = append(nh, a.String())
		}
		pols = append(pols, strings.TrimSpace(p.Action+" "+p.Match+" "+strings.Join(nh, ",")))
	}
	if want := []string{"drop ip4.dst == 10.200.0.99", "reroute ip4.src == 10.200.0.0/24 10.200.0.254"}; !slices.Equal(pols, want) {
		t.Errorf("policies %q, want %q", pols, want)
	}
	if len(plan.Peers) != 1 || plan.Peers[0].Name != "vpc-a-vpc-c" || plan.Peers[0].Peer != "vpc-c-vpc-a" || plan.Peers[0].Network.String() != "169.254.0.1/30" {
		t.Errorf("peers %+v, want one vpc-a-vpc-c peer vpc-c-vpc-a on 169.254.0.1/30", plan.Peers)
	}
	msg := strings.Join(probs, "\n")
	for _, want := range []string{
		`spec.vpcPeerings[1]: remoteVpc "vpc-gone" does not exist; create that Vpc`,
		`spec.staticRoutes[3]: nextHopIP 192.168.9.9 is outside every Subnet of VPC "vpc-a" (its Subnets [a1 10.200.0.0/24] and peering links)`,
		`spec.policyRoutes[2]: nextHopIP 8.8.8.8 is outside every Subnet`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q:\n%s", want, msg)
		}
	}
	if len(probs) != 3 {
		t.Errorf("%d problems, want 3:\n%s", len(probs), msg)
	}
}

// ValidateVpc names each bad entry, its problem and the fix.
func TestValidateVpc(t *testing.T) {
	_, probs := kubeovnv1.ValidateVpc(vpcObj("vpc-a", map[string]any{
		"colour": "blue",
		"staticRoutes": []any{
			map[string]any{"cidr": "10.0.0.0/33", "nextHopIP": "10.0.0.1"},
			map[string]any{"cidr": "10.0.0.0/24", "nextHopIP": "fd00::1"},
			map[string]any{"cidr": "10.0.0.0/24", "nextHopIP": "10.0.0.1", "policy": "sideways"},
		},
		"policyRoutes": []any{
			map[string]any{"priority": int64(40000), "match": "ip4", "action": "drop"},
			map[string]any{"priority": int64(1), "match": "ip4", "action": "nat"},
			map[string]any{"priority": int64(1), "match": "ip4", "action": "reroute"},
			map[string]any{"priority": int64(1), "match": "", "action": "allow"},
		},
		"vpcPeerings": []any{
			map[string]any{"remoteVpc": "vpc-a", "localConnectIP": "169.254.0.1/30"},
			map[string]any{"remoteVpc": "vpc-b", "localConnectIP": "169.254.0.1"},
			map[string]any{"remoteVpc": "ovn-cluster", "localConnectIP": "169.254.0.1/30"},
		},
	}))
	msg := strings.Join(probs, "\n")
	for _, want := range []string{
		"unknown field(s) spec.colour; remove them",
		`spec.staticRoutes[0]: cidr "10.0.0.0/33" is not an address or CIDR; write it as`,
		"spec.staticRoutes[1]: nextHopIP fd00::1 and cidr 10.0.0.0/24 are of different IP families",
		`spec.staticRoutes[2]: policy "sideways" is not policySrc or policyDst`,
		"spec.policyRoutes[0]: priority 40000 is outside 0..32767",
		`spec.policyRoutes[1]: action "nat" is not allow, drop or reroute`,
		`spec.policyRoutes[2]: nextHopIP "" is not an IP address; action reroute needs`,
		"spec.policyRoutes[3]: match is empty",
		`spec.vpcPeerings[0]: remoteVpc "vpc-a" is this VPC`,
		`spec.vpcPeerings[1]: localConnectIP "169.254.0.1" is not an address with its prefix length`,
		`spec.vpcPeerings[2]: remoteVpc "ovn-cluster" is the default VPC`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("problems lack %q:\n%s", want, msg)
		}
	}
	if v, probs := kubeovnv1.ValidateVpc(vpcObj("ok", map[string]any{"namespaces": []any{"a"}, "enableExternal": true})); v == nil || len(probs) != 0 ||
		kubeovnv1.VpcNotAppliedMessage(v.Spec) != "" {
		t.Errorf("a valid Vpc with enableExternal: %v %v", probs, v)
	}
}

type noPods struct{}

func (noPods) Wake(string)          {}
func (noPods) Exhausted(string) int { return 0 }
func (noPods) Recheck(string)       {}

type noGateways struct{}

func (noGateways) Condition(string) *kubeovnv1.Condition { return nil }
func (noGateways) Queue(string)                          {}
func (noGateways) Remove(context.Context, string) error  { return nil }

type fixture struct {
	*ctltest.Env
	r  *Reconciler
	sr *subnets.Reconciler
}

func start(t *testing.T, custom ...runtime.Object) *fixture {
	t.Helper()
	e := ctltest.New(t, nil, custom...)
	e.Kube.Resources = []*metav1.APIResourceList{{GroupVersion: kubeovnv1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "subnets"}, {Name: "vpcs"}}}}
	sr, err := subnets.New(subnets.Config{Log: e.Log, Recorder: e.Recorder, Dynamic: e.Dynamic, Informers: e.DInformers, Net: e.Net,
		IPAM: e.Net.IPAM, Registry: prometheus.NewRegistry(), StatusDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Log: e.Log, Recorder: e.Recorder, Discovery: e.Kube.Discovery(), Dynamic: e.Dynamic, DInformers: e.DInformers, Net: e.Net, Subnets: sr})
	sr.Use(noPods{}, noGateways{})
	sr.UseVpcs(r)
	e.Start()
	if err := r.ProgramAll(e.Ctx); err != nil {
		t.Fatal(err)
	}
	names, err := sr.ProgramAll(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	sr.Start(e.Ctx, &e.WG, names)
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	return &fixture{Env: e, r: r, sr: sr}
}

func (f *fixture) routers(t *testing.T) map[string]*nbdb.LogicalRouter {
	out := map[string]*nbdb.LogicalRouter{}
	for _, r := range nbtest.Rows[*nbdb.LogicalRouter](t, f.NBServer, f.NB, nbdb.LogicalRouterTable) {
		out[r.Name] = r
	}
	return out
}

// Two VPCs with the same CIDR: each has its router named as the VPC with
// its Subnet's port, neither switch carries the cluster's load balancer
// group, the static route lands on its VPC's router only; a Subnet naming
// a missing VPC waits (VpcNotFound, naming the fix) and is programmed when
// the VPC appears; deleting a VPC removes its router.
func TestVpcsRoutersAndWaitingSubnets(t *testing.T) {
	f := start(t,
		vpcObj("vpc-a", map[string]any{"staticRoutes": []any{map[string]any{"cidr": "0.0.0.0/0", "nextHopIP": "10.200.0.254"}}}),
		vpcObj("vpc-b", map[string]any{}),
		ctltest.Subnet("a1", map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-a"}),
		ctltest.Subnet("b1", map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-b"}),
		ctltest.Subnet("late", map[string]any{"cidrBlock": "10.201.0.0/24", "vpc": "vpc-late"}),
	)
	// The cluster's Services group: what a default VPC switch carries.
	uuid, err := f.NB.EnsureLBGroup(f.Ctx, "cluster_lbg")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.NB.AttachLBGroup(f.Ctx, "cluster_lbg", uuid, "ovn-cluster"); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("routers vpc-a (with its default route via 10.200.0.254) and vpc-b, each with its subnet's port", func() bool {
		rs := f.routers(t)
		a, b := rs["vpc-a"], rs["vpc-b"]
		if a == nil || b == nil || len(a.Ports) != 1 || len(b.Ports) != 1 || len(a.StaticRoutes) != 1 || len(b.StaticRoutes) != 0 {
			return false
		}
		return len(a.LoadBalancerGroup) == 0 && len(b.LoadBalancerGroup) == 0
	})
	for _, ls := range nbtest.Rows[*nbdb.LogicalSwitch](t, f.NBServer, f.NB, nbdb.LogicalSwitchTable) {
		if (ls.Name == "a1" || ls.Name == "b1") && (len(ls.LoadBalancerGroup) != 0 || ls.ExternalIDs[ovnnb.KeyVPC] == "") {
			t.Errorf("switch %s: lb groups %v, external_ids %v; want no group and vpc set", ls.Name, ls.LoadBalancerGroup, ls.ExternalIDs)
		}
	}
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPort](t, f.NBServer, f.NB, nbdb.LogicalRouterPortTable) {
		if p.Name == "vpc-a-a1" && !slices.Equal(p.Networks, []string{"10.200.0.1/24"}) {
			t.Errorf("vpc-a-a1 networks %v", p.Networks)
		}
	}
	ctltest.Await(t, f.sr.Informer(), "late", func(obj any) bool {
		if obj == nil {
			return false
		}
		s, _ := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
		c := s.Condition(kubeovnv1.Validated)
		return c != nil && c.Status == "False" && c.Reason == subnets.VpcNotFound && strings.Contains(c.Message, `create the Vpc "vpc-late"`)
	})
	if _, err := f.Dynamic.Resource(kubeovnv1.VpcGVR).Create(f.Ctx, vpcObj("vpc-late", map[string]any{}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("subnet late attached to router vpc-late once the Vpc exists", func() bool {
		r := f.routers(t)["vpc-late"]
		return r != nil && len(r.Ports) == 1
	})
	ctltest.Await(t, f.r.inf, "vpc-a", func(obj any) bool {
		if obj == nil {
			return false
		}
		v, _ := kubeovnv1.VpcFromUnstructured(obj.(*unstructured.Unstructured))
		return v.Status.Standby && v.Status.Router == "vpc-a" && slices.Equal(v.Status.Subnets, []string{"a1"})
	})
	if err := f.Dynamic.Resource(kubeovnv1.VpcGVR).Delete(f.Ctx, "vpc-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("router vpc-b removed with its Vpc", func() bool { return f.routers(t)["vpc-b"] == nil })
	ctltest.Await(t, f.sr.Informer(), "b1", func(obj any) bool {
		if obj == nil {
			return false
		}
		s, _ := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
		c := s.Condition(kubeovnv1.Validated)
		return c != nil && c.Reason == subnets.VpcNotFound
	})
}

// A route whose next hop is outside the VPC: Validated=False naming it,
// an InvalidVpc event; the VPC's other route is programmed.
func TestVpcBadRouteFailsThatEntryOnly(t *testing.T) {
	f := start(t,
		vpcObj("vpc-a", map[string]any{"staticRoutes": []any{
			map[string]any{"cidr": "0.0.0.0/0", "nextHopIP": "10.200.0.254"},
			map[string]any{"cidr": "192.0.2.0/24", "nextHopIP": "198.51.100.1"},
		}}),
		ctltest.Subnet("a1", map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-a"}),
	)
	f.AwaitNB("the good route on vpc-a", func() bool {
		r := f.routers(t)["vpc-a"]
		return r != nil && len(r.StaticRoutes) == 1
	})
	ev := f.AwaitEvent("Warning InvalidVpc")
	if !strings.Contains(ev, "spec.staticRoutes[1]: nextHopIP 198.51.100.1 is outside every Subnet") {
		t.Errorf("event %q", ev)
	}
	ctltest.Await(t, f.r.inf, "vpc-a", func(obj any) bool {
		if obj == nil {
			return false
		}
		v, _ := kubeovnv1.VpcFromUnstructured(obj.(*unstructured.Unstructured))
		c := v.Condition(kubeovnv1.Validated)
		return c != nil && c.Status == "False" && strings.Contains(c.Message, "198.51.100.1") && v.Status.Standby
	})
}

// A Vpc's namespaces bind its Subnets (an unbound Subnet of the VPC
// included), and its defaultSubnet is a listed namespace's Subnet after
// the Subnet bindings, before the default Subnet (Kube-OVN's order).
func TestVpcNamespacesAndDefaultSubnet(t *testing.T) {
	f := start(t,
		vpcObj("vpc-t", map[string]any{"namespaces": []any{"team"}, "defaultSubnet": "t1"}),
		ctltest.Subnet("t1", map[string]any{"cidrBlock": "10.210.0.0/24", "vpc": "vpc-t"}),
	)
	f.AwaitNB("router vpc-t with t1's port", func() bool {
		r := f.routers(t)["vpc-t"]
		return r != nil && len(r.Ports) == 1
	})
	if got := f.sr.SubnetFor("team", nil); got != "t1" {
		t.Errorf("SubnetFor(team) = %q, want vpc-t's defaultSubnet t1", got)
	}
	if got := f.sr.SubnetFor("elsewhere", nil); got != "ovn-default" {
		t.Errorf("SubnetFor(elsewhere) = %q, want ovn-default", got)
	}
	if ok, rule := f.sr.Admits("t1", "team", nil); !ok {
		t.Errorf("t1 refuses namespace team: %s", rule)
	}
	ok, rule := f.sr.Admits("t1", "elsewhere", nil)
	if ok || !strings.Contains(rule, `VPC "vpc-t"`) || !strings.Contains(rule, "spec.namespaces [team]") || !strings.Contains(rule, `adds "elsewhere" there`) {
		t.Errorf("t1 for namespace elsewhere: ok=%v rule %q; want a refusal naming the Vpc, its namespaces and the fix", ok, rule)
	}
	// A Subnet binding the namespace comes first.
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(f.Ctx, ctltest.Subnet("bound", map[string]any{"cidrBlock": "10.211.0.0/24", "namespaces": []any{"team"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, f.sr.Informer(), "bound", func(obj any) bool {
		if obj == nil {
			return false
		}
		s, _ := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
		c := s.Condition(kubeovnv1.Validated)
		return c != nil && c.Status == "True"
	})
	if got := f.sr.SubnetFor("team", nil); got != "bound" {
		t.Errorf("SubnetFor(team) = %q, want the Subnet binding it (bound) before the Vpc's defaultSubnet", got)
	}
}

// At start-up ProgramAll leaves a VPC router's routes and policies as a
// previous run left them (same rows, same UUIDs): the Subnets that hold
// their next hops are not programmed yet, so a full sync there would
// remove them all (the bug of 248de42).
func TestProgramAllLeavesRoutesAlone(t *testing.T) {
	e := ctltest.New(t, nil,
		vpcObj("vpc-a", map[string]any{
			"staticRoutes": []any{map[string]any{"cidr": "0.0.0.0/0", "nextHopIP": "10.200.0.254"}},
			"policyRoutes": []any{map[string]any{"priority": int64(30000), "match": "ip4.src == 10.200.0.0/24", "action": "reroute", "nextHopIP": "10.200.0.253"}},
		}),
		ctltest.Subnet("a1", map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-a"}),
	)
	e.Kube.Resources = []*metav1.APIResourceList{{GroupVersion: kubeovnv1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "subnets"}, {Name: "vpcs"}}}}
	sr, err := subnets.New(subnets.Config{Log: e.Log, Recorder: e.Recorder, Dynamic: e.Dynamic, Informers: e.DInformers, Net: e.Net,
		IPAM: e.Net.IPAM, Registry: prometheus.NewRegistry(), StatusDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := New(Config{Log: e.Log, Recorder: e.Recorder, Discovery: e.Kube.Discovery(), Dynamic: e.Dynamic, DInformers: e.DInformers, Net: e.Net, Subnets: sr})
	sr.Use(noPods{}, noGateways{})
	sr.UseVpcs(r)
	// What the previous controller programmed.
	prev := ovnnet.VPC{Name: "vpc-a",
		Routes:   []ovnnb.VPCRoute{{Prefix: netip.MustParsePrefix("0.0.0.0/0"), Nexthop: netip.MustParseAddr("10.200.0.254")}},
		Policies: []ovnnb.RouterPolicy{{Priority: 30000, Match: "ip4.src == 10.200.0.0/24", Action: "reroute", Nexthops: []netip.Addr{netip.MustParseAddr("10.200.0.253")}}}}
	if err := e.Net.EnsureVPC(e.Ctx, prev); err != nil {
		t.Fatal(err)
	}
	rows := func() []string {
		var out []string
		for _, x := range nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, e.NBServer, e.NB, nbdb.LogicalRouterStaticRouteTable) {
			out = append(out, x.UUID+" "+x.IPPrefix+" via "+x.Nexthop)
		}
		for _, x := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, e.NBServer, e.NB, nbdb.LogicalRouterPolicyTable) {
			out = append(out, x.UUID+" "+x.Match+" "+x.Action+" "+strings.Join(x.Nexthops, ","))
		}
		slices.Sort(out)
		return out
	}
	before := rows()
	if len(before) != 2 {
		t.Fatalf("set-up: %v", before)
	}
	e.Start()
	if err := r.ProgramAll(e.Ctx); err != nil {
		t.Fatal(err)
	}
	if after := rows(); !slices.Equal(after, before) {
		t.Fatalf("ProgramAll changed the router before the Subnets were programmed:\nbefore %v\nafter  %v", before, after)
	}
	if ok, why := r.Ready("vpc-a"); !ok {
		t.Fatalf("vpc-a not ready after ProgramAll: %s", why)
	}
	// The full sync, after the Subnets, keeps the same rows.
	names, err := sr.ProgramAll(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	sr.Start(e.Ctx, &e.WG, names)
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, r.inf, "vpc-a", func(obj any) bool {
		if obj == nil {
			return false
		}
		v, _ := kubeovnv1.VpcFromUnstructured(obj.(*unstructured.Unstructured))
		return v.Status.Standby && slices.Equal(v.Status.Subnets, []string{"a1"})
	})
	if after := rows(); !slices.Equal(after, before) {
		t.Fatalf("the full sync changed the rows:\nbefore %v\nafter  %v", before, after)
	}
}

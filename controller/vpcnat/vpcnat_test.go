package vpcnat

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// fakeGateway is extgw as vpcnat sees it: programmed with two nodes.
type fakeGateway struct {
	mu      sync.Mutex
	cfg     ovnnet.ExternalGatewayConfig
	nodes   []ovnnet.GatewayNode
	ok      bool
	started chan struct{}
	woken   int
}

func (g *fakeGateway) Gateway() (ovnnet.ExternalGatewayConfig, []ovnnet.GatewayNode, bool, string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.ok {
		return ovnnet.ExternalGatewayConfig{}, nil, false, "enable-external-gw is false"
	}
	return g.cfg, g.nodes, true, ""
}
func (g *fakeGateway) PodHolder(netip.Addr) string { return "" }
func (g *fakeGateway) WakeWaiting() {
	g.mu.Lock()
	g.woken++
	g.mu.Unlock()
}
func (g *fakeGateway) Started() <-chan struct{} { return g.started }

type readyVpcs struct{}

func (readyVpcs) Ready(string) (bool, string) { return true, "" }

type subnetsOf map[string]map[string][]netip.Prefix

func (s subnetsOf) VpcSubnets(vpc string) map[string][]netip.Prefix { return s[vpc] }

func obj(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": name, "generation": int64(1)}, "spec": spec}}
}

func ipObj(name, pod, ns, subnet, v4 string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": "IP",
		"metadata": map[string]any{"name": name}, "spec": map[string]any{"podName": pod, "namespace": ns, "subnet": subnet, "v4IpAddress": v4}}}
}

type fixture struct {
	*ctltest.Env
	r  *Reconciler
	gw *fakeGateway
}

func start(t *testing.T, objs ...*unstructured.Unstructured) *fixture {
	t.Helper()
	e := ctltest.NewOVSDB(t, nil)
	// Created through their resources: the fake client's guess of a
	// resource from a kind ("ovneips") is not Kube-OVN's ("ovn-eips").
	gvrs := map[string]schema.GroupVersionResource{"Vpc": kubeovnv1.VpcGVR, "IP": kubeovnv1.IPGVR, "OvnEip": kubeovnv1.OvnEipGVR,
		"OvnFip": kubeovnv1.OvnFipGVR, "OvnSnatRule": kubeovnv1.OvnSnatRuleGVR, "OvnDnatRule": kubeovnv1.OvnDnatRuleGVR}
	for _, o := range objs {
		if _, err := e.Dynamic.Resource(gvrs[o.GetKind()]).Create(e.Ctx, o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.Kube.Resources = []*metav1.APIResourceList{{GroupVersion: kubeovnv1.GroupVersion.String(),
		APIResources: []metav1.APIResource{{Name: "vpcs"}, {Name: "ips"}, {Name: "ovn-eips"}, {Name: "ovn-fips"}, {Name: "ovn-snat-rules"}, {Name: "ovn-dnat-rules"}}}}
	data := map[string]string{"external-gw-nodes": "node-b,node-c", "external-gw-nic": "ext0", "external-gw-addr": "172.56.0.1/16", "nic-ip": "172.56.0.254/16",
		"namespace-external-addresses": "team: 172.56.0.2-172.56.0.9"}
	cfg, err := ovnnet.ParseExternalGatewayConfig(data)
	if err != nil {
		t.Fatal(err)
	}
	gw := &fakeGateway{cfg: cfg, ok: true, nodes: []ovnnet.GatewayNode{{Node: "node-b", Chassis: "ch-b"}, {Node: "node-c", Chassis: "ch-c"}}, started: make(chan struct{})}
	close(gw.started)
	if err := e.Net.EnsureExternalGateway(e.Ctx, cfg, gw.nodes); err != nil {
		t.Fatal(err)
	}
	// vpc-a's Subnet net-a with pod team/web at 10.200.0.5; vpc-b's net-b (same CIDR).
	for _, s := range []struct{ name, vpc string }{{"net-a", "vpc-a"}, {"net-b", "vpc-b"}} {
		sc, err := ipam.ParseSubnet(s.name, "10.200.0.0/24", "", nil)
		if err != nil {
			t.Fatal(err)
		}
		sc.VPC = s.vpc
		if err := e.Net.EnsureVPC(e.Ctx, ovnnet.VPC{Name: s.vpc}); err != nil {
			t.Fatal(err)
		}
		if err := e.Net.AddSubnet(e.Ctx, sc, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.Net.IPAM.Allocate("net-a", "team/web", ipam.Request{IPs: []netip.Addr{netip.MustParseAddr("10.200.0.5")}}); err != nil {
		t.Fatal(err)
	}
	subs := subnetsOf{"vpc-a": {"net-a": {netip.MustParsePrefix("10.200.0.0/24")}}, "vpc-b": {"net-b": {netip.MustParsePrefix("10.200.0.0/24")}}}
	r := New(Config{Log: e.Log, Recorder: e.Recorder, Discovery: e.Kube.Discovery(), Dynamic: e.Dynamic, DInformers: e.DInformers,
		Net: e.Net, Gateway: gw, Vpcs: readyVpcs{}, Subnets: subs, IPAM: e.Net.IPAM})
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	return &fixture{Env: e, r: r, gw: gw}
}

func (f *fixture) nats(t *testing.T, vpc string) []string {
	nats, err := f.Net.VPCNATs(context.Background(), vpc)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range nats {
		out = append(out, n.Type+" "+n.ExternalIP+" "+n.LogicalIP+" "+n.GatewayPort)
	}
	slices.Sort(out)
	return out
}

// A Vpc with enableExternal: its gateway address is created as an lrp
// OvnEip, its port joins ovn-external with a default route, an OvnFip
// and an OvnSnatRule become NAT rows on it with ready statuses; an
// OvnEip outside the external Subnet, a FIP to an IP object no pod holds
// and a SNAT of another VPC's Subnet are refused alone with an event
// naming the fix; deleting the FIP removes its row; the Vpc dropping
// enableExternal removes the gateway.
func TestVpcExternalGatewayAndNAT(t *testing.T) {
	f := start(t,
		obj("Vpc", "vpc-a", map[string]any{"enableExternal": true}),
		obj("Vpc", "vpc-b", map[string]any{}),
		ipObj("web.team", "web", "team", "net-a", "10.200.0.5"),
		ipObj("ghost.team", "ghost", "team", "net-a", "10.200.0.6"),
		obj("OvnEip", "eip-f", map[string]any{"externalSubnet": "ovn-external", "v4Ip": "172.56.0.20", "type": "nat"}),
		obj("OvnEip", "eip-s", map[string]any{"externalSubnet": "ovn-external", "v4Ip": "172.56.0.21", "type": "nat"}),
		obj("OvnEip", "eip-g", map[string]any{"v4Ip": "172.56.0.22"}),
		obj("OvnEip", "eip-out", map[string]any{"v4Ip": "10.99.0.1"}),
		obj("OvnFip", "fip-web", map[string]any{"ovnEip": "eip-f", "ipName": "web.team"}),
		obj("OvnFip", "fip-ghost", map[string]any{"ovnEip": "eip-g", "ipName": "ghost.team"}),
		obj("OvnSnatRule", "snat-a", map[string]any{"ovnEip": "eip-s", "vpcSubnet": "net-a"}),
		obj("OvnSnatRule", "snat-b", map[string]any{"ovnEip": "eip-s", "vpcSubnet": "net-b", "vpc": "vpc-a"}),
		obj("OvnDnatRule", "dnat-a", map[string]any{"ovnEip": "eip-f", "ipName": "web.team", "internalPort": "80", "externalPort": "8080", "protocol": "tcp"}),
		obj("OvnDnatRule", "dnat-s", map[string]any{"ovnEip": "eip-s", "ipName": "web.team", "internalPort": "22", "externalPort": "2222"}),
		obj("OvnDnatRule", "dnat-t", map[string]any{"ovnEip": "eip-s", "vpc": "vpc-a", "v4Ip": "10.200.0.6", "internalPort": "22", "externalPort": "2222"}),
	)
	// The gateway address: the lowest address outside the namespace pool.
	awaitStatus(t, f, kubeovnv1.OvnEipGVR, "vpc-a-ovn-external", func(st map[string]any) bool {
		return st["ready"] == true && st["v4Ip"] == "172.56.0.10" && st["nat"] == "lrp"
	})
	f.AwaitNB("vpc-a's gateway port with its NAT rows and default route", func() bool {
		return slices.Equal(f.nats(t, "vpc-a"), []string{"dnat_and_snat 172.56.0.20 10.200.0.5 vpc-a-ovn-external", "snat 172.56.0.21 10.200.0.0/24 vpc-a-ovn-external"})
	})
	ports, _ := f.NB.RouterPorts(f.Ctx, "vpc-a")
	if !slices.Contains(ports, "vpc-a-ovn-external") {
		t.Fatalf("vpc-a's ports %v", ports)
	}
	var routes []string
	for _, r := range nbtest.Rows[*nbdb.LogicalRouterStaticRoute](t, f.NBServer, f.NB, nbdb.LogicalRouterStaticRouteTable) {
		if r.ExternalIDs[ovnnet.KeyVPCExternal] == "vpc-a" {
			routes = append(routes, r.IPPrefix+" via "+r.Nexthop)
		}
	}
	if !slices.Equal(routes, []string{"0.0.0.0/0 via 172.56.0.1"}) {
		t.Fatalf("vpc-a's external routes %v", routes)
	}
	awaitStatus(t, f, kubeovnv1.OvnFipGVR, "fip-web", func(st map[string]any) bool {
		return st["ready"] == true && st["v4Eip"] == "172.56.0.20" && st["v4Ip"] == "10.200.0.5" && st["vpc"] == "vpc-a"
	})
	awaitStatus(t, f, kubeovnv1.OvnSnatRuleGVR, "snat-a", func(st map[string]any) bool {
		return st["ready"] == true && st["v4IpCidr"] == "10.200.0.0/24"
	})
	// A port forward on the SNAT's EIP: a load balancer on vpc-a's router
	// (tcp when the protocol is empty), its status with the addresses.
	f.AwaitNB("vpc-a's port forward", func() bool {
		fw, _ := f.Net.VPCForwards(f.Ctx, "vpc-a")
		return fmt.Sprint(fw) == "[{tcp 172.56.0.21 2222 10.200.0.5 22}]"
	})
	awaitStatus(t, f, kubeovnv1.OvnDnatRuleGVR, "dnat-s", func(st map[string]any) bool {
		return st["ready"] == true && st["v4Eip"] == "172.56.0.21" && st["v4Ip"] == "10.200.0.5" && st["protocol"] == "tcp" &&
			st["externalPort"] == "2222" && st["internalPort"] == "22"
	})
	for _, c := range []struct {
		gvr  schema.GroupVersionResource
		name string
		want string
	}{
		{kubeovnv1.OvnEipGVR, "eip-out", "spec.v4Ip 10.99.0.1 is outside the external Subnet 172.56.0.0/16"},
		{kubeovnv1.OvnFipGVR, "fip-ghost", `spec.ipName "ghost.team": no such IP object`},
		{kubeovnv1.OvnSnatRuleGVR, "snat-b", `spec.vpc "vpc-a", but Subnet "net-b" is in Vpc "vpc-b"`},
		{kubeovnv1.OvnDnatRuleGVR, "dnat-a", `spec.ovnEip "eip-f" is used by OvnFip fip-web, which takes every port of it`},
		{kubeovnv1.OvnDnatRuleGVR, "dnat-t", `tcp port 2222 of OvnEip "eip-s" is forwarded by OvnDnatRule "dnat-s" already`},
	} {
		awaitStatus(t, f, c.gvr, c.name, func(st map[string]any) bool {
			return st["ready"] == false && strings.Contains(conditionMessage(st), c.want)
		})
	}
	events := strings.Join(f.Events(), "\n")
	for _, want := range []string{"Warning InvalidOvnFip spec.ipName \"ghost.team\"", "Warning InvalidOvnEip spec.v4Ip 10.99.0.1", "Warning InvalidOvnSnatRule spec.vpc \"vpc-a\""} {
		if !strings.Contains(events, want) {
			t.Errorf("no event %q in\n%s", want, events)
		}
	}
	if got := f.r.Reserved(netip.MustParseAddr("172.56.0.20")); got != "OvnEip eip-f" {
		t.Errorf("Reserved(172.56.0.20) = %q", got)
	}
	// The FIP deleted: its row goes, the SNAT stays.
	if err := f.Dynamic.Resource(kubeovnv1.OvnFipGVR).Delete(f.Ctx, "fip-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("fip-web's row removed", func() bool {
		return slices.Equal(f.nats(t, "vpc-a"), []string{"snat 172.56.0.21 10.200.0.0/24 vpc-a-ovn-external"})
	})
	// Its EIP free, the port forward that wanted it is programmed.
	f.AwaitNB("dnat-a's forward once the FIP is gone", func() bool {
		fw, _ := f.Net.VPCForwards(f.Ctx, "vpc-a")
		return fmt.Sprint(fw) == "[{tcp 172.56.0.20 8080 10.200.0.5 80} {tcp 172.56.0.21 2222 10.200.0.5 22}]"
	})
	awaitStatus(t, f, kubeovnv1.OvnDnatRuleGVR, "dnat-a", func(st map[string]any) bool { return st["ready"] == true })
	// enableExternal dropped (a new generation): everything goes.
	u, err := f.Dynamic.Resource(kubeovnv1.VpcGVR).Get(f.Ctx, "vpc-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, false, "spec", "enableExternal")
	u.SetGeneration(2)
	if _, err := f.Dynamic.Resource(kubeovnv1.VpcGVR).Update(f.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.AwaitNB("vpc-a's gateway port, route and rows removed", func() bool {
		ports, _ := f.NB.RouterPorts(f.Ctx, "vpc-a")
		have, _ := f.Net.VPCExternals(f.Ctx)
		fw, _ := f.Net.VPCForwards(f.Ctx, "vpc-a")
		lbs, _ := f.NB.LoadBalancers(f.Ctx, map[string]string{ovnnet.KeyVPCExternal: "vpc-a"})
		return len(f.nats(t, "vpc-a")) == 0 && !slices.Contains(ports, "vpc-a-ovn-external") && len(have) == 0 && len(fw) == 0 && len(lbs) == 0
	})
	awaitStatus(t, f, kubeovnv1.OvnSnatRuleGVR, "snat-a", func(st map[string]any) bool {
		return st["ready"] == false && strings.Contains(conditionMessage(st), "set spec.enableExternal: true on Vpc vpc-a")
	})
}

func conditionMessage(st map[string]any) string {
	cs, _ := st["conditions"].([]any)
	for _, c := range cs {
		if m, ok := c.(map[string]any); ok && m["type"] == kubeovnv1.Ready {
			s, _ := m["message"].(string)
			return s
		}
	}
	return ""
}

// awaitStatus waits until the object's status satisfies ok.
func awaitStatus(t *testing.T, f *fixture, gvr schema.GroupVersionResource, name string, ok func(map[string]any) bool) {
	t.Helper()
	ctltest.Await(t, f.DInformers.ForResource(gvr).Informer(), name, func(o any) bool {
		if o == nil {
			return false
		}
		st, _ := o.(*unstructured.Unstructured).Object["status"].(map[string]any)
		return st != nil && ok(st)
	})
}

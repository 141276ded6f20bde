package services

import (
	"context"
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The Kubernetes side is client-go's fake clientset (no apiserver in a
// unit test; tests/controller and tests/node run the real one), the OVN
// side libovsdb's in-memory NB.

func chassisNode(name, chassis string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{annotations.Chassis: chassis}}}
}

func webService(mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if mut != nil {
		mut(s)
	}
	return s
}

func webSlice(name string, eps ...ep) *discoveryv1.EndpointSlice {
	es := slice("http", corev1.ProtocolTCP, 8080, eps...)
	es.ObjectMeta = metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}}
	return es
}

func startServices(t *testing.T, typed ...runtime.Object) (*ctltest.Env, *Reconciler) {
	t.Helper()
	e := ctltest.New(t, typed)
	r, err := New(Config{Log: e.Log, Recorder: e.Recorder, Informers: e.Informers, NB: e.NB})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	return e, r
}

func loadBalancer(t *testing.T, e *ctltest.Env, name string) *nbdb.LoadBalancer {
	for _, lb := range nbtest.Rows[*nbdb.LoadBalancer](t, e.NBServer, e.NB, nbdb.LoadBalancerTable) {
		if lb.Name == name {
			return lb
		}
	}
	return nil
}

func lbVIPs(e *ctltest.Env, name string) map[string]string {
	lbs, _ := e.NB.LoadBalancers(context.Background(), nil)
	for _, lb := range lbs {
		if lb.Name == name {
			return lb.VIPs
		}
	}
	return nil
}

func TestServiceBecomesALoadBalancerThatFollowsItsEndpoints(t *testing.T) {
	e, _ := startServices(t, chassisNode("n1", "ch1"), webService(nil), webSlice("web-1", ep{ip: "10.16.0.5", ready: yes}))
	tcp := Name("default", "web", corev1.ProtocolTCP)
	e.AwaitNB("the Service's load balancer", func() bool { return lbVIPs(e, tcp)["10.96.0.10:80"] == "10.16.0.5:8080" })
	lb := loadBalancer(t, e, tcp)
	if lb == nil || lb.Protocol == nil || *lb.Protocol != "tcp" || lb.Options["reject"] != "true" || lb.ExternalIDs[KeyService] != "default/web" {
		t.Fatalf("load balancer %+v", lb)
	}
	groups := nbtest.Rows[*nbdb.LoadBalancerGroup](t, e.NBServer, e.NB, nbdb.LoadBalancerGroupTable)
	if len(groups) != 1 || groups[0].Name != ClusterLBGroup || len(groups[0].LoadBalancer) != 1 || groups[0].LoadBalancer[0] != lb.UUID {
		t.Fatalf("load balancer group %+v", groups)
	}
	if r := nbtest.Rows[*nbdb.LogicalRouter](t, e.NBServer, e.NB, nbdb.LogicalRouterTable)[0]; len(r.LoadBalancerGroup) != 1 {
		t.Fatal("the group is not attached to the cluster router")
	}

	// A second endpoint: the same row, both backends.
	if _, err := e.Kube.DiscoveryV1().EndpointSlices("default").Create(e.Ctx, webSlice("web-2", ep{ip: "10.16.0.6", ready: yes}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("both backends", func() bool { return lbVIPs(e, tcp)["10.96.0.10:80"] == "10.16.0.5:8080,10.16.0.6:8080" })
	if got := loadBalancer(t, e, tcp); got.UUID != lb.UUID {
		t.Fatal("the load balancer was recreated for an endpoint change")
	}

	// The Service goes: so does its load balancer.
	if err := e.Kube.CoreV1().Services("default").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("no load balancer", func() bool { return lbVIPs(e, tcp) == nil })
	if n := len(nbtest.Rows[*nbdb.LoadBalancer](t, e.NBServer, e.NB, nbdb.LoadBalancerTable)); n != 0 {
		t.Fatalf("%d load balancers left", n)
	}
}

func TestServiceOVNCannotExpressGetsAnEventAndKeepsWhatItHad(t *testing.T) {
	e, _ := startServices(t, webService(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }))
	ev := e.AwaitEvent("Warning UnsupportedService")
	if !strings.Contains(ev, "ICMP") {
		t.Fatalf("event %q", ev)
	}
	if lbs, _ := e.NB.LoadBalancers(e.Ctx, nil); len(lbs) != 0 {
		t.Fatalf("load balancers %v", lbs)
	}
}

func TestInternalTrafficPolicyLocalUsesEachNodesEndpoints(t *testing.T) {
	local := corev1.ServiceInternalTrafficPolicyLocal
	e, _ := startServices(t, chassisNode("n1", "ch1"), chassisNode("n2", "ch2"),
		webService(func(s *corev1.Service) { s.Spec.InternalTrafficPolicy = &local }),
		webSlice("web-1", ep{ip: "10.16.0.5", ready: yes, node: "n1"}))
	name := Name("default", "web", corev1.ProtocolTCP) + LocalSuffix + "4"
	e.AwaitNB("the template load balancer", func() bool { return lbVIPs(e, name) != nil })
	vars := map[string]map[string]string{}
	for _, r := range nbtest.Rows[*nbdb.ChassisTemplateVar](t, e.NBServer, e.NB, nbdb.ChassisTemplateVarTable) {
		vars[r.Chassis] = r.Variables
	}
	v := strings.TrimPrefix(lbVIPs(e, name)["10.96.0.10:80"], "^")
	if !strings.HasPrefix(v, VarPrefix("default", "web")) {
		t.Fatalf("VIP backends %q, want a template variable", lbVIPs(e, name))
	}
	if !maps.Equal(vars["ch1"], map[string]string{v: "10.16.0.5:8080"}) || !maps.Equal(vars["ch2"], map[string]string{v: ""}) {
		t.Fatalf("template variables %v: want n1's endpoint on ch1, none on ch2", vars)
	}
}

// A custom VPC's pod is no backend of the cluster's load balancers (its
// address may be a default VPC pod's); the other endpoints stay, and the
// cached slice is not changed.
func TestCustomVPCPodsAreNoBackends(t *testing.T) {
	pod := func(ns, name, ip string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name}}
	}
	es := &discoveryv1.EndpointSlice{Endpoints: []discoveryv1.Endpoint{pod("ns-a", "in-vpc", "10.200.0.10"), pod("default", "web", "10.16.0.5")}}
	got := defaultVPCEndpoints([]*discoveryv1.EndpointSlice{es}, func(owner string) string {
		if owner == "ns-a/in-vpc" {
			return "vpc-a"
		}
		return ""
	})
	if len(got) != 1 || len(got[0].Endpoints) != 1 || got[0].Endpoints[0].Addresses[0] != "10.16.0.5" {
		t.Fatalf("endpoints %+v, want only the default VPC pod's 10.16.0.5", got)
	}
	if len(es.Endpoints) != 2 {
		t.Fatalf("the informer's slice was changed: %+v", es.Endpoints)
	}
	if got := defaultVPCEndpoints([]*discoveryv1.EndpointSlice{es}, nil); len(got[0].Endpoints) != 2 {
		t.Fatalf("without PodVPC every endpoint counts: %+v", got)
	}
}

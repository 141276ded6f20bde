package controller_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func withLB(o *kube.Options) { o.EnableLB = true }

func ptrTo[T any](v T) *T { return &v }

// endpointSlice is what the endpointslice controller would write for svc:
// ready endpoints, and not-ready ones when ready is false.
func endpointSlice(ns, svc, name string, port int32, proto corev1.Protocol, ready []string, notReady []string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptrTo(""), Protocol: ptrTo(proto), Port: ptrTo(port)}}}
	for _, ip := range ready {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(true), Serving: ptrTo(true)}})
	}
	for _, ip := range notReady {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptrTo(false), Serving: ptrTo(false)}})
	}
	return es
}

// serviceLBs is the NB's view of a Service: "NAME proto=.. vips=.. options=.." lines.
func (e *env) serviceLBs(key string) string {
	lbs, _ := e.nb.LoadBalancers(context.Background(), map[string]string{services.KeyService: key})
	var out []string
	for _, lb := range lbs {
		vips := slices.Sorted(maps.Keys(lb.VIPs))
		var vs []string
		for _, v := range vips {
			vs = append(vs, v+"="+lb.VIPs[v])
		}
		opts := slices.Sorted(maps.Keys(lb.Options))
		var os []string
		for _, o := range opts {
			os = append(os, o+"="+lb.Options[o])
		}
		line := fmt.Sprintf("%s %s [%s] {%s}", lb.Name, lb.Protocol, strings.Join(vs, " "), strings.Join(os, " "))
		if len(lb.SelectionFields) > 0 {
			line += " by " + strings.Join(lb.SelectionFields, ",")
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

// lbGroupState: the group's members and which switches and routers lack it.
func (e *env) lbGroupState() (members []string, missing []string) {
	var gs []nbdb.LoadBalancerGroup
	_ = e.nb.Raw().List(context.Background(), &gs)
	var g *nbdb.LoadBalancerGroup
	for i := range gs {
		if gs[i].Name == services.ClusterLBGroup {
			g = &gs[i]
		}
	}
	if g == nil {
		return nil, []string{"group " + services.ClusterLBGroup + " does not exist"}
	}
	var lbs []nbdb.LoadBalancer
	_ = e.nb.Raw().List(context.Background(), &lbs)
	for _, lb := range lbs {
		if slices.Contains(g.LoadBalancer, lb.UUID) {
			members = append(members, lb.Name)
		}
	}
	slices.Sort(members)
	var ls []nbdb.LogicalSwitch
	_ = e.nb.Raw().List(context.Background(), &ls)
	for _, s := range ls {
		if !slices.Equal(s.LoadBalancerGroup, []string{g.UUID}) || len(s.LoadBalancer) > 0 {
			missing = append(missing, "switch "+s.Name)
		}
	}
	var rs []nbdb.LogicalRouter
	_ = e.nb.Raw().List(context.Background(), &rs)
	for _, r := range rs {
		if !slices.Equal(r.LoadBalancerGroup, []string{g.UUID}) || len(r.LoadBalancer) > 0 {
			missing = append(missing, "router "+r.Name)
		}
	}
	return members, missing
}

// TestServicesBecomeLoadBalancers: a Service and its EndpointSlices become
// one load balancer per protocol in the cluster group, attached to every
// switch (also one created later) and to ovn-cluster; endpoint changes,
// scaling to zero (reject), affinity and deletion follow; a Service OVN cannot
// express gets an event and keeps its rows; rows of a Service deleted while
// no controller ran are removed at start.
func TestServicesBecomeLoadBalancers(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stop := e.startController(withLB)
	e.waitSubnetReady("ovn-default")

	svc, err := e.kc.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "", Port: 80, Protocol: corev1.ProtocolTCP}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vip := svc.Spec.ClusterIP
	waitLBs := func(what, want string) {
		t.Helper()
		e.waitFor(30*time.Second, what, func() (bool, string) {
			got := e.serviceLBs("default/web")
			return got == want, "NB has:\n" + got + "\nwant:\n" + want
		})
	}
	waitLBs("a VIP without backends that rejects", fmt.Sprintf("Service_default/web_TCP tcp [%s:80=] {reject=true}", vip))

	es, err := e.kc.DiscoveryV1().EndpointSlices("default").Create(ctx,
		endpointSlice("default", "web", "web-1", 8080, corev1.ProtocolTCP, []string{"10.16.0.12", "10.16.0.11"}, []string{"10.16.0.13"}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitLBs("the two ready endpoints as backends", fmt.Sprintf("Service_default/web_TCP tcp [%s:80=10.16.0.11:8080,10.16.0.12:8080] {reject=true}", vip))

	// A subnet created now gets the group on its switch too.
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("extra", map[string]any{"cidrBlock": "10.70.0.0/16", "protocol": "IPv4"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSubnetReady("extra")
	e.waitFor(30*time.Second, "the group on every switch and on ovn-cluster, holding web's load balancer", func() (bool, string) {
		members, missing := e.lbGroupState()
		var ls []nbdb.LogicalSwitch
		_ = e.nb.Raw().List(context.Background(), &ls)
		ok := len(missing) == 0 && slices.Contains(members, "Service_default/web_TCP") && len(ls) == 3
		return ok, fmt.Sprintf("members %v, without the group (or with a load balancer of their own): %v, %d switches", members, missing, len(ls))
	})

	es.Endpoints = es.Endpoints[1:]
	if _, err := e.kc.DiscoveryV1().EndpointSlices("default").Update(ctx, es, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLBs("one backend left", fmt.Sprintf("Service_default/web_TCP tcp [%s:80=10.16.0.11:8080] {reject=true}", vip))

	svc, _ = e.kc.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptrTo(int32(30))}}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
	svc.Spec.Ports[0].Name = "http"
	if svc, err = e.kc.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Port names changed: the old slice's unnamed port matches none.
	waitLBs("affinity and a UDP load balancer", fmt.Sprintf("Service_default/web_TCP tcp [%s:80=] {reject=true} by ip_src\nService_default/web_UDP udp [%s:53=] {reject=true} by ip_src", vip, vip))

	// Bad input: an ingress address no load balancer can serve.
	svc.Spec.Type = corev1.ServiceTypeLoadBalancer
	if svc, err = e.kc.CoreV1().Services("default").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := e.serviceLBs("default/web")
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "0.0.0.0"}}
	if _, err := e.kc.CoreV1().Services("default").UpdateStatus(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "an UnsupportedService event on default/web", func() (bool, string) {
		evs := e.events("default", "web")
		for _, ev := range evs {
			if strings.HasPrefix(ev, "UnsupportedService: ") && strings.Contains(ev, `"0.0.0.0"`) {
				return true, ""
			}
		}
		return false, fmt.Sprint(evs)
	})
	if got := e.serviceLBs("default/web"); got != before {
		t.Fatalf("a Service with bad input changed its load balancers:\n%s\nwas:\n%s", got, before)
	}

	// Restart: a Service deleted while no controller runs loses its rows at start.
	stop()
	if err := e.kc.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.startController(withLB)
	e.waitFor(30*time.Second, "web's load balancers gone and the group empty", func() (bool, string) {
		members, _ := e.lbGroupState()
		got := e.serviceLBs("default/web")
		var lbs []nbdb.LoadBalancer
		_ = e.nb.Raw().List(context.Background(), &lbs)
		var names []string
		for _, lb := range lbs {
			names = append(names, lb.Name)
		}
		ok := got == "" && !slices.ContainsFunc(members, func(m string) bool { return strings.HasPrefix(m, "Service_default/web_") }) &&
			!slices.ContainsFunc(names, func(m string) bool { return strings.HasPrefix(m, "Service_default/web_") })
		return ok, fmt.Sprintf("rows %v, group %v", names, members)
	})
}

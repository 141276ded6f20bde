package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// TestAdoptKubeOVNState (issue 13, migration step 2): a cluster as
// kube-ovn-controller left it (Subnets as it stores them, with its
// finalizer; pod and node annotations as it writes them; its IP objects;
// NB rows with its names and external_ids: router ovn-cluster, switches
// ovn-default and join with their router port pairs, pod ports <pod>.<ns>,
// the node port node-<node> without an owner key, plus rows for features
// ovnhost does not manage: a port group with an ACL, an address set, a
// load balancer, a router policy, a static route) is adopted by
// ovnhost-controller: no pod or node changes address, MAC or port (same
// row), the router ports keep their MACs, the Kube-OVN-only rows are all
// still there, the Subnets are valid, and a new pod gets an address nobody
// holds.
func TestAdoptKubeOVNState(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Subnets as kube-ovn-controller stores them.
	for name, spec := range map[string]map[string]any{
		"ovn-default": {"default": true, "vpc": "ovn-cluster", "protocol": "IPv4", "cidrBlock": "10.16.0.0/16", "gateway": "10.16.0.1",
			"excludeIps": []any{"10.16.0.1"}, "provider": "ovn", "gatewayType": "distributed", "gatewayNode": "", "natOutgoing": true, "private": false, "enableLb": true},
		"join": {"default": false, "vpc": "ovn-cluster", "protocol": "IPv4", "cidrBlock": "100.64.0.0/16", "gateway": "100.64.0.1",
			"excludeIps": []any{"100.64.0.1"}, "provider": "ovn", "gatewayType": "distributed", "gatewayNode": "", "natOutgoing": false, "private": false},
	} {
		u := subnetObj(name, spec)
		u.SetFinalizers([]string{"kubeovn.io/kube-ovn-controller"})
		if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// NB rows with Kube-OVN's names and external_ids.
	ko := func(extra map[string]string) map[string]string {
		m := map[string]string{"vendor": "kube-ovn"}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	lrpMAC := map[string]string{"ovn-cluster-ovn-default": "00:00:00:aa:00:01", "ovn-cluster-join": "00:00:00:aa:00:02"}
	pol := nbdb.LogicalRouterStaticRoutePolicyDstIP
	var ops []ovsdb.Operation
	add := func(m any) {
		o, err := e.nb.Raw().Create(m)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o...)
	}
	add(&nbdb.LogicalRouterPort{UUID: "lrpdef", Name: "ovn-cluster-ovn-default", MAC: lrpMAC["ovn-cluster-ovn-default"], Networks: []string{"10.16.0.1/16"}})
	add(&nbdb.LogicalRouterPort{UUID: "lrpjoin", Name: "ovn-cluster-join", MAC: lrpMAC["ovn-cluster-join"], Networks: []string{"100.64.0.1/16"}})
	add(&nbdb.LogicalRouterPolicy{UUID: "pol", Priority: 31000, Match: "ip4.dst == 10.16.0.0/16", Action: "allow", ExternalIDs: ko(nil)})
	add(&nbdb.LogicalRouterStaticRoute{UUID: "rt", IPPrefix: "10.99.0.0/16", Nexthop: "100.64.0.254", Policy: &pol, ExternalIDs: ko(nil)})
	add(&nbdb.LogicalRouter{UUID: "r", Name: "ovn-cluster", Ports: []string{"lrpdef", "lrpjoin"}, Policies: []string{"pol"}, StaticRoutes: []string{"rt"}, ExternalIDs: ko(nil)})
	add(&nbdb.LogicalSwitchPort{UUID: "def2r", Name: "ovn-default-ovn-cluster", Type: "router", Addresses: []string{"router"}, Options: map[string]string{"router-port": "ovn-cluster-ovn-default"}})
	add(&nbdb.LogicalSwitchPort{UUID: "join2r", Name: "join-ovn-cluster", Type: "router", Addresses: []string{"router"}, Options: map[string]string{"router-port": "ovn-cluster-join"}})
	add(&nbdb.LogicalSwitchPort{UUID: "web", Name: "web.default", Addresses: []string{"00:00:00:12:34:56 10.16.0.7"}, ExternalIDs: ko(map[string]string{"ls": "ovn-default", "pod": "default/web"})})
	add(&nbdb.LogicalSwitchPort{UUID: "db", Name: "db.default", Addresses: []string{"00:00:00:12:34:57 10.16.0.9"}, PortSecurity: []string{"00:00:00:12:34:57 10.16.0.9"},
		ExternalIDs: ko(map[string]string{"ls": "ovn-default", "pod": "default/db"})})
	add(&nbdb.LogicalSwitchPort{UUID: "vip", Name: "vip-10.16.0.100", Type: "virtual", Options: map[string]string{"virtual-ip": "10.16.0.100"}, ExternalIDs: ko(map[string]string{"ls": "ovn-default"})})
	add(&nbdb.LogicalSwitchPort{UUID: "nodea", Name: "node-node-a", Addresses: []string{"00:00:00:ab:cd:01 100.64.0.2"}, ExternalIDs: ko(map[string]string{"ls": "join"})})
	add(&nbdb.LogicalSwitch{UUID: "lsdef", Name: "ovn-default", Ports: []string{"def2r", "web", "db", "vip"}, ExternalIDs: ko(nil)})
	add(&nbdb.LogicalSwitch{UUID: "lsjoin", Name: "join", Ports: []string{"join2r", "nodea"}, ExternalIDs: ko(nil)})
	add(&nbdb.AddressSet{UUID: "as", Name: "ovn.default.allow.v4", Addresses: []string{"10.16.0.7"}, ExternalIDs: ko(nil)})
	add(&nbdb.ACL{UUID: "acl", Direction: "to-lport", Priority: 2000, Match: "outport == @kubeovn_deny_all && ip", Action: "drop", ExternalIDs: ko(nil)})
	add(&nbdb.PortGroup{UUID: "pg", Name: "kubeovn_deny_all", ACLs: []string{"acl"}, ExternalIDs: ko(nil)})
	add(&nbdb.LoadBalancer{UUID: "lb", Name: "cluster-tcp-loadbalancer", Protocol: ptrTo(nbdb.LoadBalancerProtocolTCP), ExternalIDs: ko(nil)})
	if _, err := e.nb.Raw().Transact(ctx, ops...); err != nil {
		t.Fatal(err)
	}
	uuidOf := func(name string) string {
		l, ok := e.lsp(name)
		if !ok {
			return ""
		}
		return l.UUID
	}
	e.waitFor(30*time.Second, "Kube-OVN rows in the test's cache", func() (bool, string) {
		return uuidOf("web.default") != "" && uuidOf("node-node-a") != "", "not yet"
	})
	before := map[string]string{}
	for _, n := range []string{"web.default", "db.default", "node-node-a", "vip-10.16.0.100"} {
		before[n] = uuidOf(n)
	}

	// Node and pods annotated as kube-ovn-controller did; its IP objects.
	e.createNode("node-a", "192.168.10.11")
	nodeAnn := map[string]string{annotations.Allocated: "true", annotations.IPAddress: "100.64.0.2", annotations.MACAddress: "00:00:00:ab:cd:01",
		annotations.CIDR: "100.64.0.0/16", annotations.Gateway: "100.64.0.1", annotations.PortName: "node-node-a", annotations.LogicalSwitch: "join",
		annotations.Chassis: "5d4e3c2b-0000-4000-8000-000000000001"}
	n, err := e.kc.CoreV1().Nodes().Get(ctx, "node-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Annotations = nodeAnn
	if _, err := e.kc.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	podAnn := func(ip, mac string) map[string]string {
		return map[string]string{annotations.Allocated: "true", annotations.Routed: "true", annotations.IPAddress: ip, annotations.MACAddress: mac,
			annotations.CIDR: "10.16.0.0/16", annotations.Gateway: "10.16.0.1", annotations.LogicalSwitch: "ovn-default", "ovn.kubernetes.io/pod_nic_type": "veth-pair"}
	}
	e.createPod("default", "web", "node-a", podAnn("10.16.0.7", "00:00:00:12:34:56"))
	dbAnn := podAnn("10.16.0.9", "00:00:00:12:34:57")
	e.createPod("default", "db", "node-a", dbAnn)
	for _, ip := range []struct{ name, pod, ns, subnet, addr, mac string }{
		{"web.default", "web", "default", "ovn-default", "10.16.0.7", "00:00:00:12:34:56"},
		{"db.default", "db", "default", "ovn-default", "10.16.0.9", "00:00:00:12:34:57"},
		{"node-node-a", "node-a", "", "join", "100.64.0.2", "00:00:00:ab:cd:01"},
	} {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "IP",
			"metadata": map[string]any{"name": ip.name, "labels": map[string]any{"ovn.kubernetes.io/subnet": ip.subnet, ip.subnet: "",
				"ovn.kubernetes.io/node-name": "node-a", "ovn.kubernetes.io/ip_reserved": "false"}},
			"spec": map[string]any{"podName": ip.pod, "namespace": ip.ns, "subnet": ip.subnet, "nodeName": "node-a", "ipAddress": ip.addr,
				"v4IpAddress": ip.addr, "v6IpAddress": "", "macAddress": ip.mac, "attachIps": []any{}, "attachMacs": []any{}, "attachSubnets": []any{},
				"containerID": "", "podType": ""}}}
		if _, err := e.dc.Resource(kubeovnv1.IPGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// ovnhost-controller takes over.
	e.startController()
	e.waitWorking("default", "newcomer", "node-a")
	for _, s := range []string{"ovn-default", "join"} {
		e.waitFor(30*time.Second, s+" Validated=True ValidationSucceeded", func() (bool, string) {
			c := cond(e.subnet(s), kubeovnv1.Validated)
			return c != nil && c.Status == "True" && c.Reason == kubeovnv1.ValidationSucceeded, fmt.Sprintf("%+v", c)
		})
	}
	for name, want := range map[string]string{"web": "10.16.0.7 00:00:00:12:34:56", "db": "10.16.0.9 00:00:00:12:34:57"} {
		o, _, _ := e.pods.GetStore().GetByKey("default/" + name)
		a := o.(*corev1.Pod).Annotations
		if got := a[annotations.IPAddress] + " " + a[annotations.MACAddress]; got != want {
			t.Errorf("pod %s: %s, want %s", name, got, want)
		}
		l, _ := e.lsp(name + ".default")
		if l == nil || l.UUID != before[name+".default"] || len(l.Addresses) != 1 || l.Addresses[0] != fieldOf(want, 1)+" "+fieldOf(want, 0) {
			t.Errorf("port %s.default changed: %+v (was row %s)", name, l, before[name+".default"])
		}
	}
	o, _, _ := e.nodes.GetStore().GetByKey("node-a")
	na := o.(*corev1.Node).Annotations
	if na[annotations.IPAddress] != "100.64.0.2" || na[annotations.MACAddress] != "00:00:00:ab:cd:01" || na[annotations.PortName] != "node-node-a" {
		t.Errorf("node-a annotations changed: %v", na)
	}
	if l, _ := e.lsp("node-node-a"); l == nil || l.UUID != before["node-node-a"] || l.Addresses[0] != "00:00:00:ab:cd:01 100.64.0.2" || l.ExternalIDs["node"] != "node-a" {
		t.Errorf("node port node-node-a not adopted as it was: %+v", l)
	}
	o, _, _ = e.pods.GetStore().GetByKey("default/newcomer")
	if ip := o.(*corev1.Pod).Annotations[annotations.IPAddress]; ip == "10.16.0.7" || ip == "10.16.0.9" || !inCIDR(ip, "10.16.0.0/16") {
		t.Errorf("newcomer got %s", ip)
	}
	var lrps []nbdb.LogicalRouterPort
	_ = e.nb.Raw().List(ctx, &lrps)
	for _, p := range lrps {
		if want, ok := lrpMAC[p.Name]; ok && p.MAC != want {
			t.Errorf("router port %s MAC %s, was %s", p.Name, p.MAC, want)
		}
	}
	// Nothing Kube-OVN made for features ovnhost does not manage is gone.
	if uuidOf("vip-10.16.0.100") != before["vip-10.16.0.100"] {
		t.Error("Kube-OVN's virtual port vip-10.16.0.100 was removed")
	}
	var pgs []nbdb.PortGroup
	var acls []nbdb.ACL
	var sets []nbdb.AddressSet
	var lbs []nbdb.LoadBalancer
	var pols []nbdb.LogicalRouterPolicy
	var rts []nbdb.LogicalRouterStaticRoute
	for _, l := range []any{&pgs, &acls, &sets, &lbs, &pols, &rts} {
		if err := e.nb.Raw().List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	has := func(what string, found bool) {
		if !found {
			t.Errorf("Kube-OVN's %s was removed", what)
		}
	}
	has("port group kubeovn_deny_all", anyOf(pgs, func(p nbdb.PortGroup) bool { return p.Name == "kubeovn_deny_all" && len(p.ACLs) == 1 }))
	has("address set ovn.default.allow.v4", anyOf(sets, func(s nbdb.AddressSet) bool { return s.Name == "ovn.default.allow.v4" }))
	has("load balancer cluster-tcp-loadbalancer", anyOf(lbs, func(l nbdb.LoadBalancer) bool { return l.Name == "cluster-tcp-loadbalancer" }))
	has("router policy 31000", anyOf(pols, func(p nbdb.LogicalRouterPolicy) bool {
		return p.Priority == 31000 && p.ExternalIDs["vendor"] == "kube-ovn"
	}))
	has("static route 10.99.0.0/16", anyOf(rts, func(r nbdb.LogicalRouterStaticRoute) bool { return r.IPPrefix == "10.99.0.0/16" }))
	for _, name := range []string{"web.default", "db.default", "node-node-a"} {
		if _, err := e.dc.Resource(kubeovnv1.IPGVR).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("IP object %s: %v", name, err)
		}
	}
}

func anyOf[T any](xs []T, f func(T) bool) bool {
	for _, x := range xs {
		if f(x) {
			return true
		}
	}
	return false
}

// fieldOf is the i-th space-separated field of s.
func fieldOf(s string, i int) string { return strings.Fields(s)[i] }

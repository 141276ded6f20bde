package controller_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// TestDefaultTopologyNodesAndSubnetValidation: after start the NB holds
// router ovn-cluster with switches join and ovn-default attached the Kube-OVN
// way, the default Subnets are Ready with counts; nodes get node-<name> ports,
// annotations and routes; a restart changes nothing; Subnets with fields
// ovnhost cannot honour are Validated=False with the reason.
func TestDefaultTopologyNodesAndSubnetValidation(t *testing.T) {
	e := newEnv(t)
	e.createNode("node-a", "192.168.10.11")
	stop := e.startController()
	e.waitSubnetReady("ovn-default")
	e.waitSubnetReady("join")

	topology := func() (bool, string) {
		var rs []nbdb.LogicalRouter
		_ = e.nb.Raw().List(context.Background(), &rs)
		var ls []nbdb.LogicalSwitch
		_ = e.nb.Raw().List(context.Background(), &ls)
		var lrps []nbdb.LogicalRouterPort
		_ = e.nb.Raw().List(context.Background(), &lrps)
		var got []string
		for _, r := range rs {
			got = append(got, fmt.Sprintf("router %s ports=%d vendor=%s", r.Name, len(r.Ports), r.ExternalIDs["vendor"]))
		}
		for _, s := range ls {
			got = append(got, fmt.Sprintf("switch %s vendor=%s", s.Name, s.ExternalIDs["vendor"]))
		}
		for _, p := range lrps {
			got = append(got, fmt.Sprintf("lrp %s %v", p.Name, p.Networks))
		}
		for _, p := range e.lsps() {
			if p.Type == "router" {
				got = append(got, fmt.Sprintf("lsp %s router-port=%s", p.Name, p.Options["router-port"]))
			}
		}
		sort.Strings(got)
		want := []string{
			"lrp ovn-cluster-join [100.64.0.1/16]",
			"lrp ovn-cluster-ovn-default [10.16.0.1/16]",
			"lsp join-ovn-cluster router-port=ovn-cluster-join",
			"lsp ovn-default-ovn-cluster router-port=ovn-cluster-ovn-default",
			"router ovn-cluster ports=2 vendor=ovnhost",
			"switch join vendor=ovnhost",
			"switch ovn-default vendor=ovnhost",
		}
		return slices.Equal(got, want), strings.Join(got, "; ")
	}
	e.waitFor(30*time.Second, "default topology in the NB", topology)

	def := e.subnet("ovn-default")
	if def.Spec.CIDRBlock != "10.16.0.0/16" || !def.Spec.Default || !def.Spec.NatOutgoing || def.Status.V4AvailableIPs != 65533 {
		t.Fatalf("ovn-default spec/status: %+v", def)
	}

	// Node port, annotations and route.
	var nodeIP string
	e.waitFor(30*time.Second, "node-a annotated with its join port", func() (bool, string) {
		o, ok, _ := e.nodes.GetStore().GetByKey("node-a")
		if !ok {
			return false, "no node"
		}
		a := o.(*corev1.Node).Annotations
		nodeIP = a[annotations.IPAddress]
		ok = inCIDR(nodeIP, "100.64.0.0/16") && a[annotations.CIDR] == "100.64.0.0/16" && a[annotations.Gateway] == "100.64.0.1" &&
			a[annotations.PortName] == "node-node-a" && a[annotations.MACAddress] != ""
		if ok {
			l, found := e.lsp("node-node-a")
			ok = found && len(l.Addresses) == 1 && l.Addresses[0] == a[annotations.MACAddress]+" "+nodeIP
		}
		return ok, fmt.Sprint(a)
	})
	routes := func() (bool, string) {
		var rs []nbdb.LogicalRouterStaticRoute
		_ = e.nb.Raw().List(context.Background(), &rs)
		var got []string
		for _, r := range rs {
			got = append(got, r.IPPrefix+" via "+r.Nexthop+" node="+r.ExternalIDs["node"])
		}
		// The node's internal address, and the egress default route to the
		// join switch (the per-node policies reroute it to each node).
		slices.Sort(got)
		return slices.Equal(got, []string{"0.0.0.0/0 via 100.64.0.1 node=", "192.168.10.11 via " + nodeIP + " node=node-a"}), strings.Join(got, "; ")
	}
	e.waitFor(30*time.Second, "route to node-a's internal IP via its join address", routes)

	// Restart: same topology, same node address, nothing duplicated.
	stop()
	e.startController()
	e.waitFor(30*time.Second, "default topology unchanged after restart", topology)
	e.waitFor(30*time.Second, "node route unchanged after restart", routes)

	// Subnets that are accepted by admission but cannot be honoured.
	ctx := context.Background()
	for name, spec := range map[string]map[string]any{
		"unknown-field": {"cidrBlock": "10.30.0.0/24", "colour": "blue"},
		"vlan":          {"cidrBlock": "10.31.0.0/24", "vlan": "vlan10"},
		"mismatch":      {"cidrBlock": "10.32.0.0/24", "protocol": "IPv6"},
		"overlap":       {"cidrBlock": "10.16.5.0/24"},
	} {
		if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj(name, spec), metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", name, err)
		}
	}
	want := map[string]string{"unknown-field": "UnknownField:spec.colour", "vlan": "VlanNotFound:the Vlan and ProviderNetwork CRDs are not installed; apply packaging/kubernetes/base/crd-vlans.yaml",
		"mismatch": "ProtocolMismatch:protocol IPv6", "overlap": "InvalidField:overlaps 10.16.0.0/16"}
	for name, w := range want {
		reason, text, _ := strings.Cut(w, ":")
		e.waitFor(30*time.Second, "Subnet "+name+" Validated=False "+w, func() (bool, string) {
			c := cond(e.subnet(name), "Validated")
			if c == nil {
				return false, "no Validated condition"
			}
			r := cond(e.subnet(name), "Ready")
			return c.Status == "False" && c.Reason == reason && strings.Contains(c.Message, text) && r != nil && r.Status == "False", fmt.Sprintf("%+v", *c)
		})
	}
	// A pod asking for an invalid subnet is told why.
	e.createPod("default", "on-vlan", "node-a", map[string]string{annotations.LogicalSwitch: "vlan"})
	e.waitFor(30*time.Second, "SubnetNotValid event on on-vlan", func() (bool, string) {
		ev := strings.Join(e.events("default", "on-vlan"), "|")
		return strings.Contains(ev, `SubnetNotValid: subnet "vlan" is not valid (VlanNotFound`), ev
	})
	// A good extra subnet gets its switch and router port.
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("extra", map[string]any{"cidrBlock": "10.40.0.0/24", "gateway": "10.40.0.254", "excludeIps": []any{"10.40.0.1..10.40.0.9"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSubnetReady("extra")
	e.waitFor(30*time.Second, "router port ovn-cluster-extra 10.40.0.254/24", func() (bool, string) {
		p := &nbdb.LogicalRouterPort{Name: "ovn-cluster-extra"}
		if err := e.nb.Raw().Get(ctx, p); err != nil {
			return false, err.Error()
		}
		return slices.Equal(p.Networks, []string{"10.40.0.254/24"}), fmt.Sprint(p.Networks)
	})
	s := e.subnet("extra")
	if s.Status.V4AvailableIPs != 244 || s.Status.V4AvailableIPRange != "10.40.0.10-10.40.0.253" {
		t.Fatalf("extra status: %+v", s.Status)
	}
	// Editing a Subnet (excludeIps) is applied and reflected in its status.
	u, err := e.dc.Resource(kubeovnv1.SubnetGVR).Get(ctx, "extra", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedStringSlice(u.Object, []string{"10.40.0.1..10.40.0.99"}, "spec", "excludeIps")
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "extra status after excludeIps edit", func() (bool, string) {
		s := e.subnet("extra")
		return s.Status.V4AvailableIPs == 154 && s.Status.V4AvailableIPRange == "10.40.0.100-10.40.0.253", fmt.Sprintf("%+v", s.Status)
	})

	// Deleting a Subnet removes its switch and router port pair.
	if err := e.dc.Resource(kubeovnv1.SubnetGVR).Delete(ctx, "extra", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitFor(30*time.Second, "switch extra and router port ovn-cluster-extra gone", func() (bool, string) {
		var ls []nbdb.LogicalSwitch
		_ = e.nb.Raw().WhereCache(func(s *nbdb.LogicalSwitch) bool { return s.Name == "extra" }).List(ctx, &ls)
		err := e.nb.Raw().Get(ctx, &nbdb.LogicalRouterPort{Name: "ovn-cluster-extra"})
		_, lsp := e.lsp("extra-ovn-cluster")
		return len(ls) == 0 && err != nil && !lsp, fmt.Sprintf("switches %d, lrp err %v, lsp %v", len(ls), err, lsp)
	})

	// Dual stack: one address per family, both on the port and the router port.
	if _, err := e.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("dual", map[string]any{"cidrBlock": "10.70.0.0/24,fd00:10:70::/120", "protocol": "Dual", "namespaces": []any{"v6ns"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.createNamespace("v6ns", nil)
	e.waitSubnetReady("dual")
	e.createPod("v6ns", "pod6", "node-a", nil)
	e.waitFor(30*time.Second, "dual-stack pod annotated with both families", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("v6ns/pod6")
		if !ok {
			return false, "no pod"
		}
		p := o.(*corev1.Pod)
		good, why := e.podPortMatches(p)
		a := p.Annotations
		return good && a[annotations.IPAddress] == "10.70.0.2,fd00:10:70::2" && a[annotations.Gateway] == "10.70.0.1,fd00:10:70::1" &&
			a[annotations.CIDR] == "10.70.0.0/24,fd00:10:70::/120", why + fmt.Sprint(a)
	})
	lrp := &nbdb.LogicalRouterPort{Name: "ovn-cluster-dual"}
	if err := e.nb.Raw().Get(ctx, lrp); err != nil || !slices.Equal(lrp.Networks, []string{"10.70.0.1/24", "fd00:10:70::1/120"}) {
		t.Fatalf("dual router port: %+v %v", lrp, err)
	}

	// ovn-northd accepted all of it: every port is bound in the southbound.
	if err := e.central.WaitNorthd(ctx); err != nil {
		t.Fatal(err)
	}
	bound := e.sbPortBindings(t)
	for _, want := range []string{"pod6.v6ns", "node-node-a", "ovn-cluster-dual", "ovn-cluster-ovn-default", "join-ovn-cluster"} {
		if !bound[want] {
			t.Fatalf("no southbound Port_Binding for %s (have %d bindings)", want, len(bound))
		}
	}
}

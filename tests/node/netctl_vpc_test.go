package node_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// TestNetctlCustomVPCAndAttachment drives netctl against two real node
// daemons, the controller and the API server, for a pod of a custom VPC
// and a pod with an attachment network (issues 26 and 27):
//
//   - vpc show names the VPC's router, its Subnets' router ports and the
//     spec's static route on it (exit 0); with the route removed from the
//     router behind the controller's back, it names the missing route
//     (exit 2);
//   - diagnose pod of the VPC's pod: its switch attached to the VPC's
//     router, not ovn-cluster;
//   - trace between the VPC's two Subnets passes the VPC's router;
//   - diagnose pod of the attachment pod: net1's address, OVS port and
//     binding; trace --interface net1 leaves from net1's port and reaches
//     the peer's net1.
func TestNetctlCustomVPCAndAttachment(t *testing.T) {
	c := startClusterWith(t, clusterSpec{nodes: 2, nodeNB: true, crds: []string{"tests/runtime/testdata/crd-network-attachment-definitions.yaml"}})
	nb := dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	sc := &svcCluster{cluster: c, nb: nb}
	c.waitNodeAPI(t)
	a := c.nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	create := func(gvrName string, u *unstructured.Unstructured) {
		t.Helper()
		var err error
		switch gvrName {
		case "vpc":
			_, err = c.cp.dc.Resource(kubeovnv1.VpcGVR).Create(ctx, u, metav1.CreateOptions{})
		case "subnet":
			_, err = c.cp.dc.Resource(subnetsGVR).Create(ctx, u, metav1.CreateOptions{})
		case "nad":
			_, err = c.cp.dc.Resource(nadGVR).Namespace("default").Create(ctx, u, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	object := func(apiVersion, kind, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
	}
	// vpc-n: Subnets sn and sn2, a static route with its next hop in sn.
	create("vpc", object("kubeovn.io/v1", "Vpc", "vpc-n", map[string]any{
		"staticRoutes": []any{map[string]any{"cidr": "10.99.0.0/24", "nextHopIP": "10.210.0.254", "policy": "policyDst"}}}))
	create("subnet", object("kubeovn.io/v1", "Subnet", "sn", map[string]any{"cidrBlock": "10.210.0.0/24", "vpc": "vpc-n", "protocol": "IPv4"}))
	create("subnet", object("kubeovn.io/v1", "Subnet", "sn2", map[string]any{"cidrBlock": "10.211.0.0/24", "vpc": "vpc-n", "protocol": "IPv4"}))
	// The attachment network attnet behind the NAD default/attnet.
	// Not private: ovn-trace reports a private Subnet's traffic dropped at
	// ls_out_acl while pings pass (attach_test's attnet is private).
	create("subnet", object("kubeovn.io/v1", "Subnet", "attnet", map[string]any{"cidrBlock": attCIDR, "provider": attProvider}))
	create("nad", object("k8s.cni.cncf.io/v1", "NetworkAttachmentDefinition", "attnet", map[string]any{
		"config": fmt.Sprintf(`{"cniVersion":"0.3.1","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":%q}`, attProvider)}))
	for _, s := range []string{"sn", "sn2", "attnet"} {
		waitSubnetCondition(t, sc, s, "True", "")
	}
	v0 := c.addPod(t, 0, "default", "v0", nil, map[string]string{"ovn.kubernetes.io/logical_switch": "sn"})
	v1 := c.addPod(t, 1, "default", "v1", nil, map[string]string{"ovn.kubernetes.io/logical_switch": "sn2"})
	var net1 []string
	for i, name := range []string{"att-a", "att-b"} {
		p := c.addPod(t, i, "default", name, nil, map[string]string{"k8s.v1.cni.cncf.io/networks": "attnet"})
		out, err := cniAttach(p.node, "ADD", p.netns, "default", name, "net1", attProvider)
		if err != nil {
			t.Fatalf("CNI ADD net1 of %s: %v\n%s", name, err, out)
		}
		t.Cleanup(func() { _, _ = cniAttach(p.node, "DEL", p.netns, "default", name, "net1", attProvider) })
		pod, err := c.cp.kc.CoreV1().Pods("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		net1 = append(net1, pod.Annotations[attProvider+".kubernetes.io/ip_address"])
	}
	waitPing(t, v0.netns, v1.ip, "vpc-n pod v0 (sn, node-a) to v1 (sn2, node-b)")

	t.Run("vpc-show", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "vpc", "show", "vpc-n")
		for _, want := range []string{"Router:          vpc-n", "Subnets:         sn, sn2", "port    vpc-n-sn 10.210.0.1/24 switch sn",
			"route   10.99.0.0/24 via 10.210.0.254 [vpc=vpc-n]", "PASS: 0 failed, 0 warnings"} {
			if !strings.Contains(out, want) {
				t.Errorf("vpc show vpc-n lacks %q:\n%s%s", want, out, errb)
			}
		}
		if code != 0 {
			t.Errorf("vpc show vpc-n: exit %d, want 0\n%s%s", code, out, errb)
		}
		out, _, code = c.netctlIn(t, a, "vpc", "list")
		if code != 0 || !strings.Contains(out, "vpc-n") || !strings.Contains(out, "sn,sn2") {
			t.Errorf("vpc list: exit %d\n%s", code, out)
		}
	})
	t.Run("diagnose-vpc-pod", func(t *testing.T) {
		fs, code, out := c.diagnose(t, a, "pod", "default/v0")
		if !has(fs, "pass", "subnet/sn", "vpc-attachment", "switch sn is attached to router vpc-n (VPC vpc-n)") ||
			!has(fs, "pass", "pod/default/v0", "pod-vpc", "VPC vpc-n") ||
			!has(fs, "pass", "vpc/vpc-n", "vpc-static-route", "10.99.0.0/24 via 10.210.0.254 on router vpc-n") {
			t.Errorf("diagnose pod default/v0 (exit %d) does not name vpc-n's router:\n%s", code, out)
		}
	})
	t.Run("trace-vpc", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "trace", "default/v0", "default/v1")
		if code != 0 || !strings.Contains(out, "PATH:     sn -> router vpc-n -> sn2") || !strings.Contains(out, "vpc: vpc-n") ||
			!strings.Contains(out, "delivered to v1.default") {
			t.Errorf("trace default/v0 default/v1: exit %d\n%s%s", code, out, errb)
		}
	})
	t.Run("diagnose-attachment", func(t *testing.T) {
		fs, code, out := c.diagnose(t, a, "pod", "default/att-a")
		lsp := "att-a.default." + attProvider
		if !has(fs, "pass", "pod/default/att-a", "attachment-address/net1", net1[0]+" ") ||
			!has(fs, "pass", "pod/default/att-a", "attachment-ovs-port/net1", "ovn-installed, bound to "+lsp) ||
			!has(fs, "pass", "pod/default/att-a", "attachment-binding/net1", "bound to chassis") ||
			!has(fs, "pass", "subnet/attnet", "vpc-attachment", "attached to router ovn-cluster") {
			t.Errorf("diagnose pod default/att-a (exit %d) does not check net1:\n%s", code, out)
		}
	})
	t.Run("trace-attachment", func(t *testing.T) {
		out, errb, code := c.netctlIn(t, a, "trace", "default/att-a", "default/att-b", "--interface", "net1")
		if code != 0 || !strings.Contains(out, "default/att-a net1 (node node-a, port att-a.default."+attProvider+")") ||
			!strings.Contains(out, "-> default/att-b") || !strings.Contains(out, "delivered to att-b.default."+attProvider) {
			t.Errorf("trace --interface net1: exit %d\n%s%s", code, out, errb)
		}
		out, errb, code = c.netctlIn(t, a, "trace", "default/att-a", net1[1], "--interface", "net9")
		if code != 2 || !strings.Contains(errb, `interface "net9": the pod's OVN attachment networks are net1 (`+attProvider+")") {
			t.Errorf("trace --interface net9: exit %d\n%s%s", code, out, errb)
		}
	})
	// Last, as it breaks vpc-n: its static route removed from the router
	// behind the controller's back (no event wakes the controller).
	t.Run("vpc-show-missing-route", func(t *testing.T) {
		var routes []nbdb.LogicalRouterStaticRoute
		if err := nb.WhereCache(func(r *nbdb.LogicalRouterStaticRoute) bool {
			return r.IPPrefix == "10.99.0.0/24" && r.ExternalIDs["vpc"] == "vpc-n"
		}).List(ctx, &routes); err != nil || len(routes) != 1 {
			t.Fatalf("vpc-n's route 10.99.0.0/24 in the NB: %v (%d rows)", err, len(routes))
		}
		var lrs []nbdb.LogicalRouter
		if err := nb.WhereCache(func(r *nbdb.LogicalRouter) bool { return r.Name == "vpc-n" }).List(ctx, &lrs); err != nil || len(lrs) != 1 {
			t.Fatalf("router vpc-n in the NB: %v (%d rows)", err, len(lrs))
		}
		lr := &lrs[0]
		ops, err := nb.Where(lr).Mutate(lr, model.Mutation{Field: &lr.StaticRoutes, Mutator: ovsdb.MutateOperationDelete, Value: []string{routes[0].UUID}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ovsdbconn.Transact(ctx, nb, "remove vpc-n's static route", ops...); err != nil {
			t.Fatal(err)
		}
		out, errb, code := c.netctlIn(t, a, "vpc", "show", "vpc-n")
		if code != 2 || !strings.Contains(out, "spec.staticRoutes[0] 10.99.0.0/24 via 10.210.0.254 is not on router vpc-n") {
			t.Errorf("vpc show vpc-n without its route: exit %d, want 2 naming the missing route\n%s%s", code, out, errb)
		}
	})
}

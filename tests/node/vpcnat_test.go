package node_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// TestVPCNATFipAndSnat: OVN-native NAT of a custom VPC (issue 26) with
// the real daemons and apiserver, checked by packets on the external
// network of addExternalNetwork (node-b its gateway node).
//
//   - Vpc vpc-n with enableExternal: its gateway address (an lrp OvnEip)
//     is created and its router gets a port on ovn-external;
//   - an OvnFip makes pod fip-pod reachable from the outside at its EIP,
//     and its own connections arrive from the EIP;
//   - an OvnSnatRule makes snat-pod's connections arrive from its EIP;
//   - an OvnDnatRule on the SNAT's EIP (by the pod's IP object) forwards
//     one port of it to a port of snat-pod, and only that port; a second
//     rule on the same port is refused alone; deleting the rule closes it;
//   - an OvnFip naming an address in no Subnet of the VPC is refused
//     alone (status and event naming the fix);
//   - the VPC's router (ports, routes, NAT rows) is the same rows after
//     a controller restart, and the paths work;
//   - deleting the FIP stops the outside reaching the pod.
func TestVPCNATFipAndSnat(t *testing.T) {
	// With the IP objects' CRD, as deployed: dnat-1 names its pod by IP object.
	c := &svcCluster{cluster: startClusterWith(t, clusterSpec{nodes: 2, crds: []string{"packaging/kubernetes/base/crd-ips.yaml"}})}
	c.nb = dial(t, nbdb.FullDatabaseModel, c.cp.central.NB())
	t.Cleanup(c.nb.Close)
	c.addExternalNetwork(t, "ext0", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	c.setExternalConfig(t, extConfig("node-b"))
	c.waitEvent(t, extNS, "ConfigMap", extCM, "ExternalGatewayProgrammed", 60*time.Second, "node-b")
	c.waitBridge(t, 1, []string{"br-external", "ext0"}, 10*time.Second)

	create := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := c.cp.dc.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	status := func(gvr schema.GroupVersionResource, name string) map[string]any {
		u, err := c.cp.dc.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil
		}
		st, _ := u.Object["status"].(map[string]any)
		return st
	}
	waitReady := func(gvr schema.GroupVersionResource, name string) map[string]any {
		t.Helper()
		var st map[string]any
		waitFor(t, gvr.Resource+" "+name+" ready", func() bool {
			st = status(gvr, name)
			return st != nil && st["ready"] == true
		}, func() string { b, _ := json.Marshal(st); return string(b) })
		return st
	}

	const ns = "vpcnat"
	c.ensureNamespace(t, ns, nil)
	create(kubeovnv1.VpcGVR, "Vpc", "vpc-n", map[string]any{"namespaces": []any{ns}, "enableExternal": true})
	create(subnetsGVR, "Subnet", "sn", map[string]any{"cidrBlock": "10.220.0.0/24", "vpc": "vpc-n", "protocol": "IPv4", "namespaces": []any{ns}})
	waitSubnetCondition(t, c, "sn", "True", "")
	gw := waitReady(kubeovnv1.OvnEipGVR, "vpc-n-ovn-external")
	t.Logf("vpc-n's gateway address: %v (%v)", gw["v4Ip"], gw["macAddress"])

	pod := func(node int, name, ip string) *clusterPod {
		t.Helper()
		p := c.addPod(t, node, ns, name, nil, map[string]string{"ovn.kubernetes.io/logical_switch": "sn", "ovn.kubernetes.io/ip_address": ip})
		servePodName(t, p)
		return p
	}
	fipPod := pod(0, "fip-pod", "10.220.0.10")
	snatPod := pod(0, "snat-pod", "10.220.0.11")

	create(kubeovnv1.OvnEipGVR, "OvnEip", "eip-fip", map[string]any{"externalSubnet": "ovn-external", "v4Ip": "172.56.0.30", "type": "nat"})
	create(kubeovnv1.OvnEipGVR, "OvnEip", "eip-snat", map[string]any{"externalSubnet": "ovn-external", "v4Ip": "172.56.0.31", "type": "nat"})
	create(kubeovnv1.OvnEipGVR, "OvnEip", "eip-bad", map[string]any{"externalSubnet": "ovn-external", "v4Ip": "172.56.0.32", "type": "nat"})
	create(kubeovnv1.OvnFipGVR, "OvnFip", "fip-1", map[string]any{"ovnEip": "eip-fip", "vpc": "vpc-n", "v4Ip": "10.220.0.10"})
	create(kubeovnv1.OvnSnatRuleGVR, "OvnSnatRule", "snat-1", map[string]any{"ovnEip": "eip-snat", "vpc": "vpc-n", "v4IpCidr": "10.220.0.11"})
	create(kubeovnv1.OvnFipGVR, "OvnFip", "fip-bad", map[string]any{"ovnEip": "eip-bad", "vpc": "vpc-n", "v4Ip": "10.99.0.10"})
	if st := waitReady(kubeovnv1.OvnFipGVR, "fip-1"); st["v4Eip"] != "172.56.0.30" || st["v4Ip"] != "10.220.0.10" || st["vpc"] != "vpc-n" {
		t.Fatalf("fip-1's status %v", st)
	}
	waitReady(kubeovnv1.OvnSnatRuleGVR, "snat-1")

	// The outside reaches the pod at its FIP (the pod sees the outside's address)...
	t0 := time.Now()
	if got, err := askUntil(c.world.ns, "172.56.0.30:8000", "fip-pod "+worldExt, 30*time.Second); err != nil {
		t.Fatalf("outside -> FIP 172.56.0.30: %q (%v), want fip-pod answering %s\n%s", got, err, worldExt, c.diag())
	}
	t.Logf("outside reached the FIP %s after its status was ready", time.Since(t0).Round(time.Millisecond))
	// ...its connections leave from the FIP, the SNAT pod's from its EIP.
	if got, err := askUntil(fipPod.netns, worldEcho, "172.56.0.30", 10*time.Second); err != nil {
		t.Fatalf("FIP pod -> outside: the outside saw %q (%v), want 172.56.0.30\n%s", got, err, c.diag())
	}
	if got, err := askUntil(snatPod.netns, worldEcho, "172.56.0.31", 10*time.Second); err != nil {
		t.Fatalf("SNAT pod -> outside: the outside saw %q (%v), want 172.56.0.31\n%s", got, err, c.diag())
	}
	if got, err := askFrom(c.world.ns, "172.56.0.31:8000", time.Second); err == nil {
		t.Fatalf("outside -> SNAT address 172.56.0.31 answered %q; snat must not accept connections", got)
	}

	// A port forward on the SNAT's EIP to snat-pod (named by its IP
	// object): the outside reaches snat-pod at 172.56.0.31:8022 and sees
	// its own address; other ports of the EIP stay closed.
	create(kubeovnv1.OvnDnatRuleGVR, "OvnDnatRule", "dnat-1", map[string]any{"ovnEip": "eip-snat", "ipName": "snat-pod." + ns,
		"externalPort": "8022", "internalPort": "8000", "protocol": "tcp"})
	create(kubeovnv1.OvnDnatRuleGVR, "OvnDnatRule", "dnat-dup", map[string]any{"ovnEip": "eip-snat", "vpc": "vpc-n", "v4Ip": "10.220.0.10",
		"externalPort": "8022", "internalPort": "8000"})
	if st := waitReady(kubeovnv1.OvnDnatRuleGVR, "dnat-1"); st["v4Eip"] != "172.56.0.31" || st["v4Ip"] != "10.220.0.11" || st["vpc"] != "vpc-n" {
		t.Fatalf("dnat-1's status %v", st)
	}
	t0 = time.Now()
	if got, err := askUntil(c.world.ns, "172.56.0.31:8022", "snat-pod "+worldExt, 30*time.Second); err != nil {
		t.Fatalf("outside -> 172.56.0.31:8022 (dnat-1): %q (%v), want snat-pod answering %s\n%s", got, err, worldExt, c.diag())
	}
	t.Logf("outside reached the port forward %s after its status was ready", time.Since(t0).Round(time.Millisecond))
	if got, err := askFrom(c.world.ns, "172.56.0.31:8000", time.Second); err == nil {
		t.Fatalf("outside -> 172.56.0.31:8000 answered %q; only the forwarded port 8022 may", got)
	}
	if got, err := askUntil(snatPod.netns, worldEcho, "172.56.0.31", 10*time.Second); err != nil {
		t.Fatalf("SNAT pod -> outside with a port forward beside the SNAT: the outside saw %q (%v), want 172.56.0.31", got, err)
	}
	c.waitEvent(t, "default", "OvnDnatRule", "dnat-dup", "InvalidOvnDnatRule", 30*time.Second, `forwarded by OvnDnatRule "dnat-1" already`)

	// The bad FIP fails alone, naming the fix.
	c.waitEvent(t, "default", "OvnFip", "fip-bad", "InvalidOvnFip", 30*time.Second, "10.99.0.10 is in no Subnet of Vpc \"vpc-n\"")
	if st := status(kubeovnv1.OvnFipGVR, "fip-bad"); st == nil || st["ready"] != false {
		t.Fatalf("fip-bad's status %v, want ready false", st)
	}

	// A controller restart leaves vpc-n's router as it is.
	before := vpcRouterRows(t, c, []string{"vpc-n"})
	if !strings.Contains(before, "vpc-n-ovn-external") || !strings.Contains(before, "0.0.0.0/0 via 172.56.0.1") {
		t.Fatalf("vpc-n's router lacks its gateway port or default route:\n%s", before)
	}
	c.cp.stopController()
	c.cp.startController(t)
	// The NAT worker syncs everything at once: a new FIP's row means the
	// start-up sync is done.
	create(kubeovnv1.OvnEipGVR, "OvnEip", "eip-probe", map[string]any{"v4Ip": "172.56.0.33"})
	create(kubeovnv1.OvnFipGVR, "OvnFip", "fip-probe", map[string]any{"ovnEip": "eip-probe", "vpc": "vpc-n", "v4Ip": "10.220.0.12"})
	waitReady(kubeovnv1.OvnFipGVR, "fip-probe")
	if err := c.cp.dc.Resource(kubeovnv1.OvnFipGVR).Delete(ctx, "fip-probe", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fip-probe's NAT row removed", func() bool { return !strings.Contains(vpcNATRows(t, c), "172.56.0.33") })
	if after := vpcRouterRows(t, c, []string{"vpc-n"}); after != before {
		t.Fatalf("vpc-n's router changed across a controller restart:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if got, err := askUntil(c.world.ns, "172.56.0.30:8000", "fip-pod "+worldExt, 10*time.Second); err != nil {
		t.Fatalf("after the restart: outside -> FIP 172.56.0.30: %q (%v)", got, err)
	}
	if got, err := askUntil(c.world.ns, "172.56.0.31:8022", "snat-pod "+worldExt, 10*time.Second); err != nil {
		t.Fatalf("after the restart: outside -> 172.56.0.31:8022 (dnat-1): %q (%v)", got, err)
	}

	// Deleting the port forward closes the port; the duplicate, now alone
	// on it, takes it (to fip-pod).
	if err := c.cp.dc.Resource(kubeovnv1.OvnDnatRuleGVR).Delete(ctx, "dnat-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitReady(kubeovnv1.OvnDnatRuleGVR, "dnat-dup")
	if got, err := askUntil(c.world.ns, "172.56.0.31:8022", "fip-pod "+worldExt, 30*time.Second); err != nil {
		t.Fatalf("outside -> 172.56.0.31:8022 after dnat-1 was deleted: %q (%v), want fip-pod through dnat-dup", got, err)
	}
	if err := c.cp.dc.Resource(kubeovnv1.OvnDnatRuleGVR).Delete(ctx, "dnat-dup", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the outside no longer reaching 172.56.0.31:8022", func() bool {
		_, err := askFrom(c.world.ns, "172.56.0.31:8022", 500*time.Millisecond)
		return err != nil
	})
	var lbs []nbdb.LoadBalancer
	if err := c.nb.List(ctx, &lbs); err != nil {
		t.Fatal(err)
	}
	for _, lb := range lbs {
		if strings.HasPrefix(lb.Name, "vpc-dnat-vpc-n") {
			t.Errorf("load balancer %s %v left after vpc-n's last port forward was deleted", lb.Name, lb.Vips)
		}
	}

	// Deleting the FIP: the outside no longer reaches the pod.
	if err := c.cp.dc.Resource(kubeovnv1.OvnFipGVR).Delete(ctx, "fip-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fip-1's NAT row removed", func() bool { return !strings.Contains(vpcNATRows(t, c), "172.56.0.30") })
	waitFor(t, "the outside no longer reaching 172.56.0.30", func() bool {
		_, err := askFrom(c.world.ns, "172.56.0.30:8000", 500*time.Millisecond)
		return err != nil
	})
	if got, err := askFrom(c.world.ns, "172.56.0.30:8000", 2*time.Second); err == nil {
		t.Fatalf("outside -> 172.56.0.30 answered %q after the FIP was deleted", got)
	}

	// enableExternal dropped: the gateway port, route and rows go.
	b, _ := json.Marshal(map[string]any{"spec": map[string]any{"enableExternal": false}})
	if _, err := c.cp.dc.Resource(kubeovnv1.VpcGVR).Patch(ctx, "vpc-n", types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "vpc-n's gateway port and NAT rows removed", func() bool {
		rows := vpcRouterRows(t, c, []string{"vpc-n"})
		return !strings.Contains(rows, "vpc-n-ovn-external") && !strings.Contains(rows, "0.0.0.0/0") && vpcNATRows(t, c) == ""
	})
	if got, err := askFrom(snatPod.netns, worldEcho, time.Second); err == nil {
		t.Fatalf("SNAT pod -> outside answered %q after enableExternal was dropped", got)
	}
}

// vpcNATRows lists vpc-n's NAT rows ("type external logical", one a line).
func vpcNATRows(t *testing.T, c *svcCluster) string {
	t.Helper()
	var rs []nbdb.LogicalRouter
	var nats []nbdb.NAT
	ctx := context.Background()
	if err := c.nb.List(ctx, &rs); err != nil {
		t.Fatal(err)
	}
	if err := c.nb.List(ctx, &nats); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Name != "vpc-n" {
			continue
		}
		for _, n := range nats {
			for _, u := range r.Nat {
				if u == n.UUID {
					out = append(out, n.Type+" "+n.ExternalIP+" "+n.LogicalIP)
				}
			}
		}
	}
	return strings.Join(out, "\n")
}

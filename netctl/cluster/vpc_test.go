package cluster

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestOVSDBTextValues(t *testing.T) {
	if got := Set(`["a b", c, "x, y"]`); !reflect.DeepEqual(got, []string{"a b", "c", "x, y"}) {
		t.Errorf("Set = %q", got)
	}
	if got := Set("[]"); got != nil {
		t.Errorf("Set([]) = %q", got)
	}
	if got := Map(`{router-port=vpc-a-sa, "k=1"="v, w"}`); got["router-port"] != "vpc-a-sa" || got["k=1"] != "v, w" {
		t.Errorf("Map = %q", got)
	}
	if Text(`"ip4.dst == 10.0.0.5"`) != "ip4.dst == 10.0.0.5" || Text("[]") != "" || Text("src-ip") != "src-ip" {
		t.Error("Text")
	}
}

// nbRows is the NB of two VPCs as the node API lists it: vpc-a with
// Subnet sa, a static route, a policy and a peering to vpc-b (whose
// router lacks the peer port); sb's switch attached to ovn-cluster.
func nbRows() NBRows {
	return NBRows{
		Routers: []map[string]string{
			{"_uuid": "r1", "name": "vpc-a", "ports": "[p1, p2]", "static_routes": "[s1, s2]", "policies": "[y1]", "nat": "[]", "external_ids": "{vendor=ovnhost, vpc=vpc-a}"},
			{"_uuid": "r2", "name": "vpc-b", "ports": "[]", "static_routes": "[]", "policies": "[]", "nat": "[]"},
			{"_uuid": "r3", "name": "ovn-cluster", "ports": "[p3]", "static_routes": "[]", "policies": "[]", "nat": "[]"},
		},
		RouterPorts: []map[string]string{
			{"_uuid": "p1", "name": "vpc-a-sa", "networks": `["10.200.0.1/24"]`, "peer": "[]"},
			{"_uuid": "p2", "name": "vpc-a-vpc-b", "networks": `["169.254.10.1/30"]`, "peer": "[vpc-b-vpc-a]"},
			{"_uuid": "p3", "name": "ovn-cluster-sb", "networks": `["10.210.0.1/24"]`, "peer": "[]"},
		},
		Routes: []map[string]string{
			{"_uuid": "s1", "ip_prefix": "10.240.0.0/24", "nexthop": "169.254.10.2", "policy": "dst-ip", "external_ids": "{vendor=ovnhost, vpc=vpc-a}"},
			{"_uuid": "s2", "ip_prefix": "10.9.0.0/16", "nexthop": "10.200.0.254", "policy": "dst-ip", "external_ids": "{vendor=ovnhost, vpc=vpc-a}"},
		},
		Policies: []map[string]string{
			{"_uuid": "y1", "priority": "31000", "match": `"ip4.dst == 10.200.0.12"`, "action": "drop", "nexthops": "[]"},
		},
		Switches: []map[string]string{
			{"_uuid": "w1", "name": "sa", "ports": "[l1, l9]"},
			{"_uuid": "w2", "name": "sb", "ports": "[l2]"},
		},
		SwitchPorts: []map[string]string{
			{"_uuid": "l1", "name": "sa-vpc-a", "type": "router", "options": "{router-port=vpc-a-sa}"},
			{"_uuid": "l2", "name": "sb-ovn-cluster", "type": "router", "options": "{router-port=ovn-cluster-sb}"},
		},
	}
}

func obj(kind, name string, spec map[string]any) unstructured.Unstructured {
	return unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
}

func TestVpcChecksCompareSpecWithTheRouter(t *testing.T) {
	topo := ParseTopology(nbRows())
	if got := topo.SwitchRouters["sa"]; !reflect.DeepEqual(got, []string{"vpc-a"}) {
		t.Fatalf("sa's routers: %v", got)
	}
	vpcs := []unstructured.Unstructured{
		obj("Vpc", "vpc-a", map[string]any{
			"staticRoutes": []any{
				map[string]any{"cidr": "10.240.0.0/24", "nextHopIP": "169.254.10.2"},
				map[string]any{"cidr": "10.250.0.0/24", "nextHopIP": "169.254.10.2", "policy": "policyDst"},
			},
			"policyRoutes": []any{map[string]any{"priority": int64(31000), "match": "ip4.dst == 10.200.0.12", "action": "drop"}},
			"vpcPeerings":  []any{map[string]any{"remoteVpc": "vpc-b", "localConnectIP": "169.254.10.1/30"}},
		}),
		obj("Vpc", "vpc-c", map[string]any{}),
	}
	subnets := []unstructured.Unstructured{
		obj("Subnet", "sa", map[string]any{"cidrBlock": "10.200.0.0/24", "vpc": "vpc-a"}),
		obj("Subnet", "sb", map[string]any{"cidrBlock": "10.210.0.0/24", "vpc": "vpc-a"}),
	}
	infos, probs := Vpcs(vpcs, subnets, topo)
	if len(probs) != 0 || len(infos) != 2 {
		t.Fatalf("Vpcs: %d infos, problems %v", len(infos), probs)
	}
	a := infos[0]
	for _, w := range []struct {
		sev        Severity
		check, sub string
	}{
		{Pass, "vpc-router", "router vpc-a in NB"},
		{Pass, "vpc-attachment", "switch sa is attached to router vpc-a"},
		{Fail, "vpc-attachment", "switch sb is attached to router(s) ovn-cluster, but Subnet sb is in VPC vpc-a"},
		{Pass, "vpc-static-route", "spec.staticRoutes[0] 10.240.0.0/24 via 169.254.10.2 on router vpc-a"},
		{Fail, "vpc-static-route", "spec.staticRoutes[1] 10.250.0.0/24 via 169.254.10.2 is not on router vpc-a"},
		{Warn, "vpc-static-route", "router vpc-a has static route 10.9.0.0/16 via 10.200.0.254 that the Vpc's spec does not list"},
		{Pass, "vpc-policy-route", `31000 "ip4.dst == 10.200.0.12" drop on router vpc-a`},
		{Warn, "vpc-peering", "names peer vpc-b-vpc-a, which router vpc-b lacks"},
	} {
		if !find(a.Findings, w.sev, w.check, w.sub) {
			t.Errorf("no %s %s %q in\n%+v", w.sev, w.check, w.sub, a.Findings)
		}
	}
	if c := infos[1]; !find(c.Findings, Fail, "vpc-router", "no logical router vpc-c") {
		t.Errorf("vpc-c without a router: %+v", c.Findings)
	}
	// Without the NB only the conditions are judged.
	infos, _ = Vpcs(vpcs, subnets, nil)
	if len(infos[0].Findings) != 0 {
		t.Errorf("findings without NB: %+v", infos[0].Findings)
	}
}

func TestAttachmentsFromAnnotations(t *testing.T) {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", Annotations: map[string]string{
		"k8s.v1.cni.cncf.io/networks":             "att, other/mv@eth9, ns/late",
		"att.ns.ovn.kubernetes.io/allocated":      "true",
		"att.ns.ovn.kubernetes.io/ip_address":     "10.80.0.2",
		"att.ns.ovn.kubernetes.io/mac_address":    "0a:00:00:00:00:02",
		"att.ns.ovn.kubernetes.io/logical_switch": "attnet",
		"gone.ns.ovn.kubernetes.io/allocated":     "true",
		"gone.ns.ovn.kubernetes.io/ip_address":    "10.81.0.2",
		"ovn.kubernetes.io/allocated":             "true",
	}}}
	// other/mv is a macvlan NAD (provider ""); late is not readable.
	atts, err := Attachments(p, map[string]string{"ns/att": "att.ns.ovn", "other/mv": ""})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, a := range atts {
		got = append(got, a.Interface+"|"+a.Provider+"|"+a.LSP+"|"+a.IP)
	}
	want := []string{"net1|att.ns.ovn|p.ns.att.ns.ovn|10.80.0.2", "net3|late.ns.ovn|p.ns.late.ns.ovn|", "|gone.ns.ovn|p.ns.gone.ns.ovn|10.81.0.2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("attachments\n got %q\nwant %q", got, want)
	}
	if a, err := FindAttachment(atts, "net1"); err != nil || a.Provider != "att.ns.ovn" {
		t.Errorf("FindAttachment net1: %v %v", a, err)
	}
	if a, err := FindAttachment(atts, "late"); err != nil || a.Interface != "net3" {
		t.Errorf("FindAttachment by NAD name: %v %v", a, err)
	}
	if _, err := FindAttachment(atts, "net7"); err == nil {
		t.Error("FindAttachment net7: no error")
	}
	atts[0].OVS = &OVSPort{Interface: "abc_h", OFPort: 5, OVNInstalled: true}
	atts[0].Bound = "ch-a"
	fs := AttachmentChecks("pod/ns/p", "node-a", "ch-a", atts, "")
	for _, w := range []struct {
		sev        Severity
		check, sub string
	}{
		{Pass, "attachment-address/net1", "net1 10.80.0.2 0a:00:00:00:00:02 in attnet"},
		{Pass, "attachment-ovs-port/net1", "abc_h ofport 5, ovn-installed, bound to p.ns.att.ns.ovn"},
		{Pass, "attachment-binding/net1", "bound to chassis ch-a"},
		{Fail, "attachment-address/net3", "net3 (NAD ns/late, provider late.ns.ovn) has no address"},
		{Fail, "attachment-ovs-port/gone.ns.ovn", "no OVS interface with external_ids:iface-id=p.ns.gone.ns.ovn on node node-a"},
	} {
		if !find(fs, w.sev, w.check, w.sub) {
			t.Errorf("no %s %s %q in\n%+v", w.sev, w.check, w.sub, fs)
		}
	}
}

func TestNADProvider(t *testing.T) {
	for cfg, want := range map[string]string{
		`{"type":"kube-ovn","provider":"a.b.ovn"}`:                  "a.b.ovn",
		`{"plugins":[{"type":"ovnhost-cni","provider":"x.y.ovn"}]}`: "x.y.ovn",
		`{"type":"macvlan","master":"eth0"}`:                        "",
		`not json`:                                                  "",
	} {
		if got := NADProvider(cfg); got != want {
			t.Errorf("NADProvider(%s) = %q, want %q", cfg, got, want)
		}
	}
}

func TestTracePathNamesTheVPCRouter(t *testing.T) {
	out := `ingress(dp="sa", inport="a0.ns-a")
 0. ls_in_check_port_sec (northd.c:1): 1, priority 50, uuid 1
egress(dp="sa", inport="a0.ns-a", outport="sa-vpc-a")
ingress(dp="vpc-a", inport="vpc-a-sa")
egress(dp="vpc-a", inport="vpc-a-sa", outport="vpc-a-sa2")
ingress(dp="sa2", inport="sa2-vpc-a")
egress(dp="sa2", inport="sa2-vpc-a", outport="a2.ns-a")`
	path := TracePath(out)
	if !reflect.DeepEqual(path, []string{"sa", "vpc-a", "sa2"}) {
		t.Fatalf("path %v", path)
	}
	routers := map[string]bool{"vpc-a": true, "ovn-cluster": true}
	if got := RoutersOn(path, routers); !reflect.DeepEqual(got, []string{"vpc-a"}) {
		t.Errorf("routers %v", got)
	}
	if got := PathString(path, routers); got != "sa -> router vpc-a -> sa2" {
		t.Errorf("PathString %q", got)
	}
}

func TestUnderlaySubnetWithThePhysicalGatewayNeedsNoRouter(t *testing.T) {
	topo := ParseTopology(nbRows())
	subnets := []unstructured.Unstructured{
		obj("Subnet", "ul", map[string]any{"cidrBlock": "172.17.0.0/24", "vlan": "v100"}),
		obj("Subnet", "ul-lgw", map[string]any{"cidrBlock": "172.18.0.0/24", "vlan": "v100", "logicalGateway": true}),
	}
	infos, _ := Vpcs([]unstructured.Unstructured{obj("Vpc", "ovn-cluster", map[string]any{})}, subnets, topo)
	fs := infos[0].Findings
	if find(fs, Fail, "vpc-attachment", "switch ul ") {
		t.Errorf("underlay Subnet with the physical gateway reported without a router: %+v", fs)
	}
	if !find(fs, Fail, "vpc-attachment", "switch ul-lgw is attached to no router") {
		t.Errorf("logicalGateway Subnet off the router not reported: %+v", fs)
	}
}

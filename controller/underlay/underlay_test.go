package underlay

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	fakediscovery "k8s.io/client-go/discovery/fake"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
)

func object(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func vlan(name string, id int64, provider string) *unstructured.Unstructured {
	return object("Vlan", name, map[string]any{"id": id, "provider": provider})
}

func pn(name, nic string) *unstructured.Unstructured {
	return object("ProviderNetwork", name, map[string]any{"defaultInterface": nic})
}

func ready(st kubeovnv1.VlanStatus) *kubeovnv1.Condition {
	for i := range st.Conditions {
		if st.Conditions[i].Type == kubeovnv1.Ready {
			return &st.Conditions[i]
		}
	}
	return nil
}

// VlanStatus for each way a Vlan can be wrong, and right.
func TestVlanStatus(t *testing.T) {
	net1 := pn("net1", "eth1")
	older := vlan("vlan10", 10, "net1")
	older.SetCreationTimestamp(metav1.NewTime(time.Unix(100, 0)))
	newer := vlan("vlan10b", 10, "net1")
	newer.SetCreationTimestamp(metav1.NewTime(time.Unix(200, 0)))
	all := []*unstructured.Unstructured{older, newer, vlan("other", 10, "net2"), vlan("untagged", 0, "net1"), vlan("untagged2", 0, "net1")}
	subnets := []*unstructured.Unstructured{
		ctltest.Subnet("b", map[string]any{"cidrBlock": "10.2.0.0/24", "vlan": "vlan10"}),
		ctltest.Subnet("a", map[string]any{"cidrBlock": "10.1.0.0/24", "vlan": "vlan10"}),
		ctltest.Subnet("overlay", map[string]any{"cidrBlock": "10.3.0.0/24"}),
	}
	cases := []struct {
		name     string
		v        *unstructured.Unstructured
		provider *unstructured.Unstructured
		reason   string
		text     string
		conflict bool
		subnets  string
	}{
		{"ready, with its subnets sorted", older, net1, "VlanReady", "", false, "a,b"},
		{"second with the tag", newer, net1, "VlanConflict", `Vlan "vlan10" already carries tag 10 on provider network "net1"`, true, ""},
		{"same tag, other provider", all[2], pn("net2", "eth2"), "VlanReady", "", false, ""},
		{"untagged twice is fine", all[4], net1, "VlanReady", "", false, ""},
		{"provider absent", vlan("v20", 20, "net9"), nil, "ProviderNetworkNotFound", `provider network "net9" does not exist`, false, ""},
		{"provider invalid", vlan("v21", 21, "net1"), pn("net1", "eth/1"), "ProviderNetworkInvalid", "spec.defaultInterface", false, ""},
		{"tag 4095", vlan("v4095", 4095, "net1"), net1, "InvalidField", "4095 is reserved", false, ""},
	}
	for _, c := range cases {
		st, problem := VlanStatus(c.v, subnets, c.provider, all)
		r := ready(st)
		if r == nil || r.Reason != c.reason || !strings.Contains(r.Message, c.text) || st.Conflict != c.conflict || strings.Join(st.Subnets, ",") != c.subnets {
			t.Errorf("%s: got %+v (problem %q), want Ready reason %s with %q, conflict %v, subnets %q", c.name, st, problem, c.reason, c.text, c.conflict, c.subnets)
		}
		if (c.reason == "VlanReady") != (problem == "") || (r != nil && (r.Status == "True") != (c.reason == "VlanReady")) {
			t.Errorf("%s: problem %q with Ready %+v", c.name, problem, r)
		}
	}
}

// The reconciler on a fake API: status written, kept in line when a
// Subnet moves to the VLAN, the conflict cleared when the first Vlan goes,
// the ProviderNetwork's vlans and Validated condition, the nodes'
// conditions from their labels (node-a ready, node-b not with its reason,
// node-c excluded, node-d has not reported) and ready once node-b and
// node-d are; an invalid ProviderNetwork gets an event.
func TestReconcilerKeepsStatus(t *testing.T) {
	nodeCond := map[string]any{"node": "node-a", "type": "Ready", "status": "True", "reason": "InitOVSBridgeSucceeded"}
	net1 := pn("net1", "eth1")
	net1.Object["status"] = map[string]any{"ready": true, "readyNodes": []any{"node-a"}, "conditions": []any{nodeCond}}
	first := vlan("vlan10", 10, "net1")
	first.SetCreationTimestamp(metav1.NewTime(time.Unix(100, 0)))
	second := vlan("vlan10b", 10, "net1")
	second.SetCreationTimestamp(metav1.NewTime(time.Unix(200, 0)))
	net1.Object["spec"].(map[string]any)["excludeNodes"] = []any{"node-c"}
	node := func(name string, labels, ann map[string]string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}}
	}
	e := ctltest.New(t, []runtime.Object{
		node("node-a", map[string]string{"net1.provider-network.kubernetes.io/ready": "true"}, nil),
		node("node-b", map[string]string{"net1.provider-network.kubernetes.io/ready": "false"}, map[string]string{"net1.provider-network.ovnhost.io/error": "eth1 not found; this host has eth0"}),
		node("node-c", nil, nil),
		node("node-d", nil, nil),
	}, first, second, ctltest.Subnet("s1", map[string]any{"cidrBlock": "10.1.0.0/24", "vlan": "vlan10"}))
	// The fake client would file a ProviderNetwork under the resource its
	// kind guesses (providernetworks): create them under theirs.
	for _, p := range []*unstructured.Unstructured{net1, pn("bad", "a/b")} {
		if _, err := e.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(e.Ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	e.Kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{
		{GroupVersion: kubeovnv1.GroupVersion.String(), APIResources: []metav1.APIResource{{Name: "subnets"}, {Name: "vlans"}, {Name: "provider-networks"}}}}
	r := New(Config{Log: e.Log, Recorder: e.Recorder, Discovery: e.Kube.Discovery(), Dynamic: e.Dynamic, DInformers: e.DInformers,
		Nodes: e.Informers.Core().V1().Nodes().Informer()})
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	vlanStatus := func(obj any) (kubeovnv1.VlanStatus, bool) {
		u, ok := obj.(*unstructured.Unstructured)
		var st kubeovnv1.VlanStatus
		if !ok {
			return st, false
		}
		raw, _ := u.Object["status"].(map[string]any)
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		return st, true
	}
	ctltest.Await(t, r.vlans, "vlan10", func(obj any) bool {
		st, ok := vlanStatus(obj)
		c := ready(st)
		return ok && c != nil && c.Status == "True" && strings.Join(st.Subnets, ",") == "s1"
	})
	ctltest.Await(t, r.vlans, "vlan10b", func(obj any) bool {
		st, ok := vlanStatus(obj)
		c := ready(st)
		return ok && st.Conflict && c != nil && c.Reason == "VlanConflict"
	})
	pnStatus := func(obj any) kubeovnv1.ProviderNetworkStatus {
		var st kubeovnv1.ProviderNetworkStatus
		if u, ok := obj.(*unstructured.Unstructured); ok {
			raw, _ := u.Object["status"].(map[string]any)
			_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st)
		}
		return st
	}
	conds := func(st kubeovnv1.ProviderNetworkStatus) string {
		var s []string
		for _, c := range st.Conditions {
			s = append(s, c.Node+":"+c.Type+"="+c.Status+"("+c.Reason+" "+c.Message+")")
		}
		return strings.Join(s, "; ")
	}
	ctltest.Await(t, r.pns, "net1", func(obj any) bool {
		st := pnStatus(obj)
		c := conds(st)
		return !st.Ready && strings.Join(st.Vlans, ",") == "vlan10,vlan10b" &&
			strings.Join(st.ReadyNodes, ",") == "node-a" && strings.Join(st.NotReadyNodes, ",") == "node-b,node-d" &&
			strings.HasPrefix(c, ":Validated=True(ValidationSucceeded ); node-a:Ready=True(InitOVSBridgeSucceeded ); node-b:Ready=False(InitOVSBridgeFailed eth1 not found; this host has eth0); node-d:Ready=False(InitOVSBridgeFailed the node has not reported this network") &&
			!strings.Contains(c, "node-c")
	})
	// A network asking for what the node does not do is valid, and says so.
	net2 := pn("net2", "eth2")
	net2.Object["spec"].(map[string]any)["exchangeLinkName"] = true
	if _, err := e.Dynamic.Resource(kubeovnv1.ProviderNetworkGVR).Create(e.Ctx, net2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, r.pns, "net2", func(obj any) bool {
		return strings.HasPrefix(conds(pnStatus(obj)), ":Validated=True(AcceptedNotApplied spec.exchangeLinkName: the bridge keeps the name br-<network>")
	})
	// node-b and node-d report ready: the network is.
	for _, n := range []string{"node-b", "node-d"} {
		if _, err := e.Kube.CoreV1().Nodes().Update(e.Ctx, node(n, map[string]string{"net1.provider-network.kubernetes.io/ready": "true"}, nil), metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctltest.Await(t, r.pns, "net1", func(obj any) bool {
		st := pnStatus(obj)
		return st.Ready && strings.Join(st.ReadyNodes, ",") == "node-a,node-b,node-d" && len(st.NotReadyNodes) == 0
	})

	// A second Subnet on the VLAN; then the first Vlan goes: the second is
	// no longer in conflict.
	if _, err := e.Dynamic.Resource(kubeovnv1.SubnetGVR).Create(e.Ctx, ctltest.Subnet("s2", map[string]any{"cidrBlock": "10.2.0.0/24", "vlan": "vlan10"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, r.vlans, "vlan10", func(obj any) bool {
		st, _ := vlanStatus(obj)
		return strings.Join(st.Subnets, ",") == "s1,s2"
	})
	if err := e.Dynamic.Resource(kubeovnv1.VlanGVR).Delete(e.Ctx, "vlan10", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ctltest.Await(t, r.vlans, "vlan10b", func(obj any) bool {
		st, ok := vlanStatus(obj)
		c := ready(st)
		return ok && !st.Conflict && c != nil && c.Status == "True"
	})
	ctltest.Await(t, r.pns, "bad", func(obj any) bool {
		u, _ := obj.(*unstructured.Unstructured)
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		return len(conds) == 1 && strings.Contains(conds[0].(map[string]any)["message"].(string), "spec.defaultInterface")
	})
	if ev := ctltest.Event(e.Events(), "Warning InvalidProviderNetwork"); !strings.Contains(ev, "spec.defaultInterface") {
		t.Errorf("no InvalidProviderNetwork event naming the field: %q", ev)
	}
}

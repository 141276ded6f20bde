package cluster

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

func node(name, chassis string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if chassis != "" {
		n.Annotations[annotations.Chassis] = chassis
	}
	return n
}

func find(fs []Finding, sev Severity, check, sub string) bool {
	for _, f := range fs {
		if f.Severity == sev && f.Check == check && strings.Contains(f.Found, sub) {
			return true
		}
	}
	return false
}

func TestChassisChecks(t *testing.T) {
	nodes := []corev1.Node{node("a", "c1"), node("b", "c1"), node("c", "c3"), node("d", "")}
	sb := []SBChassis{{Name: "c1", Hostname: "a", EncapIPs: []string{"10.0.0.1"}}, {Name: "c9", Hostname: "old", EncapIPs: []string{"10.0.0.1"}}}
	fs := ChassisChecks(nodes, sb, true)
	for _, want := range []struct {
		sev        Severity
		check, sub string
	}{
		{Fail, "duplicate-chassis", "nodes a, b share chassis c1"},
		{Fail, "chassis", "chassis c3 is not in the southbound database"},
		{Warn, "chassis", "announces no chassis"},
		{Warn, "stale-chassis", "SB chassis c9"},
		{Fail, "duplicate-encap-ip", "chassis c1, c9 share encap IP 10.0.0.1"},
		{Pass, "chassis", "chassis c1 in SB"},
	} {
		if !find(fs, want.sev, want.check, want.sub) {
			t.Errorf("no %s %s %q in %+v", want.sev, want.check, want.sub, fs)
		}
	}
	// Without SB only the annotations are compared.
	if fs := ChassisChecks(nodes[:1], nil, false); len(fs) != 0 {
		t.Errorf("%+v", fs)
	}
}

func TestSubnetChecks(t *testing.T) {
	fs := SubnetChecks([]*SubnetInfo{
		{Name: "full", CIDR: "10.1.0.0/30", Used: 1, Available: 0, Usage: 100},
		{Name: "busy", CIDR: "10.2.0.0/24", Used: 240, Available: 13, Usage: 94.9},
		{Name: "ok", CIDR: "10.3.0.0/16", Used: 3, Available: 65530, Usage: 0.01},
	})
	if !find(fs, Fail, "subnet-usage", "10.1.0.0/30 exhausted") || !find(fs, Warn, "subnet-usage", "95% used") || !find(fs, Pass, "subnet-usage", "10.3.0.0/16") {
		t.Fatalf("%+v", fs)
	}
	Sort(fs)
	if fs[0].Severity != Fail || fs[len(fs)-1].Severity != Pass || ExitCode(fs) != 2 {
		t.Fatalf("not worst first: %+v", fs)
	}
}

func TestUnaddressedPodsQuoteTheControllersReason(t *testing.T) {
	now := time.Now()
	old := metav1.NewTime(now.Add(-time.Minute))
	pods := []corev1.Pod{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "waits", CreationTimestamp: old}, Spec: corev1.PodSpec{NodeName: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "young", CreationTimestamp: metav1.NewTime(now)}, Spec: corev1.PodSpec{NodeName: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "host", CreationTimestamp: old}, Spec: corev1.PodSpec{NodeName: "a", HostNetwork: true}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "done", CreationTimestamp: old, Annotations: map[string]string{annotations.Allocated: "true"}}, Spec: corev1.PodSpec{NodeName: "a"}},
		{ObjectMeta: metav1.ObjectMeta{Namespace: "x", Name: "silent", CreationTimestamp: old}, Spec: corev1.PodSpec{NodeName: "a"}},
	}
	ev := func(name, reason string, at time.Time) corev1.Event {
		return corev1.Event{Type: corev1.EventTypeWarning, Reason: reason, Message: reason + " message", LastTimestamp: metav1.NewTime(at),
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "x", Name: name}}
	}
	events := LatestWarnings([]corev1.Event{ev("waits", "Old", now.Add(-time.Hour)), ev("waits", "SubnetExhausted", now.Add(-time.Second))})
	fs := UnaddressedPods(pods, events, now, 10*time.Second)
	if len(fs) != 2 || !find(fs, Fail, "pod-address", "SubnetExhausted: SubnetExhausted message") || !find(fs, Fail, "pod-address", "no event from the controller") {
		t.Fatalf("%+v", fs)
	}
}

func TestLeaderCheck(t *testing.T) {
	now := time.Now()
	holder, d := "ctrl-1", int32(15)
	fresh := &coordinationv1.Lease{Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &d, RenewTime: &metav1.MicroTime{Time: now.Add(-2 * time.Second)}}}
	stale := fresh.DeepCopy()
	stale.Spec.RenewTime = &metav1.MicroTime{Time: now.Add(-time.Minute)}
	if f := LeaderCheck(fresh, "ns/l", now); f.Severity != Pass {
		t.Error(f)
	}
	if f := LeaderCheck(stale, "ns/l", now); f.Severity != Fail || !strings.Contains(f.Found, "stopped renewing") {
		t.Error(f)
	}
	if f := LeaderCheck(nil, "ns/l", now); f.Severity != Warn {
		t.Error(f)
	}
}

func TestPrivateSubnetsBoundToNoNamespaceAreFlagged(t *testing.T) {
	subnet := func(name string, spec map[string]any) unstructured.Unstructured {
		return unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	subs, err := Subnets([]unstructured.Unstructured{
		subnet("open-private", map[string]any{"cidrBlock": "10.1.0.0/24", "private": true}),
		subnet("listed", map[string]any{"cidrBlock": "10.2.0.0/24", "private": true, "namespaces": []any{"tenant-a"}}),
		subnet("selected", map[string]any{"cidrBlock": "10.3.0.0/24", "private": true,
			"namespaceSelectors": []any{map[string]any{"matchLabels": map[string]any{"team": "blue"}}}}),
		subnet("public", map[string]any{"cidrBlock": "10.4.0.0/24"}),
	})
	if err != nil {
		t.Fatal(err)
	}
	fs := SubnetChecks(subs)
	var binding []Finding
	for _, f := range fs {
		if f.Check == "subnet-binding" {
			binding = append(binding, f)
		}
	}
	if len(binding) != 3 {
		t.Fatalf("subnet-binding findings %+v, want one per private Subnet", binding)
	}
	var w Finding
	for _, f := range binding {
		if f.Scope == "subnet/open-private" {
			w = f
		}
	}
	if w.Severity != Warn || w.Scope != "subnet/open-private" || !strings.Contains(w.Found, "bound to no namespace") ||
		!strings.Contains(w.Found, annotations.LogicalSwitch) || !strings.Contains(w.Fix, "kubectl patch subnet open-private") || !strings.Contains(w.Fix, "spec") {
		t.Fatalf("finding for the unbound private Subnet: %+v", w)
	}
	if !find(fs, Pass, "subnet-binding", "admits only namespaces tenant-a") || !find(fs, Pass, "subnet-binding", "namespaces matching team=blue") {
		t.Fatalf("bound private Subnets: %+v", binding)
	}
	if ExitCode(fs) != 1 {
		t.Fatalf("exit code %d, want 1 (a warning)", ExitCode(fs))
	}
}

// A pod of an underlay Subnet on a node where its provider network is not
// ready (or absent) fails with the node's reason and the nodeSelector
// that fixes it; a network whose pods all run where it is ready passes.
func TestUnderlayPlacement(t *testing.T) {
	node := func(name string, labels, ann map[string]string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: ann}}
	}
	pod := func(name, node, pn string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "u", Name: name,
			Annotations: map[string]string{annotations.ProviderNetwork: pn, annotations.LogicalSwitch: "sub-" + pn}},
			Spec: corev1.PodSpec{NodeName: node}}
	}
	nodes := []corev1.Node{
		node("a", map[string]string{"physnet1.provider-network.kubernetes.io/ready": "true", "physnet2.provider-network.kubernetes.io/ready": "true"}, nil),
		node("b", map[string]string{"physnet1.provider-network.kubernetes.io/ready": "false"},
			map[string]string{"physnet1.provider-network.ovnhost.io/error": "eth1 not found; this host has eth0"}),
		node("c", nil, nil),
	}
	fs := UnderlayPlacement([]corev1.Pod{pod("ok1", "a", "physnet1"), pod("down", "b", "physnet1"), pod("absent", "c", "physnet1"),
		pod("ok2", "a", "physnet2"), {ObjectMeta: metav1.ObjectMeta{Namespace: "u", Name: "overlay"}, Spec: corev1.PodSpec{NodeName: "c"}}}, nodes)
	got := map[string]Finding{}
	for _, f := range fs {
		got[f.Scope+" "+string(f.Severity)] = f
	}
	if f, ok := got["pod/u/down fail"]; !ok || !strings.Contains(f.Found, "eth1 not found") || !strings.Contains(f.Fix, `nodeSelector physnet1.provider-network.kubernetes.io/ready: "true"`) {
		t.Errorf("pod on a node where the network is not ready: %+v", f)
	}
	if f, ok := got["pod/u/absent fail"]; !ok || !strings.Contains(f.Found, "does not carry the network") {
		t.Errorf("pod on a node without the network: %+v", f)
	}
	if f, ok := got["cluster pass"]; !ok || !strings.Contains(f.Found, "provider network physnet2") {
		t.Errorf("physnet2's pods all placed well: %+v", f)
	}
	if len(fs) != 3 {
		t.Errorf("findings %+v, want two failures and one pass (overlay pods and well-placed physnet1 pods say nothing)", fs)
	}
}

package netpol

import (
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The Kubernetes side is client-go's fake clientset (no apiserver in a
// unit test; tests/node runs the real one and sends packets), the OVN side
// libovsdb's in-memory NB with the pods' ports written by ovnnet.

func addressedPod(ns, name, ip string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels,
		Annotations: map[string]string{annotations.Allocated: "true", annotations.IPAddress: ip}},
		Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
}

// webPolicy lets pods labelled app=client reach app=web.
func webPolicy() *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		}}
}

// startPolicies writes the ports of the pods (as the pod reconciler does)
// and runs the policy reconciler.
func startPolicies(t *testing.T, withPorts bool, typed ...runtime.Object) (*ctltest.Env, *Reconciler) {
	t.Helper()
	e := ctltest.New(t, append(typed, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}}))
	cfg, err := ipam.ParseSubnet("ovn-default", "10.16.0.0/16", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Net.AddSubnet(e.Ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	if withPorts {
		for _, o := range typed {
			if p, ok := o.(*corev1.Pod); ok {
				addPort(t, e, p)
			}
		}
	}
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

func addPort(t *testing.T, e *ctltest.Env, p *corev1.Pod) {
	t.Helper()
	if _, err := e.Net.AddPod(e.Ctx, ovnnet.PodRequest{Namespace: p.Namespace, Name: p.Name, Subnet: "ovn-default",
		IPs: []netip.Addr{netip.MustParseAddr(p.Annotations[annotations.IPAddress])}, Node: "n1", PoolIndex: -1}); err != nil {
		t.Fatal(err)
	}
}

type pgView struct {
	ports []string // port names
	acls  []string // matches
	sets  map[string][]string
}

func readPolicy(t *testing.T, e *ctltest.Env, pg string) *pgView {
	t.Helper()
	portName := map[string]string{}
	for _, p := range nbtest.Rows[*nbdb.LogicalSwitchPort](t, e.NBServer, e.NB, nbdb.LogicalSwitchPortTable) {
		portName[p.UUID] = p.Name
	}
	aclMatch := map[string]string{}
	for _, a := range nbtest.Rows[*nbdb.ACL](t, e.NBServer, e.NB, nbdb.ACLTable) {
		aclMatch[a.UUID] = a.Match
	}
	for _, g := range nbtest.Rows[*nbdb.PortGroup](t, e.NBServer, e.NB, nbdb.PortGroupTable) {
		if g.Name != pg {
			continue
		}
		v := &pgView{sets: map[string][]string{}}
		for _, u := range g.Ports {
			v.ports = append(v.ports, portName[u])
		}
		for _, u := range g.ACLs {
			v.acls = append(v.acls, aclMatch[u])
		}
		sort.Strings(v.ports)
		for _, s := range nbtest.Rows[*nbdb.AddressSet](t, e.NBServer, e.NB, nbdb.AddressSetTable) {
			if s.ExternalIDs[keyPolicy] == g.ExternalIDs[keyPolicy] {
				a := slices.Clone(s.Addresses)
				sort.Strings(a)
				v.sets[s.Name] = a
			}
		}
		return v
	}
	return nil
}

func (v *pgView) peers() []string {
	var out []string
	for _, a := range v.sets {
		out = append(out, a...)
	}
	sort.Strings(out)
	return out
}

func TestPolicyBecomesAPortGroupThatFollowsThePods(t *testing.T) {
	e, _ := startPolicies(t, true,
		addressedPod("default", "web", "10.16.0.10", map[string]string{"app": "web"}),
		addressedPod("default", "client", "10.16.0.20", map[string]string{"app": "client"}),
		webPolicy())
	pg := PortGroupName("default", "web")
	e.AwaitNB("the policy's port group", func() bool { return readPolicy(t, e, pg) != nil })
	v := readPolicy(t, e, pg)
	if !slices.Equal(v.ports, []string{"web.default"}) {
		t.Fatalf("port group ports %v, want the selected pod's", v.ports)
	}
	if !slices.Equal(v.peers(), []string{"10.16.0.20"}) {
		t.Fatalf("peer addresses %v", v.sets)
	}
	if !slices.ContainsFunc(v.acls, func(m string) bool {
		return strings.HasPrefix(m, "outport == @"+pg+" && ip") && !strings.Contains(m, "ip4")
	}) {
		t.Fatalf("no default drop among %v", v.acls)
	}

	// A second client: only the address set changes.
	client2 := addressedPod("default", "client2", "10.16.0.21", map[string]string{"app": "client"})
	addPort(t, e, client2)
	if _, err := e.Kube.CoreV1().Pods("default").Create(e.Ctx, client2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("the second client's address", func() bool {
		v := readPolicy(t, e, pg)
		return v != nil && slices.Equal(v.peers(), []string{"10.16.0.20", "10.16.0.21"})
	})

	// The policy goes: its rows go.
	if err := e.Kube.NetworkingV1().NetworkPolicies("default").Delete(e.Ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("no port group", func() bool { return readPolicy(t, e, pg) == nil })
	if n := len(nbtest.Rows[*nbdb.ACL](t, e.NBServer, e.NB, nbdb.ACLTable)); n != 0 {
		t.Fatalf("%d ACLs left", n)
	}
	for _, s := range nbtest.Rows[*nbdb.AddressSet](t, e.NBServer, e.NB, nbdb.AddressSetTable) {
		if s.ExternalIDs[keyPolicy] != "" {
			t.Fatalf("address set %s of the deleted policy left", s.Name)
		}
	}
}

func TestPolicyWaitsForItsPodsPorts(t *testing.T) {
	web := addressedPod("default", "web", "10.16.0.10", map[string]string{"app": "web"})
	e, _ := startPolicies(t, false, web, webPolicy())
	pg := PortGroupName("default", "web")
	e.AwaitNB("the port group, without the missing port", func() bool { return readPolicy(t, e, pg) != nil })
	if v := readPolicy(t, e, pg); len(v.ports) != 0 {
		t.Fatalf("ports %v before the pod's port exists", v.ports)
	}
	addPort(t, e, web) // the pod reconciler's port comes; the retry picks it up
	e.AwaitNB("the pod's port in the group", func() bool {
		v := readPolicy(t, e, pg)
		return v != nil && slices.Equal(v.ports, []string{"web.default"})
	})
}

func TestPolicyOVNCannotExpressIsReported(t *testing.T) {
	np := webPolicy()
	np.Spec.Ingress[0].From = []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.1.0.0/24"}}}}
	e, _ := startPolicies(t, true, addressedPod("default", "web", "10.16.0.10", map[string]string{"app": "web"}), np)
	ev := e.AwaitEvent("Warning PolicyNotApplied")
	if !strings.Contains(ev, "10.1.0.0/24") {
		t.Fatalf("event %q", ev)
	}
	if v := readPolicy(t, e, PortGroupName("default", "web")); v != nil {
		t.Fatalf("rows written for a policy that cannot be: %+v", v)
	}
}

func TestStartRemovesRowsOfPoliciesGone(t *testing.T) {
	e := ctltest.New(t, nil)
	if _, err := e.NB.EnsurePortGroup(e.Ctx, ovnnb.PortGroup{Name: "np_stale", ExternalIDs: map[string]string{keyPolicy: "default/stale"},
		ACLs: []ovnnb.ACL{{Direction: "to-lport", Priority: 2000, Match: "outport == @np_stale && ip", Action: "drop"}}}); err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Log: e.Log, Recorder: e.Recorder, Informers: e.Informers, NB: e.NB})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	if v := readPolicy(t, e, "np_stale"); v != nil {
		t.Fatalf("port group of a deleted policy left: %+v", v)
	}
}

// Issue 23 (low): a logging ACL without a meter lets a tenant flood
// ovn-controller with packet-ins; each one names a rate-limited meter.
func TestLoggingACLsAreRateLimitedByAMeter(t *testing.T) {
	np := webPolicy()
	np.Annotations = map[string]string{AnnotationEnableLog: "true", AnnotationLogActions: "drop,allow"}
	plain := webPolicy()
	plain.Name = "plain"
	e := ctltest.New(t, []runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "default"}},
		addressedPod("default", "web", "10.16.0.10", map[string]string{"app": "web"}), np, plain})
	cfg, err := ipam.ParseSubnet("ovn-default", "10.16.0.0/16", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Net.AddSubnet(e.Ctx, cfg, nil); err != nil {
		t.Fatal(err)
	}
	addPort(t, e, addressedPod("default", "web", "10.16.0.10", nil))
	r, err := New(Config{Log: e.Log, Recorder: e.Recorder, Informers: e.Informers, NB: e.NB, ACLLogRate: 7})
	if err != nil {
		t.Fatal(err)
	}
	e.Start()
	if err := r.Start(e.Ctx, &e.WG); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("both policies' port groups", func() bool {
		return readPolicy(t, e, PortGroupName("default", "web")) != nil && readPolicy(t, e, PortGroupName("default", "plain")) != nil
	})
	logged, unlogged := 0, 0
	for _, a := range nbtest.Rows[*nbdb.ACL](t, e.NBServer, e.NB, nbdb.ACLTable) {
		switch {
		case a.Log && (a.Meter == nil || *a.Meter != ovnnb.ACLLogMeter):
			t.Errorf("logging ACL %q has meter %v, want %s", a.Match, a.Meter, ovnnb.ACLLogMeter)
		case a.Log:
			logged++
		case a.Meter != nil:
			t.Errorf("ACL %q logs nothing but names meter %s", a.Match, *a.Meter)
		default:
			unlogged++
		}
	}
	if logged == 0 || unlogged == 0 {
		t.Fatalf("%d logging and %d other ACLs; the test needs both", logged, unlogged)
	}
	meters := nbtest.Rows[*nbdb.Meter](t, e.NBServer, e.NB, nbdb.MeterTable)
	if len(meters) != 1 || meters[0].Name != ovnnb.ACLLogMeter || meters[0].Unit != nbdb.MeterUnitPktps || meters[0].Fair == nil || !*meters[0].Fair || len(meters[0].Bands) != 1 {
		t.Fatalf("meters %+v, want one fair pktps %s with one band", meters, ovnnb.ACLLogMeter)
	}
	bands := nbtest.Rows[*nbdb.MeterBand](t, e.NBServer, e.NB, nbdb.MeterBandTable)
	if len(bands) != 1 || bands[0].UUID != meters[0].Bands[0] || bands[0].Action != nbdb.MeterBandActionDrop || bands[0].Rate != 7 {
		t.Fatalf("bands %+v, want one drop band at the configured 7 pktps", bands)
	}
}

// TestLocalAndClusterPoliciesFollowTheirPods: a policy that reads only its
// namespace (Local) is synced over that namespace's pods and takes no pod
// of another namespace even with matching labels; one with a
// namespaceSelector follows pods of the namespaces it selects as they
// come, and a namespace relabelled into its selector.
func TestLocalAndClusterPoliciesFollowTheirPods(t *testing.T) {
	cross := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "cross"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "blue"}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "client"}}}}}},
		}}
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Labels: map[string]string{"team": "red"}}}
	e, r := startPolicies(t, true,
		addressedPod("default", "web", "10.16.0.10", map[string]string{"app": "web"}),
		addressedPod("default", "client", "10.16.0.20", map[string]string{"app": "client"}),
		addressedPod("other", "client", "10.16.0.30", map[string]string{"app": "client"}),
		addressedPod("other", "web", "10.16.0.31", map[string]string{"app": "web"}),
		other, webPolicy(), cross)
	local, pgCross := PortGroupName("default", "web"), PortGroupName("default", "cross")
	e.AwaitNB("both port groups", func() bool { return readPolicy(t, e, local) != nil && readPolicy(t, e, pgCross) != nil })
	// Both policies' add events have been handled once their rows exist.
	if got := r.clusterPolicies(); !slices.Equal(got, []string{"default/cross"}) {
		t.Fatalf("cluster-scoped policies %v, want [default/cross]", got)
	}
	if v := readPolicy(t, e, local); !slices.Equal(v.ports, []string{"web.default"}) || !slices.Equal(v.peers(), []string{"10.16.0.20"}) {
		t.Fatalf("local policy: ports %v peers %v, want its namespace's web and client only", v.ports, v.peers())
	}
	if v := readPolicy(t, e, pgCross); len(v.peers()) != 0 {
		t.Fatalf("cross policy peers %v before namespace other is team=blue", v.peers())
	}
	// The namespace is relabelled into the selector: its client becomes a peer.
	other.Labels = map[string]string{"team": "blue"}
	if _, err := e.Kube.CoreV1().Namespaces().Update(e.Ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("the other namespace's client as a peer of the cross policy", func() bool {
		v := readPolicy(t, e, pgCross)
		return v != nil && slices.Equal(v.peers(), []string{"10.16.0.30"})
	})
	// A new client there follows through the pod event alone.
	c2 := addressedPod("other", "client2", "10.16.0.32", map[string]string{"app": "client"})
	addPort(t, e, c2)
	if _, err := e.Kube.CoreV1().Pods("other").Create(e.Ctx, c2, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("the new client as a peer", func() bool {
		v := readPolicy(t, e, pgCross)
		return v != nil && slices.Equal(v.peers(), []string{"10.16.0.30", "10.16.0.32"})
	})
	if v := readPolicy(t, e, local); !slices.Equal(v.ports, []string{"web.default"}) || !slices.Equal(v.peers(), []string{"10.16.0.20"}) {
		t.Fatalf("local policy changed: ports %v peers %v", v.ports, v.peers())
	}
	// The cross policy made local: it leaves the cluster set.
	cur, err := e.Kube.NetworkingV1().NetworkPolicies("default").Get(e.Ctx, "cross", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ingress[0].From[0].NamespaceSelector = nil
	cur.ResourceVersion = "2" // the fake clientset does not bump it; the handler skips an update without a new version
	if _, err := e.Kube.NetworkingV1().NetworkPolicies("default").Update(e.Ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.AwaitNB("the cross policy with its own namespace's client only", func() bool {
		v := readPolicy(t, e, pgCross)
		return v != nil && slices.Equal(v.peers(), []string{"10.16.0.20"})
	})
	if got := r.clusterPolicies(); len(got) != 0 {
		t.Fatalf("cluster-scoped policies %v after the change, want none", got)
	}
}

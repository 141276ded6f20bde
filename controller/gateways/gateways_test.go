package gateways

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/internal/ctltest"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// The Kubernetes side is client-go's fake clientsets (no apiserver in a
// unit test; tests/controller and tests/node run the real one), the OVN
// side a real ovsdb-server (an HA chassis group is replaced in one
// transaction with the port pointing at it, which the in-memory server
// refuses). The subnet reconciler is the real one; pods are a stand-in.

type noPods struct{}

func (noPods) Wake(string)          {}
func (noPods) Exhausted(string) int { return 0 }
func (noPods) Recheck(string)       {}

type fixture struct {
	*ctltest.Env
	r       *Reconciler
	subnets *subnets.Reconciler
}

func gatewayNode(name, chassis string, ready corev1.ConditionStatus) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{}}}
	if chassis != "" {
		n.Annotations[annotations.Chassis] = chassis
	}
	if ready != "" {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready}}
	}
	return n
}

func central(name, cidr, nodes string) *unstructured.Unstructured {
	return ctltest.Subnet(name, map[string]any{"cidrBlock": cidr, "gatewayType": "centralized", "gatewayNode": nodes})
}

func start(t *testing.T, typed []runtime.Object, custom ...runtime.Object) *fixture {
	t.Helper()
	e := ctltest.NewOVSDB(t, typed, custom...)
	sr, err := subnets.New(subnets.Config{Log: e.Log, Recorder: e.Recorder, Dynamic: e.Dynamic, Informers: e.DInformers, Net: e.Net,
		IPAM: e.Net.IPAM, Registry: prometheus.NewRegistry(), StatusDelay: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Log: e.Log, Dynamic: e.Dynamic, Informers: e.Informers, DInformers: e.DInformers, Net: e.Net, Subnets: sr})
	if err != nil {
		t.Fatal(err)
	}
	sr.Use(noPods{}, r)
	e.Start()
	names, err := sr.ProgramAll(e.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.ProgramAll(e.Ctx); err != nil {
		t.Fatal(err)
	}
	sr.Start(e.Ctx, &e.WG, names)
	r.Start(e.Ctx, &e.WG)
	return &fixture{Env: e, r: r, subnets: sr}
}

// haChassis is the subnet's HA group, highest priority first.
func (f *fixture) haChassis(t *testing.T, subnet string) []string {
	t.Helper()
	byUUID := map[string]*nbdb.HAChassis{}
	for _, c := range nbtest.Rows[*nbdb.HAChassis](t, f.NBServer, f.NB, nbdb.HAChassisTable) {
		byUUID[c.UUID] = c
	}
	var out []*nbdb.HAChassis
	for _, g := range nbtest.Rows[*nbdb.HAChassisGroup](t, f.NBServer, f.NB, nbdb.HAChassisGroupTable) {
		if g.Name == ovnnet.GatewaySwitch(subnet) {
			for _, u := range g.HaChassis {
				out = append(out, byUUID[u])
			}
		}
	}
	slices.SortFunc(out, func(a, b *nbdb.HAChassis) int { return b.Priority - a.Priority })
	names := []string{}
	for _, c := range out {
		names = append(names, c.ChassisName)
	}
	return names
}

// awaitStatus waits until the Subnet's GatewayReady condition (written by
// the subnet reconciler from this one's) is so.
func (f *fixture) awaitStatus(t *testing.T, name string, ok func(c *kubeovnv1.Condition) bool) {
	t.Helper()
	ctltest.Await(t, f.DInformers.ForResource(kubeovnv1.SubnetGVR).Informer(), name, func(obj any) bool {
		if obj == nil {
			return false
		}
		s, err := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
		return err == nil && ok(s.Condition(GatewayReady))
	})
}

func TestCentralizedGatewayRanksItsReadyNodes(t *testing.T) {
	f := start(t, []runtime.Object{gatewayNode("n1", "ch1", corev1.ConditionTrue), gatewayNode("n2", "ch2", corev1.ConditionFalse)},
		central("central", "10.70.0.0/24", "n1,n2"))
	if got := f.haChassis(t, "central"); !slices.Equal(got, []string{"ch1"}) {
		t.Fatalf("HA chassis %v, want [ch1] (n2 NotReady)", got)
	}
	var reroute *nbdb.LogicalRouterPolicy
	for _, p := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, f.NBServer, f.NB, nbdb.LogicalRouterPolicyTable) {
		if p.Match == "ip4.src == 10.70.0.0/24" {
			reroute = p
		}
	}
	if reroute == nil || reroute.Priority != ovnnet.CentralizedPriority || reroute.Action != nbdb.LogicalRouterPolicyActionReroute {
		t.Fatalf("reroute policy %+v", reroute)
	}
	if s := f.GetSubnet("central"); s.Annotations[ovnnet.TransitAnnotation] == "" {
		t.Fatalf("subnet not annotated with its transit network: %v", s.Annotations)
	}
	f.awaitStatus(t, "central", func(c *kubeovnv1.Condition) bool {
		return c != nil && c.Status == "True" && strings.Contains(c.Message, "left out: n2")
	})

	// n2 becomes Ready: it joins the group, after n1 (gatewayNode order).
	n2, err := f.Kube.CoreV1().Nodes().Get(f.Ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2.Status.Conditions[0].Status = corev1.ConditionTrue
	if _, err := f.Kube.CoreV1().Nodes().UpdateStatus(f.Ctx, n2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitStatus(t, "central", func(c *kubeovnv1.Condition) bool {
		return c != nil && c.Status == "True" && c.Message == "gateway nodes in priority order: n1, n2"
	})
	if got := f.haChassis(t, "central"); !slices.Equal(got, []string{"ch1", "ch2"}) {
		t.Fatalf("HA chassis %v, want [ch1 ch2]", got)
	}

	// Distributed again: the gateway goes, and so does the condition.
	u, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Get(f.Ctx, "central", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["spec"].(map[string]any)["gatewayType"] = "distributed"
	u.SetGeneration(2)
	if _, err := f.Dynamic.Resource(kubeovnv1.SubnetGVR).Update(f.Ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitStatus(t, "central", func(c *kubeovnv1.Condition) bool { return c == nil })
	if got := f.haChassis(t, "central"); len(got) != 0 {
		t.Fatalf("HA group left: %v", got)
	}
	if s := f.GetSubnet("central"); s.Annotations[ovnnet.TransitAnnotation] != "" {
		t.Fatalf("transit annotation left: %v", s.Annotations)
	}
}

func TestUnknownGatewayNodeChangesNothing(t *testing.T) {
	f := start(t, []runtime.Object{gatewayNode("n1", "ch1", corev1.ConditionTrue)}, central("typo", "10.71.0.0/24", "n1,node-x"))
	c := f.r.Condition("typo")
	if c == nil || c.Status != "False" || c.Reason != "UnknownGatewayNode" || !strings.Contains(c.Message, "node-x") || !strings.Contains(c.Message, "n1") {
		t.Fatalf("GatewayReady %+v", c)
	}
	if got := f.haChassis(t, "typo"); len(got) != 0 {
		t.Fatalf("HA group programmed for a bad gatewayNode: %v", got)
	}
}

func TestNoChassisYetIsSaid(t *testing.T) {
	f := start(t, []runtime.Object{gatewayNode("n1", "", corev1.ConditionTrue)}, central("early", "10.72.0.0/24", "n1"))
	c := f.r.Condition("early")
	if c == nil || c.Reason != "NoGatewayNode" || !strings.Contains(c.Message, annotations.Chassis) {
		t.Fatalf("GatewayReady %+v", c)
	}
	// The node's daemon writes its chassis: the gateway follows.
	n1, err := f.Kube.CoreV1().Nodes().Get(f.Ctx, "n1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n1.Annotations[annotations.Chassis] = "ch1"
	if _, err := f.Kube.CoreV1().Nodes().Update(f.Ctx, n1, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitStatus(t, "early", func(c *kubeovnv1.Condition) bool { return c != nil && c.Status == "True" })
	if got := f.haChassis(t, "early"); !slices.Equal(got, []string{"ch1"}) {
		t.Fatalf("HA chassis %v", got)
	}
}

func TestGatewayOfADeletedSubnetIsCollectedAtStart(t *testing.T) {
	f := start(t, []runtime.Object{gatewayNode("n1", "ch1", corev1.ConditionTrue)})
	// A gateway whose Subnet went while no controller ran.
	if _, err := f.Net.EnsureCentralizedGateway(f.Ctx, "orphan", []netip.Prefix{netip.MustParsePrefix("10.73.0.0/24")},
		[]ovnnet.GatewayNode{{Node: "n1", Chassis: "ch1"}}); err != nil {
		t.Fatal(err)
	}
	if got := f.haChassis(t, "orphan"); len(got) != 1 {
		t.Fatalf("HA chassis %v", got)
	}
	if err := f.r.ProgramAll(f.Ctx); err != nil { // the start-up pass
		t.Fatal(err)
	}
	if got := f.haChassis(t, "orphan"); len(got) != 0 {
		t.Fatalf("HA group of a deleted subnet left: %v", got)
	}
	if subs, _ := f.Net.CentralizedSubnets(f.Ctx); len(subs) != 0 {
		t.Fatalf("centralized subnets left: %v", subs)
	}
}

// A node daemon older than IPv6 gateways ignores the IPv6 transit network:
// during a rolling upgrade that starts with the controller, the subnet's
// IPv6 keeps leaving through each pod's node until every gateway node
// announces the feature, and an IPv6-only subnet waits with a reason.
func TestIPv6GatewayWaitsForEveryGatewayNode(t *testing.T) {
	n1 := gatewayNode("n1", "ch1", corev1.ConditionTrue)
	n1.Annotations[annotations.NodeFeatures] = annotations.FeatureGatewayIPv6
	n2 := gatewayNode("n2", "ch2", corev1.ConditionTrue) // not upgraded yet
	f := start(t, []runtime.Object{n1, n2},
		central("dual", "10.71.0.0/24,fd00:71::/64", "n1,n2"), central("six", "fd00:72::/64", "n1,n2"))
	policies := func() []string {
		var out []string
		for _, p := range nbtest.Rows[*nbdb.LogicalRouterPolicy](t, f.NBServer, f.NB, nbdb.LogicalRouterPolicyTable) {
			if p.Priority == ovnnet.CentralizedPriority {
				out = append(out, p.Match)
			}
		}
		slices.Sort(out)
		return out
	}
	f.awaitStatus(t, "dual", func(c *kubeovnv1.Condition) bool {
		return c != nil && c.Status == "True" && strings.Contains(c.Message, "IPv6 traffic leaves through each pod's own node until n2 run(s)")
	})
	f.awaitStatus(t, "six", func(c *kubeovnv1.Condition) bool {
		return c != nil && c.Status == "False" && c.Reason == "GatewayNodesWithoutIPv6" && strings.Contains(c.Message, "n2")
	})
	if got := policies(); !slices.Equal(got, []string{"ip4.src == 10.71.0.0/24"}) {
		t.Fatalf("reroutes %v while n2 cannot take IPv6, want the IPv4 one only", got)
	}
	if s := f.GetSubnet("dual"); s.Annotations[ovnnet.TransitAnnotation6] != "" {
		t.Fatalf("IPv6 transit announced before n2 can take it: %v", s.Annotations)
	}

	// n2 is upgraded: its daemon announces the feature with its chassis.
	nd, err := f.Kube.CoreV1().Nodes().Get(f.Ctx, "n2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd.Annotations[annotations.NodeFeatures] = annotations.FeatureGatewayIPv6
	if _, err := f.Kube.CoreV1().Nodes().Update(f.Ctx, nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.awaitStatus(t, "dual", func(c *kubeovnv1.Condition) bool {
		return c != nil && c.Status == "True" && c.Message == "gateway nodes in priority order: n1, n2"
	})
	f.awaitStatus(t, "six", func(c *kubeovnv1.Condition) bool { return c != nil && c.Status == "True" })
	if got := policies(); !slices.Equal(got, []string{"ip4.src == 10.71.0.0/24", "ip6.src == fd00:71::/64", "ip6.src == fd00:72::/64"}) {
		t.Fatalf("reroutes %v once every gateway node takes IPv6", got)
	}
	if s := f.GetSubnet("dual"); s.Annotations[ovnnet.TransitAnnotation6] == "" {
		t.Fatalf("no IPv6 transit annotation once n2 takes IPv6: %v", s.Annotations)
	}
}

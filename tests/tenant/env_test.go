// Package tenant_test is the hostile-tenant suite: a real kube-apiserver
// with RBAC, a real OVN central and the controller, and two tenants who
// hold the built-in `admin` ClusterRole in their own namespace and nothing
// more (what `kubectl create rolebinding --clusterrole=admin` gives a
// namespace owner). Each test is an attack a tenant tries through the API
// server with their own identity (impersonation of the user by the test's
// system:masters client, so RBAC and admission judge it as that user);
// each must be refused or contained, and the refusal visible to the
// tenant as an event in their namespace. docs/security.md lists the
// attacks, their results and the node-side ones tested elsewhere.
package tenant_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/harness/notify"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// cluster is the control plane the tenants attack, seen with the admin's
// eyes: pods, events and the NB the controller writes.
type cluster struct {
	t     testing.TB
	srv   *kubeapi.Server
	admin kubernetes.Interface
	adyn  dynamic.Interface
	nb    *ovnnb.Client

	pods, events cache.SharedIndexInformer
	changes      notify.Notifier
}

// tenant is one namespace owner: their user name, namespace and clients.
type tenant struct {
	user, ns string
	kc       kubernetes.Interface
	dyn      dynamic.Interface
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterWith(t)
}

// newClusterWith also installs the CRDs of these files (repository-relative)
// before the controller starts (it looks for them once).
func newClusterWith(t *testing.T, crds ...string) *cluster {
	t.Helper()
	testenv.RequireCommands(t, "ovsdb-server", "ovn-northd")
	central := ovncentral.Start(t)
	srv := kubeapi.Start(t)
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	srv.InstallCRD(t, filepath.Join(base, "crd-subnets.yaml"))
	srv.InstallCRD(t, filepath.Join(base, "crd-ips.yaml"))
	for _, crd := range crds {
		srv.InstallCRD(t, filepath.Join(testenv.RepoRoot(), crd))
	}
	c := &cluster{t: t, srv: srv}
	c.admin = kubernetes.NewForConfigOrDie(srv.Config)
	c.adyn = dynamic.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: central.NB(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), PortGroups: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nb.Close)
	c.nb = nb
	nb.Raw().Cache().AddEventHandler(c.changes.OVSDB())
	f := informers.NewSharedInformerFactory(c.admin, 0)
	c.pods = f.Core().V1().Pods().Informer()
	c.events = f.Core().V1().Events().Informer()
	h := c.changes.Informer()
	_, _ = c.pods.AddEventHandler(h)
	_, _ = c.events.AddEventHandler(h)
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.pods.HasSynced, c.events.HasSynced) {
		t.Fatal("test informers did not sync")
	}
	c.startController(central.NB())
	// The built-in admin role is an aggregation: the controller manager's
	// clusterrole-aggregation controller fills its rules.
	srv.StartControllerManager(t, "--controllers=clusterrole-aggregation")
	c.waitAdminRole(ctx)
	return c
}

// waitAdminRole waits, on a watch, until the aggregated ClusterRole admin
// grants pods (a tenant with it can then do what a namespace owner does).
func (c *cluster) waitAdminRole(ctx context.Context) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	grantsPods := func(r *rbacv1.ClusterRole) bool {
		for _, rule := range r.Rules {
			if slices.Contains(rule.Resources, "pods") && slices.Contains(rule.Verbs, "create") {
				return true
			}
		}
		return false
	}
	w, err := c.admin.RbacV1().ClusterRoles().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=admin"})
	if err != nil {
		c.t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if r, ok := ev.Object.(*rbacv1.ClusterRole); ok && grantsPods(r) {
			return
		}
	}
	c.t.Fatalf("ClusterRole admin got no rules from the clusterrole-aggregation controller within 90s: %v", ctx.Err())
}

func (c *cluster) startController(nbAddr string) {
	c.t.Helper()
	o := kube.Options{Config: kube.Config{Rest: c.srv.Config, NBEndpoints: nbAddr, ServiceCIDRs: []netip.Prefix{serviceCIDR},
		EnableLB: true, EnableNP: true, // as the manifests run it
		Logger: slog.New(slog.NewTextHandler(logWriter{c.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- kube.Run(ctx, o) }()
	c.t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			c.t.Errorf("controller: %v", err)
		}
	})
}

// serviceCIDR is the harness apiserver's --service-cluster-ip-range.
var serviceCIDR = netip.MustParsePrefix("10.96.0.0/12")

type logWriter struct{ t testing.TB }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// newTenant creates namespace ns with labels and binds user to the
// built-in admin ClusterRole there: all a namespace owner has.
func (c *cluster) newTenant(user, ns string, labels map[string]string) *tenant {
	c.t.Helper()
	ctx := context.Background()
	if _, err := c.admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user + "-admin", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "admin"},
		Subjects: []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: user}}}
	if _, err := c.admin.RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	cfg := rest.CopyConfig(c.srv.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	tn := &tenant{user: user, ns: ns, kc: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(cfg)}
	c.waitGranted(tn)
	return tn
}

// waitGranted waits until the API server's authorizer lets the tenant do
// what the tests ask of a namespace owner. The RBAC authorizer reads its
// own informer cache, so a RoleBinding just created (or the admin role's
// rules just aggregated) is not yet in force when the create returns: a
// test that went ahead saw "services is forbidden" for bob in CI. The
// authorizer has no watch, so this asks it (SelfSubjectAccessReview as
// the tenant) until every verb is allowed or 30 s pass.
func (c *cluster) waitGranted(tn *tenant) {
	c.t.Helper()
	c.waitGrantedFor(tn,
		authzv1.ResourceAttributes{Namespace: tn.ns, Verb: "create", Resource: "pods"},
		authzv1.ResourceAttributes{Namespace: tn.ns, Verb: "create", Resource: "services"},
		authzv1.ResourceAttributes{Namespace: tn.ns, Verb: "create", Resource: "networkpolicies", Group: "networking.k8s.io"})
}

// waitGrantedFor waits until the authorizer allows the tenant each of needs.
func (c *cluster) waitGrantedFor(tn *tenant, needs ...authzv1.ResourceAttributes) {
	c.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, ra := range needs {
			r, err := tn.kc.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
				&authzv1.SelfSubjectAccessReview{Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &ra}}, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !r.Status.Allowed {
				last = fmt.Sprintf("%s %s/%s not allowed yet (%s)", ra.Verb, ra.Resource, ra.Name, r.Status.Reason)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		c.t.Fatalf("tenant %s: the rights asked in %s did not take effect within 30s: %v; last: %s", tn.user, tn.ns, err, last)
	}
}

// waitFor re-evaluates cond on every pod, event or NB change until it
// holds or d passes; then it fails naming what was awaited.
func (c *cluster) waitFor(d time.Duration, what string, cond func() (bool, string)) {
	c.t.Helper()
	c.changes.WaitFor(c.t, d, what, cond)
}

// eventFor is the first Warning event on the object (kind, ns, name) whose
// reason is reason, as the tenant would read it with their own client.
func (c *cluster) waitEvent(tn *tenant, kind, name, reason string) *corev1.Event {
	c.t.Helper()
	var got *corev1.Event
	c.waitFor(60*time.Second, fmt.Sprintf("a %s event on %s %s/%s", reason, kind, tn.ns, name), func() (bool, string) {
		var seen []string
		for _, o := range c.events.GetStore().List() {
			e := o.(*corev1.Event)
			if e.Namespace != tn.ns || e.InvolvedObject.Kind != kind || e.InvolvedObject.Name != name {
				continue
			}
			seen = append(seen, e.Reason+": "+e.Message)
			if e.Reason == reason && e.Type == corev1.EventTypeWarning {
				got = e
				return true, ""
			}
		}
		return false, fmt.Sprintf("events on it: %q", seen)
	})
	// The tenant can read it in their namespace.
	evs, err := tn.kc.CoreV1().Events(tn.ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		c.t.Fatalf("tenant %s cannot list events in %s: %v", tn.user, tn.ns, err)
	}
	for _, e := range evs.Items {
		if e.UID == got.UID {
			return got
		}
	}
	c.t.Fatalf("tenant %s does not see the %s event in %s", tn.user, reason, tn.ns)
	return nil
}

func (c *cluster) lsp(name string) (*nbdb.LogicalSwitchPort, bool) {
	l := &nbdb.LogicalSwitchPort{Name: name}
	if err := c.nb.Raw().Get(context.Background(), l); err != nil {
		return nil, false
	}
	return l, true
}

// createSubnet is the admin creating a Subnet.
func (c *cluster) createSubnet(name string, spec map[string]any) {
	c.t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
		"metadata": map[string]any{"name": name}, "spec": spec}}
	if _, err := c.adyn.Resource(kubeovnv1.SubnetGVR).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
}

// lbVIPs is every load balancer VIP in the NB by the Service owning it
// ("namespace/name" -> "ip:port" set).
func (c *cluster) lbVIPs() map[string]map[string]bool {
	var lbs []nbdb.LoadBalancer
	_ = c.nb.Raw().List(context.Background(), &lbs)
	out := map[string]map[string]bool{}
	for _, lb := range lbs {
		svc := lb.ExternalIDs["service"]
		if out[svc] == nil {
			out[svc] = map[string]bool{}
		}
		for vip := range lb.Vips {
			out[svc][vip] = true
		}
	}
	return out
}

// natRules are the router's NAT rules as "type external logical".
func (c *cluster) natRules() []string {
	var nats []nbdb.NAT
	_ = c.nb.Raw().List(context.Background(), &nats)
	var out []string
	for _, n := range nats {
		out = append(out, n.Type+" "+n.ExternalIP+" "+n.LogicalIP)
	}
	return out
}

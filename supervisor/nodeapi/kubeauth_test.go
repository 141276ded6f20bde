package nodeapi

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/supervisor/health"
)

var quiet = slog.New(slog.DiscardHandler)

// apiServer is a fake API server answering TokenReviews (tokens maps a
// token to its user) and SubjectAccessReviews by RBAC rules per user,
// matched as the RBAC authorizer does (verbs, groups, resources with
// "*" and "*/subresource", resourceNames); it counts the reviews.
type apiServer struct {
	tokens map[string]string
	// audiences a token is bound to (none: the API server's own, "api").
	audiences map[string][]string
	rules     map[string][]rbacv1.PolicyRule
	reviews   atomic.Int32
	sars      atomic.Int32
	gate      chan struct{} // when set, a TokenReview waits for it
}

func (a *apiServer) client() *fake.Clientset {
	kc := fake.NewClientset()
	kc.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.reviews.Add(1)
		if a.gate != nil {
			<-a.gate
		}
		tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
		// As the API server: a review without audiences asks for its
		// own; a token authenticates for the audiences it shares.
		want, has := tr.Spec.Audiences, a.audiences[tr.Spec.Token]
		if len(want) == 0 {
			want = []string{"api"}
		}
		if len(has) == 0 {
			has = []string{"api"}
		}
		var shared []string
		for _, w := range want {
			if slices.Contains(has, w) {
				shared = append(shared, w)
			}
		}
		if u, ok := a.tokens[tr.Spec.Token]; ok && len(shared) == 0 {
			tr.Status = authnv1.TokenReviewStatus{Error: "token audiences " + strings.Join(has, ",") + " is invalid for the target audiences " + strings.Join(want, ",") + " (" + u + ")"}
		} else if ok {
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, Audiences: shared, User: authnv1.UserInfo{Username: u, Groups: []string{"system:authenticated"}}}
		} else {
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	kc.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		a.sars.Add(1)
		sar := action.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview).DeepCopy()
		ra := sar.Spec.ResourceAttributes
		for _, r := range a.rules[sar.Spec.User] {
			if ra != nil && ruleAllows(r, ra) {
				sar.Status.Allowed = true
			}
			if na := sar.Spec.NonResourceAttributes; na != nil && matches(r.NonResourceURLs, na.Path) && matches(r.Verbs, na.Verb) {
				sar.Status.Allowed = true
			}
		}
		if !sar.Status.Allowed {
			sar.Status.Reason = "no RBAC rule allows it"
		}
		return true, sar, nil
	})
	return kc
}

func matches(set []string, v string) bool {
	return slices.Contains(set, "*") || slices.Contains(set, v)
}

func ruleAllows(r rbacv1.PolicyRule, a *authzv1.ResourceAttributes) bool {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	resOK := slices.Contains(r.Resources, "*") || slices.Contains(r.Resources, res) ||
		(a.Subresource != "" && slices.Contains(r.Resources, "*/"+a.Subresource))
	nameOK := len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, a.Name)
	return matches(r.Verbs, a.Verb) && matches(r.APIGroups, a.Group) && resOK && nameOK
}

// clusterRole reads a ClusterRole's rules from a manifest of this tree.
func clusterRole(t *testing.T, file, name string) []rbacv1.PolicyRule {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(raw), "\n---") {
		var cr rbacv1.ClusterRole
		if yaml.Unmarshal([]byte(doc), &cr) == nil && cr.Kind == "ClusterRole" && cr.Name == name {
			return cr.Rules
		}
	}
	t.Fatalf("no ClusterRole %s in %s", name, file)
	return nil
}

func bearer(h http.Handler, method, target, token string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, target, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// The same bogus token, sent again or by many requests at once, costs
// the API server one TokenReview while the refusal is cached (before:
// concurrent requests each sent their own).
func TestBogusTokenCostsOneReview(t *testing.T) {
	as := &apiServer{gate: make(chan struct{})}
	auth := &KubeAuthorizer{Client: as.client()}
	h := Handler(health.New(), Backend{Node: "n1"}, auth, quiet)
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = bearer(h, http.MethodGet, api.PathStatus, "bogus").Code
		}()
	}
	// The first review answers only once all 20 requests wait for a review.
	for auth.waiting.Load() < int32(len(codes)) {
		goruntime.Gosched()
	}
	close(as.gate)
	wg.Wait()
	if w := bearer(h, http.MethodGet, api.PathStatus, "bogus"); w.Code != http.StatusUnauthorized || !strings.Contains(errorOf(t, w), "invalid bearer token") {
		t.Fatalf("bogus token: %d %s", w.Code, w.Body)
	}
	for _, c := range codes {
		if c != http.StatusUnauthorized {
			t.Fatalf("codes %v, want 401 each", codes)
		}
	}
	if n := as.reviews.Load(); n != 1 {
		t.Fatalf("21 requests with one bogus token cost %d TokenReviews, want 1", n)
	}
}

// The caches keep tokens only by hash and stay bounded under a flood of
// distinct bogus tokens, without dropping what is still fresh all at once.
func TestTokenCacheIsBoundedAndHashed(t *testing.T) {
	as := &apiServer{tokens: map[string]string{"good": "alice"}, rules: map[string][]rbacv1.PolicyRule{
		"alice": {{Verbs: []string{"get"}, APIGroups: []string{api.APIGroup}, Resources: []string{"nodes/diagnostics"}}}}}
	auth := &KubeAuthorizer{Client: as.client(), MaxEntries: 50, ReviewRate: 1e6, ReviewBurst: 1e6}
	h := Handler(health.New(), Backend{Node: "n1"}, auth, quiet)
	for i := 0; i < 500; i++ {
		bearer(h, http.MethodGet, api.PathStatus, "bogus-"+strings.Repeat("x", i))
	}
	if n := auth.users.len(); n > 50 {
		t.Fatalf("%d cached tokens, want at most 50", n)
	}
	for k := range auth.users.m {
		if strings.Contains(string(k[:]), "bogus") {
			t.Fatal("a token is kept in clear")
		}
	}
	if w := bearer(h, http.MethodGet, api.PathStatus, "good"); w.Code != http.StatusOK {
		t.Fatalf("good token: %d %s", w.Code, w.Body)
	}
}

// Capture is its own verb: a role granting get (and list, watch) on every
// resource of every group, as wide read-only roles do, cannot capture;
// ovnhost-netctl (the manifest) captures on pods but not on the node's
// own interfaces; ovnhost-netctl-hostcapture adds those.
func TestCaptureNeedsItsOwnVerb(t *testing.T) {
	netctl := clusterRole(t, "../../packaging/kubernetes/base/rbac-netctl.yaml", "ovnhost-netctl")
	host := clusterRole(t, "../../packaging/kubernetes/base/rbac-netctl.yaml", "ovnhost-netctl-hostcapture")
	as := &apiServer{
		tokens: map[string]string{"reader": "reader", "op": "op", "admin": "admin"},
		rules: map[string][]rbacv1.PolicyRule{
			"reader": {{Verbs: []string{"get", "list", "watch"}, APIGroups: []string{"*"}, Resources: []string{"*"}}},
			"op":     netctl,
			"admin":  append(append([]rbacv1.PolicyRule{}, netctl...), host...),
		}}
	var captured []api.CaptureRequest
	backend := Backend{Node: "n1", Capture: func(_ context.Context, r api.CaptureRequest, w io.Writer, started func()) error {
		captured = append(captured, r)
		started()
		_, err := w.Write([]byte("pcap"))
		return err
	}}
	h := Handler(health.New(), backend, &KubeAuthorizer{Client: as.client()}, quiet)
	pod := api.PathCapture + "?namespace=ns&pod=p"
	uplink := api.PathCapture + "?iface=eth1"

	w := bearer(h, http.MethodGet, pod, "reader")
	if w.Code != http.StatusForbidden || !strings.Contains(errorOf(t, w), `"reader" may not capture nodes/capture.ovnhost.io "n1"`) {
		t.Fatalf("a wildcard read-only role captured: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, api.PathStatus, "reader"); w.Code != http.StatusOK {
		t.Fatalf("the read-only role still reads status: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, pod, "op"); w.Code != http.StatusOK || w.Body.String() != "pcap" {
		t.Fatalf("ovnhost-netctl on a pod: %d %s", w.Code, w.Body)
	}
	w = bearer(h, http.MethodGet, uplink, "op")
	if w.Code != http.StatusForbidden || !strings.Contains(errorOf(t, w), `may not capture nodes/hostcapture.ovnhost.io "n1"`) {
		t.Fatalf("ovnhost-netctl on the uplink: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, uplink, "admin"); w.Code != http.StatusOK {
		t.Fatalf("with ovnhost-netctl-hostcapture on the uplink: %d %s", w.Code, w.Body)
	}
	if len(captured) != 2 || captured[0].Pod != "p" || captured[1].Iface != "eth1" {
		t.Fatalf("captured %+v", captured)
	}
}

// Every TLS handshake asks for the client CA: without a readable
// ConfigMap, a flood of anonymous handshakes costs the API server one
// read per 30 s, not one each.
func TestClientCAReadsAreBounded(t *testing.T) {
	kc := fake.NewClientset()
	var gets atomic.Int32
	kc.PrependReactor("get", "configmaps", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets.Add(1)
		return false, nil, nil // not found
	})
	auth := &KubeAuthorizer{Client: kc}
	for i := 0; i < 100; i++ {
		if auth.ClientCAPool(context.Background()) != nil {
			t.Fatal("a pool from nothing")
		}
	}
	if n := gets.Load(); n != 1 {
		t.Fatalf("100 handshakes read the ConfigMap %d times, want 1", n)
	}
}

// An operator's own token, good at the API server, is refused on the
// node's resources: only a token bound to this node is (netctl asks for
// one), so nothing a node sees can be replayed at the API server or at
// another node. /metrics keeps the API server's audience for Prometheus.
func TestNodeResourcesTakeOnlyTokensBoundToThisNode(t *testing.T) {
	sa := "system:serviceaccount:ovnhost:ovnhost-netctl"
	nodeRules := clusterRole(t, "../../packaging/kubernetes/base/rbac-netctl.yaml", "ovnhost-netctl-node-api")
	as := &apiServer{
		tokens:    map[string]string{"alice": "alice", "for-n1": sa, "for-n2": sa, "prom": "prometheus"},
		audiences: map[string][]string{"for-n1": {api.NodeAudience("n1")}, "for-n2": {api.NodeAudience("n2")}},
		rules: map[string][]rbacv1.PolicyRule{
			"alice":      clusterRole(t, "../../packaging/kubernetes/base/rbac-netctl.yaml", "ovnhost-netctl"),
			sa:           nodeRules,
			"prometheus": clusterRole(t, "../../packaging/kubernetes/base/rbac-netctl.yaml", "ovnhost-metrics-reader"),
		}}
	h := Handler(health.New(), Backend{Node: "n1"}, &KubeAuthorizer{Client: as.client(), Audiences: []string{api.NodeAudience("n1")}}, quiet)
	w := bearer(h, http.MethodGet, api.PathStatus, "alice")
	if w.Code != http.StatusUnauthorized || !strings.Contains(errorOf(t, w), "this node accepts only tokens bound to ovnhost.io/node-api:n1") {
		t.Fatalf("an operator's own token on a node: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, api.PathStatus, "for-n2"); w.Code != http.StatusUnauthorized {
		t.Fatalf("a token bound to node n2 at n1: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, api.PathStatus, "for-n1"); w.Code != http.StatusOK {
		t.Fatalf("a token bound to n1 of the netctl account: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, api.PathCapture+"?namespace=ns&pod=p", "for-n1"); w.Code == http.StatusForbidden || w.Code == http.StatusUnauthorized {
		t.Fatalf("the netctl account may capture on a pod: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, api.PathCapture+"?iface=eth0", "for-n1"); w.Code != http.StatusForbidden {
		t.Fatalf("the netctl account on the node's own interfaces: %d %s", w.Code, w.Body)
	}
	if w := bearer(h, http.MethodGet, "/metrics", "prom"); w.Code != http.StatusOK {
		t.Fatalf("Prometheus's token on /metrics: %d %s", w.Code, w.Body)
	}
}

package kube

import (
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// Issue 23 (low): the controller's /metrics and pprof on the host
// network's :10660 answered anyone. With --metrics-auth (auto on a
// non-loopback address) they are HTTPS and need a token the API server
// accepts (TokenReview) with get on the path (SubjectAccessReview); the
// API server is client-go's fake clientset answering the two reviews.

const promUser = "system:serviceaccount:monitoring:prometheus-k8s"

// reviewer answers TokenReviews (tokens "prom" and "tenant" are valid)
// and SubjectAccessReviews (only Prometheus may get /metrics), counting them.
func reviewer(t *testing.T) (*fake.Clientset, *atomic.Int32) {
	kc := fake.NewSimpleClientset()
	var reviews atomic.Int32
	kc.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview)
		switch tr.Spec.Token {
		case "prom":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: promUser, Groups: []string{"system:serviceaccounts"}}}
		case "tenant":
			tr.Status = authnv1.TokenReviewStatus{Authenticated: true, User: authnv1.UserInfo{Username: "system:serviceaccount:team-a:default"}}
		default:
			tr.Status = authnv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	kc.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authzv1.SubjectAccessReview)
		na := sar.Spec.NonResourceAttributes
		sar.Status.Allowed = sar.Spec.User == promUser && na != nil && na.Verb == "get" && na.Path == "/metrics"
		return true, sar, nil
	})
	return kc, &reviews
}

func TestMetricsNeedATokenWithGetOnThePath(t *testing.T) {
	kc, reviews := reviewer(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector())
	o := Options{HealthAddr: "0.0.0.0:0", Profiling: true}
	secure, err := metricsAuthFor(o.MetricsAuth, o.HealthAddr)
	if err != nil || !secure {
		t.Fatalf("auto on a non-loopback address: secure=%v, %v", secure, err)
	}
	addr, stop, err := serveHealth(o, reg, &nbHealth{after: time.Minute, downSince: time.Now()}, &atomic.Pointer[Controller]{}, kc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addr = strings.Replace(addr, "0.0.0.0", "127.0.0.1", 1)
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(scheme, path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+addr+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path, token string
		want        int
		body        string
	}{
		{"/metrics", "", http.StatusUnauthorized, "Bearer"},
		{"/metrics", "forged", http.StatusUnauthorized, "invalid bearer token"},
		{"/metrics", "tenant", http.StatusForbidden, "system:serviceaccount:team-a:default"},
		{"/metrics", "prom", http.StatusOK, "go_goroutines"},
		{"/debug/pprof/", "", http.StatusUnauthorized, ""},
		{"/debug/pprof/", "prom", http.StatusForbidden, "/debug/pprof/"}, // its own permission
		{"/healthz", "", http.StatusOK, "ok"},                            // the kubelet's probe
		{"/readyz", "", http.StatusServiceUnavailable, "not started"},
	} {
		if code, body := get("https", tc.path, tc.token); code != tc.want || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s with token %q: %d %q, want %d with %q", tc.path, tc.token, code, body, tc.want, tc.body)
		}
	}
	// The token is never taken over plain HTTP.
	if code, _ := get("http", "/metrics", "prom"); code == http.StatusOK {
		t.Error("/metrics answered over plain HTTP")
	}
	// Answers are cached: a second scrape costs no review.
	n := reviews.Load()
	if code, _ := get("https", "/metrics", "prom"); code != http.StatusOK || reviews.Load() != n {
		t.Errorf("second scrape: %d, %d more TokenReviews", code, reviews.Load()-n)
	}
}

func TestMetricsAuthMode(t *testing.T) {
	for _, tc := range []struct {
		mode, addr string
		secure     bool
	}{
		{"", "127.0.0.1:10660", false}, // the manifests' default: only the node reaches it
		{"auto", "[::1]:10660", false},
		{"auto", "localhost:10660", false},
		{"auto", ":10660", true}, // the monitoring overlay's
		{"auto", "0.0.0.0:10660", true},
		{"auto", "192.168.0.11:10660", true},
		{"kubernetes", "127.0.0.1:10660", true},
		{"none", ":10660", false},
	} {
		if got, err := metricsAuthFor(tc.mode, tc.addr); err != nil || got != tc.secure {
			t.Errorf("mode %q addr %s: %v, %v; want %v", tc.mode, tc.addr, got, err, tc.secure)
		}
	}
	if _, err := metricsAuthFor("open", ":10660"); err == nil || !strings.Contains(err.Error(), "auto, kubernetes or none") {
		t.Errorf("unknown mode: %v", err)
	}
}

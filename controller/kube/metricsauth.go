package kube

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
)

// The controller runs on the host network: with monitoring on, its
// --health-addr (:10660) is reachable from every node and, through them,
// from pods. /metrics and /debug/pprof are therefore served as
// controller-runtime's "secure metrics" and kube-rbac-proxy serve them:
// HTTPS, each request's bearer token reviewed by the API server
// (TokenReview) and its path authorized (SubjectAccessReview, get on the
// non-resource URL: the ClusterRole ovnhost-metrics-reader grants /metrics).
// /healthz and /readyz stay open to the kubelet's probes. On a loopback
// address (the manifests' default, 127.0.0.1:10660) only the node itself
// reaches the port and nothing is asked (MetricsAuthAuto).

// Metrics authentication modes (--metrics-auth).
const (
	MetricsAuthAuto       = "auto"       // kubernetes unless --health-addr is a loopback address
	MetricsAuthKubernetes = "kubernetes" // HTTPS, TokenReview and SubjectAccessReview
	MetricsAuthNone       = "none"       // plain HTTP, open (a trusted network only)
)

// metricsAuthFor resolves mode for addr: whether /metrics and pprof need
// authentication (and so HTTPS).
func metricsAuthFor(mode, addr string) (bool, error) {
	switch mode {
	case MetricsAuthKubernetes:
		return true, nil
	case MetricsAuthNone:
		return false, nil
	case MetricsAuthAuto, "":
		return !loopbackAddr(addr), nil
	}
	return false, fmt.Errorf("--metrics-auth %q: use auto, kubernetes or none", mode)
}

// loopbackAddr reports whether addr ("host:port") listens on loopback only.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// metricsAuthorizer checks a request's bearer token with the API server.
// Answers are cached for ttl by token hash and path (bounded), so a scrape
// every 30 s costs two reviews a minute at most and a flood of one bad
// token costs one.
type metricsAuthorizer struct {
	kc  kubernetes.Interface
	ttl time.Duration
	max int // cache entries

	mu    sync.Mutex
	cache map[[32]byte]metricsDecision
}

type metricsDecision struct {
	status  int
	msg     string
	expires time.Time
}

func newMetricsAuthorizer(kc kubernetes.Interface) *metricsAuthorizer {
	return &metricsAuthorizer{kc: kc, ttl: 10 * time.Second, max: 1024, cache: map[[32]byte]metricsDecision{}}
}

// wrap serves h to authenticated, authorized requests only: 401 without a
// valid token, 403 without get on the path.
func (a *metricsAuthorizer) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		token = strings.TrimSpace(token)
		if !ok || token == "" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="ovnhost-controller"`)
			http.Error(w, "Unauthorized: send Authorization: Bearer TOKEN (a ServiceAccount token with get on the non-resource URL "+r.URL.Path+"; ClusterRole ovnhost-metrics-reader grants /metrics)", http.StatusUnauthorized)
			return
		}
		status, msg := a.check(r.Context(), token, r.URL.Path)
		if status != http.StatusOK {
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", `Bearer realm="ovnhost-controller"`)
			}
			http.Error(w, msg, status)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// check decides (token, path): 200, 401, 403, or 503 when the API server
// could not be asked (not cached).
func (a *metricsAuthorizer) check(ctx context.Context, token, path string) (int, string) {
	key := sha256.Sum256([]byte(token + "\x00" + path))
	now := time.Now()
	a.mu.Lock()
	if d, ok := a.cache[key]; ok && now.Before(d.expires) {
		a.mu.Unlock()
		return d.status, d.msg
	}
	a.mu.Unlock()
	status, msg, final := a.review(ctx, token, path)
	if final {
		a.mu.Lock()
		if len(a.cache) >= a.max {
			for k, d := range a.cache {
				if now.After(d.expires) {
					delete(a.cache, k)
				}
			}
			if len(a.cache) >= a.max {
				a.cache = map[[32]byte]metricsDecision{}
			}
		}
		a.cache[key] = metricsDecision{status: status, msg: msg, expires: now.Add(a.ttl)}
		a.mu.Unlock()
	}
	return status, msg
}

func (a *metricsAuthorizer) review(ctx context.Context, token, path string) (status int, msg string, final bool) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := a.kc.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable, "cannot review the token with the API server: " + err.Error() + " (does the controller's ClusterRole allow create on tokenreviews?)", false
	}
	if !tr.Status.Authenticated {
		why := tr.Status.Error
		if why == "" {
			why = "not authenticated"
		}
		return http.StatusUnauthorized, "Unauthorized: the API server did not accept the token: " + why, true
	}
	u := tr.Status.User
	extra := map[string]authzv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = authzv1.ExtraValue(v)
	}
	sar, err := a.kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra,
		NonResourceAttributes: &authzv1.NonResourceAttributes{Path: path, Verb: "get"},
	}}, metav1.CreateOptions{})
	if err != nil {
		return http.StatusServiceUnavailable, "cannot authorize with the API server: " + err.Error() + " (does the controller's ClusterRole allow create on subjectaccessreviews?)", false
	}
	if !sar.Status.Allowed {
		return http.StatusForbidden, fmt.Sprintf("Forbidden: user %q may not get %s; bind a ClusterRole granting get on the non-resource URL %s (ovnhost-metrics-reader grants /metrics)", u.Username, path, path), true
	}
	return http.StatusOK, "", true
}

// metricsTLS is the listener's TLS: the key pair in certFile/keyFile,
// re-read when either changes (a rotated Secret), else a self-signed one
// made at start (Prometheus then needs insecureSkipVerify, as for the
// node API).
func metricsTLS(certFile, keyFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		host, _ := os.Hostname()
		certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey(host, nil, nil)
		if err != nil {
			return nil, fmt.Errorf("self-signed metrics certificate: %w", err)
		}
		c, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, err
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{c}}, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("--metrics-cert %q and --metrics-key %q: give both or neither (neither: a self-signed certificate)", certFile, keyFile)
	}
	r := &reloadingPair{cert: certFile, key: keyFile}
	if _, err := r.get(nil); err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

type reloadingPair struct {
	cert, key string
	mu        sync.Mutex
	stamp     string
	pair      *tls.Certificate
}

func (r *reloadingPair) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	stamp := ""
	for _, f := range []string{r.cert, r.key} {
		st, err := os.Stat(f)
		if err != nil {
			return nil, fmt.Errorf("metrics TLS: %w (mount the key pair or drop --metrics-cert/--metrics-key)", err)
		}
		stamp += st.ModTime().String() + fmt.Sprint(st.Size())
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pair != nil && stamp == r.stamp {
		return r.pair, nil
	}
	c, err := tls.LoadX509KeyPair(r.cert, r.key)
	if err != nil {
		if r.pair != nil {
			return r.pair, nil // half-written rotation: keep the last good pair
		}
		return nil, fmt.Errorf("metrics TLS: %s, %s: %w", r.cert, r.key, err)
	}
	r.pair, r.stamp = &c, stamp
	return r.pair, nil
}

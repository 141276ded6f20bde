package nodeapi

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// ClientCAPool returns the cluster's client CA bundle, the one the API
// server verifies client certificates with, as published in the ConfigMap
// kube-system/extension-apiserver-authentication (key client-ca-file); it
// is re-read when older than five minutes, so a rotated CA is picked up.
func (k *KubeAuthorizer) ClientCAPool(ctx context.Context) *x509.CertPool {
	k.mu.Lock()
	pool, at, tried := k.caPool, k.caAt, k.caTried
	fresh := (pool != nil && time.Since(at) < 5*time.Minute) || time.Since(tried) < 30*time.Second
	if !fresh {
		// One read at a time, at most every 30 s: every TLS handshake,
		// an anonymous one too, comes here.
		k.caTried = time.Now()
	}
	k.mu.Unlock()
	if fresh {
		return pool
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cm, err := k.Client.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil || cm.Data["client-ca-file"] == "" {
		return pool // keep the last one; bearer tokens still work
	}
	p := x509.NewCertPool()
	if !p.AppendCertsFromPEM([]byte(cm.Data["client-ca-file"])) {
		return pool
	}
	k.mu.Lock()
	k.caPool, k.caAt = p, time.Now()
	k.mu.Unlock()
	return p
}

// Attributes is what a request asks to do, in SubjectAccessReview terms:
// a resource (Group, Resource, Subresource, Name) or a non-resource Path.
type Attributes struct {
	Verb                               string
	Group, Resource, Subresource, Name string
	Path                               string
}

func (a Attributes) String() string {
	if a.Path != "" {
		return a.Verb + " " + a.Path
	}
	r := a.Resource
	if a.Subresource != "" {
		r += "/" + a.Subresource
	}
	if a.Group != "" {
		r += "." + a.Group
	}
	return fmt.Sprintf("%s %s %q", a.Verb, r, a.Name)
}

// Authorizer decides one request: the user it authenticated, and on
// refusal the HTTP status (401 or 403) and why.
type Authorizer interface {
	Check(ctx context.Context, req *http.Request, a Attributes) (user string, status int, err error)
}

// KubeAuthorizer asks the API server: TokenReview for the bearer token,
// SubjectAccessReview for the attributes. Answers, refusals too, are
// cached for TTL (kube-rbac-proxy caches too) in bounded caches: tokens
// keyed by their SHA-256, never the token itself. Concurrent requests
// with the same token or question share one review, and the reviews this
// node sends are rate limited, so a flood of bogus tokens costs the API
// server at most ReviewRate reviews a second.
type KubeAuthorizer struct {
	Client kubernetes.Interface
	TTL    time.Duration // default 10s
	// Audiences are what a token must be bound to for the node's own
	// resources (nodes/diagnostics, nodes/capture): this node's audience
	// (nodeapi.NodeAudience), which netctl asks a TokenRequest for, so an
	// operator's own token, valid at the API server, is refused here and a
	// token a node does see is good at that node only. Non-resource paths
	// (/metrics, scraped by Prometheus with its ServiceAccount token, as it
	// scrapes the kubelets) take the API server's default audience. Empty:
	// the default audience everywhere.
	Audiences []string
	// MaxEntries bounds each cache (default 4096).
	MaxEntries int
	// ReviewRate and ReviewBurst bound the reviews sent to the API server
	// (default 20/s, bursts of 50); a request past them waits for its
	// turn within its own deadline.
	ReviewRate  rate.Limit
	ReviewBurst int

	mu      sync.Mutex
	caPool  *x509.CertPool
	caAt    time.Time
	caTried time.Time
	users   *ttlCache[[32]byte, cachedUser]
	dec     *ttlCache[string, cachedDecision]
	flight  singleflight.Group
	reviews *rate.Limiter
	waiting atomic.Int32 // requests waiting for a review's answer
}

type cachedUser struct {
	info   authnv1.UserInfo
	ok     bool
	reason string
}

type cachedDecision struct {
	ok     bool
	reason string
}

// Check implements Authorizer. A client certificate that the TLS layer
// verified against the cluster's client CA (ClientCAPool) names the user
// as the API server would (CN user, O groups); otherwise the bearer token
// is reviewed.
func (k *KubeAuthorizer) Check(ctx context.Context, req *http.Request, a Attributes) (string, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var u authnv1.UserInfo
	if req.TLS != nil && len(req.TLS.VerifiedChains) > 0 && len(req.TLS.VerifiedChains[0]) > 0 {
		leaf := req.TLS.VerifiedChains[0][0]
		u = authnv1.UserInfo{Username: leaf.Subject.CommonName, Groups: append(append([]string{}, leaf.Subject.Organization...), "system:authenticated")}
	} else {
		token, ok := strings.CutPrefix(req.Header.Get("Authorization"), "Bearer ")
		token = strings.TrimSpace(token)
		if !ok || token == "" {
			return "", http.StatusUnauthorized, errors.New("no credentials: send a client certificate of the cluster's CA or Authorization: Bearer TOKEN (netctl uses the kubeconfig's; a ServiceAccount token works)")
		}
		aud := k.Audiences
		if a.Path != "" {
			aud = nil
		}
		var err error
		if u, err = k.authenticate(ctx, token, aud); err != nil {
			return "", http.StatusUnauthorized, err
		}
	}
	if err := k.authorize(ctx, u, a); err != nil {
		return u.Username, http.StatusForbidden, err
	}
	return u.Username, http.StatusOK, nil
}

func (k *KubeAuthorizer) init() {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.users != nil {
		return
	}
	n := k.MaxEntries
	if n <= 0 {
		n = 4096
	}
	r, b := k.ReviewRate, k.ReviewBurst
	if r <= 0 {
		r = 20
	}
	if b <= 0 {
		b = 50
	}
	k.users, k.dec = newTTLCache[[32]byte, cachedUser](n), newTTLCache[string, cachedDecision](n)
	k.reviews = rate.NewLimiter(r, b)
}

// review runs one review (TokenReview or SubjectAccessReview) under the
// node's review rate, shared by every concurrent caller with the same key.
func (k *KubeAuthorizer) review(ctx context.Context, key string, do func(context.Context) (any, error)) (any, error) {
	k.waiting.Add(1)
	defer k.waiting.Add(-1)
	v, err, _ := k.flight.Do(key, func() (any, error) {
		if err := k.reviews.Wait(ctx); err != nil {
			return nil, fmt.Errorf("the node API is sending the API server too many reviews; retry shortly (%w)", err)
		}
		return do(ctx)
	})
	return v, err
}

func (k *KubeAuthorizer) ttl() time.Duration {
	if k.TTL > 0 {
		return k.TTL
	}
	return 10 * time.Second
}

func (k *KubeAuthorizer) authenticate(ctx context.Context, token string, audiences []string) (authnv1.UserInfo, error) {
	k.init()
	key := sha256.Sum256([]byte(strings.Join(audiences, ",") + "\x00" + token))
	c, hit := k.users.get(key, time.Now())
	if !hit {
		v, err := k.review(ctx, "token\x00"+string(key[:]), func(ctx context.Context) (any, error) {
			if c, hit := k.users.get(key, time.Now()); hit {
				return c, nil // answered while this request waited
			}
			tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
				Spec: authnv1.TokenReviewSpec{Token: token, Audiences: audiences}}, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("cannot review the token with the API server: %w", err)
			}
			c := cachedUser{info: tr.Status.User, ok: tr.Status.Authenticated, reason: tr.Status.Error}
			// The API server authenticates only for an asked audience;
			// checked again so that a lax reviewer cannot widen it.
			if c.ok && len(audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(audiences, a) }) {
				c = cachedUser{reason: fmt.Sprintf("the token is for audiences %q", tr.Status.Audiences)}
			}
			if !c.ok && len(audiences) > 0 {
				c.reason = strings.TrimPrefix(c.reason+"; ", "; ") + fmt.Sprintf("this node accepts only tokens bound to %s: netctl asks the API server for one (ServiceAccount %s) and never sends your own credentials to a node (docs/security.md)",
					strings.Join(audiences, ", "), api.DefaultNetctlAccount)
			}
			k.users.put(key, c, time.Now().Add(k.ttl()))
			return c, nil
		})
		if err != nil {
			return authnv1.UserInfo{}, err
		}
		c = v.(cachedUser)
	}
	if !c.ok {
		msg := "the API server did not accept the token"
		if c.reason != "" {
			msg += ": " + c.reason
		}
		return authnv1.UserInfo{}, errors.New(msg)
	}
	return c.info, nil
}

func (k *KubeAuthorizer) authorize(ctx context.Context, u authnv1.UserInfo, a Attributes) error {
	k.init()
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, ",") + "\x00" + a.String()
	d, hit := k.dec.get(key, time.Now())
	if !hit {
		v, err := k.review(ctx, "sar\x00"+key, func(ctx context.Context) (any, error) {
			if d, hit := k.dec.get(key, time.Now()); hit {
				return d, nil
			}
			spec := authzv1.SubjectAccessReviewSpec{User: u.Username, UID: u.UID, Groups: u.Groups, Extra: map[string]authzv1.ExtraValue{}}
			for k, v := range u.Extra {
				spec.Extra[k] = authzv1.ExtraValue(v)
			}
			if a.Path != "" {
				spec.NonResourceAttributes = &authzv1.NonResourceAttributes{Path: a.Path, Verb: a.Verb}
			} else {
				spec.ResourceAttributes = &authzv1.ResourceAttributes{Verb: a.Verb, Group: a.Group, Resource: a.Resource, Subresource: a.Subresource, Name: a.Name}
			}
			sar, err := k.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: spec}, metav1.CreateOptions{})
			if err != nil {
				return nil, fmt.Errorf("cannot ask the API server whether %q may %s: %w", u.Username, a, err)
			}
			d := cachedDecision{ok: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason}
			k.dec.put(key, d, time.Now().Add(k.ttl()))
			return d, nil
		})
		if err != nil {
			return err
		}
		d = v.(cachedDecision)
	}
	if !d.ok {
		msg := fmt.Sprintf("%q may not %s", u.Username, a)
		if d.reason != "" {
			msg += " (" + d.reason + ")"
		}
		return errors.New(msg + "; grant it with a ClusterRole (packaging/kubernetes/base/rbac-netctl.yaml)")
	}
	return nil
}

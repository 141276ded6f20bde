package health

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// ClientCAPool returns the cluster's client CA bundle, the one the API
// server verifies client certificates with, as published in the ConfigMap
// kube-system/extension-apiserver-authentication (key client-ca-file); it
// is re-read when older than five minutes, so a rotated CA is picked up.
func (k *KubeAuthorizer) ClientCAPool(ctx context.Context) *x509.CertPool {
	k.mu.Lock()
	pool, at := k.caPool, k.caAt
	k.mu.Unlock()
	if pool != nil && time.Since(at) < 5*time.Minute {
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
// SubjectAccessReview for the attributes. Answers are cached for TTL
// (kube-rbac-proxy caches too), keyed by a hash of the token.
type KubeAuthorizer struct {
	Client kubernetes.Interface
	TTL    time.Duration // default 10s
	// Audiences restricts accepted tokens (empty: the API server's default).
	Audiences []string

	mu     sync.Mutex
	caPool *x509.CertPool
	caAt   time.Time
	users  map[[32]byte]cachedUser
	dec    map[string]cachedDecision
}

type cachedUser struct {
	info    authnv1.UserInfo
	ok      bool
	reason  string
	expires time.Time
}

type cachedDecision struct {
	ok      bool
	reason  string
	expires time.Time
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
		var err error
		if u, err = k.authenticate(ctx, token); err != nil {
			return "", http.StatusUnauthorized, err
		}
	}
	if err := k.authorize(ctx, u, a); err != nil {
		return u.Username, http.StatusForbidden, err
	}
	return u.Username, http.StatusOK, nil
}

func (k *KubeAuthorizer) initLocked() {
	if k.users == nil {
		k.users, k.dec = map[[32]byte]cachedUser{}, map[string]cachedDecision{}
	}
}

func (k *KubeAuthorizer) ttl() time.Duration {
	if k.TTL > 0 {
		return k.TTL
	}
	return 10 * time.Second
}

func (k *KubeAuthorizer) authenticate(ctx context.Context, token string) (authnv1.UserInfo, error) {
	key := sha256.Sum256([]byte(token))
	now := time.Now()
	k.mu.Lock()
	k.initLocked()
	c, hit := k.users[key]
	k.mu.Unlock()
	if !hit || now.After(c.expires) {
		tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
			Spec: authnv1.TokenReviewSpec{Token: token, Audiences: k.Audiences}}, metav1.CreateOptions{})
		if err != nil {
			return authnv1.UserInfo{}, fmt.Errorf("cannot review the token with the API server: %w", err)
		}
		c = cachedUser{info: tr.Status.User, ok: tr.Status.Authenticated, reason: tr.Status.Error, expires: now.Add(k.ttl())}
		k.mu.Lock()
		if len(k.users) > 1000 {
			k.users = map[[32]byte]cachedUser{}
		}
		k.users[key] = c
		k.mu.Unlock()
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
	key := u.Username + "\x00" + u.UID + "\x00" + strings.Join(u.Groups, ",") + "\x00" + a.String()
	now := time.Now()
	k.mu.Lock()
	k.initLocked()
	d, hit := k.dec[key]
	k.mu.Unlock()
	if !hit || now.After(d.expires) {
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
			return fmt.Errorf("cannot ask the API server whether %q may %s: %w", u.Username, a, err)
		}
		d = cachedDecision{ok: sar.Status.Allowed && !sar.Status.Denied, reason: sar.Status.Reason, expires: now.Add(k.ttl())}
		k.mu.Lock()
		if len(k.dec) > 1000 {
			k.dec = map[string]cachedDecision{}
		}
		k.dec[key] = d
		k.mu.Unlock()
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

// Package nodeclient is netctl's client of the node daemons' authenticated
// API (internal/nodeapi, served by supervisor/nodeapi): it finds a node's
// API from the Node's annotations, pins the certificate fingerprint
// published there, and authenticates without handing the node anything it
// could replay at the API server: the kubeconfig's client certificate
// (TLS never reveals its key), or else a ServiceAccount token bound to that
// one node (Tokens), never the kubeconfig's own token.
package nodeclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// Client talks to one node's API.
type Client struct {
	Node   string
	Addr   string
	http   *http.Client
	tokens TokenSource // nil: the client certificate authenticates
}

// TokenSource returns a bearer token bound to node's API.
type TokenSource interface {
	Token(ctx context.Context, node string) (string, error)
}

// ErrNotPublished: the node has never run a daemon with the API (or it has
// no Kubernetes client, or --node-api-addr is empty).
var ErrNotPublished = errors.New("the node has not published its API")

// HasClientCert reports whether rc authenticates with a client certificate.
func HasClientCert(rc *rest.Config) bool {
	return len(rc.CertData) > 0 || rc.CertFile != ""
}

// For builds the client of node n: rc's client certificate when it has
// one, else tokens' token for n.
func For(rc *rest.Config, n *corev1.Node, timeout time.Duration, tokens TokenSource) (*Client, error) {
	addr, fp := n.Annotations[api.AnnotationNodeAPIAddr], n.Annotations[api.AnnotationNodeAPICert]
	if addr == "" || fp == "" {
		return nil, fmt.Errorf("node %s: %w (annotations %s and %s are missing): is ovnhost running there with a Kubernetes client and --node-api-addr set?",
			n.Name, ErrNotPublished, api.AnnotationNodeAPIAddr, api.AnnotationNodeAPICert)
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				addr = net.JoinHostPort(a.Address, port)
				break
			}
		}
	}
	pin := api.PinnedTLS(fp)
	tc := pin
	if HasClientCert(rc) {
		// Only the certificate: no bearer token or exec plugin output.
		certOnly := &rest.Config{TLSClientConfig: rest.TLSClientConfig{CertData: rc.CertData, CertFile: rc.CertFile, KeyData: rc.KeyData, KeyFile: rc.KeyFile}}
		withCert, err := rest.TLSConfigFor(certOnly)
		if err != nil {
			return nil, err
		}
		tc = withCert.Clone()
		tc.RootCAs, tc.ServerName = nil, ""
		tc.InsecureSkipVerify, tc.VerifyPeerCertificate = true, pin.VerifyPeerCertificate
		tokens = nil
	} else if tokens == nil {
		return nil, fmt.Errorf("node %s: the kubeconfig has no client certificate and no token source was given", n.Name)
	}
	base := &http.Transport{TLSClientConfig: tc, DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: 0}
	return &Client{Node: n.Name, Addr: addr, http: &http.Client{Transport: base}, tokens: tokens}, nil
}

// AccountTokens mints, through the API server and as the kubeconfig's user,
// tokens of one ServiceAccount bound to one node each (TokenRequest with
// audience nodeapi.NodeAudience), and keeps each until shortly before it
// expires.
type AccountTokens struct {
	Client          kubernetes.Interface
	Namespace, Name string

	mu    sync.Mutex
	cache map[string]cachedToken
}

type cachedToken struct {
	token string
	until time.Time
}

// Token implements TokenSource.
func (a *AccountTokens) Token(ctx context.Context, node string) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.cache[node]; ok && time.Now().Before(c.until) {
		return c.token, nil
	}
	secs := int64(api.TokenLifetime / time.Second)
	tr, err := a.Client.CoreV1().ServiceAccounts(a.Namespace).CreateToken(ctx, a.Name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{api.NodeAudience(node)}, ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		fix := ""
		switch {
		case apierrors.IsForbidden(err):
			fix = fmt.Sprintf(": bind the ClusterRole ovnhost-netctl to yourself (it grants create on serviceaccounts/token for %s), or use a kubeconfig with a client certificate", a.Name)
		case apierrors.IsNotFound(err):
			fix = fmt.Sprintf(": the ServiceAccount %s/%s does not exist; install packaging/kubernetes (rbac-netctl.yaml) or name yours with --node-api-account", a.Namespace, a.Name)
		}
		return "", fmt.Errorf("node %s: netctl calls a node with a token of ServiceAccount %s/%s bound to that node, never with your own credentials, and could not get one: %w%s",
			node, a.Namespace, a.Name, err, fix)
	}
	if a.cache == nil {
		a.cache = map[string]cachedToken{}
	}
	until := tr.Status.ExpirationTimestamp.Time.Add(-time.Minute)
	a.cache[node] = cachedToken{token: tr.Status.Token, until: until}
	return tr.Status.Token, nil
}

// Error is a failed API call with the HTTP status (0: no answer).
type Error struct {
	Node   string
	Status int
	Msg    string
	Err    error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return fmt.Sprintf("node %s: %s", e.Node, e.Msg)
	}
	return fmt.Sprintf("node %s: %s (HTTP %d)", e.Node, e.Msg, e.Status)
}

func (e *Error) Unwrap() error { return e.Err }

// Unreachable: the daemon did not answer (down, or the port is blocked).
func (e *Error) Unreachable() bool { return e.Status == 0 }

func (c *Client) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(ctx, method, "https://"+c.Addr+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.tokens != nil {
		tok, err := c.tokens.Token(ctx, c.Node)
		if err != nil {
			return nil, err // not an *Error: the node was not asked
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		msg := "no answer from the node daemon's API at " + c.Addr
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			msg += ": connection refused (ovnhost is not running there, or listens elsewhere)"
		case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "timeout"):
			msg += ": timed out (the node is down, or a firewall drops the port)"
		default:
			msg += ": " + err.Error()
		}
		return nil, &Error{Node: c.Node, Msg: msg, Err: err}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e api.ErrorBody
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		if json.Unmarshal(raw, &e) != nil || e.Error == "" {
			e.Error = strings.TrimSpace(string(raw))
		}
		return nil, &Error{Node: c.Node, Status: resp.StatusCode, Msg: e.Error}
	}
	return resp, nil
}

func (c *Client) getJSON(ctx context.Context, method, path string, body, out any) (http.Header, error) {
	resp, err := c.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return nil, &Error{Node: c.Node, Status: resp.StatusCode, Msg: "bad answer: " + err.Error()}
	}
	return resp.Header, nil
}

// Doctor runs doctor on the node; code is its exit code.
func (c *Client) Doctor(ctx context.Context, out any) (code int, err error) {
	h, err := c.getJSON(ctx, http.MethodGet, api.PathDoctor, nil, out)
	if err != nil {
		return 0, err
	}
	_, _ = fmt.Sscan(h.Get(api.HeaderDoctorExitCode), &code)
	return code, nil
}

// Status is the node daemon's /status.
func (c *Client) Status(ctx context.Context) (*api.Snapshot, error) {
	var s api.Snapshot
	_, err := c.getJSON(ctx, http.MethodGet, api.PathStatus, nil, &s)
	return &s, err
}

// Pinger is the node's latest pinger matrix, decoded into out.
func (c *Client) Pinger(ctx context.Context, out any) error {
	_, err := c.getJSON(ctx, http.MethodGet, api.PathPinger, nil, out)
	return err
}

// Pod is the node's view of one pod.
func (c *Client) Pod(ctx context.Context, ns, name string) (*api.PodPort, error) {
	var p api.PodPort
	_, err := c.getJSON(ctx, http.MethodGet, api.PathPod+"?"+url.Values{"namespace": {ns}, "name": {name}}.Encode(), nil, &p)
	return &p, err
}

// Appctl passes a read-only control-socket command.
func (c *Client) Appctl(ctx context.Context, r api.AppctlRequest) (string, error) {
	var out api.AppctlResult
	_, err := c.getJSON(ctx, http.MethodPost, api.PathAppctl, r, &out)
	return out.Output, err
}

// OVSDB runs a ctl-style read query.
func (c *Client) OVSDB(ctx context.Context, r api.OVSDBRequest) (*api.OVSDBResult, error) {
	var out api.OVSDBResult
	_, err := c.getJSON(ctx, http.MethodPost, api.PathOVSDB, r, &out)
	return &out, err
}

// Trace traces a packet from a pod of this node.
func (c *Client) Trace(ctx context.Context, r api.TraceRequest) (*api.TraceResult, error) {
	var t api.TraceResult
	_, err := c.getJSON(ctx, http.MethodPost, api.PathTrace, r, &t)
	return &t, err
}

// Capture streams pcap from the pod's host veth into w.
func (c *Client) Capture(ctx context.Context, ns, pod string, count int, d time.Duration, w io.Writer) error {
	q := api.CaptureRequest{Namespace: ns, Pod: pod, Count: count, Duration: d}.Query()
	resp, err := c.do(ctx, http.MethodGet, api.PathCapture+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, err = io.Copy(w, resp.Body)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

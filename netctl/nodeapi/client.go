// Package nodeapi is netctl's client of the node daemons' authenticated
// API (supervisor/health): it finds a node's API from the Node's
// annotations, pins the certificate fingerprint published there, and
// presents the kubeconfig's credentials (client certificate or bearer
// token), which the node checks with the API server.
package nodeapi

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
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/ovnhost/ovnhost/supervisor/health"
)

// Client talks to one node's API.
type Client struct {
	Node string
	Addr string
	http *http.Client
}

// ErrNotPublished: the node has never run a daemon with the API (or it has
// no Kubernetes client, or --node-api-addr is empty).
var ErrNotPublished = errors.New("the node has not published its API")

// For builds the client of node n with the credentials of rc.
func For(rc *rest.Config, n *corev1.Node, timeout time.Duration) (*Client, error) {
	addr, fp := n.Annotations[health.AnnotationNodeAPIAddr], n.Annotations[health.AnnotationNodeAPICert]
	if addr == "" || fp == "" {
		return nil, fmt.Errorf("node %s: %w (annotations %s and %s are missing): is ovnhost running there with a Kubernetes client and --node-api-addr set?",
			n.Name, ErrNotPublished, health.AnnotationNodeAPIAddr, health.AnnotationNodeAPICert)
	}
	if host, port, err := net.SplitHostPort(addr); err == nil && host == "" {
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP {
				addr = net.JoinHostPort(a.Address, port)
				break
			}
		}
	}
	tc, err := rest.TLSConfigFor(rc)
	if err != nil {
		return nil, err
	}
	pin := health.PinnedTLS(fp)
	if tc == nil {
		tc = pin
	} else {
		tc = tc.Clone()
		tc.RootCAs, tc.ServerName = nil, ""
		tc.InsecureSkipVerify, tc.VerifyPeerCertificate = true, pin.VerifyPeerCertificate
	}
	base := &http.Transport{TLSClientConfig: tc, DialContext: (&net.Dialer{Timeout: timeout}).DialContext,
		TLSHandshakeTimeout: timeout, ResponseHeaderTimeout: 0}
	// Bearer tokens (static, file or exec plugin) the way client-go adds them.
	noCerts := rest.CopyConfig(rc)
	noCerts.TLSClientConfig = rest.TLSClientConfig{}
	rt, err := rest.HTTPWrappersForConfig(noCerts, base)
	if err != nil {
		return nil, err
	}
	return &Client{Node: n.Name, Addr: addr, http: &http.Client{Transport: rt}}, nil
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
		var e health.NodeAPIError
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
	h, err := c.getJSON(ctx, http.MethodGet, health.PathDoctor, nil, out)
	if err != nil {
		return 0, err
	}
	_, _ = fmt.Sscan(h.Get("X-Doctor-Exit-Code"), &code)
	return code, nil
}

// Status is the node daemon's /status.
func (c *Client) Status(ctx context.Context) (*health.Snapshot, error) {
	var s health.Snapshot
	_, err := c.getJSON(ctx, http.MethodGet, health.PathStatus, nil, &s)
	return &s, err
}

// Pinger is the node's latest pinger matrix, decoded into out.
func (c *Client) Pinger(ctx context.Context, out any) error {
	_, err := c.getJSON(ctx, http.MethodGet, health.PathPinger, nil, out)
	return err
}

// Pod is the node's view of one pod.
func (c *Client) Pod(ctx context.Context, ns, name string) (*health.PodPort, error) {
	var p health.PodPort
	_, err := c.getJSON(ctx, http.MethodGet, health.PathPod+"?"+url.Values{"namespace": {ns}, "name": {name}}.Encode(), nil, &p)
	return &p, err
}

// Appctl passes a read-only control-socket command.
func (c *Client) Appctl(ctx context.Context, r health.AppctlRequest) (string, error) {
	var out map[string]string
	_, err := c.getJSON(ctx, http.MethodPost, health.PathAppctl, r, &out)
	return out["output"], err
}

// OVSDBResult is a query's text and, for list and find, its rows (values
// formatted as in the text).
type OVSDBResult struct {
	Text string              `json:"output"`
	Rows []map[string]string `json:"rows"`
}

// OVSDB runs a ctl-style read query.
func (c *Client) OVSDB(ctx context.Context, r health.OVSDBRequest) (*OVSDBResult, error) {
	var out OVSDBResult
	_, err := c.getJSON(ctx, http.MethodPost, health.PathOVSDB, r, &out)
	return &out, err
}

// Trace traces a packet from a pod of this node.
func (c *Client) Trace(ctx context.Context, r health.TraceRequest) (*health.TraceResult, error) {
	var t health.TraceResult
	_, err := c.getJSON(ctx, http.MethodPost, health.PathTrace, r, &t)
	return &t, err
}

// Capture streams pcap from the pod's host veth into w.
func (c *Client) Capture(ctx context.Context, ns, pod string, count int, d time.Duration, w io.Writer) error {
	q := url.Values{"namespace": {ns}, "pod": {pod}, "count": {fmt.Sprint(count)}, "duration": {d.String()}}
	resp, err := c.do(ctx, http.MethodGet, health.PathCapture+"?"+q.Encode(), nil)
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

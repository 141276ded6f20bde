package nodeapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// MaxPingerBody bounds the /matrix answer a node daemon reads from its
// pinger pod (a round is a few hundred bytes per node of the cluster).
const MaxPingerBody = 4 << 20

// PingerSource says which pod's /matrix the node relays: a pod of the
// pinger DaemonSet in its namespace, on this node, under its
// ServiceAccount, at its status.podIP. Pods elsewhere carrying the label,
// and every annotation, are ignored: a tenant controls both.
type PingerSource struct {
	Kube kubernetes.Interface
	Node string
	// Namespace is the pinger DaemonSet's namespace (the node daemon's own:
	// the namespace of its ServiceAccount, else "ovnhost").
	Namespace string
	// DaemonSet and ServiceAccount default to api.PingerDaemonSet and
	// api.PingerServiceAccount.
	DaemonSet, ServiceAccount string
	// MaxBody defaults to MaxPingerBody.
	MaxBody int64
	// Client is the HTTP client (default: no proxy, no redirects, 3 s).
	Client *http.Client
}

// saNamespaceFile is where a pod finds its own namespace.
const saNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// OwnNamespace is the node daemon's namespace: its ServiceAccount's in a
// pod, "ovnhost" (the manifests' namespace) elsewhere.
func OwnNamespace() string {
	if raw, err := os.ReadFile(saNamespaceFile); err == nil && strings.TrimSpace(string(raw)) != "" {
		return strings.TrimSpace(string(raw))
	}
	return "ovnhost"
}

// noRedirects is the pinger client: a redirect from the pod would send the
// node's request to wherever the pod names (server-side request forgery).
var noRedirects = &http.Client{
	Timeout:   3 * time.Second,
	Transport: &http.Transport{Proxy: nil, DialContext: (&net.Dialer{Timeout: 2 * time.Second}).DialContext, MaxResponseHeaderBytes: 16 << 10},
	CheckRedirect: func(req *http.Request, _ []*http.Request) error {
		return fmt.Errorf("the pinger answered with a redirect to %s; the node follows none", req.URL.Redacted())
	},
}

// Accept says why pod p is not one of the pinger DaemonSet's pods on this
// node ("" when it is).
func (s PingerSource) Accept(p *corev1.Pod) string {
	ds, sa := s.names()
	switch {
	case p.Namespace != s.Namespace:
		return fmt.Sprintf("it runs in namespace %s, not the pinger DaemonSet's %s", p.Namespace, s.Namespace)
	case p.Spec.NodeName != s.Node:
		return fmt.Sprintf("it runs on node %q, not %s", p.Spec.NodeName, s.Node)
	case p.Spec.ServiceAccountName != sa:
		return fmt.Sprintf("it runs as ServiceAccount %q, not %s", p.Spec.ServiceAccountName, sa)
	}
	owner := metav1.GetControllerOf(p)
	if owner == nil || owner.Kind != "DaemonSet" || owner.Name != ds || !strings.HasPrefix(owner.APIVersion, "apps/") {
		return fmt.Sprintf("it is not controlled by DaemonSet %s/%s", s.Namespace, ds)
	}
	if p.Status.Phase != corev1.PodRunning {
		return fmt.Sprintf("it is %s, not Running", p.Status.Phase)
	}
	if _, err := netip.ParseAddr(p.Status.PodIP); err != nil {
		return fmt.Sprintf("its status.podIP %q is no address", p.Status.PodIP)
	}
	return ""
}

func (s PingerSource) names() (ds, sa string) {
	ds, sa = s.DaemonSet, s.ServiceAccount
	if ds == "" {
		ds = api.PingerDaemonSet
	}
	if sa == "" {
		sa = api.PingerServiceAccount
	}
	return ds, sa
}

// Latest fetches the latest round of this node's pinger pod from its
// /matrix on the pod network (reached through ovn0).
func (s PingerSource) Latest(ctx context.Context) (any, error) {
	ds, _ := s.names()
	pods, err := s.Kube.CoreV1().Pods(s.Namespace).List(ctx, metav1.ListOptions{LabelSelector: api.PingerSelector, FieldSelector: "spec.nodeName=" + s.Node})
	if err != nil {
		return nil, fmt.Errorf("listing the pinger pods of this node in namespace %s: %w", s.Namespace, err)
	}
	var errs []string
	for i := range pods.Items {
		p := &pods.Items[i]
		if why := s.Accept(p); why != "" {
			errs = append(errs, fmt.Sprintf("pod %s/%s ignored: %s", p.Namespace, p.Name, why))
			continue
		}
		round, err := s.fetch(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("pod %s/%s: %v", p.Namespace, p.Name, err))
			continue
		}
		return round, nil
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no pod of DaemonSet %s/%s runs on this node (netctl pinger; packaging/kubernetes/base/pinger.yaml)", s.Namespace, ds)
	}
	return nil, errors.New(strings.Join(errs, "; "))
}

func (s PingerSource) fetch(ctx context.Context, p *corev1.Pod) (json.RawMessage, error) {
	port := int32(8080)
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == api.PingerPortName && cp.ContainerPort > 0 && cp.ContainerPort < 65536 {
				port = cp.ContainerPort
			}
		}
	}
	cl := s.Client
	if cl == nil {
		cl = noRedirects
	}
	limit := s.MaxBody
	if limit <= 0 {
		limit = MaxPingerBody
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	url := "http://" + net.JoinHostPort(p.Status.PodIP, fmt.Sprint(port)) + api.PingerPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("GET %s: the answer is larger than %d bytes; the node reads no more (a pinger round is far smaller)", url, limit)
	}
	if !json.Valid(raw) {
		return nil, fmt.Errorf("GET %s: the answer is not JSON", url)
	}
	return json.RawMessage(raw), nil
}

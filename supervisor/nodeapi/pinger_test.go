package nodeapi

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
)

// matrixServer is a pod's /matrix: it counts the requests the node sent it.
type matrixServer struct {
	*httptest.Server
	hits atomic.Int32
	ip   string
	port int32
}

func newMatrixServer(t *testing.T, body func(w http.ResponseWriter, r *http.Request)) *matrixServer {
	t.Helper()
	m := &matrixServer{}
	m.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.hits.Add(1)
		body(w, r)
	}))
	t.Cleanup(m.Close)
	host, port, _ := net.SplitHostPort(m.Listener.Addr().String())
	p, _ := strconv.Atoi(port)
	m.ip, m.port = host, int32(p)
	return m
}

func round(node string) func(w http.ResponseWriter, _ *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"node":"` + node + `","targets":[]}`))
	}
}

// pingerPod is a pod of the pinger DaemonSet as the manifests make it;
// edit changes it into what a tenant could make.
func pingerPod(ns, name, node string, m *matrixServer, edit func(*corev1.Pod)) *corev1.Pod {
	yes := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "ovnhost-pinger"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: api.PingerDaemonSet, UID: "ds-uid", Controller: &yes}}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: api.PingerServiceAccount,
			Containers: []corev1.Container{{Name: "pinger", Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: m.port}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: m.ip},
	}
	if edit != nil {
		edit(p)
	}
	return p
}

// A tenant labels a pod app=ovnhost-pinger in their namespace, on the
// node, serving a /matrix: the node must not ask it (before: it listed the
// label in every namespace and relayed the first answer).
func TestPingerRelayRefusesATenantsLookalikePod(t *testing.T) {
	tenant := newMatrixServer(t, round("forged"))
	kc := fake.NewClientset(pingerPod("tenant-a", "ovnhost-pinger-x", "n1", tenant, nil))
	src := PingerSource{Kube: kc, Node: "n1", Namespace: "ovnhost"}
	_, err := src.Latest(context.Background())
	if err == nil || !strings.Contains(err.Error(), "no pod of DaemonSet ovnhost/ovnhost-pinger runs on this node") {
		t.Fatalf("a tenant's lookalike pod: err = %v, want no pinger pod", err)
	}
	if n := tenant.hits.Load(); n != 0 {
		t.Fatalf("the node sent the tenant's pod %d requests", n)
	}
}

// In the pinger's namespace too, only the DaemonSet's own pods count, by
// their status.podIP; the tenant-writable ip_address annotation is never
// an address to dial.
func TestPingerRelayTakesOnlyTheDaemonSetsPods(t *testing.T) {
	real := newMatrixServer(t, round("n1"))
	other := newMatrixServer(t, round("forged"))
	cases := []struct {
		name string
		edit func(*corev1.Pod)
		want string
	}{
		{"no owner", func(p *corev1.Pod) { p.OwnerReferences = nil }, "not controlled by DaemonSet ovnhost/ovnhost-pinger"},
		{"another DaemonSet", func(p *corev1.Pod) { p.OwnerReferences[0].Name = "mine" }, "not controlled by DaemonSet"},
		{"another ServiceAccount", func(p *corev1.Pod) { p.Spec.ServiceAccountName = "default" }, `ServiceAccount "default", not ovnhost-pinger`},
		{"annotation only", func(p *corev1.Pod) {
			p.Status.PodIP = ""
			p.Annotations = map[string]string{"ovn.kubernetes.io/ip_address": other.ip}
		}, `status.podIP "" is no address`},
		{"pending", func(p *corev1.Pod) { p.Status.Phase = corev1.PodPending }, "Pending, not Running"},
		{"another node", func(p *corev1.Pod) { p.Spec.NodeName = "n2" }, `node "n2", not n1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			kc := fake.NewClientset(pingerPod("ovnhost", "p", "n1", other, c.edit))
			_, err := PingerSource{Kube: kc, Node: "n1", Namespace: "ovnhost"}.Latest(context.Background())
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "pod ovnhost/p ignored") {
				t.Fatalf("err = %v, want it to name the pod and %q", err, c.want)
			}
			if other.hits.Load() != 0 {
				t.Fatalf("the node asked a pod it must ignore")
			}
		})
	}
	kc := fake.NewClientset(pingerPod("ovnhost", "ovnhost-pinger-abc", "n1", real, nil))
	got, err := PingerSource{Kube: kc, Node: "n1", Namespace: "ovnhost"}.Latest(context.Background())
	if err != nil || !strings.Contains(string(got.(json.RawMessage)), `"node":"n1"`) {
		t.Fatalf("the DaemonSet's pod: %s %v", got, err)
	}
}

// A pinger answering without end is read up to the cap, then refused
// with an error naming the cap; a redirect is not followed.
func TestPingerRelayBoundsTheAnswer(t *testing.T) {
	huge := newMatrixServer(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"targets":["`))
		chunk := []byte(strings.Repeat("x", 64<<10))
		for { // without end, until the reader stops
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	kc := fake.NewClientset(pingerPod("ovnhost", "p", "n1", huge, nil))
	_, err := PingerSource{Kube: kc, Node: "n1", Namespace: "ovnhost", MaxBody: 1 << 20}.Latest(context.Background())
	if err == nil || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
		t.Fatalf("an endless answer: err = %v, want the cap named", err)
	}

	target := newMatrixServer(t, round("elsewhere"))
	redirect := newMatrixServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+"/anything", http.StatusFound)
	})
	kc = fake.NewClientset(pingerPod("ovnhost", "p", "n1", redirect, nil))
	_, err = PingerSource{Kube: kc, Node: "n1", Namespace: "ovnhost"}.Latest(context.Background())
	if err == nil || !strings.Contains(err.Error(), "redirect") || target.hits.Load() != 0 {
		t.Fatalf("a redirect: err = %v, target asked %d times", err, target.hits.Load())
	}
}

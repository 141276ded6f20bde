package kubeapi_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
)

// The real endpointslice controller turns a Service and a ready Pod into an
// EndpointSlice holding the pod's address.
func TestControllerManagerEndpointSlices(t *testing.T) {
	srv := kubeapi.Start(t)
	srv.StartControllerManager(t)
	kc := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The endpointslice controller leaves out pods whose Node it cannot find.
	if _, err := kc.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kc.CoreV1().Services("default").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p, err := kc.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "none"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.16.0.9", PodIPs: []corev1.PodIP{{IP: "10.16.0.9"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if _, err := kc.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w, err := kc.DiscoveryV1().EndpointSlices("default").Watch(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if ev.Type == watch.Error {
			t.Fatalf("watch: %v", ev.Object)
		}
		es, ok := ev.Object.(*discoveryv1.EndpointSlice)
		if !ok {
			continue
		}
		for _, e := range es.Endpoints {
			if len(e.Addresses) > 0 && e.Addresses[0] == "10.16.0.9" && e.Conditions.Ready != nil && *e.Conditions.Ready &&
				len(es.Ports) == 1 && es.Ports[0].Port != nil && *es.Ports[0].Port == 8080 {
				return
			}
		}
	}
	t.Fatalf("no EndpointSlice for service default/web with ready endpoint 10.16.0.9:8080 within 60s (is kube-controller-manager's endpointslice controller running?)")
}

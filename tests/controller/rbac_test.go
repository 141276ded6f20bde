package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// applyYAML creates every document of a multi-document YAML file.
func (e *env) applyYAML(path string) {
	e.t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---")) {
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			e.t.Fatalf("%s: %v", path, err)
		}
		if len(obj) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		gv, _ := schema.ParseGroupVersion(u.GetAPIVersion())
		res := strings.ToLower(u.GetKind()) + "s"
		r := e.dc.Resource(gv.WithResource(res))
		var err error
		if ns := u.GetNamespace(); ns != "" {
			_, err = r.Namespace(ns).Create(context.Background(), u, metav1.CreateOptions{})
		} else {
			_, err = r.Create(context.Background(), u, metav1.CreateOptions{})
		}
		if err != nil {
			e.t.Fatalf("%s: create %s %s: %v", path, u.GetKind(), u.GetName(), err)
		}
	}
}

// kubeconfigAs writes a kubeconfig that impersonates user.
func (e *env) kubeconfigAs(user string) string {
	e.t.Helper()
	cfg, err := clientcmd.LoadFromFile(e.srv.Kubeconfig)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, a := range cfg.AuthInfos {
		a.Impersonate = user
	}
	p := filepath.Join(e.t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// TestControllerWorksWithItsRBACOnly runs the controller as a ServiceAccount
// bound to testdata/controller-rbac.yaml: start-up (default Subnets, lease),
// pods, nodes, events and Subnet status all work with those rules alone.
func TestControllerWorksWithItsRBACOnly(t *testing.T) {
	e := newEnv(t)
	e.applyYAML(filepath.Join("testdata", "controller-rbac.yaml"))
	e.createNode("node-a", "192.168.10.11")
	kc := e.kubeconfigAs("system:serviceaccount:kube-system:ovnhost-controller")
	p := e.startControllerProcess("--kubeconfig", kc)
	p.waitReady(t, 60*time.Second)
	e.waitSubnetReady("ovn-default")
	e.createPod("default", "web", "node-a", nil)
	e.createPod("default", "bad", "node-a", map[string]string{annotations.IPAddress: "10.99.0.1"})
	e.waitFor(30*time.Second, "pod annotated, node annotated, event on the bad pod", func() (bool, string) {
		o, ok, _ := e.pods.GetStore().GetByKey("default/web")
		n, _, _ := e.nodes.GetStore().GetByKey("node-a")
		ev := strings.Join(e.events("default", "bad"), "|")
		if !ok || n == nil {
			return false, "objects missing"
		}
		return annotated(o.(*corev1.Pod)) && n.(*corev1.Node).Annotations[annotations.PortName] == "node-node-a" && strings.Contains(ev, "IPOutOfRange"),
			fmt.Sprint(o.(*corev1.Pod).Annotations, n.(*corev1.Node).Annotations, ev)
	})
	e.waitFor(30*time.Second, "ovn-default status counting the pod", func() (bool, string) {
		s := e.subnet("ovn-default")
		return s != nil && s.Status.V4UsingIPs == 1, fmt.Sprintf("%+v", s.Status)
	})
	p.mu.Lock()
	for _, l := range p.lines {
		if strings.Contains(l, "forbidden") {
			t.Errorf("controller hit a permission error: %s", l)
		}
	}
	p.mu.Unlock()

	// The impersonation is real: an identity without the rules is refused.
	nobody := e.startControllerProcess("--kubeconfig", e.kubeconfigAs("system:serviceaccount:kube-system:nobody"), "--identity=nobody")
	nobody.waitLine(t, "forbidden", 30*time.Second)
}

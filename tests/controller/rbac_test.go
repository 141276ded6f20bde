package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/yaml"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/tests/testenv"
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
		if u.GetKind() == "ProviderNetwork" {
			res = kubeovnv1.ProviderNetworkGVR.Resource // not the plural the kind suggests
		}
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

// waitAllowed waits until the API server's authorizer lets user do verb
// on resource (group/resource) in namespace ns: RBAC objects just created
// are in force only once the authorizer's own cache has them.
func (e *env) waitAllowed(user, verb, group, resource, ns string) {
	e.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		r, err := e.kc.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{User: user,
			ResourceAttributes: &authzv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource}}}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		last = r.Status.Reason
		return r.Status.Allowed, nil
	})
	if err != nil {
		e.t.Fatalf("%s may not %s %s in %q 30s after its RBAC was applied: %v (%s)", user, verb, resource, ns, err, last)
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

// TestControllerWorksWithItsRBACOnly runs the controller, with its default
// features (Services, NetworkPolicy), as the ServiceAccount of the shipped
// packaging/kubernetes/base/rbac-controller.yaml, bound to those rules
// alone: start-up (default Subnets, lease in its namespace), pods, nodes,
// events, Subnet status and finalizers all work, and nothing is forbidden.
func TestControllerWorksWithItsRBACOnly(t *testing.T) {
	e := newEnv(t)
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	e.applyYAML(filepath.Join(base, "namespace.yaml"))
	e.applyYAML(filepath.Join(base, "rbac-controller.yaml"))
	e.createNode("node-a", "192.168.10.11")
	sa := "system:serviceaccount:ovnhost:ovnhost-controller"
	e.waitAllowed(sa, "list", "", "pods", "")
	e.waitAllowed(sa, "create", "coordination.k8s.io", "leases", "ovnhost")
	kc := e.kubeconfigAs(sa)
	p := e.startControllerProcess("--kubeconfig", kc, "--lease-namespace", "ovnhost")
	p.waitReady(t, 60*time.Second)
	e.waitSubnetReady("ovn-default")
	e.waitFor(30*time.Second, "finalizer on ovn-default", func() (bool, string) {
		s := e.subnet("ovn-default")
		return s != nil && slices.Contains(s.Finalizers, subnets.SubnetFinalizer), fmt.Sprint(s.Finalizers)
	})
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
	for _, l := range p.Output() {
		if strings.Contains(l, "forbidden") {
			t.Errorf("controller hit a permission error: %s", l)
		}
	}

	// The impersonation is real: an identity without the rules is refused.
	nobody := e.startControllerProcess("--kubeconfig", e.kubeconfigAs("system:serviceaccount:ovnhost:nobody"), "--identity=nobody", "--lease-namespace", "ovnhost")
	nobody.waitLine(t, "forbidden", 30*time.Second)
}

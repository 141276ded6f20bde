package packaging

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

type kube struct {
	t          *testing.T
	bin        string
	kubeconfig string
}

func (k kube) run(stdin string, args ...string) (string, error) {
	cmd := exec.Command(k.bin, append([]string{"--kubeconfig", k.kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (k kube) must(stdin string, args ...string) string {
	k.t.Helper()
	out, err := k.run(stdin, args...)
	if err != nil {
		k.t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// TestManifestsServerDryRun renders the kustomize base with kubectl and has
// a real kube-apiserver validate all of it (kubectl apply --dry-run=server:
// schema, strict field validation, admission); broken variants must fail.
// Then it applies the base for real and asks the API server what each
// service account may do: least privilege, as the authorizer sees it.
func TestManifestsServerDryRun(t *testing.T) {
	srv := kubeapi.Start(t)
	k := kube{t: t, bin: kubectl(t), kubeconfig: srv.Kubeconfig}
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	rendered := k.must("", "kustomize", base)
	for _, kind := range []string{"Namespace", "CustomResourceDefinition", "ConfigMap", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "DaemonSet", "Deployment", "Job", "CronJob"} {
		if !strings.Contains(rendered, "\nkind: "+kind+"\n") {
			t.Errorf("rendered base has no %s", kind)
		}
	}
	// Namespaced objects cannot be dry-run into a namespace that does not
	// exist yet: create the namespace as `kubectl apply` would first.
	k.must("", "apply", "-f", filepath.Join(base, "namespace.yaml"))
	if out, err := k.run(rendered, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err != nil {
		t.Fatalf("the API server rejects the manifests:\n%s", out)
	}

	broken := map[string][2]string{
		"misspelled field":      {"\n        readinessProbe:\n", "\n        readinesProbe:\n"},
		"bad probe port":        {"path: /readyz\n            port: 10665\n", "path: /readyz\n            port: 70000\n"},
		"unknown hostPath type": {"type: CharDevice\n", "type: CharDev\n"},
		"RBAC verbs not a list": {"  verbs:\n  - create\n", "  verbs: create\n"},
	}
	for name, r := range broken {
		bad := strings.Replace(rendered, r[0], r[1], 1)
		if bad == rendered {
			t.Errorf("%s: pattern %q not in the manifests", name, r[0])
			continue
		}
		if out, err := k.run(bad, "apply", "--dry-run=server", "--validate=strict", "-f", "-"); err == nil {
			t.Errorf("%s: the API server accepted a broken manifest:\n%s", name, out)
		}
	}

	// Apply for real and check the authorizer's answers.
	k.must(rendered, "apply", "--validate=strict", "-f", "-")
	can := func(sa, verb, resource string, extra ...string) bool {
		args := append([]string{"auth", "can-i", verb, resource, "--as=system:serviceaccount:ovnhost:" + sa}, extra...)
		out, err := k.run("", args...)
		if err != nil && !strings.HasSuffix(strings.TrimSpace(out), "no") {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return err == nil
	}
	for _, c := range []struct {
		sa, verb, resource string
		extra              []string
		want               bool
	}{
		{"ovnhost-node", "list", "pods", nil, true},
		{"ovnhost-node", "watch", "pods", nil, true},
		{"ovnhost-node", "patch", "pods", nil, false},
		{"ovnhost-node", "delete", "pods", nil, false},
		{"ovnhost-node", "patch", "nodes", nil, true},
		{"ovnhost-node", "delete", "nodes", nil, false},
		{"ovnhost-node", "list", "subnets.kubeovn.io", nil, true},
		{"ovnhost-node", "list", "events", []string{"-A"}, true},
		{"ovnhost-node", "create", "events", []string{"-A"}, true},
		{"ovnhost-node", "get", "pods", []string{"-A"}, false},
		{"ovnhost-node", "patch", "subnets.kubeovn.io", []string{"--subresource=status"}, true},
		{"ovnhost-node", "patch", "subnets.kubeovn.io", nil, false},
		{"ovnhost-node", "delete", "events", []string{"-A"}, false},
		{"ovnhost-node", "update", "subnets.kubeovn.io", nil, false},
		{"ovnhost-node", "get", "secrets", []string{"-A"}, false},
		{"ovnhost-node", "create", "leases.coordination.k8s.io", []string{"-n", "ovnhost"}, false},
		// The node API asks the API server about its callers.
		{"ovnhost-node", "create", "tokenreviews.authentication.k8s.io", nil, true},
		{"ovnhost-node", "create", "subjectaccessreviews.authorization.k8s.io", nil, true},
		{"ovnhost-node", "get", "configmaps/extension-apiserver-authentication", []string{"-n", "kube-system"}, true},
		{"ovnhost-node", "get", "configmaps", []string{"-n", "ovnhost"}, false},
		{"ovnhost-pinger", "list", "pods", []string{"-n", "ovnhost"}, true},
		{"ovnhost-pinger", "list", "pods", []string{"-n", "default"}, false},
		{"ovnhost-pinger", "list", "nodes", nil, true},
		{"ovnhost-pinger", "patch", "nodes", nil, false},
		{"ovnhost-controller", "patch", "pods", nil, true},
		{"ovnhost-controller", "delete", "pods", nil, false},
		{"ovnhost-controller", "create", "pods", nil, false},
		{"ovnhost-controller", "patch", "nodes", nil, true},
		{"ovnhost-controller", "list", "namespaces", nil, true},
		{"ovnhost-controller", "create", "subnets.kubeovn.io", nil, true},
		{"ovnhost-controller", "patch", "subnets.kubeovn.io/status", nil, true},
		{"ovnhost-controller", "delete", "subnets.kubeovn.io", nil, false},
		{"ovnhost-controller", "get", "secrets", []string{"-A"}, false},
		{"ovnhost-controller", "update", "leases.coordination.k8s.io/ovnhost-controller", []string{"-n", "ovnhost"}, true},
		{"ovnhost-controller", "update", "leases.coordination.k8s.io/other", []string{"-n", "ovnhost"}, false},
		{"ovnhost-controller", "create", "leases.coordination.k8s.io", []string{"-n", "kube-system"}, false},
		// ovnhost certs: the one Secret of the OVN certificates.
		{"ovnhost-certs", "get", "secrets/ovnhost-ovn-tls", []string{"-n", "ovnhost"}, true},
		{"ovnhost-certs", "update", "secrets/ovnhost-ovn-tls", []string{"-n", "ovnhost"}, true},
		{"ovnhost-certs", "create", "secrets", []string{"-n", "ovnhost"}, true},
		{"ovnhost-certs", "get", "secrets/other", []string{"-n", "ovnhost"}, false},
		{"ovnhost-certs", "update", "secrets/other", []string{"-n", "ovnhost"}, false},
		{"ovnhost-certs", "list", "secrets", []string{"-n", "ovnhost"}, false},
		{"ovnhost-certs", "delete", "secrets/ovnhost-ovn-tls", []string{"-n", "ovnhost"}, false},
		{"ovnhost-certs", "create", "secrets", []string{"-n", "kube-system"}, false},
		{"ovnhost-node", "get", "secrets/ovnhost-ovn-tls", []string{"-n", "ovnhost"}, false},
		{"ovnhost-controller", "get", "secrets/ovnhost-ovn-tls", []string{"-n", "ovnhost"}, false},
	} {
		got := can(c.sa, c.verb, c.resource, c.extra...)
		// The authorizer reads its own cache of the roles just applied: a
		// grant may take a moment to be in force (the first ones are
		// waited for; a denial is only ever checked after them).
		for deadline := time.Now().Add(30 * time.Second); c.want && !got && time.Now().Before(deadline); {
			got = can(c.sa, c.verb, c.resource, c.extra...)
		}
		if got != c.want {
			t.Errorf("%s can %s %s %v: %v, want %v", c.sa, c.verb, c.resource, c.extra, got, c.want)
		}
	}
	checkOwnNodePolicy(t, srv)
	checkServiceExternalIPsPolicy(t, srv)
	checkCertsJob(t, srv.Kubeconfig)
}

// checkServiceExternalIPsPolicy: a tenant (all verbs on Services,
// ConfigMaps, Endpoints and pods in its namespace, nothing more) may not give a Service an external address outside the admin's
// allowlist (ConfigMap ovnhost-service-external-ips: empty by default);
// one inside it is admitted once the admin lists its range.
func checkServiceExternalIPsPolicy(t *testing.T, srv *kubeapi.Server) {
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The namespace admin's rights on what matters here (the built-in
	// ClusterRole admin is aggregated by kube-controller-manager, which this
	// API server runs without).
	if _, err := admin.RbacV1().Roles("tenant").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services", "configmaps", "endpoints", "pods"}, Verbs: []string{"*"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().RoleBindings("tenant").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-admin"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "tenant-admin"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "tenant-user"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tc := rest.CopyConfig(srv.Config)
	tc.Impersonate = rest.ImpersonationConfig{UserName: "tenant-user"}
	tenant := kubernetes.NewForConfigOrDie(tc)
	create := func(name string, mut func(*corev1.Service)) error {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 53, Protocol: corev1.ProtocolUDP}}}}
		mut(svc)
		_, err := tenant.CoreV1().Services("tenant").Create(ctx, svc, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}
	// until retries a real request until its answer is the one wanted (the
	// API server loads policies and their parameters asynchronously).
	until := func(what string, denied bool, try func() error) error {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := try()
			if (err != nil) == denied {
				return err
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: got %v", what, err)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	// The RBAC authorizer reads its own cache: the tenant's binding is in
	// force once a plain Service is admitted (forbidden before that).
	until("the tenant's RoleBinding takes effect (a plain Service admitted)", false, func() error { return create("plain", func(*corev1.Service) {}) })
	hijack := func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"10.96.0.10"} }
	err := until("an externalIP with the default (empty) allowlist is admitted: the policy is not enforced", true, func() error { return create("dns", hijack) })
	if !apierrors.IsInvalid(err) && !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "spec.externalIPs 10.96.0.10") ||
		!strings.Contains(err.Error(), "tenant/dns") || !strings.Contains(err.Error(), "ovnhost-service-external-ips") {
		t.Fatalf("the refusal does not name the Service, the address and the allowlist: %v", err)
	}
	if err := create("plain", func(*corev1.Service) {}); err != nil {
		t.Fatalf("a Service without external addresses is refused: %v", err)
	}
	lb := func(ip string) func(*corev1.Service) {
		return func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeLoadBalancer; s.Spec.LoadBalancerIP = ip }
	}
	if err := create("lb", lb("198.51.100.7")); err == nil || !strings.Contains(err.Error(), "spec.loadBalancerIP 198.51.100.7") {
		t.Fatalf("a loadBalancerIP outside the allowlist: %v", err)
	}

	// The admin allows 198.51.100.0/24: an address there is admitted, the
	// cluster DNS still is not; the tenant cannot widen the list itself.
	if _, err := admin.CoreV1().ConfigMaps("ovnhost").Patch(ctx, "ovnhost-service-external-ips", types.MergePatchType,
		[]byte(`{"data":{"cidrs":"198.51.100.0/24, 2001:db8:1::/64"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	until("an externalIP inside the allowlist", false, func() error {
		return create("public", func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"198.51.100.7"} })
	})
	until("a loadBalancerIP inside the allowlist", false, func() error { return create("lb", lb("198.51.100.8")) })
	if err := create("dns", hijack); err == nil {
		t.Fatal("the cluster DNS address is admitted once another range is allowed")
	}
	if _, err := tenant.CoreV1().ConfigMaps("ovnhost").Patch(ctx, "ovnhost-service-external-ips", types.MergePatchType,
		[]byte(`{"data":{"cidrs":"0.0.0.0/0"}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Fatalf("the tenant may edit the allowlist: %v", err)
	}
}

// checkOwnNodePolicy uses real service-account tokens of ovnhost-node, as
// the DaemonSet pod (token bound to its Pod) and a systemd or Talos node
// (token bound to its Node, docs/install.md) hold them, and checks the
// admission policy: its own node's ovn.kubernetes.io/ annotations only.
func checkOwnNodePolicy(t *testing.T, srv *kubeapi.Server) {
	admin := kubernetes.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	uids := map[string]types.UID{}
	for _, n := range []string{"node-a", "node-b"} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[n] = node.UID
	}
	pod, err := admin.CoreV1().Pods("ovnhost").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "ovnhost-node-test"},
		Spec: corev1.PodSpec{
			NodeName: "node-a", ServiceAccountName: "ovnhost-node",
			Containers: []corev1.Container{{Name: "c", Image: "ovnhost"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := func(kind, name string, uid types.UID) *kubernetes.Clientset {
		tr, err := admin.CoreV1().ServiceAccounts("ovnhost").CreateToken(ctx, "ovnhost-node", &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: kind, APIVersion: "v1", Name: name, UID: uid}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token bound to %s %s: %v", kind, name, err)
		}
		cfg := rest.AnonymousClientConfig(srv.Config)
		cfg.BearerToken = tr.Status.Token
		return kubernetes.NewForConfigOrDie(cfg)
	}
	for _, c := range []struct {
		how string
		cs  *kubernetes.Clientset
	}{
		{"token bound to its Pod", token("Pod", pod.Name, pod.UID)},
		{"token bound to its Node", token("Node", "node-a", uids["node-a"])},
	} {
		patch := func(node, body string) error {
			_, err := c.cs.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err
		}
		// What the node daemon writes once its chassis exists (supervisor/egress).
		const own = `{"metadata":{"annotations":{"ovn.kubernetes.io/chassis":"c1","ovnhost.io/node-features":"gateway-ipv6"}}}`
		// The API server loads a new policy asynchronously: retry the request
		// that the policy must deny until it is denied (each try is a real
		// request; the deadline bounds it).
		deadline := time.Now().Add(30 * time.Second)
		for patch("node-b", own) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("%s: ovnhost-node may annotate another node: the admission policy is not enforced", c.how)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(50 * time.Millisecond):
			}
		}
		if err := patch("node-a", own); err != nil {
			t.Errorf("%s: ovnhost-node may not annotate its own node: %v", c.how, err)
		}
		if err := patch("node-a", `{"metadata":{"annotations":{"ovn.kubernetes.io/external-gw-nic":"eth1"}}}`); err != nil {
			t.Errorf("%s: ovnhost-node may not record its bridged external NIC: %v", c.how, err)
		}
		if err := patch("node-a", `{"metadata":{"labels":{"evil":"true"}}}`); err == nil {
			t.Errorf("%s: ovnhost-node may label its own node", c.how)
		}
		if err := patch("node-a", `{"metadata":{"annotations":{"other.io/x":"y"}}}`); err == nil {
			t.Errorf("%s: ovnhost-node may write annotations outside ovn.kubernetes.io/", c.how)
		}
		// The controller's node annotations are not the node's to write:
		// only the chassis key is (issue 13).
		for _, key := range []string{"ip_address", "cidr", "gateway", "port_name", "allocated"} {
			if err := patch("node-a", `{"metadata":{"annotations":{"ovn.kubernetes.io/`+key+`":"x"}}}`); err == nil {
				t.Errorf("%s: ovnhost-node may write the controller's node annotation ovn.kubernetes.io/%s", c.how, key)
			}
		}
		// The node API's address and certificate pin (netctl reads them).
		if err := patch("node-a", `{"metadata":{"annotations":{"ovnhost.io/node-api-address":"10.0.0.1:10666","ovnhost.io/node-api-cert-sha256":"ab"}}}`); err != nil {
			t.Errorf("%s: ovnhost-node may not publish its node API: %v", c.how, err)
		}
		if err := patch("node-a", `{"metadata":{"annotations":{"ovnhost.io/other":"y"}}}`); err == nil {
			t.Errorf("%s: ovnhost-node may write ovnhost.io/ annotations other than node-api-*", c.how)
		}
		if err := patch("node-a", `{"spec":{"unschedulable":true}}`); err == nil {
			t.Errorf("%s: ovnhost-node may change its node's spec", c.how)
		}
		if _, err := c.cs.CoreV1().Pods("ovnhost").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=node-a"}); err != nil {
			t.Errorf("%s: ovnhost-node may not list the pods of its node: %v", c.how, err)
		}
	}
}

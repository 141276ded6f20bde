package controller_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// TestControllerKeepsVpcNATStatusWithItsRBAC: with the Vpc and the
// OVN-native NAT CRDs installed, the controller running as the shipped
// ServiceAccount reads OvnEips, OvnFips, OvnSnatRules and OvnDnatRules and
// writes their status (here: not ready, no external gateway configured
// and no Subnet in the VPC, the reason named), and hits no permission error.
func TestControllerKeepsVpcNATStatusWithItsRBAC(t *testing.T) {
	e := newEnv(t)
	base := filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base")
	for _, crd := range []string{"crd-vpcs.yaml", "crd-ovn-eips.yaml", "crd-ovn-fips.yaml", "crd-ovn-snat-rules.yaml", "crd-ovn-dnat-rules.yaml"} {
		e.srv.InstallCRD(t, filepath.Join(base, crd))
	}
	e.applyYAML(filepath.Join(base, "namespace.yaml"))
	e.applyYAML(filepath.Join(base, "rbac-controller.yaml"))
	ctx := context.Background()
	create := func(gvr schema.GroupVersionResource, kind, name string, spec map[string]any) {
		t.Helper()
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": kind, "metadata": map[string]any{"name": name}, "spec": spec}}
		if _, err := e.dc.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(kubeovnv1.VpcGVR, "Vpc", "vpc-r", map[string]any{"enableExternal": true})
	create(kubeovnv1.OvnEipGVR, "OvnEip", "eip-r", map[string]any{"v4Ip": "172.56.0.40", "type": "nat"})
	create(kubeovnv1.OvnFipGVR, "OvnFip", "fip-r", map[string]any{"ovnEip": "eip-r", "vpc": "vpc-r", "v4Ip": "10.230.0.5"})
	create(kubeovnv1.OvnSnatRuleGVR, "OvnSnatRule", "snat-r", map[string]any{"ovnEip": "eip-r", "vpc": "vpc-r", "v4IpCidr": "10.230.0.0/24"})
	create(kubeovnv1.OvnDnatRuleGVR, "OvnDnatRule", "dnat-r", map[string]any{"ovnEip": "eip-r", "vpc": "vpc-r", "v4Ip": "10.230.0.5", "internalPort": "80", "externalPort": "8080"})

	sa := "system:serviceaccount:ovnhost:ovnhost-controller"
	e.waitAllowed(sa, "patch", "kubeovn.io", "ovn-fips/status", "")
	e.waitAllowed(sa, "create", "coordination.k8s.io", "leases", "ovnhost")
	p := e.startControllerProcess("--kubeconfig", e.kubeconfigAs(sa), "--lease-namespace", "ovnhost")
	p.waitReady(t, 60*time.Second)

	message := func(gvr schema.GroupVersionResource, name string) string {
		u, err := e.dc.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		ready, _, _ := unstructured.NestedBool(u.Object, "status", "ready")
		for _, c := range conds {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" {
				return fmt.Sprintf("ready=%v %v", ready, m["message"])
			}
		}
		return "no condition"
	}
	want := map[schema.GroupVersionResource][2]string{
		kubeovnv1.OvnEipGVR:      {"eip-r", "the external network is not programmed"},
		kubeovnv1.OvnFipGVR:      {"fip-r", `spec.v4Ip 10.230.0.5 is in no Subnet of Vpc "vpc-r"`},
		kubeovnv1.OvnSnatRuleGVR: {"snat-r", `spec.v4IpCidr 10.230.0.0/24 is in no Subnet of Vpc "vpc-r"`},
		kubeovnv1.OvnDnatRuleGVR: {"dnat-r", `spec.v4Ip 10.230.0.5 is in no Subnet of Vpc "vpc-r"`},
	}
	e.waitFor(60*time.Second, "the NAT objects' statuses written by the controller", func() (bool, string) {
		var seen []string
		ok := true
		for gvr, w := range want {
			m := message(gvr, w[0])
			seen = append(seen, w[0]+": "+m)
			ok = ok && strings.HasPrefix(m, "ready=false") && strings.Contains(m, w[1])
		}
		return ok, strings.Join(seen, "; ")
	})
	for _, l := range p.Output() {
		if strings.Contains(l, "forbidden") {
			t.Errorf("controller hit a permission error: %s", l)
		}
	}
}

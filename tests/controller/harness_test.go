package controller_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/tests/harness/kubeapi"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func crdPath() string {
	return filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-subnets.yaml")
}

func ipCRDPath() string {
	return filepath.Join(testenv.RepoRoot(), "packaging", "kubernetes", "base", "crd-ips.yaml")
}

func subnetObj(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

// TestSubnetAdmissionRejectsBadFields: the shipped CRD's schema refuses
// malformed CIDRs, gateways outside the CIDR and bad excludeIps at admission,
// with a message that names the field and the fix.
func TestSubnetAdmissionRejectsBadFields(t *testing.T) {
	srv := kubeapi.Start(t)
	srv.InstallCRD(t, crdPath())
	dc := dynamic.NewForConfigOrDie(srv.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	bad := []struct {
		spec map[string]any
		want string
	}{
		{map[string]any{"cidrBlock": "10.300.0.0/16"}, "cidrBlock must be a CIDR"},
		{map[string]any{"cidrBlock": "10.20.0.0"}, "cidrBlock must be a CIDR"},
		{map[string]any{"cidrBlock": "10.20.0.0/16", "gateway": "10.21.0.1"}, "gateway must be an address inside cidrBlock"},
		{map[string]any{"cidrBlock": "10.20.0.0/16", "gateway": "gw"}, "gateway must be an IP address"},
		{map[string]any{"cidrBlock": "10.20.0.0/16", "excludeIps": []any{"10.20.0.1-10.20.0.5"}}, "excludeIps entries must be"},
		{map[string]any{"cidrBlock": "10.20.0.0/16", "gatewayType": "sideways"}, "gatewayType"},
		{map[string]any{"gateway": "10.20.0.1"}, "cidrBlock"},
	}
	for i, b := range bad {
		_, err := dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("bad", b.spec), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("case %d %v: got %v, want rejection mentioning %q", i, b.spec, err, b.want)
		}
	}
	good := map[string]any{"cidrBlock": "10.20.0.0/16,fd00:20::/64", "gateway": "10.20.0.1,fd00:20::1", "excludeIps": []any{"10.20.0.2..10.20.0.9", "10.20.1.1"}}
	if _, err := dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, subnetObj("good", good), metav1.CreateOptions{}); err != nil {
		t.Fatalf("valid dual-stack subnet rejected: %v", err)
	}
}

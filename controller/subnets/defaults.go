package subnets

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Defaults are the default Subnets' settings ("" = Kube-OVN's defaults).
type Defaults struct {
	CIDR, Gateway string // ovn-default: "" = 10.16.0.0/16, first address
	Exclude       []string
	JoinCIDR      string // join: "" = 100.64.0.0/16
}

// EnsureDefaults creates the Subnets join and ovn-default if absent.
func EnsureDefaults(ctx context.Context, dc dynamic.Interface, d Defaults) error {
	def := d.CIDR
	if def == "" {
		def = ovnnet.DefaultSubnetCIDR
	}
	join := d.JoinCIDR
	if join == "" {
		join = ovnnet.JoinSubnetCIDR
	}
	excl := []any{}
	for _, e := range d.Exclude {
		excl = append(excl, e)
	}
	defSpec := map[string]any{"default": true, "protocol": "IPv4", "cidrBlock": def, "natOutgoing": true, "gatewayType": "distributed", "provider": "ovn", "excludeIps": excl}
	if d.Gateway != "" {
		defSpec["gateway"] = d.Gateway
	}
	for _, s := range []struct {
		name string
		spec map[string]any
	}{
		{ovnnet.JoinSubnet, map[string]any{"protocol": "IPv4", "cidrBlock": join, "gatewayType": "distributed", "provider": "ovn"}},
		{ovnnet.DefaultSubnet, defSpec},
	} {
		if strings.Contains(s.spec["cidrBlock"].(string), ":") {
			s.spec["protocol"] = "IPv6"
			if strings.Contains(s.spec["cidrBlock"].(string), ",") {
				s.spec["protocol"] = "Dual"
			}
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
			"metadata": map[string]any{"name": s.name}, "spec": s.spec}}
		_, err := dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("kube: creating Subnet %q: the Subnet CRD is not installed; apply packaging/kubernetes/base/crd-subnets.yaml: %w", s.name, err)
			}
			return fmt.Errorf("kube: creating Subnet %q: %w", s.name, err)
		}
	}
	return nil
}

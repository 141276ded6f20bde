package v1

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func obj(spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
		"metadata": map[string]any{"name": "s"}, "spec": spec}}
}

func TestValidate(t *testing.T) {
	cases := []struct {
		spec   map[string]any
		reason string
		text   string
	}{
		{map[string]any{"cidrBlock": "10.1.0.0/16", "colour": "blue"}, "UnknownField", "spec.colour"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "vlan": "v10"}, "UnsupportedField", "spec.vlan"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "provider": "macvlan.default"}, "UnsupportedField", "spec.provider"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "private": true}, "UnsupportedField", "private"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "protocol": "Dual"}, "ProtocolMismatch", "set protocol to IPv4"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "gateway": "10.2.0.1"}, "InvalidField", "outside cidrBlock"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "mtu": "big"}, "InvalidField", ""},
	}
	for _, c := range cases {
		_, _, p := Validate(obj(c.spec))
		if p == nil || p.Reason != c.reason || !strings.Contains(p.Message, c.text) {
			t.Errorf("%v: got %+v, want %s containing %q", c.spec, p, c.reason, c.text)
		}
	}
	cfg, s, p := Validate(obj(map[string]any{"cidrBlock": "10.1.0.0/16,fd00::/64", "protocol": "Dual", "provider": "ovn",
		"gatewayType": "centralized", "gatewayNode": "n1", "natOutgoing": true, "namespaces": []any{"a"}, "mtu": int64(1400)}))
	if p != nil || len(cfg.CIDRs) != 2 || s.Spec.GatewayNode != "n1" || s.Spec.MTU != 1400 {
		t.Fatalf("valid subnet: %+v %+v %+v", cfg, s, p)
	}
}

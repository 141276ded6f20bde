package v1

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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
		{map[string]any{"cidrBlock": "10.1.0.0/16", "provider": "macvlan.default"}, "UnsupportedField", "spec.provider"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "vpc": "team-a", "vlan": "v100"}, "UnsupportedField", `spec.vlan "v100" in custom VPC "team-a"`},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "private": true, "allowSubnets": []any{"10.2.0.0"}}, "InvalidField", `allowSubnets entry "10.2.0.0"`},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "acls": []any{map[string]any{"direction": "sideways", "priority": int64(1), "match": "ip", "action": "drop"}}}, "UnsupportedField", "spec.acls[0].direction"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "enableLb": "yes"}, "InvalidField", ""},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "protocol": "Dual"}, "ProtocolMismatch", "set protocol to IPv4"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "gateway": "10.2.0.1"}, "InvalidField", "outside cidrBlock"},
		{map[string]any{"cidrBlock": "10.1.0.0/16", "mtu": "big"}, "InvalidField", ""},
		// A dual-stack underlay subnet with only its IPv4 gateway: the
		// physical router's IPv6 address is not guessed.
		{map[string]any{"cidrBlock": "192.168.50.0/24,fd00:50::/64", "gateway": "192.168.50.254", "vlan": "vlan50"}, "InvalidField",
			`subnet "s": gateway "192.168.50.254" has no IPv6 address but cidrBlock "192.168.50.0/24,fd00:50::/64" is dual-stack; the subnet is underlay (spec.vlan "vlan50"): its pods' IPv6 default route goes to the physical router of fd00:50::/64, whose address ovnhost does not guess; give one gateway per family: gateway: "192.168.50.254,<the IPv6 gateway in fd00:50::/64>"`},
		{map[string]any{"cidrBlock": "192.168.50.0/24,fd00:50::/64", "gateway": "fd00:50::1", "vlan": "vlan50"}, "InvalidField",
			`gateway "fd00:50::1" has no IPv4 address`},
		{map[string]any{"cidrBlock": "10.1.0.0/16,fd00::/64", "gateway": "10.1.0.1"}, "InvalidField", "its pods would get no IPv6 default route"},
		// Two IPv4 gateways pass the CRD's count rule; the first is kept in the fix.
		{map[string]any{"cidrBlock": "10.1.0.0/16,fd00::/64", "gateway": "10.1.0.1,10.1.0.2", "vlan": "v1"}, "InvalidField",
			`gateway: "10.1.0.1,<the IPv6 gateway in fd00::/64>"`},
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
	// Kube-OVN takes a dual-stack gateway in either order.
	cfg, _, p = Validate(obj(map[string]any{"cidrBlock": "192.168.50.0/24,fd00:50::/64", "gateway": "fd00:50::fe, 192.168.50.254", "vlan": "vlan50"}))
	if p != nil || fmt.Sprint(cfg.Gateways) != "[192.168.50.254 fd00:50::fe]" {
		t.Errorf("dual-stack gateway in the other order: gateways %v, problem %+v", cfg.Gateways, p)
	}
}

func TestNotAppliedFieldsAndMessage(t *testing.T) {
	cases := []struct {
		spec   SubnetSpec
		fields []string
		want   []string // sentences, in this order
	}{
		{SubnetSpec{}, nil, nil},
		{SubnetSpec{GatewayType: "distributed"}, nil, nil},
		{SubnetSpec{GatewayNode: "  "}, nil, nil},
		// natOutgoing is applied (egress masqueraded on each pod's node).
		{SubnetSpec{NatOutgoing: true, GatewayType: "distributed"}, nil, nil},
		// Centralized gateways are applied.
		{SubnetSpec{GatewayType: "centralized"}, nil, nil},
		{SubnetSpec{NatOutgoing: true, GatewayType: "centralized", GatewayNode: "n1,n2"}, nil, nil},
		{SubnetSpec{GatewayNode: "n1"}, []string{"gatewayNode"},
			[]string{"gatewayNode is not applied to a distributed subnet:"}},
		// Underlay subnets: logicalGateway is applied; what needs the overlay's gateways is not.
		{SubnetSpec{Vlan: "v10", LogicalGateway: true, NatOutgoing: true}, nil, nil},
		{SubnetSpec{Vlan: "v10", GatewayType: "centralized", GatewayNode: "n1", NatOutgoing: true, U2OInterconnection: true},
			[]string{"gatewayType", "natOutgoing"},
			[]string{"gatewayType: centralized is not applied to an underlay subnet:", "natOutgoing is not applied to an underlay subnet"}},
		{SubnetSpec{Vlan: "v10", U2OInterconnection: true, U2OFeatures: &U2OFeatures{OverlayOnlyRouting: true}}, []string{"u2oFeatures"}, []string{"u2oFeatures.overlayOnlyRouting is not applied:"}},
		// Kube-OVN's stored defaults ask for nothing.
		{SubnetSpec{Vpc: "ovn-cluster", Provider: "ovn", EnableLb: ptr(true), GatewayType: "distributed", RouteTable: ""}, nil, nil},
		// enableLb: false is honoured only without load balancers (with them, they stay on every switch).
		{SubnetSpec{EnableLb: ptr(false)}, []string{"enableLb"}, []string{"enableLb: false is not applied:"}},
		{SubnetSpec{EnableDHCP: true, EnableEcmp: true, RouteTable: "rt1", HtbQos: "htbqos-high"}, []string{"enableDHCP", "enableEcmp", "routeTable", "htbqos"},
			[]string{"enableDHCP is not applied:", "enableEcmp is not applied:", "routeTable is not applied:", "htbqos is not applied:"}},
	}
	for _, c := range cases {
		got := NotAppliedFields(c.spec, Settings{EnableLB: true})
		if !slices.Equal(got, c.fields) {
			t.Errorf("%+v: fields %v, want %v", c.spec, got, c.fields)
		}
		msg := NotAppliedMessage(got)
		if len(c.want) == 0 {
			if msg != "" {
				t.Errorf("%+v: message %q, want none", c.spec, msg)
			}
			continue
		}
		// One sentence per field, in spec order, each with its consequence after the colon.
		sentences := strings.SplitAfter(msg, ". ")
		if len(sentences) != len(c.want) {
			t.Errorf("%+v: %d sentences in %q, want %d", c.spec, len(sentences), msg, len(c.want))
			continue
		}
		for i, s := range sentences {
			s = strings.TrimSpace(s)
			if !strings.HasPrefix(s, c.want[i]) || !strings.HasSuffix(s, ".") || len(strings.TrimSpace(s[strings.Index(s, ":")+1:])) < 10 {
				t.Errorf("%+v: sentence %d %q, want it to start with %q and state a consequence", c.spec, i, s, c.want[i])
			}
		}
	}
	// The message depends on the set only, not on the order it is given in.
	if a, b := NotAppliedMessage([]string{"gatewayNode", "vlan"}), NotAppliedMessage([]string{"vlan", "gatewayNode"}); a != b {
		t.Errorf("order changes the message: %q vs %q", a, b)
	}
	if NotAppliedMessage(nil) != "" || NotAppliedMessage([]string{"vlan"}) != "" {
		t.Error("no (known) field must give an empty message")
	}
	if f := NotAppliedFields(SubnetSpec{EnableLb: ptr(false)}, Settings{EnableLB: false}); len(f) != 0 {
		t.Errorf("enableLb: false without load balancers is applied, got %v", f)
	}
}

func ptr[T any](v T) *T { return &v }

// TestEveryKubeOVNFieldIsKnown: each JSON field of SubnetSpec is in
// KnownFields and back, so no Kube-OVN field is unknown and the table says
// what happens to each.
func TestEveryKubeOVNFieldIsKnown(t *testing.T) {
	var tags []string
	rt := reflect.TypeOf(SubnetSpec{})
	for i := 0; i < rt.NumField(); i++ {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		tags = append(tags, name)
		if !slices.Contains(KnownFields, name) {
			t.Errorf("field %s (%s) missing from KnownFields", rt.Field(i).Name, name)
		}
	}
	for _, k := range KnownFields {
		if !slices.Contains(tags, k) {
			t.Errorf("KnownFields has %q, SubnetSpec does not", k)
		}
	}
}

// TestKubeOVNSubnetsAccepted: the eight Subnets of testdata (Kube-OVN's
// stored defaults and documentation examples) are valid and ask for
// nothing that is not applied.
func TestKubeOVNSubnetsAccepted(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "kubeovn-subnets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, doc := range strings.Split(string(b), "\n---") {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: obj}
		_, s, p := Validate(u)
		if p != nil {
			t.Errorf("%s refused: %s: %s", u.GetName(), p.Reason, p.Message)
			continue
		}
		if f := NotAppliedFields(s.Spec, Settings{EnableLB: true}); len(f) != 0 {
			t.Errorf("%s: not applied %v", u.GetName(), f)
		}
		n++
	}
	if n != 8 {
		t.Fatalf("%d Subnets accepted, want 8", n)
	}
}

func TestCondition(t *testing.T) {
	s := &Subnet{Status: SubnetStatus{Conditions: []Condition{{Type: Ready, Status: "True"}, {Type: Validated, Status: "True", Reason: AcceptedNotApplied}}}}
	if c := s.Condition(Validated); c == nil || c.Reason != AcceptedNotApplied {
		t.Fatalf("Validated: %+v", c)
	}
	if s.Condition(Error) != nil || (*Subnet)(nil).Condition(Ready) != nil {
		t.Fatal("absent condition must be nil")
	}
}

// TestCRDSchemaTypesEveryField: the shipped CRD types exactly the fields
// the controller knows, so admission checks each one's type.
func TestCRDSchemaTypesEveryField(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "packaging", "kubernetes", "base", "crd-subnets.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd struct {
		Spec struct {
			Versions []struct {
				Schema struct {
					OpenAPIV3Schema struct {
						Properties map[string]struct {
							Properties map[string]any `json:"properties"`
						} `json:"properties"`
					} `json:"openAPIV3Schema"`
				} `json:"schema"`
			} `json:"versions"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	props := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties
	for _, k := range KnownFields {
		if _, ok := props[k]; !ok {
			t.Errorf("crd-subnets.yaml does not type spec.%s", k)
		}
	}
	for k := range props {
		if !slices.Contains(KnownFields, k) {
			t.Errorf("crd-subnets.yaml types spec.%s, which the controller does not know", k)
		}
	}
}

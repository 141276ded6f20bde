package v1

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

func pnObj(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "ProviderNetwork",
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func vlanObj(spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Vlan",
		"metadata": map[string]any{"name": "vlan10"}, "spec": spec}}
}

func TestValidateProviderNetworkRefusals(t *testing.T) {
	cases := []struct {
		name   string
		spec   map[string]any
		reason string
		text   string
	}{
		{"net1", map[string]any{"defaultInterface": "eth1", "mtu": int64(1500)}, "UnknownField", "spec.mtu"},
		{"a-very-long-name", map[string]any{"defaultInterface": "eth1"}, "InvalidField", "at most 12"},
		{"net1", map[string]any{}, "InvalidField", "spec.defaultInterface \"\" is empty"},
		{"net1", map[string]any{"defaultInterface": "enp0s31f6-long-name"}, "InvalidField", "at most 15"},
		{"net1", map[string]any{"defaultInterface": "eth 1"}, "InvalidField", "white space"},
		{"net1", map[string]any{"defaultInterface": "eth1", "customInterfaces": []any{
			map[string]any{"interface": "eth2", "nodes": []any{"n1"}},
			map[string]any{"interface": "bond0", "nodes": []any{"n2", "n1"}}}}, "InvalidField", `node "n1" is in spec.customInterfaces[0] (eth2) and [1] (bond0)`},
		{"net1", map[string]any{"defaultInterface": "eth1", "customInterfaces": []any{map[string]any{"interface": "eth2"}}}, "InvalidField", "lists no nodes"},
		{"net1", map[string]any{"defaultInterface": "eth1", "nodeSelector": map[string]any{"matchExpressions": []any{
			map[string]any{"key": "role", "operator": "Sometimes"}}}}, "InvalidField", "spec.nodeSelector"},
		{"net1", map[string]any{"defaultInterface": "eth1", "vlanInterfaces": []any{"eth1:10"}}, "InvalidField", `spec.vlanInterfaces[0] "eth1:10"`},
		{"net1", map[string]any{"defaultInterface": "eth1", "vlanInterfaces": []any{"eth1.4095"}}, "InvalidField", "use 1 to 4094"},
		{"net1", map[string]any{"defaultInterface": "eth1", "excludeNodes": "n1"}, "InvalidField", ""},
	}
	for _, c := range cases {
		_, p := ValidateProviderNetwork(pnObj(c.name, c.spec))
		if p == nil || p.Reason != c.reason || !strings.Contains(p.Message, c.text) {
			t.Errorf("%s %v: got %+v, want %s containing %q", c.name, c.spec, p, c.reason, c.text)
		}
	}
}

func TestProviderNetworkNodeInterface(t *testing.T) {
	pn, p := ValidateProviderNetwork(pnObj("net1", map[string]any{"defaultInterface": "eth1",
		"customInterfaces": []any{map[string]any{"interface": "bond0", "nodes": []any{"n2"}}},
		"excludeNodes":     []any{"n3"}}))
	if p != nil {
		t.Fatal(p)
	}
	for node, want := range map[string]string{"n1": "eth1", "n2": "bond0", "n3": ""} {
		nic, selected, err := pn.NodeInterface(node, nil)
		if err != nil || nic != want || selected != (want != "") {
			t.Errorf("%s: got %q %v %v, want %q", node, nic, selected, err, want)
		}
	}
	// With a nodeSelector, excludeNodes is ignored (Kube-OVN's rule).
	pn.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"underlay": "yes"}}
	if nic, ok, _ := pn.NodeInterface("n3", map[string]string{"underlay": "yes"}); !ok || nic != "eth1" {
		t.Errorf("selected n3 listed in excludeNodes: got %q %v, want eth1 (excludeNodes ignored with a selector)", nic, ok)
	}
	if _, ok, _ := pn.NodeInterface("n1", map[string]string{"underlay": "no"}); ok {
		t.Error("n1 without the label was selected")
	}
}

func TestValidateVlan(t *testing.T) {
	cases := []struct {
		spec   map[string]any
		reason string
		text   string
	}{
		{map[string]any{"id": int64(4095), "provider": "net1"}, "InvalidField", "4095 is reserved"},
		{map[string]any{"id": int64(-1), "provider": "net1"}, "InvalidField", "outside 0..4094"},
		{map[string]any{"id": int64(10)}, "InvalidField", "spec.provider is empty"},
		{map[string]any{"id": int64(10), "vlanId": int64(20), "provider": "net1"}, "InvalidField", "remove vlanId"},
		{map[string]any{"id": int64(10), "provider": "net1", "providerInterfaceName": "net2"}, "InvalidField", "remove providerInterfaceName"},
		{map[string]any{"id": int64(10), "provider": "net1", "tag": int64(3)}, "UnknownField", "spec.tag"},
	}
	for _, c := range cases {
		_, p := ValidateVlan(vlanObj(c.spec))
		if p == nil || p.Reason != c.reason || !strings.Contains(p.Message, c.text) {
			t.Errorf("%v: got %+v, want %s containing %q", c.spec, p, c.reason, c.text)
		}
	}
	// The fields Kube-OVN before 1.9 stored are read.
	v, p := ValidateVlan(vlanObj(map[string]any{"vlanId": int64(30), "providerInterfaceName": "net1"}))
	if p != nil || v.Spec.Tag() != 30 || v.Spec.ProviderName() != "net1" {
		t.Fatalf("deprecated fields: %+v %+v", v, p)
	}
	v, p = ValidateVlan(vlanObj(map[string]any{"id": int64(0), "provider": "net1"}))
	if p != nil || v.Spec.Tag() != 0 {
		t.Fatalf("vlan 0 (untagged): %+v %+v", v, p)
	}
}

// TestKubeOVNUnderlayObjectsValidate: the ProviderNetworks and Vlans of
// Kube-OVN's guides (testdata/kubeovn-underlay.yaml; tests/controller applies
// the same file to the real API server with the shipped CRDs) are valid here.
func TestKubeOVNUnderlayObjectsValidate(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("testdata", "kubeovn-underlay.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var pns, vlans int
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var o map[string]any
		if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: o}
		switch u.GetKind() {
		case "ProviderNetwork":
			pns++
			if _, p := ValidateProviderNetwork(u); p != nil {
				t.Errorf("ProviderNetwork %s: %+v", u.GetName(), p)
			}
		case "Vlan":
			vlans++
			if _, p := ValidateVlan(u); p != nil {
				t.Errorf("Vlan %s: %+v", u.GetName(), p)
			}
		}
	}
	if pns < 2 || vlans < 2 {
		t.Fatalf("testdata holds %d ProviderNetworks and %d Vlans, want at least 2 of each", pns, vlans)
	}
}

package subnets

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
)

func TestBindsAdmitsOnlyTheBoundNamespaces(t *testing.T) {
	sub := func(spec kubeovnv1.SubnetSpec) *kubeovnv1.Subnet { return &kubeovnv1.Subnet{Spec: spec} }
	blue := []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "blue"}}}
	bad := []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}}}
	cases := []struct {
		name   string
		s      *kubeovnv1.Subnet
		ns     string
		labels labels.Set
		ok     bool
		rule   string
	}{
		{"unbound: open to annotations (Kube-OVN)", sub(kubeovnv1.SubnetSpec{}), "any", nil, true, ""},
		{"the default Subnet admits all", sub(kubeovnv1.SubnetSpec{Default: true, Namespaces: []string{"a"}}), "b", nil, true, ""},
		{"listed", sub(kubeovnv1.SubnetSpec{Namespaces: []string{"a", "b"}}), "b", nil, true, ""},
		{"not listed", sub(kubeovnv1.SubnetSpec{Namespaces: []string{"a", "b"}}), "c", labels.Set{}, false, "spec.namespaces [a, b]"},
		{"selected", sub(kubeovnv1.SubnetSpec{NamespaceSelectors: blue}), "x", labels.Set{"team": "blue"}, true, ""},
		{"not selected", sub(kubeovnv1.SubnetSpec{NamespaceSelectors: blue}), "x", labels.Set{"team": "red"}, false, "spec.namespaceSelectors [team=blue]"},
		{"unknown namespace", sub(kubeovnv1.SubnetSpec{NamespaceSelectors: blue}), "x", nil, false, "team=blue"},
		{"both", sub(kubeovnv1.SubnetSpec{Namespaces: []string{"a"}, NamespaceSelectors: blue}), "x", labels.Set{}, false,
			"spec.namespaces [a] and those matching its spec.namespaceSelectors [team=blue]"},
		{"a bad selector admits nobody", sub(kubeovnv1.SubnetSpec{NamespaceSelectors: bad}), "x", labels.Set{"team": "x"}, false, "(invalid selector)"},
	}
	for _, c := range cases {
		ok, rule := Binds(c.s, c.ns, c.labels)
		if ok != c.ok || !strings.Contains(rule, c.rule) {
			t.Errorf("%s: Binds = %v %q, want %v and a rule saying %q", c.name, ok, rule, c.ok, c.rule)
		}
	}
}

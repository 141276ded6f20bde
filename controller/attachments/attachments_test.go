package attachments

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

func TestParseNetworksAsMultus(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []Selection
	}{
		{"", nil},
		{"a", []Selection{{"p", "a", ""}}},
		{"a, ns2/b@eth9 ,c@net5", []Selection{{"p", "a", ""}, {"ns2", "b", "eth9"}, {"p", "c", "net5"}}},
		{`[{"name":"a"},{"name":"b","namespace":"ns2","interface":"x1"}]`, []Selection{{"p", "a", ""}, {"ns2", "b", "x1"}}},
	} {
		got, err := ParseNetworks(c.in, "p")
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("ParseNetworks(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"a/b/c", "A", "a,,b", "a@", `[{"namespace":"x"}]`, `[{`, "ns/"} {
		if _, err := ParseNetworks(bad, "p"); err == nil || !strings.Contains(err.Error(), annotations.NetworksAnnotation) {
			t.Errorf("ParseNetworks(%q): error %v, want one naming the annotation", bad, err)
		}
	}
}

func TestParseNADConfig(t *testing.T) {
	for _, c := range []struct {
		in   string
		want NADConfig
	}{
		{`{"cniVersion":"0.3.1","type":"kube-ovn","server_socket":"/run/openvswitch/kube-ovn-daemon.sock","provider":"n1.default.ovn"}`, NADConfig{true, "kube-ovn", "n1.default.ovn"}},
		{`{"type":"ovnhost-cni","provider":"n2.x.ovn"}`, NADConfig{true, "ovnhost-cni", "n2.x.ovn"}},
		{`{"cniVersion":"0.4.0","plugins":[{"type":"kube-ovn","provider":"a.b.ovn"},{"type":"portmap"}]}`, NADConfig{true, "kube-ovn", "a.b.ovn"}},
		{`{"type":"macvlan","master":"eth0","ipam":{"type":"kube-ovn","provider":"m.d"}}`, NADConfig{}},
		{"", NADConfig{}},
	} {
		got, err := ParseNADConfig(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseNADConfig(%s) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	if _, err := ParseNADConfig("{"); err == nil || !strings.Contains(err.Error(), "spec.config") {
		t.Errorf("bad JSON: %v", err)
	}
}

// world: NADs by ns/name, Subnets by provider.
func lookups(nads map[string]string, subnets map[string]string) Lookups {
	return Lookups{
		NAD: func(ns, name string) (string, bool, error) {
			c, ok := nads[ns+"/"+name]
			return c, ok, nil
		},
		SubnetsOf: func(p string) []string {
			var out []string
			for s, sp := range subnets {
				if sp == p {
					out = append(out, s)
				}
			}
			return out
		},
		ProviderOf: func(s string) string { return subnets[s] },
	}
}

func TestResolvePicksOVNAttachments(t *testing.T) {
	l := lookups(map[string]string{
		"default/n1":  `{"type":"kube-ovn","provider":"n1.default.ovn"}`,
		"other/n2":    `{"type":"ovnhost-cni","provider":"n2.other.ovn"}`,
		"default/mac": `{"type":"macvlan","master":"eth0"}`,
	}, map[string]string{"s1": "n1.default.ovn", "s2": "n2.other.ovn", "s2b": "n2.other.ovn"})
	got, err := Resolve("default", map[string]string{annotations.NetworksAnnotation: "n1, mac, other/n2@eth7",
		"n2.other.ovn.kubernetes.io/logical_switch": "s2b"}, l)
	if err != nil {
		t.Fatal(err)
	}
	want := []Attachment{
		{NAD: Selection{"default", "n1", ""}, Provider: "n1.default.ovn", Subnet: "s1", Interface: "net1"},
		{NAD: Selection{"other", "n2", "eth7"}, Provider: "n2.other.ovn", Subnet: "s2b", Interface: "eth7"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}

func TestResolveRefusals(t *testing.T) {
	l := lookups(map[string]string{
		"default/n1":     `{"type":"kube-ovn","provider":"n1.default.ovn"}`,
		"default/orphan": `{"type":"kube-ovn","provider":"orphan.default.ovn"}`,
		"default/noprov": `{"type":"kube-ovn"}`,
		"default/bad":    `{"type":`,
	}, map[string]string{"s1": "n1.default.ovn", "ovn-default": "ovn"})
	for _, c := range []struct {
		ann            map[string]string
		reason, naming string
	}{
		{map[string]string{annotations.NetworksAnnotation: "missing"}, ReasonNADNotFound, "default/missing"},
		{map[string]string{annotations.NetworksAnnotation: "orphan"}, ReasonUnknownProvider, `no Subnet has spec.provider "orphan.default.ovn"`},
		{map[string]string{annotations.NetworksAnnotation: "noprov"}, ReasonInvalidNAD, `"provider": "noprov.default.ovn"`},
		{map[string]string{annotations.NetworksAnnotation: "bad"}, ReasonInvalidNAD, "spec.config is not JSON"},
		{map[string]string{annotations.NetworksAnnotation: "n1,n1@net9"}, ReasonInvalidNetworks, "twice"},
		{map[string]string{annotations.NetworksAnnotation: "x/y/z"}, ReasonInvalidNetworks, "x/y/z"},
		{map[string]string{annotations.NetworksAnnotation: "n1", "n1.default.ovn.kubernetes.io/logical_switch": "ovn-default"}, ReasonWrongSubnet, "such as s1"},
	} {
		_, err := Resolve("default", c.ann, l)
		var r *Refusal
		if !errors.As(err, &r) || r.Reason != c.reason || !strings.Contains(r.Message, c.naming) {
			t.Errorf("%v: got %v; want %s naming %q", c.ann, err, c.reason, c.naming)
		}
	}
}

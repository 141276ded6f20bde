package netpol

import (
	"errors"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	nss = []Namespace{{Name: "x", Labels: map[string]string{"ns": "x"}}, {Name: "y", Labels: map[string]string{"ns": "y"}}}
	tcp = corev1.ProtocolTCP
	udp = corev1.ProtocolUDP
)

func pod(ns, name, ip string, labels map[string]string, ports ...corev1.ContainerPort) Pod {
	return Pod{Namespace: ns, Name: name, Labels: labels, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Port: name + "." + ns, ContainerPorts: ports}
}

func pods() []Pod {
	return []Pod{
		pod("x", "a", "10.16.0.1", map[string]string{"pod": "a"}, corev1.ContainerPort{Name: "http", ContainerPort: 80}),
		pod("x", "b", "10.16.0.2", map[string]string{"pod": "b"}, corev1.ContainerPort{Name: "http", ContainerPort: 8080}),
		pod("y", "a", "10.16.0.3", map[string]string{"pod": "a"}),
		pod("y", "b", "10.16.0.4", map[string]string{"pod": "b"}, corev1.ContainerPort{Name: "dns", ContainerPort: 53, Protocol: udp}),
	}
}

func policy(ns, name string, spec networkingv1.NetworkPolicySpec) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
}

var hostOpt = Options{HostCIDRs: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16")}}

func translate(t *testing.T, np *networkingv1.NetworkPolicy, ps []Pod) *Desired {
	t.Helper()
	d, err := Translate(np, ps, nss, hostOpt)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d.ACLs {
		if strings.Contains(a.Match, "!=") {
			t.Errorf("negated match (expands into many flows): %s", a.Match)
		}
	}
	return d
}

func matchesOf(d *Desired, dir string) []string {
	var out []string
	for _, a := range d.ACLs {
		if a.Direction == dir {
			out = append(out, a.Action+" "+a.Match)
		}
	}
	return out
}

func set(d *Desired, name string) []string {
	for _, s := range d.AddressSets {
		if s.Name == name {
			return s.Addresses
		}
	}
	return nil
}

func TestDefaultDenyIngressSelectsPodsAndAdmitsTheHost(t *testing.T) {
	d := translate(t, policy("x", "deny", networkingv1.NetworkPolicySpec{}), pods())
	pg := PortGroupName("x", "deny")
	if !slices.Equal(d.Ports, []string{"a.x", "b.x"}) {
		t.Fatalf("ports %v, want both pods of x", d.Ports)
	}
	want := []string{
		"allow-related outport == @" + pg + " && ip4.src == {100.64.0.0/16}",
		"drop outport == @" + pg + " && ip",
	}
	if got := matchesOf(d, ToLport); !slices.Equal(got, want) {
		t.Fatalf("ingress ACLs\n got %q\nwant %q", got, want)
	}
	if got := matchesOf(d, FromLport); len(got) != 0 {
		t.Fatalf("an ingress-only policy isolates egress: %q", got)
	}
	if d.ACLs[0].Priority != PriorityHost || d.ACLs[1].Priority != PriorityDrop {
		t.Fatalf("priorities %d, %d: host allow must beat the drop", d.ACLs[0].Priority, d.ACLs[1].Priority)
	}
}

func TestPolicyTypesDefaulting(t *testing.T) {
	for _, c := range []struct {
		spec        networkingv1.NetworkPolicySpec
		ingr, egres bool
	}{
		{networkingv1.NetworkPolicySpec{}, true, false},
		{networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}}, true, true},
		{networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}}, false, true},
	} {
		i, e := PolicyTypes(policy("x", "p", c.spec))
		if i != c.ingr || e != c.egres {
			t.Errorf("%+v: ingress %v egress %v, want %v %v", c.spec, i, e, c.ingr, c.egres)
		}
	}
}

func TestPeersBySelectors(t *testing.T) {
	nsY := &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}
	podA := &metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}}
	for _, c := range []struct {
		name string
		peer networkingv1.NetworkPolicyPeer
		want []string
	}{
		{"namespace", networkingv1.NetworkPolicyPeer{NamespaceSelector: nsY}, []string{"10.16.0.3", "10.16.0.4"}},
		{"pod in own namespace", networkingv1.NetworkPolicyPeer{PodSelector: podA}, []string{"10.16.0.1"}},
		{"pod and namespace", networkingv1.NetworkPolicyPeer{PodSelector: podA, NamespaceSelector: nsY}, []string{"10.16.0.3"}},
		{"pod in any namespace", networkingv1.NetworkPolicyPeer{PodSelector: podA, NamespaceSelector: &metav1.LabelSelector{}}, []string{"10.16.0.1", "10.16.0.3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			np := policy("x", "p", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{c.peer}}}})
			d := translate(t, np, pods())
			as := PortGroupName("x", "p") + "_in0"
			if got := set(d, as); !slices.Equal(got, c.want) {
				t.Fatalf("address set %v, want %v", got, c.want)
			}
			if !slices.Contains(matchesOf(d, ToLport), "allow-related outport == @"+PortGroupName("x", "p")+" && ip4 && ip4.src == $"+as) {
				t.Fatalf("no allow ACL on the set: %q", matchesOf(d, ToLport))
			}
		})
	}
}

func TestPodChurnChangesOnlyMembersAndSets(t *testing.T) {
	np := policy("x", "p", networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"pod": "a"}},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}}}},
		Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}}}},
	})
	before := translate(t, np, pods())
	more := append(pods(), pod("x", "c", "10.16.0.9", map[string]string{"pod": "a"}), pod("y", "c", "10.16.0.10", nil))
	after := translate(t, np, more)
	if !reflect.DeepEqual(before.ACLs, after.ACLs) {
		t.Fatalf("ACLs changed with pods:\n%v\n%v", before.ACLs, after.ACLs)
	}
	if !slices.Equal(after.Ports, []string{"a.x", "c.x"}) {
		t.Fatalf("ports %v", after.Ports)
	}
	pg := PortGroupName("x", "p")
	if got := set(after, pg+"_in0"); !slices.Contains(got, "10.16.0.9") || !slices.Contains(got, "10.16.0.10") {
		t.Fatalf("ingress peers %v miss the new pods", got)
	}
	if got := set(after, pg+"_eg0"); !slices.Contains(got, "10.16.0.9") || slices.Contains(got, "10.16.0.10") {
		t.Fatalf("egress peers %v: want x's new pod only", got)
	}
}

func TestIPBlockExceptIsSubtracted(t *testing.T) {
	np := policy("x", "p", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
		{IPBlock: &networkingv1.IPBlock{CIDR: "10.16.0.0/16", Except: []string{"10.16.0.0/24", "10.16.128.0/17"}}},
	}}}})
	d := translate(t, np, pods())
	got := set(d, PortGroupName("x", "p")+"_in0")
	want := []string{"10.16.1.0/24", "10.16.16.0/20", "10.16.2.0/23", "10.16.32.0/19", "10.16.4.0/22", "10.16.64.0/18", "10.16.8.0/21"}
	if !slices.Equal(got, want) {
		t.Fatalf("set %v\nwant %v", got, want)
	}
	if ps := Subtract(netip.MustParsePrefix("10.0.0.0/8"), []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}); len(ps) != 0 {
		t.Fatalf("whole block excepted: %v", ps)
	}
}

func TestPortsNumberRangeAndName(t *testing.T) {
	end := int32(90)
	np := policy("x", "p", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
		{Protocol: &udp, Port: ptr(intstr.FromInt32(53))},
		{Port: ptr(intstr.FromInt32(80)), EndPort: &end},
		{Protocol: &tcp, Port: ptr(intstr.FromString("http"))},
	}}}})
	d := translate(t, np, pods())
	pg := PortGroupName("x", "p")
	got := matchesOf(d, ToLport)
	for _, w := range []string{
		"allow-related outport == @" + pg + " && ip4 && udp.dst == 53",
		"allow-related outport == @" + pg + " && ip4 && tcp.dst >= 80 && tcp.dst <= 90",
		"allow-related outport == @" + pg + " && ip4 && ip4.dst == $" + pg + "_tcp_http_80 && tcp.dst == 80",
		"allow-related outport == @" + pg + " && ip4 && ip4.dst == $" + pg + "_tcp_http_8080 && tcp.dst == 8080",
	} {
		if !slices.Contains(got, w) {
			t.Errorf("missing %q in\n%q", w, got)
		}
	}
	if s := set(d, pg+"_tcp_http_8080"); !slices.Equal(s, []string{"10.16.0.2"}) {
		t.Fatalf("named port 8080 resolves on b only, set %v", s)
	}
}

func TestEgressDNSAllowAndNamedEgressPort(t *testing.T) {
	np := policy("x", "p", networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr(intstr.FromInt32(53))}}},
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr(intstr.FromString("dns"))}}},
		},
	})
	d := translate(t, np, pods())
	pg := PortGroupName("x", "p")
	want := []string{
		"allow-related inport == @" + pg + " && ip4 && ip4.dst == $" + pg + "_eg1_udp_dns_53 && udp.dst == 53",
		"allow-related inport == @" + pg + " && ip4 && udp.dst == 53",
		"drop inport == @" + pg + " && ip",
	}
	if got := matchesOf(d, FromLport); !slices.Equal(got, want) {
		t.Fatalf("egress\n got %q\nwant %q", got, want)
	}
	for _, a := range d.ACLs {
		if a.Options["apply-after-lb"] != "true" {
			t.Fatalf("egress ACL %q not after the load balancer", a.Match)
		}
	}
	if s := set(d, pg+"_eg1_udp_dns_53"); !slices.Equal(s, []string{"10.16.0.4"}) {
		t.Fatalf("dns resolves on y/b only: %v", s)
	}
	if !Relevant(np, &Pod{Namespace: "z", Name: "new"}, nil) {
		t.Fatal("any pod may become a named egress destination")
	}
}

func TestLoggingAnnotation(t *testing.T) {
	np := policy("x", "p", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{}}})
	np.Annotations = map[string]string{AnnotationEnableLog: "true"}
	for _, a := range translate(t, np, pods()).ACLs {
		if a.Log != (a.Action == ActionDrop) || (a.Log && (a.Name != "x/p" || a.Severity != "warning")) {
			t.Fatalf("enable_log logs drops: %+v", a)
		}
	}
	np.Annotations[AnnotationLogActions] = "drop,allow"
	for _, a := range translate(t, np, pods()).ACLs {
		if !a.Log {
			t.Fatalf("log_acl_actions=drop,allow: %+v not logged", a)
		}
	}
}

func TestInvalidPoliciesAreRefused(t *testing.T) {
	end := int32(10)
	for name, spec := range map[string]networkingv1.NetworkPolicySpec{
		"except outside cidr": {Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/24", Except: []string{"10.1.0.0/24"}}}}}}},
		"bad cidr":            {Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}}}},
		"endPort below port":  {Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromInt32(80)), EndPort: &end}}}}},
		"endPort on a name":   {Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromString("http")), EndPort: &end}}}}},
		"bad selector":        {PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "a", Operator: "Nope"}}}},
	} {
		_, err := Translate(policy("x", name, spec), pods(), nss, hostOpt)
		var inv *InvalidError
		if !errors.As(err, &inv) {
			t.Errorf("%s: err %v, want InvalidError", name, err)
		}
	}
}

func TestPortGroupNamesAreValidAndDistinct(t *testing.T) {
	a, b := PortGroupName("a-b", "c"), PortGroupName("a", "b-c")
	if a == b {
		t.Fatalf("collision %s", a)
	}
	for _, n := range []string{a, b, PortGroupName(strings.Repeat("n", 63), strings.Repeat("p", 253))} {
		for i, c := range n {
			if !(c == '_' || c == '.' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || i > 0 && c >= '0' && c <= '9') {
				t.Fatalf("%q is not an OVN name", n)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }

// In a dual-stack cluster (its join CIDRs in both families) every allow ACL
// and peer set exists per family: IPv6 ones match ip6 and their sets, named
// <set>_ip6, hold the peers' IPv6 addresses and the IPv6 ipBlocks; the
// IPv4 ones are unchanged; the drop ACLs match ip (both).
func TestDualStackPolicyHasEachFamilysACLsAndSets(t *testing.T) {
	dual := func(ns, name, v4, v6 string, labels map[string]string, ports ...corev1.ContainerPort) Pod {
		p := pod(ns, name, v4, labels, ports...)
		p.IPs = append(p.IPs, netip.MustParseAddr(v6))
		return p
	}
	ps := []Pod{
		dual("x", "a", "10.16.0.1", "fd00:10:16::1", map[string]string{"pod": "a"}, corev1.ContainerPort{Name: "http", ContainerPort: 80}),
		dual("y", "a", "10.16.0.3", "fd00:10:16::3", map[string]string{"pod": "a"}),
	}
	opt := Options{HostCIDRs: []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd00:100:64::/112")}}
	np := policy("x", "web", networkingv1.NetworkPolicySpec{
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress: []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"ns": "y"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "fd00:99::/64", Except: []string{"fd00:99::/65"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "192.0.2.0/24"}}},
			Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromString("http"))}}}},
		Egress: []networkingv1.NetworkPolicyEgressRule{{}},
	})
	d, err := Translate(np, ps, nss, opt)
	if err != nil {
		t.Fatal(err)
	}
	pg := PortGroupName("x", "web")
	in := matchesOf(d, ToLport)
	for _, want := range []string{
		"drop outport == @" + pg + " && ip",
		"allow-related outport == @" + pg + " && ip4.src == {100.64.0.0/16}",
		"allow-related outport == @" + pg + " && ip6.src == {fd00:100:64::/112}",
		"allow-related outport == @" + pg + " && ip4 && ip4.src == $" + pg + "_in0 && ip4.dst == $" + pg + "_tcp_http_80 && tcp.dst == 80",
		"allow-related outport == @" + pg + " && ip6 && ip6.src == $" + pg + "_in0_ip6 && ip6.dst == $" + pg + "_tcp_http_80_ip6 && tcp.dst == 80",
	} {
		if !slices.Contains(in, want) {
			t.Errorf("ingress ACLs lack %q:\n%s", want, strings.Join(in, "\n"))
		}
	}
	eg := matchesOf(d, FromLport)
	for _, want := range []string{"allow-related inport == @" + pg + " && ip4", "allow-related inport == @" + pg + " && ip6"} {
		if !slices.Contains(eg, want) {
			t.Errorf("egress ACLs lack %q:\n%s", want, strings.Join(eg, "\n"))
		}
	}
	for name, want := range map[string][]string{
		pg + "_in0":             {"10.16.0.3", "192.0.2.0/24"},
		pg + "_in0_ip6":         {"fd00:10:16::3", "fd00:99:0:0:8000::/65"},
		pg + "_tcp_http_80":     {"10.16.0.1"},
		pg + "_tcp_http_80_ip6": {"fd00:10:16::1"},
	} {
		if got := set(d, name); !slices.Equal(got, want) {
			t.Errorf("set %s = %v, want %v", name, got, want)
		}
	}
	// An IPv4 cluster's rows are those of before: no IPv6 ACL or set.
	d4, err := Translate(np, ps, nss, hostOpt)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d4.ACLs {
		if strings.Contains(a.Match, "ip6") {
			t.Errorf("IPv6 ACL in an IPv4 cluster: %s", a.Match)
		}
	}
	for _, s := range d4.AddressSets {
		if strings.HasSuffix(s.Name, "_ip6") {
			t.Errorf("IPv6 set in an IPv4 cluster: %s", s.Name)
		}
	}
}

func TestLocalPolicies(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	named, num := intstr.FromString("http"), intstr.FromInt32(80)
	for _, c := range []struct {
		name string
		spec networkingv1.NetworkPolicySpec
		want bool
	}{
		{"default deny", networkingv1.NetworkPolicySpec{}, true},
		{"pod peers", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel}}}}}, true},
		{"ipBlock", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}}}}}}, true},
		{"ingress from anywhere to a named port", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &named}}}}}, true},
		{"egress anywhere on a number", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &num}}}}}, true},
		{"egress anywhere on a named port", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{Ports: []networkingv1.NetworkPolicyPort{{Port: &named}}}}}, false},
		{"namespace selector in ingress", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel}}}}}, false},
		{"namespace and pod selector in egress", networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}, PodSelector: sel}}}}}, false},
		{"invalid", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{}}}}}, false},
	} {
		np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}, Spec: c.spec}
		if got := Local(np); got != c.want {
			t.Errorf("%s: Local = %v, want %v", c.name, got, c.want)
		}
	}
}

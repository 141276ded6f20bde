package services

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func ptr[T any](v T) *T { return &v }

func svc(mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}}}
	if mut != nil {
		mut(s)
	}
	return s
}

type ep struct {
	ip                          string
	ready, serving, terminating *bool
	node                        string
}

func slice(port string, proto corev1.Protocol, num int32, eps ...ep) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr(port), Protocol: ptr(proto), Port: ptr(num)}}}
	if strings.Contains(eps[0].ip, ":") {
		es.AddressType = discoveryv1.AddressTypeIPv6
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: []string{e.ip},
			Conditions: discoveryv1.EndpointConditions{Ready: e.ready, Serving: e.serving, Terminating: e.terminating}}
		if e.node != "" {
			d.NodeName = ptr(e.node)
		}
		es.Endpoints = append(es.Endpoints, d)
	}
	return es
}

var yes, no = ptr(true), ptr(false)

func TestTranslate(t *testing.T) {
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		eps  []*discoveryv1.EndpointSlice
		want map[string]map[string]string // LB name -> VIPs
		opts map[string]string            // options of every LB
		sel  []string                     // selection fields of every LB
	}{
		{name: "ready endpoints only, sorted, across slices",
			svc: svc(nil),
			eps: []*discoveryv1.EndpointSlice{
				slice("http", corev1.ProtocolTCP, 8080, ep{ip: "10.16.0.7", ready: yes}, ep{ip: "10.16.0.5", ready: no, serving: no}),
				slice("http", corev1.ProtocolTCP, 8080, ep{ip: "10.16.0.3"}), // nil ready = ready
				slice("other", corev1.ProtocolTCP, 9, ep{ip: "10.16.0.9", ready: yes}),
			},
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": "10.16.0.3:8080,10.16.0.7:8080"}},
			opts: map[string]string{"reject": "true"}},
		{name: "no ready endpoint: serving terminating ones",
			svc: svc(nil),
			eps: []*discoveryv1.EndpointSlice{slice("http", corev1.ProtocolTCP, 8080,
				ep{ip: "10.16.0.7", ready: no, serving: yes, terminating: yes}, ep{ip: "10.16.0.8", ready: no, serving: no, terminating: yes})},
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": "10.16.0.7:8080"}},
			opts: map[string]string{"reject": "true"}},
		{name: "ready wins over terminating",
			svc: svc(nil),
			eps: []*discoveryv1.EndpointSlice{slice("http", corev1.ProtocolTCP, 8080,
				ep{ip: "10.16.0.7", ready: no, serving: yes, terminating: yes}, ep{ip: "10.16.0.8", ready: yes})},
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": "10.16.0.8:8080"}},
			opts: map[string]string{"reject": "true"}},
		{name: "no endpoints: VIP without backends (rejected)",
			svc:  svc(nil),
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": ""}},
			opts: map[string]string{"reject": "true"}},
		{name: "one LB per protocol; external and LB ingress IPs; affinity",
			svc: svc(func(s *corev1.Service) {
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				s.Spec.Ports = []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}, {Name: "dnst", Port: 53},
					{Name: "s", Port: 9, Protocol: corev1.ProtocolSCTP, NodePort: 30009}}
				s.Spec.ExternalIPs = []string{"192.0.2.1", "10.96.0.10"}
				s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.7"}, {Hostname: "lb.example"}}
				s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(60))}}
			}),
			eps: []*discoveryv1.EndpointSlice{slice("dns", corev1.ProtocolUDP, 5353, ep{ip: "10.16.0.2"}), slice("dnst", corev1.ProtocolTCP, 5353, ep{ip: "10.16.0.2"})},
			want: map[string]map[string]string{
				"Service_ns/web_UDP":  {"10.96.0.10:53": "10.16.0.2:5353", "192.0.2.1:53": "10.16.0.2:5353", "198.51.100.7:53": "10.16.0.2:5353"},
				"Service_ns/web_TCP":  {"10.96.0.10:53": "10.16.0.2:5353", "192.0.2.1:53": "10.16.0.2:5353", "198.51.100.7:53": "10.16.0.2:5353"},
				"Service_ns/web_SCTP": {"10.96.0.10:9": "", "192.0.2.1:9": "", "198.51.100.7:9": ""},
			},
			opts: map[string]string{"reject": "true"}, sel: []string{"ip_src"}},
		{name: "dual stack: backends of the VIP's family",
			svc:  svc(func(s *corev1.Service) { s.Spec.ClusterIPs = []string{"10.96.0.10", "fd00:96::a"} }),
			eps:  []*discoveryv1.EndpointSlice{slice("http", corev1.ProtocolTCP, 8080, ep{ip: "10.16.0.2"}), slice("http", corev1.ProtocolTCP, 8080, ep{ip: "fd00:16::2"})},
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": "10.16.0.2:8080", "[fd00:96::a]:80": "[fd00:16::2]:8080"}},
			opts: map[string]string{"reject": "true"}},
		{name: "default affinity timeout",
			svc:  svc(func(s *corev1.Service) { s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP }),
			want: map[string]map[string]string{"Service_ns/web_TCP": {"10.96.0.10:80": ""}},
			opts: map[string]string{"reject": "true"}, sel: []string{"ip_src"}},
		{name: "headless and ExternalName: nothing",
			svc:  svc(func(s *corev1.Service) { s.Spec.ClusterIP, s.Spec.ClusterIPs = "None", []string{"None"} }),
			want: map[string]map[string]string{}},
		{name: "ExternalName", svc: svc(func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeExternalName }),
			want: map[string]map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Translate(tc.svc, tc.eps)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %d load balancers %+v, want %d", len(got), got, len(tc.want))
			}
			for _, lb := range got {
				w, ok := tc.want[lb.Name]
				if !ok || !maps.Equal(w, lb.VIPs) {
					t.Errorf("%s: VIPs %v, want %v", lb.Name, lb.VIPs, w)
				}
				if !maps.Equal(lb.Options, tc.opts) {
					t.Errorf("%s: options %v, want %v", lb.Name, lb.Options, tc.opts)
				}
				if !slices.Equal(lb.SelectionFields, tc.sel) {
					t.Errorf("%s: selection fields %v, want %v", lb.Name, lb.SelectionFields, tc.sel)
				}
				if lb.ExternalIDs[KeyService] != "ns/web" || !strings.HasSuffix(lb.Name, "_"+lb.ExternalIDs[KeyProtocol]) ||
					strings.ToUpper(lb.Protocol) != lb.ExternalIDs[KeyProtocol] {
					t.Errorf("%s: protocol %q external IDs %v", lb.Name, lb.Protocol, lb.ExternalIDs)
				}
			}
		})
	}
}

func TestTranslateBadInput(t *testing.T) {
	for _, tc := range []struct {
		svc  *corev1.Service
		want string
	}{
		{svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"192.0.2.1/32"} }), `externalIP "192.0.2.1/32"`},
		{svc(func(s *corev1.Service) { s.Spec.ExternalIPs = []string{"fe80::1%eth0"} }), `externalIP "fe80::1%eth0"`},
		{svc(func(s *corev1.Service) {
			s.Spec.Type = corev1.ServiceTypeLoadBalancer
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "0.0.0.0"}}
		}), `loadBalancer ingress IP "0.0.0.0"`},
		{svc(func(s *corev1.Service) { s.Spec.Ports[0].Protocol = "ICMP" }), `protocol "ICMP"`},
		{svc(func(s *corev1.Service) { s.Spec.Ports[0].Port = 70000 }), "70000 is outside 1..65535"},
		{svc(func(s *corev1.Service) {
			s.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
			s.Spec.SessionAffinityConfig = &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr(int32(0))}}
		}), "timeoutSeconds 0"},
	} {
		got, err := Translate(tc.svc, nil)
		var ie *InputError
		if !errors.As(err, &ie) || got != nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "ns/web") {
			t.Errorf("want an InputError naming ns/web and %q, got %v, %v", tc.want, got, err)
		}
	}
}

func TestNames(t *testing.T) {
	n := Names("kube-system", "kube-dns")
	if len(n) != 9 || !slices.Contains(n, "Service_kube-system/kube-dns_UDP") || !slices.Contains(n, "Service_kube-system/kube-dns_TCP_local4") {
		t.Fatalf("names %v", n)
	}
}

// internalTrafficPolicy Local: the ClusterIP goes to a template load
// balancer whose backends are a per-node variable (the node's own ready
// endpoints, or its terminating ones when none is ready); external IPs keep
// every endpoint in the ordinary load balancer.
func TestInternalTrafficPolicyLocal(t *testing.T) {
	s := svc(func(s *corev1.Service) {
		p := corev1.ServiceInternalTrafficPolicyLocal
		s.Spec.InternalTrafficPolicy = &p
		s.Spec.ExternalIPs = []string{"192.0.2.1"}
	})
	f, tr := false, true
	eps := []*discoveryv1.EndpointSlice{slice("http", corev1.ProtocolTCP, 8080,
		ep{ip: "10.16.0.2", node: "a"}, ep{ip: "10.16.0.3", node: "a"}, ep{ip: "10.16.0.4", node: "b"},
		ep{ip: "10.16.0.5", node: "c", ready: &f, serving: &tr, terminating: &tr}, ep{ip: "10.16.0.6", node: "d", ready: &f})}
	got, err := Translate(s, eps)
	if err != nil || len(got) != 2 {
		t.Fatalf("Translate: %+v, %v; want an ordinary and a template load balancer", got, err)
	}
	plain, tmpl := got[0], got[1]
	if plain.Name != "Service_ns/web_TCP" || !maps.Equal(plain.VIPs, map[string]string{"192.0.2.1:80": "10.16.0.2:8080,10.16.0.3:8080,10.16.0.4:8080"}) {
		t.Errorf("ordinary load balancer %s %v, want only the external IP with the ready endpoints", plain.Name, plain.VIPs)
	}
	if tmpl.Name != "Service_ns/web_TCP_local4" || tmpl.Options["template"] != "true" || tmpl.Options["address-family"] != "ipv4" ||
		tmpl.ExternalIDs[KeyService] != "ns/web" || tmpl.ExternalIDs[KeyTrafficPolicy] != "Local" {
		t.Fatalf("template load balancer %+v", tmpl)
	}
	v := strings.TrimPrefix(tmpl.VIPs["10.96.0.10:80"], "^")
	if !strings.HasPrefix(v, VarPrefix("ns", "web")) || len(tmpl.VIPs) != 1 {
		t.Fatalf("template VIPs %v, want 10.96.0.10:80 -> ^%s...", tmpl.VIPs, VarPrefix("ns", "web"))
	}
	want := map[string]string{"a": "10.16.0.2:8080,10.16.0.3:8080", "b": "10.16.0.4:8080", "c": "10.16.0.5:8080"}
	if !maps.Equal(tmpl.Vars[v], want) {
		t.Errorf("per-node backends %v, want %v (node d has no serving endpoint)", tmpl.Vars[v], want)
	}
}

// Package services turns Services into OVN load balancers. The translation
// (this file) is pure: a Kubernetes Service and its EndpointSlices in,
// desired Load_Balancer rows out, no I/O. The reconciler (reconciler.go)
// watches Services, EndpointSlices and nodes' chassis and writes the rows
// through internal/ovnnb.
//
// One load balancer per (Service, protocol), named like ovn-kubernetes'
// ("Service_<namespace>/<name>_TCP"), so an endpoint change rewrites one
// small row and per-Service options (affinity) have a row of their own. Every
// one of them sits in the load balancer group ClusterLBGroup, which is
// attached to every logical switch and to the cluster router.
package services

import (
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ClusterLBGroup is the Load_Balancer_Group holding every Service's load balancers.
const ClusterLBGroup = "clusterLBGroup"

// External ID keys on the rows.
const (
	KeyService  = "service"  // "namespace/name"
	KeyProtocol = "protocol" // "TCP", "UDP", "SCTP"
	// KeyTrafficPolicy marks template load balancers ("Local").
	KeyTrafficPolicy = "internal-traffic-policy"
)

// DefaultAffinityTimeout is Kubernetes' default for sessionAffinity ClientIP (3 hours).
const DefaultAffinityTimeout = 10800

// Protocols are the Service protocols OVN load balancers carry.
var Protocols = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}

// LB is one desired Load_Balancer row.
type LB struct {
	Name     string
	Protocol string            // OVN's: "tcp", "udp", "sctp"
	VIPs     map[string]string // "10.96.0.10:53" -> "10.16.0.5:53,10.16.0.6:53"; "" = no backend (rejected)
	Options  map[string]string
	// SelectionFields: ["ip_src"] for sessionAffinity ClientIP.
	SelectionFields []string
	// ExternalIDs identify the owner: service and protocol.
	ExternalIDs map[string]string
	// Vars of a template load balancer (internalTrafficPolicy Local): each
	// VIP's backends are a Chassis_Template_Var ("^var") whose value on a
	// node's chassis is that node's endpoints; var -> node -> backends.
	Vars map[string]map[string]string
}

// LocalSuffix marks the template load balancers of a Service's ClusterIPs
// under internalTrafficPolicy Local, one per protocol and address family.
const LocalSuffix = "_local"

// VarPrefix starts the names of a Service's template variables (so that
// the controller can remove them without knowing its old spec).
func VarPrefix(namespace, name string) string {
	h := fnv.New64a()
	h.Write([]byte(namespace + "/" + name))
	return fmt.Sprintf("itp_%016x_", h.Sum64())
}

// Name is the load balancer of a Service's protocol.
func Name(namespace, name string, proto corev1.Protocol) string {
	return "Service_" + namespace + "/" + name + "_" + string(proto)
}

// Names are all the load balancer names a Service may own.
func Names(namespace, name string) []string {
	var out []string
	for _, p := range Protocols {
		n := Name(namespace, name, p)
		out = append(out, n, n+LocalSuffix+"4", n+LocalSuffix+"6")
	}
	return out
}

// InputError is a Service OVN cannot express; the controller reports it as
// an event on the Service and changes nothing.
type InputError struct {
	Service  string
	Problems []string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("service %s cannot be programmed as an OVN load balancer: %s; fix the Service spec (its previous load balancers are kept)",
		e.Service, strings.Join(e.Problems, "; "))
}

// Translate returns the load balancers of svc given its EndpointSlices
// (those labelled kubernetes.io/service-name=<svc>). A Service that needs
// none (ExternalName, headless without external addresses) yields nil.
// Only ready endpoints are backends; when a port has none, serving endpoints
// that are terminating are used instead. NodePorts are not translated (see
// the controller README: they stay with kube-proxy).
func Translate(svc *corev1.Service, eps []*discoveryv1.EndpointSlice) ([]LB, error) {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	t := translation{svc: svc, byProto: map[corev1.Protocol]map[string]string{}, byLocal: map[localKey]*LB{}}
	t.addVIPs()
	affinity := t.affinity()
	for _, sp := range svc.Spec.Ports {
		t.addPort(sp, eps)
	}
	if len(t.problems) > 0 {
		return nil, &InputError{Service: svc.Namespace + "/" + svc.Name, Problems: t.problems}
	}
	return t.balancers(affinity), nil
}

// translation is one Service's load balancers as Translate builds them.
type translation struct {
	svc      *corev1.Service
	problems []string
	vips     []netip.Addr
	// local: VIPs that reach only the node's own endpoints (internalTrafficPolicy Local).
	local   map[netip.Addr]bool
	byProto map[corev1.Protocol]map[string]string // protocol -> VIP -> backends
	byLocal map[localKey]*LB                      // template load balancers of the local VIPs
	nvars   int
}

type localKey struct {
	proto corev1.Protocol
	v4    bool
}

// addVIPs collects the ClusterIPs, externalIPs and LoadBalancer ingress IPs.
func (t *translation) addVIPs() {
	svc := t.svc
	cips := svc.Spec.ClusterIPs
	if len(cips) == 0 && svc.Spec.ClusterIP != "" {
		cips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range cips {
		t.addVIP("clusterIP", ip)
	}
	// internalTrafficPolicy Local: pods reach the ClusterIPs only on their
	// own node's endpoints (external addresses keep every endpoint: their
	// policy is externalTrafficPolicy, applied by kube-proxy on the node).
	t.local = map[netip.Addr]bool{}
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		for _, a := range t.vips {
			t.local[a] = true
		}
	}
	for _, ip := range svc.Spec.ExternalIPs {
		t.addVIP("externalIP", ip)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			t.addVIP("loadBalancer ingress IP", ing.IP) // hostname-only ingress has no IP to serve
		}
	}
}

func (t *translation) addVIP(what, s string) {
	if s == "" || s == corev1.ClusterIPNone {
		return
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" || !a.IsValid() || a.IsUnspecified() {
		t.problems = append(t.problems, fmt.Sprintf("%s %q is not an IP address a load balancer can serve", what, s))
		return
	}
	a = a.Unmap()
	if !slices.Contains(t.vips, a) {
		t.vips = append(t.vips, a)
	}
}

// affinity says whether sessionAffinity ClientIP asks for backends picked
// by the client's address.
func (t *translation) affinity() bool {
	svc := t.svc
	if svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		return false
	}
	timeout := DefaultAffinityTimeout
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
		timeout = int(*c.ClientIP.TimeoutSeconds)
	}
	if timeout <= 0 || timeout > 86400 {
		t.problems = append(t.problems, fmt.Sprintf("sessionAffinityConfig.clientIP.timeoutSeconds %d is outside 1..86400", timeout))
	}
	// OVN 23.03's affinity_timeout loses the first connection of every
	// client (its SYN and retransmits go unanswered; seen on the
	// userspace datapath): a hash of the source address keeps a client
	// on one backend instead, for as long as the backend set stays the
	// same; timeoutSeconds is validated but not enforced (README).
	return true
}

// addPort adds one Service port on every VIP: to its protocol's load
// balancer, or for a local VIP to a template one with a variable per node.
func (t *translation) addPort(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice) {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	if !slices.Contains(Protocols, proto) {
		t.problems = append(t.problems, fmt.Sprintf("port %q: protocol %q is not TCP, UDP or SCTP", sp.Name, proto))
		return
	}
	if sp.Port < 1 || sp.Port > 65535 {
		t.problems = append(t.problems, fmt.Sprintf("port %q: %d is outside 1..65535", sp.Name, sp.Port))
		return
	}
	backends := Backends(sp, eps)
	m := t.byProto[proto]
	if m == nil {
		m = map[string]string{}
		t.byProto[proto] = m
	}
	for _, vip := range t.vips {
		if t.local[vip] {
			continue
		}
		m[netip.AddrPortFrom(vip, uint16(sp.Port)).String()] = joinFamily(backends, vip.Is4())
	}
	for _, vip := range t.vips {
		if !t.local[vip] {
			continue
		}
		k := localKey{proto, vip.Is4()}
		lb := t.byLocal[k]
		if lb == nil {
			lb = &LB{VIPs: map[string]string{}, Vars: map[string]map[string]string{}}
			t.byLocal[k] = lb
		}
		v := fmt.Sprintf("%s%d", VarPrefix(t.svc.Namespace, t.svc.Name), t.nvars)
		t.nvars++
		lb.VIPs[netip.AddrPortFrom(vip, uint16(sp.Port)).String()] = "^" + v
		perNode := map[string]string{}
		for node, bs := range BackendsByNode(sp, eps) {
			if j := joinFamily(bs, vip.Is4()); j != "" {
				perNode[node] = j
			}
		}
		lb.Vars[v] = perNode
	}
}

// balancers are the load balancers collected, in protocol order, the
// template ones last.
func (t *translation) balancers(affinity bool) []LB {
	svc := t.svc
	key := svc.Namespace + "/" + svc.Name
	var out []LB
	for _, proto := range Protocols {
		m := t.byProto[proto]
		if len(m) == 0 {
			continue
		}
		lb := LB{
			Name: Name(svc.Namespace, svc.Name, proto), Protocol: strings.ToLower(string(proto)), VIPs: m,
			// A VIP without backends answers with a TCP reset / ICMP
			// unreachable at once instead of letting clients time out.
			Options:     map[string]string{"reject": "true"},
			ExternalIDs: map[string]string{KeyService: key, KeyProtocol: string(proto)},
		}
		if affinity {
			lb.SelectionFields = []string{"ip_src"}
		}
		out = append(out, lb)
	}
	for _, proto := range Protocols {
		for _, v4 := range []bool{true, false} {
			lb := t.byLocal[localKey{proto, v4}]
			if lb == nil {
				continue
			}
			fam, suffix := "ipv4", "4"
			if !v4 {
				fam, suffix = "ipv6", "6"
			}
			lb.Name = Name(svc.Namespace, svc.Name, proto) + LocalSuffix + suffix
			lb.Protocol = strings.ToLower(string(proto))
			// A node without an endpoint of its own has an empty value:
			// OVN then installs no load balancing there and the traffic is
			// dropped, as kube-proxy does for internalTrafficPolicy Local.
			lb.Options = map[string]string{"template": "true", "address-family": fam}
			lb.ExternalIDs = map[string]string{KeyService: key, KeyProtocol: string(proto), KeyTrafficPolicy: "Local"}
			if affinity {
				lb.SelectionFields = []string{"ip_src"}
			}
			out = append(out, *lb)
		}
	}
	return out
}

// Backends are the endpoints of one Service port, sorted: the ready ones,
// or when there are none the serving-and-terminating ones (so that
// connections still land during a rollout's last moments).
func Backends(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice) []netip.AddrPort {
	return pick(sp, eps, func(discoveryv1.Endpoint) bool { return true })
}

// BackendsByNode are the backends of one Service port on each node (by the
// endpoints' nodeName), chosen per node as Backends chooses for all.
func BackendsByNode(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice) map[string][]netip.AddrPort {
	nodes := map[string]bool{}
	for _, es := range eps {
		if es == nil {
			continue
		}
		for _, e := range es.Endpoints {
			if e.NodeName != nil && *e.NodeName != "" {
				nodes[*e.NodeName] = true
			}
		}
	}
	out := map[string][]netip.AddrPort{}
	for n := range nodes {
		if bs := pick(sp, eps, func(e discoveryv1.Endpoint) bool { return e.NodeName != nil && *e.NodeName == n }); len(bs) > 0 {
			out[n] = bs
		}
	}
	return out
}

func joinFamily(bs []netip.AddrPort, v4 bool) string {
	var out []string
	for _, b := range bs {
		if b.Addr().Is4() == v4 {
			out = append(out, b.String())
		}
	}
	return strings.Join(out, ",")
}

// pick returns the ready endpoints of sp among those keep accepts, or the
// serving-and-terminating ones when none is ready.
func pick(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice, keep func(discoveryv1.Endpoint) bool) []netip.AddrPort {
	proto := sp.Protocol
	if proto == "" {
		proto = corev1.ProtocolTCP
	}
	var ready, terminating []netip.AddrPort
	for _, es := range eps {
		if es == nil || (es.AddressType != discoveryv1.AddressTypeIPv4 && es.AddressType != discoveryv1.AddressTypeIPv6) {
			continue
		}
		port := -1
		for _, p := range es.Ports {
			pp := corev1.ProtocolTCP
			if p.Protocol != nil {
				pp = *p.Protocol
			}
			name := ""
			if p.Name != nil {
				name = *p.Name
			}
			if name == sp.Name && pp == proto && p.Port != nil {
				port = int(*p.Port)
				break
			}
		}
		if port < 1 || port > 65535 {
			continue
		}
		for _, e := range es.Endpoints {
			if !keep(e) {
				continue
			}
			c := e.Conditions
			isReady := c.Ready == nil || *c.Ready // nil means ready (API contract)
			serving := c.Serving != nil && *c.Serving
			term := c.Terminating != nil && *c.Terminating
			for _, s := range e.Addresses {
				a, err := netip.ParseAddr(s)
				if err != nil {
					continue
				}
				ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
				switch {
				case isReady && !term:
					ready = append(ready, ap)
				case serving && term:
					terminating = append(terminating, ap)
				}
			}
		}
	}
	out := ready
	if len(out) == 0 {
		out = terminating
	}
	slices.SortFunc(out, func(a, b netip.AddrPort) int { return a.Compare(b) })
	return slices.Compact(out)
}

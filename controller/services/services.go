// Package services translates a Kubernetes Service and its EndpointSlices
// into the OVN load balancers that implement it. It is pure: Kubernetes
// objects in, desired Load_Balancer rows out, no I/O; controller/kube does
// the watching and internal/ovnnb the writing.
//
// One load balancer per (Service, protocol), named like ovn-kubernetes'
// ("Service_<namespace>/<name>_TCP"), so an endpoint change rewrites one
// small row and per-Service options (affinity) have a row of their own. Every
// one of them sits in the load balancer group ClusterLBGroup, which is
// attached to every logical switch and to the cluster router.
package services

import (
	"fmt"
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
}

// Name is the load balancer of a Service's protocol.
func Name(namespace, name string, proto corev1.Protocol) string {
	return "Service_" + namespace + "/" + name + "_" + string(proto)
}

// Names are all the load balancer names a Service may own.
func Names(namespace, name string) []string {
	out := make([]string, len(Protocols))
	for i, p := range Protocols {
		out[i] = Name(namespace, name, p)
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
	key := svc.Namespace + "/" + svc.Name
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, nil
	}
	var problems []string
	var vips []netip.Addr
	addVIP := func(what, s string) {
		if s == "" || s == corev1.ClusterIPNone {
			return
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" || !a.IsValid() || a.IsUnspecified() {
			problems = append(problems, fmt.Sprintf("%s %q is not an IP address a load balancer can serve", what, s))
			return
		}
		a = a.Unmap()
		if !slices.Contains(vips, a) {
			vips = append(vips, a)
		}
	}
	cips := svc.Spec.ClusterIPs
	if len(cips) == 0 && svc.Spec.ClusterIP != "" {
		cips = []string{svc.Spec.ClusterIP}
	}
	for _, ip := range cips {
		addVIP("clusterIP", ip)
	}
	for _, ip := range svc.Spec.ExternalIPs {
		addVIP("externalIP", ip)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			addVIP("loadBalancer ingress IP", ing.IP) // hostname-only ingress has no IP to serve
		}
	}
	opts := map[string]string{
		// A VIP without backends answers with a TCP reset / ICMP unreachable
		// at once instead of letting clients time out.
		"reject": "true",
	}
	affinity := false
	if svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		t := DefaultAffinityTimeout
		if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && c.ClientIP.TimeoutSeconds != nil {
			t = int(*c.ClientIP.TimeoutSeconds)
		}
		if t <= 0 || t > 86400 {
			problems = append(problems, fmt.Sprintf("sessionAffinityConfig.clientIP.timeoutSeconds %d is outside 1..86400", t))
		}
		// OVN 23.03's affinity_timeout loses the first connection of every
		// client (its SYN and retransmits go unanswered; seen on the
		// userspace datapath): a hash of the source address keeps a client
		// on one backend instead, for as long as the backend set stays the
		// same; timeoutSeconds is validated but not enforced (README).
		affinity = true
	}
	byProto := map[corev1.Protocol]map[string]string{}
	for _, sp := range svc.Spec.Ports {
		proto := sp.Protocol
		if proto == "" {
			proto = corev1.ProtocolTCP
		}
		if !slices.Contains(Protocols, proto) {
			problems = append(problems, fmt.Sprintf("port %q: protocol %q is not TCP, UDP or SCTP", sp.Name, proto))
			continue
		}
		if sp.Port < 1 || sp.Port > 65535 {
			problems = append(problems, fmt.Sprintf("port %q: %d is outside 1..65535", sp.Name, sp.Port))
			continue
		}
		backends := Backends(sp, eps)
		m := byProto[proto]
		if m == nil {
			m = map[string]string{}
			byProto[proto] = m
		}
		for _, vip := range vips {
			var bs []string
			for _, b := range backends {
				if b.Addr().Is4() == vip.Is4() {
					bs = append(bs, b.String())
				}
			}
			m[netip.AddrPortFrom(vip, uint16(sp.Port)).String()] = strings.Join(bs, ",")
		}
	}
	if len(problems) > 0 {
		return nil, &InputError{Service: key, Problems: problems}
	}
	var out []LB
	for _, proto := range Protocols {
		m := byProto[proto]
		if len(m) == 0 {
			continue
		}
		lb := LB{
			Name: Name(svc.Namespace, svc.Name, proto), Protocol: strings.ToLower(string(proto)), VIPs: m,
			Options:     clone(opts),
			ExternalIDs: map[string]string{KeyService: key, KeyProtocol: string(proto)},
		}
		if affinity {
			lb.SelectionFields = []string{"ip_src"}
		}
		out = append(out, lb)
	}
	return out, nil
}

// Backends are the endpoints of one Service port, sorted: the ready ones,
// or when there are none the serving-and-terminating ones (so that
// connections still land during a rollout's last moments).
func Backends(sp corev1.ServicePort, eps []*discoveryv1.EndpointSlice) []netip.AddrPort {
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

func clone(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

package services

// External addresses: spec.externalIPs and the LoadBalancer addresses
// (status.loadBalancer.ingress, spec.loadBalancerIP) are written by whoever
// may edit the Service, a tenant included, and each one becomes a VIP in
// the load balancer group on every switch and the cluster router. Left
// unchecked, a tenant takes the cluster DNS (10.96.0.10:53), another pod's
// address, a node's address or another Service's address (the
// CVE-2020-8554 class), and with no endpoints `reject` turns it into a
// cluster-wide denial of service. The rules below refuse such an address
// (only that address: the Service's other VIPs are still programmed) with
// a Warning event on the Service; it is programmed on the sync after the
// conflict goes away.

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Rules an external address can break (the word after "rule" in the event).
const (
	RuleSpecialAddress  = "SpecialAddress" // loopback, link-local, multicast, unspecified
	RulePodSubnet       = "PodSubnet"      // inside a Subnet's cidrBlock
	RuleJoinSubnet      = "JoinSubnet"     // inside the nodes' join subnet
	RuleServiceCIDR     = "ServiceCIDR"    // inside the cluster's Service CIDRs
	RuleNodeAddress     = "NodeAddress"    // a Node's InternalIP or ExternalIP
	RuleClusterIP       = "ClusterIPOfAnotherService"
	RuleHeldByService   = "HeldByAnotherService" // same address, protocol and port as another Service's external address
	ReasonAddrRefused   = "ExternalAddressRefused"
	fixOutsideCluster   = "use an address outside the cluster's pod, join, Service and node ranges that the cluster admin allows for Services, or remove it from the Service"
	fixPickAnotherOrAsk = "use another address or port, or ask the owner of %s to release it; the first Service to claim an address and port keeps it"
)

// refusal is one external address the controller does not program for a
// Service: every port of it (ports nil) or only some (protocol/port).
type refusal struct {
	addr  netip.Addr
	what  string // "externalIP", "loadBalancer ingress IP", "loadBalancerIP"
	rule  string
	why   string
	fix   string
	ports []claimKey // nil: the whole address
}

func (r refusal) message(svcKey string) string {
	on := ""
	if len(r.ports) > 0 {
		var ps []string
		for _, k := range r.ports {
			ps = append(ps, fmt.Sprintf("%s/%d", k.proto, k.port))
		}
		on = " on " + strings.Join(ps, ", ")
	}
	return fmt.Sprintf("Service %s: %s %s%s is not programmed (rule %s): %s; fix: %s", svcKey, r.what, r.addr, on, r.rule, r.why, r.fix)
}

// claimKey is one VIP of a load balancer: address, protocol and port.
type claimKey struct {
	addr  netip.Addr
	proto corev1.Protocol
	port  int32
}

// externalAddr is one external address a Service asks for.
type externalAddr struct {
	addr netip.Addr
	what string
	// programmed: it would become a VIP (externalIPs; ingress IPs of a
	// LoadBalancer Service). spec.loadBalancerIP is only a request to the
	// load balancer implementation and is checked against the ranges.
	programmed bool
}

// externalAddrs lists what a Service asks for beyond its ClusterIPs
// (unparseable ones are Translate's to report).
func externalAddrs(svc *corev1.Service) []externalAddr {
	var out []externalAddr
	add := func(what, s string, programmed bool) {
		a, err := netip.ParseAddr(strings.TrimSpace(s))
		if err != nil || a.Zone() != "" {
			return
		}
		a = a.Unmap()
		for i := range out {
			if out[i].addr == a {
				out[i].programmed = out[i].programmed || programmed
				return
			}
		}
		out = append(out, externalAddr{addr: a, what: what, programmed: programmed})
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	for _, ip := range svc.Spec.ExternalIPs {
		add("externalIP", ip, true)
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, ing := range svc.Status.LoadBalancer.Ingress {
			if ing.IP != "" {
				add("loadBalancer ingress IP", ing.IP, true)
			}
		}
		if svc.Spec.LoadBalancerIP != "" {
			add("loadBalancerIP", svc.Spec.LoadBalancerIP, false)
		}
	}
	return out
}

// clusterIPs are a Service's ClusterIPs, parsed.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	cips := svc.Spec.ClusterIPs
	if len(cips) == 0 && svc.Spec.ClusterIP != "" {
		cips = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range cips {
		if a, err := netip.ParseAddr(s); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// servicePorts are the (protocol, port) pairs a Service serves on each VIP.
func servicePorts(svc *corev1.Service) []claimKey {
	var out []claimKey
	for _, sp := range svc.Spec.Ports {
		p := sp.Protocol
		if p == "" {
			p = corev1.ProtocolTCP
		}
		k := claimKey{proto: p, port: sp.Port}
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// addressIndex indexes Services by every address they carry (ClusterIPs
// and external addresses), so a change wakes exactly the Services that may
// contend for the same address.
func addressIndex(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, a := range clusterIPs(svc) {
		out = append(out, a.String())
	}
	for _, e := range externalAddrs(svc) {
		if s := e.addr.String(); !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out, nil
}

const byAddressIndex = "address"

// before orders contenders: the older Service first, then by namespace/name.
func before(a, b *corev1.Service) bool {
	if c := a.CreationTimestamp.Time.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	return cmp.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) < 0
}

// rangeRule says which cluster range holds a ("" when none): special
// addresses, the Service CIDRs, Subnets (join apart), node addresses.
func (s *Reconciler) rangeRule(a netip.Addr) (rule, why string) {
	switch {
	case !a.IsValid() || a.IsUnspecified() || a.IsLoopback() || a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || a.IsMulticast() || a.IsInterfaceLocalMulticast():
		return RuleSpecialAddress, "loopback, link-local (such as 169.254.169.254, the cloud metadata service), multicast and unspecified addresses belong to every host, not to a Service"
	}
	for _, p := range s.serviceCIDRs {
		if p.Contains(a) {
			return RuleServiceCIDR, fmt.Sprintf("it is inside the Service CIDR %s, where the API server hands out ClusterIPs (the cluster DNS among them)", p)
		}
	}
	for _, p := range s.joinCIDRs {
		if p.Contains(a) {
			return RuleJoinSubnet, fmt.Sprintf("it is inside the join subnet %s, the nodes' own addresses on the overlay", p)
		}
	}
	if s.subnetI != nil {
		for _, obj := range s.subnetI.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			cidrs, _, _ := unstructured.NestedString(u.Object, "spec", "cidrBlock")
			for _, c := range strings.Split(cidrs, ",") {
				p, err := netip.ParsePrefix(strings.TrimSpace(c))
				if err != nil || !p.Masked().Contains(a) {
					continue
				}
				if u.GetName() == joinSubnet {
					return RuleJoinSubnet, fmt.Sprintf("it is inside the join subnet %s (Subnet %s), the nodes' own addresses on the overlay", p, u.GetName())
				}
				return RulePodSubnet, fmt.Sprintf("it is inside Subnet %s (%s), where pods get their addresses: it would take their traffic", u.GetName(), p)
			}
		}
	}
	nodes, _ := s.nodes.List(everything)
	for _, n := range nodes {
		for _, na := range n.Status.Addresses {
			if na.Type != corev1.NodeInternalIP && na.Type != corev1.NodeExternalIP {
				continue
			}
			if b, err := netip.ParseAddr(na.Address); err == nil && b.Unmap() == a {
				return RuleNodeAddress, fmt.Sprintf("it is the %s of Node %s: it would take the node's traffic", na.Type, n.Name)
			}
		}
	}
	return "", ""
}

// otherClusterIP names another Service whose ClusterIP is a.
func (s *Reconciler) otherClusterIP(a netip.Addr, key string) string {
	objs, _ := s.svcI.GetIndexer().ByIndex(byAddressIndex, a.String())
	var names []string
	for _, o := range objs {
		svc, ok := o.(*corev1.Service)
		if !ok || svc.Namespace+"/"+svc.Name == key {
			continue
		}
		if slices.Contains(clusterIPs(svc), a) {
			names = append(names, svc.Namespace+"/"+svc.Name)
		}
	}
	slices.Sort(names)
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// eligible says whether svc asks for k as a programmed external address
// that breaks no range rule and is nobody else's ClusterIP.
func (s *Reconciler) eligible(svc *corev1.Service, k claimKey) bool {
	if svc.DeletionTimestamp != nil && len(svc.Finalizers) == 0 {
		return false
	}
	if !slices.Contains(servicePorts(svc), claimKey{proto: k.proto, port: k.port}) || slices.Contains(clusterIPs(svc), k.addr) {
		return false
	}
	asked := false
	for _, e := range externalAddrs(svc) {
		if e.addr == k.addr && e.programmed {
			asked = true
		}
	}
	if !asked {
		return false
	}
	if rule, _ := s.rangeRule(k.addr); rule != "" {
		return false
	}
	return s.otherClusterIP(k.addr, svc.Namespace+"/"+svc.Name) == ""
}

// claim gives k to svc unless another Service holds it: a claim stands
// until its holder's sync has removed the VIP from the NB and released it
// (so two load balancers never serve one VIP); a free k goes to the first
// eligible contender by age then namespace/name, whoever syncs first. It
// returns the holder.
func (s *Reconciler) claim(svc *corev1.Service, k claimKey) string {
	key := svc.Namespace + "/" + svc.Name
	s.mu.Lock()
	defer s.mu.Unlock()
	if h, ok := s.claims[k]; ok {
		return h
	}
	winner := svc
	objs, _ := s.svcI.GetIndexer().ByIndex(byAddressIndex, k.addr.String())
	for _, obj := range objs {
		o, ok := obj.(*corev1.Service)
		if !ok || o.Namespace+"/"+o.Name == key || !before(o, winner) || !s.eligible(o, k) {
			continue
		}
		winner = o
	}
	w := winner.Namespace + "/" + winner.Name
	s.claims[k] = w
	if w != key {
		s.q.Add(w)
	}
	return w
}

// release drops the claims key holds beyond keep and wakes the Services
// that may take them over; called once the NB no longer serves them.
func (s *Reconciler) release(key string, keep map[claimKey]bool) {
	s.mu.Lock()
	var freed []netip.Addr
	for k, h := range s.claims {
		if h == key && !keep[k] {
			delete(s.claims, k)
			if !slices.Contains(freed, k.addr) {
				freed = append(freed, k.addr)
			}
		}
	}
	s.mu.Unlock()
	for _, a := range freed {
		s.requeueAddress(a.String(), key)
	}
}

// requeueAddress syncs again every Service carrying the address but skip.
func (s *Reconciler) requeueAddress(addr, skip string) {
	objs, _ := s.svcI.GetIndexer().ByIndex(byAddressIndex, addr)
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok && svc.Namespace+"/"+svc.Name != skip {
			s.q.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// requeueExternal syncs again every Service with an external address (a
// range they are checked against changed: a Subnet, a node's addresses).
func (s *Reconciler) requeueExternal() {
	svcs, _ := s.svcs.List(everything)
	for _, svc := range svcs {
		if len(externalAddrs(svc)) > 0 {
			s.q.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// screen returns the external addresses of svc that are not to be
// programmed and the claims it holds (release the others once the NB is
// written).
func (s *Reconciler) screen(svc *corev1.Service) ([]refusal, map[claimKey]bool) {
	key := svc.Namespace + "/" + svc.Name
	own := clusterIPs(svc)
	ports := servicePorts(svc)
	keep := map[claimKey]bool{}
	var out []refusal
	for _, e := range externalAddrs(svc) {
		if rule, why := s.rangeRule(e.addr); rule != "" {
			out = append(out, refusal{addr: e.addr, what: e.what, rule: rule, why: why, fix: fixOutsideCluster})
			continue
		}
		if !e.programmed || slices.Contains(own, e.addr) {
			continue
		}
		if other := s.otherClusterIP(e.addr, key); other != "" {
			out = append(out, refusal{addr: e.addr, what: e.what, rule: RuleClusterIP,
				why: fmt.Sprintf("it is the ClusterIP of Service %s: it would take that Service's traffic", other), fix: fixOutsideCluster})
			continue
		}
		held := map[string][]claimKey{}
		for _, p := range ports {
			k := claimKey{addr: e.addr, proto: p.proto, port: p.port}
			if h := s.claim(svc, k); h != key {
				held[h] = append(held[h], k)
				continue
			}
			keep[k] = true
		}
		holders := make([]string, 0, len(held))
		for h := range held {
			holders = append(holders, h)
		}
		slices.Sort(holders)
		for _, h := range holders {
			out = append(out, refusal{addr: e.addr, what: e.what, rule: RuleHeldByService, ports: held[h],
				why: fmt.Sprintf("Service %s already serves this address and port", h), fix: fmt.Sprintf(fixPickAnotherOrAsk, h)})
		}
	}
	return out, keep
}

// withoutRefused removes the refused VIPs from the load balancers Translate
// made (never one of the Service's own ClusterIPs); a load balancer left
// without VIPs is dropped.
func withoutRefused(svc *corev1.Service, lbs []LB, refused []refusal) []LB {
	if len(refused) == 0 {
		return lbs
	}
	own := clusterIPs(svc)
	drop := map[corev1.Protocol]map[string]bool{}
	for _, r := range refused {
		if slices.Contains(own, r.addr) {
			continue
		}
		ports := r.ports
		if ports == nil {
			ports = servicePorts(svc)
		}
		for _, p := range ports {
			if drop[p.proto] == nil {
				drop[p.proto] = map[string]bool{}
			}
			if p.port >= 1 && p.port <= 65535 {
				drop[p.proto][netip.AddrPortFrom(r.addr, uint16(p.port)).String()] = true
			}
		}
	}
	out := lbs[:0:0]
	for _, lb := range lbs {
		if d := drop[corev1.Protocol(lb.ExternalIDs[KeyProtocol])]; d != nil && lb.Vars == nil {
			for v := range lb.VIPs {
				if d[v] {
					delete(lb.VIPs, v)
				}
			}
			if len(lb.VIPs) == 0 {
				continue
			}
		}
		out = append(out, lb)
	}
	return out
}

// Package netpol translates a networking.k8s.io/v1 NetworkPolicy into the
// OVN rows that enforce it, without I/O: one port group holding the pods the
// policy selects, a default-drop ACL per direction it isolates, allow-related
// ACLs per rule (so replies pass), and address sets for the peers, so that
// pods coming and going change set contents and group membership only.
//
// Layout of one policy (pg = PortGroupName):
//
//	to-lport   3000  outport == @pg && ip4.src == {host CIDRs}        allow-related (kubelet probes via ovn0)
//	to-lport   2001  outport == @pg && ip4 && ip4.src == $pg_in<i> ...   allow-related
//	to-lport   2000  outport == @pg && ip                              drop
//	from-lport 2001  inport == @pg && ip4 && ip4.dst == $pg_eg<i> ...    allow-related (apply-after-lb)
//	from-lport 2000  inport == @pg && ip                               drop (apply-after-lb)
//
// In a dual-stack or IPv6 cluster (the host CIDRs say which families it
// has) each allow ACL and address set exists once per family: the IPv6
// ones match ip6 and their sets are named <set>_ip6.
//
// ACLs of all port groups are evaluated together by priority, so the allow
// rules of several policies selecting one pod add up, as Kubernetes wants.
// No match negates an address set (`!= $set` expands into many OpenFlow
// flows): ipBlock excepts are subtracted here into plain CIDRs.
//
// The translation (this file) does no I/O; the reconciler (reconciler.go)
// watches policies, pods and namespaces and writes through internal/ovnnb.
package netpol

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Kube-OVN's annotations on a NetworkPolicy.
const (
	AnnotationEnableLog  = "ovn.kubernetes.io/enable_log"      // "true": log dropped packets
	AnnotationLogActions = "ovn.kubernetes.io/log_acl_actions" // "drop,allow": allowed packets too
)

// ACL priorities (Kube-OVN's values).
const (
	PriorityDrop  = 2000
	PriorityAllow = 2001
	PriorityHost  = 3000
)

// Directions and actions, OVN's spelling.
const (
	ToLport   = "to-lport"
	FromLport = "from-lport"

	ActionAllowRelated = "allow-related"
	ActionDrop         = "drop"
)

// Pod is what the translation reads of a pod.
type Pod struct {
	Namespace, Name string
	Labels          map[string]string
	IPs             []netip.Addr
	Port            string                 // its logical switch port
	ContainerPorts  []corev1.ContainerPort // named ones are what matters
}

// Namespace is a namespace's name and labels.
type Namespace struct {
	Name   string
	Labels map[string]string
}

// Options are cluster facts the translation needs.
type Options struct {
	// HostCIDRs: sources of the nodes' own traffic (the join subnet, where
	// each node's ovn0 lives): always admitted to selected pods, since
	// kubelet probes must pass whatever the policy says.
	HostCIDRs []netip.Prefix
}

// ACL is one desired ACL row.
type ACL struct {
	Direction string
	Priority  int
	Match     string
	Action    string
	Log       bool
	Name      string // set when Log
	Severity  string // set when Log
	Options   map[string]string
}

// AddressSet is one desired address set.
type AddressSet struct {
	Name      string
	Addresses []string // sorted, unique
}

// Desired is everything one policy needs in OVN.
type Desired struct {
	PortGroup   string
	Ports       []string // logical switch ports of the selected pods, sorted
	ACLs        []ACL
	AddressSets []AddressSet // sorted by name
}

// InvalidError is a policy OVN cannot express: it becomes an event and
// changes nothing.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string { return e.Msg }

func invalid(format string, a ...any) error { return &InvalidError{Msg: fmt.Sprintf(format, a...)} }

// PortGroupName is the port group of a policy (internal/ovnnb names it, so
// netctl reads the same name without linking the controller).
func PortGroupName(namespace, name string) string { return ovnnb.PolicyPortGroup(namespace, name) }

func sanitize(s string) string { return ovnnb.SanitizeName(s) }

// PolicyTypes are the directions a policy isolates, with Kubernetes'
// defaulting when policyTypes is empty.
func PolicyTypes(np *networkingv1.NetworkPolicy) (ingress, egress bool) {
	if len(np.Spec.PolicyTypes) == 0 {
		return true, len(np.Spec.Egress) > 0
	}
	for _, t := range np.Spec.PolicyTypes {
		switch t {
		case networkingv1.PolicyTypeIngress:
			ingress = true
		case networkingv1.PolicyTypeEgress:
			egress = true
		}
	}
	return ingress, egress
}

type peerSel struct {
	pods labels.Selector // nil: every pod of the matched namespaces
	ns   labels.Selector // nil: the policy's own namespace
}

// compiled is a policy with its selectors parsed and ipBlocks resolved.
type compiled struct {
	np      *networkingv1.NetworkPolicy
	sel     labels.Selector
	ingress []rule
	egress  []rule
}

type rule struct {
	peers  []peerSel
	cidrs  []netip.Prefix // ipBlocks minus their excepts (both families)
	any    bool           // no peers: any source / destination
	ports  []networkingv1.NetworkPolicyPort
	noPort bool
}

func selector(s *metav1.LabelSelector, what string) (labels.Selector, error) {
	sel, err := metav1.LabelSelectorAsSelector(s)
	if err != nil {
		return nil, invalid("%s: %v", what, err)
	}
	return sel, nil
}

func compile(np *networkingv1.NetworkPolicy) (*compiled, error) {
	c := &compiled{np: np}
	var err error
	if c.sel, err = selector(&np.Spec.PodSelector, "spec.podSelector"); err != nil {
		return nil, err
	}
	for i, r := range np.Spec.Ingress {
		cr, err := compileRule(r.From, r.Ports, fmt.Sprintf("spec.ingress[%d]", i), "from")
		if err != nil {
			return nil, err
		}
		c.ingress = append(c.ingress, cr)
	}
	for i, r := range np.Spec.Egress {
		cr, err := compileRule(r.To, r.Ports, fmt.Sprintf("spec.egress[%d]", i), "to")
		if err != nil {
			return nil, err
		}
		c.egress = append(c.egress, cr)
	}
	return c, nil
}

func compileRule(peers []networkingv1.NetworkPolicyPeer, ports []networkingv1.NetworkPolicyPort, path, field string) (rule, error) {
	r := rule{any: len(peers) == 0, ports: ports, noPort: len(ports) == 0}
	for j, p := range peers {
		at := fmt.Sprintf("%s.%s[%d]", path, field, j)
		if p.IPBlock != nil {
			if p.PodSelector != nil || p.NamespaceSelector != nil {
				return r, invalid("%s: ipBlock cannot be combined with selectors", at)
			}
			cidrs, err := ipBlock(p.IPBlock, at)
			if err != nil {
				return r, err
			}
			r.cidrs = append(r.cidrs, cidrs...)
			continue
		}
		var ps peerSel
		var err error
		if p.PodSelector == nil && p.NamespaceSelector == nil {
			return r, invalid("%s: a peer needs podSelector, namespaceSelector or ipBlock", at)
		}
		if p.PodSelector != nil {
			if ps.pods, err = selector(p.PodSelector, at+".podSelector"); err != nil {
				return r, err
			}
		}
		if p.NamespaceSelector != nil {
			if ps.ns, err = selector(p.NamespaceSelector, at+".namespaceSelector"); err != nil {
				return r, err
			}
		}
		r.peers = append(r.peers, ps)
	}
	for j, p := range ports {
		at := fmt.Sprintf("%s.ports[%d]", path, j)
		if _, err := l4(p.Protocol); err != nil {
			return r, invalid("%s: %v", at, err)
		}
		if p.EndPort != nil {
			if p.Port == nil || p.Port.Type != 0 {
				return r, invalid("%s: endPort needs a numeric port", at)
			}
			if *p.EndPort < p.Port.IntVal || *p.EndPort > 65535 {
				return r, invalid("%s: endPort %d is not in [port %d, 65535]", at, *p.EndPort, p.Port.IntVal)
			}
		}
		if p.Port != nil && p.Port.Type == 0 && (p.Port.IntVal < 1 || p.Port.IntVal > 65535) {
			return r, invalid("%s: port %d is not in [1, 65535]", at, p.Port.IntVal)
		}
		if p.Port != nil && p.Port.Type != 0 && p.Port.StrVal == "" {
			return r, invalid("%s: empty port name", at)
		}
	}
	return r, nil
}

func l4(p *corev1.Protocol) (string, error) {
	if p == nil {
		return "tcp", nil
	}
	switch *p {
	case corev1.ProtocolTCP:
		return "tcp", nil
	case corev1.ProtocolUDP:
		return "udp", nil
	case corev1.ProtocolSCTP:
		return "sctp", nil
	}
	return "", fmt.Errorf("protocol %q is not TCP, UDP or SCTP", *p)
}

// ipBlock is the block's CIDR minus its excepts, as plain prefixes.
func ipBlock(b *networkingv1.IPBlock, at string) ([]netip.Prefix, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, invalid("%s.ipBlock.cidr %q: %v", at, b.CIDR, err)
	}
	cidr = cidr.Masked()
	var ex []netip.Prefix
	for _, e := range b.Except {
		p, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, invalid("%s.ipBlock.except %q: %v", at, e, err)
		}
		p = p.Masked()
		if p.Addr().Is4() != cidr.Addr().Is4() || !cidr.Contains(p.Addr()) || p.Bits() < cidr.Bits() {
			return nil, invalid("%s.ipBlock.except %s is not inside cidr %s", at, e, cidr)
		}
		ex = append(ex, p)
	}
	return Subtract(cidr, ex), nil
}

// Subtract returns the prefixes covering p minus every prefix of except:
// at most bits(except)-bits(p) prefixes per except.
func Subtract(p netip.Prefix, except []netip.Prefix) []netip.Prefix {
	for _, e := range except {
		if e.Overlaps(p) && e.Bits() <= p.Bits() {
			return nil // p lies inside an except
		}
	}
	var inside []netip.Prefix
	for _, e := range except {
		if e.Overlaps(p) {
			inside = append(inside, e)
		}
	}
	if len(inside) == 0 {
		return []netip.Prefix{p}
	}
	lo, hi := halves(p)
	return append(Subtract(lo, inside), Subtract(hi, inside)...)
}

// halves splits p into its two sub-prefixes one bit longer.
func halves(p netip.Prefix) (netip.Prefix, netip.Prefix) {
	bits := p.Bits() + 1
	lo := netip.PrefixFrom(p.Addr(), bits)
	b := p.Addr().AsSlice()
	idx := p.Bits() / 8
	b[idx] |= 0x80 >> (p.Bits() % 8)
	a, _ := netip.AddrFromSlice(b)
	return lo, netip.PrefixFrom(a, bits)
}

func matches(sel labels.Selector, l map[string]string) bool { return sel.Matches(labels.Set(l)) }

// selects: the pod is in the policy's namespace and its podSelector matches.
func (c *compiled) selects(p *Pod) bool {
	return p.Namespace == c.np.Namespace && matches(c.sel, p.Labels)
}

func (ps peerSel) selects(policyNS string, p *Pod, nsLabels map[string]string) bool {
	if ps.ns == nil {
		if p.Namespace != policyNS {
			return false
		}
	} else if !matches(ps.ns, nsLabels) {
		return false
	}
	return ps.pods == nil || matches(ps.pods, p.Labels)
}

func (r rule) selectsPeer(policyNS string, p *Pod, nsLabels map[string]string) bool {
	for _, ps := range r.peers {
		if ps.selects(policyNS, p, nsLabels) {
			return true
		}
	}
	return false
}

// Translate computes the OVN rows of one policy over the current pods and
// namespaces. Pods without a port or an address are left out.
func Translate(np *networkingv1.NetworkPolicy, pods []Pod, namespaces []Namespace, opt Options) (*Desired, error) {
	c, err := compile(np)
	if err != nil {
		return nil, err
	}
	nsLabels := make(map[string]map[string]string, len(namespaces))
	for _, n := range namespaces {
		nsLabels[n.Name] = n.Labels
	}
	pg := PortGroupName(np.Namespace, np.Name)
	d := &Desired{PortGroup: pg}
	var selected []*Pod
	for i := range pods {
		p := &pods[i]
		if c.selects(p) {
			selected = append(selected, p)
			if p.Port != "" {
				d.Ports = append(d.Ports, p.Port)
			}
		}
	}
	sort.Strings(d.Ports)
	d.Ports = slices.Compact(d.Ports)

	logDrop := np.Annotations[AnnotationEnableLog] == "true"
	logAllow := logDrop && slices.Contains(strings.Split(strings.ReplaceAll(np.Annotations[AnnotationLogActions], " ", ""), ","), "allow")
	name := np.Namespace + "/" + np.Name
	if len(name) > 63 {
		name = name[:63]
	}
	acl := func(dir string, prio int, match, action string) ACL {
		a := ACL{Direction: dir, Priority: prio, Match: match, Action: action}
		if dir == FromLport {
			// After the load balancer: egress rules see the backend, not the ClusterIP.
			a.Options = map[string]string{"apply-after-lb": "true"}
		}
		if (action == ActionDrop && logDrop) || (action != ActionDrop && logAllow) {
			a.Log, a.Name, a.Severity = true, name, "info"
			if action == ActionDrop {
				a.Severity = "warning"
			}
		}
		return a
	}
	sets := map[string][]string{}
	ingress, egress := PolicyTypes(np)
	fams := clusterFamilies(opt.HostCIDRs)
	if ingress {
		port := "outport == @" + pg
		d.ACLs = append(d.ACLs, acl(ToLport, PriorityDrop, port+" && ip", ActionDrop))
		for _, f := range fams {
			var host []string
			for _, h := range opt.HostCIDRs {
				if f.is(h.Addr()) {
					host = append(host, h.Masked().String())
				}
			}
			if len(host) > 0 {
				d.ACLs = append(d.ACLs, acl(ToLport, PriorityHost, port+" && "+f.ip+".src == {"+strings.Join(host, ", ")+"}", ActionAllowRelated))
			}
			for i, r := range c.ingress {
				src := ""
				if !r.any {
					as := fmt.Sprintf("%s_in%d%s", pg, i, f.suffix)
					sets[as] = peerAddresses(c, r, pods, nsLabels, f)
					src = " && " + f.ip + ".src == $" + as
				}
				for _, m := range portMatches(r, pg, selected, sets, f) {
					d.ACLs = append(d.ACLs, acl(ToLport, PriorityAllow, port+" && "+f.ip+src+m, ActionAllowRelated))
				}
			}
		}
	}
	if egress {
		port := "inport == @" + pg
		d.ACLs = append(d.ACLs, acl(FromLport, PriorityDrop, port+" && ip", ActionDrop))
		for _, f := range fams {
			for i, r := range c.egress {
				dst := ""
				if !r.any {
					as := fmt.Sprintf("%s_eg%d%s", pg, i, f.suffix)
					sets[as] = peerAddresses(c, r, pods, nsLabels, f)
					dst = " && " + f.ip + ".dst == $" + as
				}
				// Named egress ports resolve on the destination pods: the rule's
				// pod peers, or every pod when it names no peer.
				var dests []*Pod
				for j := range pods {
					p := &pods[j]
					if r.any || r.selectsPeer(np.Namespace, p, nsLabels[p.Namespace]) {
						dests = append(dests, p)
					}
				}
				for _, m := range portMatches(r, fmt.Sprintf("%s_eg%d", pg, i), dests, sets, f) {
					d.ACLs = append(d.ACLs, acl(FromLport, PriorityAllow, port+" && "+f.ip+dst+m, ActionAllowRelated))
				}
			}
		}
	}
	for n, a := range sets {
		sort.Strings(a)
		d.AddressSets = append(d.AddressSets, AddressSet{Name: n, Addresses: slices.Compact(a)})
	}
	sort.Slice(d.AddressSets, func(i, j int) bool { return d.AddressSets[i].Name < d.AddressSets[j].Name })
	sortACLs(d.ACLs)
	return d, nil
}

func sortACLs(a []ACL) {
	sort.SliceStable(a, func(i, j int) bool {
		if a[i].Direction != a[j].Direction {
			return a[i].Direction > a[j].Direction
		}
		if a[i].Priority != a[j].Priority {
			return a[i].Priority > a[j].Priority
		}
		return a[i].Match < a[j].Match
	})
}

// family is one IP version of the ACLs: the match prefix and the suffix of
// its address sets' names (OVN matches compare one family; the IPv4 names
// are those of an IPv4-only cluster).
type family struct {
	ip     string // "ip4" or "ip6"
	suffix string // "" or "_ip6"
	is     func(netip.Addr) bool
}

var (
	ip4 = family{"ip4", "", netip.Addr.Is4}
	ip6 = family{"ip6", "_ip6", func(a netip.Addr) bool { return a.Is6() && !a.Is4In6() }}
)

// clusterFamilies are the families of the cluster, read from its host
// CIDRs (the join Subnet's, one per family): IPv4 when they say nothing.
func clusterFamilies(host []netip.Prefix) []family {
	var out []family
	for _, f := range []family{ip4, ip6} {
		if slices.ContainsFunc(host, func(p netip.Prefix) bool { return f.is(p.Addr()) }) {
			out = append(out, f)
		}
	}
	if len(out) == 0 {
		return []family{ip4}
	}
	return out
}

// peerAddresses: the addresses of family f of the pods a rule's selectors
// pick, plus its ipBlocks of that family.
func peerAddresses(c *compiled, r rule, pods []Pod, nsLabels map[string]map[string]string, f family) []string {
	out := []string{}
	for i := range pods {
		p := &pods[i]
		if r.selectsPeer(c.np.Namespace, p, nsLabels[p.Namespace]) {
			out = append(out, f.of(p.IPs)...)
		}
	}
	for _, b := range r.cidrs {
		if f.is(b.Addr()) {
			out = append(out, b.String())
		}
	}
	return out
}

// of keeps the addresses of family f.
func (f family) of(ips []netip.Addr) []string {
	var out []string
	for _, ip := range ips {
		if f.is(ip) {
			out = append(out, ip.String())
		}
	}
	return out
}

// resolve groups pods (their addresses of family f) by the number their
// container port of that name and protocol has.
func resolve(pods []*Pod, name string, proto corev1.Protocol, f family) map[int32][]string {
	out := map[int32][]string{}
	for _, p := range pods {
		for _, cp := range p.ContainerPorts {
			pp := cp.Protocol
			if pp == "" {
				pp = corev1.ProtocolTCP
			}
			if cp.Name == name && pp == proto {
				out[cp.ContainerPort] = append(out[cp.ContainerPort], f.of(p.IPs)...)
				break
			}
		}
	}
	return out
}

func protoOf(p *corev1.Protocol) corev1.Protocol {
	if p == nil {
		return corev1.ProtocolTCP
	}
	return *p
}

func numericMatch(proto string, p networkingv1.NetworkPolicyPort) string {
	switch {
	case p.Port == nil:
		return " && " + proto
	case p.EndPort != nil && *p.EndPort > p.Port.IntVal:
		return fmt.Sprintf(" && %s.dst >= %d && %s.dst <= %d", proto, p.Port.IntVal, proto, *p.EndPort)
	default:
		return fmt.Sprintf(" && %s.dst == %d", proto, p.Port.IntVal)
	}
}

// portMatches are the port parts of a rule's ACLs ("" = all ports). A
// named port resolves on the destination pods (an ingress rule's selected
// pods, an egress rule's peers): one set of those pods per number the name
// stands for, named <prefix>_<proto>_<name>_<number> (plus the family's
// suffix) and added to sets.
func portMatches(r rule, prefix string, pods []*Pod, sets map[string][]string, f family) []string {
	if r.noPort {
		return []string{""}
	}
	var out []string
	for _, p := range r.ports {
		proto, _ := l4(p.Protocol)
		if p.Port == nil || p.Port.Type == 0 {
			out = append(out, numericMatch(proto, p))
			continue
		}
		byNum := resolve(pods, p.Port.StrVal, protoOf(p.Protocol), f)
		for _, n := range sortedKeys(byNum) {
			as := fmt.Sprintf("%s_%s_%s_%d%s", prefix, proto, sanitize(p.Port.StrVal), n, f.suffix)
			sets[as] = append(sets[as], byNum[n]...)
			out = append(out, fmt.Sprintf(" && %s.dst == $%s && %s.dst == %d", f.ip, as, proto, n))
		}
	}
	return out
}

func sortedKeys(m map[int32][]string) []int32 {
	k := make([]int32, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

// Relevant says whether a pod (with its namespace's labels) can change
// what a policy needs: it is selected, it is a peer, or it may be the
// destination of a named egress port.
func Relevant(np *networkingv1.NetworkPolicy, p *Pod, nsLabels map[string]string) bool {
	c, err := compile(np)
	if err != nil {
		return false
	}
	if c.selects(p) {
		return true
	}
	for _, r := range append(slices.Clone(c.ingress), c.egress...) {
		if r.selectsPeer(np.Namespace, p, nsLabels) {
			return true
		}
	}
	for _, r := range c.egress {
		if r.any && !r.noPort {
			for _, pp := range r.ports {
				if pp.Port != nil && pp.Port.Type != 0 {
					return true
				}
			}
		}
	}
	return false
}

// Local says whether everything the policy reads lies in its own
// namespace: no peer has a namespaceSelector, and no egress rule without
// peers (to anywhere) names a port (named ports resolve on the peer pods,
// which are then every pod). Pods and namespaces elsewhere cannot change a
// local policy's rows (Relevant is false for them), so the reconciler
// translates it over its namespace's pods and ignores other namespaces'
// events. An invalid policy counts as not local (it is re-checked on every
// change, as before).
func Local(np *networkingv1.NetworkPolicy) bool {
	if _, err := compile(np); err != nil {
		return false
	}
	peersLocal := func(peers []networkingv1.NetworkPolicyPeer) bool {
		for _, p := range peers {
			if p.NamespaceSelector != nil {
				return false
			}
		}
		return true
	}
	for _, r := range np.Spec.Ingress {
		if !peersLocal(r.From) {
			return false
		}
	}
	for _, r := range np.Spec.Egress {
		if !peersLocal(r.To) {
			return false
		}
		if len(r.To) == 0 {
			for _, pp := range r.Ports {
				if pp.Port != nil && pp.Port.Type != 0 {
					return false
				}
			}
		}
	}
	return true
}

// NamedPorts keeps the named container ports of a pod spec, all the
// translation reads of it.
func NamedPorts(containers []corev1.Container) []corev1.ContainerPort {
	var out []corev1.ContainerPort
	for _, c := range containers {
		for _, p := range c.Ports {
			if p.Name != "" {
				out = append(out, corev1.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
			}
		}
	}
	return out
}

package extgw

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// claim records p as programmed (x.mu held).
func (x *Reconciler) claim(p ovnnet.PodNAT) {
	x.unclaim(p.Pod)
	x.held[p.Pod] = p
	if p.EIP.IsValid() {
		x.eips[p.EIP] = p.Pod
	}
	if p.SNAT.IsValid() {
		if x.snats[p.SNAT] == nil {
			x.snats[p.SNAT] = map[string]bool{}
		}
		x.snats[p.SNAT][p.Pod] = true
	}
}

// unclaim forgets what pod holds and reports whether it held an EIP (x.mu held).
func (x *Reconciler) unclaim(pod string) bool {
	p, ok := x.held[pod]
	if !ok {
		return false
	}
	delete(x.held, pod)
	delete(x.via, pod)
	freed := false
	if p.EIP.IsValid() && x.eips[p.EIP] == pod {
		delete(x.eips, p.EIP)
		freed = true
	}
	if p.SNAT.IsValid() {
		delete(x.snats[p.SNAT], pod)
		if len(x.snats[p.SNAT]) == 0 {
			delete(x.snats, p.SNAT)
			freed = true
		}
	}
	return freed
}

// release removes what a pod holds; pods refused for a conflict try again.
func (x *Reconciler) release(ctx context.Context, key string) error {
	x.mu.Lock()
	_, had := x.held[key]
	x.mu.Unlock()
	if !had {
		return nil
	}
	if err := x.deps.Net.RemovePodNAT(ctx, key); err != nil {
		return err
	}
	x.mu.Lock()
	freed := x.unclaim(key)
	var wake []string
	if freed {
		for k := range x.waiting {
			wake = append(wake, k)
		}
		x.waiting = map[string]bool{}
	}
	x.mu.Unlock()
	x.log.Info("EIP/SNAT removed", "pod", key)
	x.notify()
	for _, k := range wake {
		x.q.Add(k)
	}
	return nil
}

// syncPod programs (or removes) one pod's EIP/SNAT.
func (x *Reconciler) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ref := "pod/" + key
	pod, err := x.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		x.forget(ref)
		x.unwait(key)
		return x.release(ctx, key)
	}
	if err != nil {
		return err
	}
	if !reconcile.WantsAddress(pod) || pod.DeletionTimestamp != nil || !wantsExternal(pod) {
		x.forget(ref)
		x.unwait(key)
		return x.release(ctx, key)
	}
	x.mu.Lock()
	cfg, why := x.cfg, x.why
	x.mu.Unlock()
	if cfg == nil {
		// What an earlier configuration programmed stays until the gateway is removed.
		x.wait(key)
		x.report(pod, ref, corev1.EventTypeWarning, "ExternalGatewayNotReady", fmt.Sprintf("EIP/SNAT of this pod cannot be programmed: %s", why))
		return nil
	}
	want, ok, release := x.wanted(pod, ref, cfg)
	if release {
		return x.release(ctx, key)
	}
	if !ok {
		return nil
	}
	centralWhy := x.place(pod, &want, cfg)
	return x.commit(ctx, pod, ref, cfg, want, centralWhy)
}

// wanted is the NAT the pod's annotations ask for. ok is false while there
// is nothing to program yet; release: what the pod holds goes (an event
// says what is wrong with its annotations).
func (x *Reconciler) wanted(pod *corev1.Pod, ref string, cfg *ovnnet.ExternalGatewayConfig) (want ovnnet.PodNAT, ok, release bool) {
	want = ovnnet.PodNAT{Pod: pod.Namespace + "/" + pod.Name}
	if s := pod.Annotations[annotations.EIP]; s != "" {
		a, err := cfg.CheckExternalAddress(annotations.EIP, s)
		if err != nil {
			x.report(pod, ref, corev1.EventTypeWarning, "InvalidEIP", err.Error())
			return want, false, true
		}
		if !x.authorized(pod, ref, cfg, annotations.EIP, a) {
			return want, false, true
		}
		want.EIP = a
	}
	if s := pod.Annotations[annotations.SNAT]; s != "" {
		a, err := cfg.CheckExternalAddress(annotations.SNAT, s)
		if err != nil {
			x.report(pod, ref, corev1.EventTypeWarning, "InvalidSNAT", err.Error())
			return want, false, true
		}
		if want.EIP.IsValid() {
			// dnat_and_snat already gives the pod's connections the EIP as source.
			x.report(pod, ref, corev1.EventTypeWarning, "SNATIgnored", fmt.Sprintf("annotation %s=%s is not applied: the pod has %s=%s, and its connections leave from the EIP; remove one of them",
				annotations.SNAT, s, annotations.EIP, want.EIP))
		} else {
			if !x.authorized(pod, ref, cfg, annotations.SNAT, a) {
				return want, false, true
			}
			want.SNAT = a
		}
	}
	if pod.Annotations[annotations.Allocated] != "true" {
		return want, false, false // the pod's own sync annotates it; that update queues it again
	}
	ips, err := ipam.ParseIPs(pod.Annotations[annotations.IPAddress])
	if err != nil {
		return want, false, false
	}
	for _, ip := range ips {
		if ip.Is4() {
			want.IP = ip
		}
	}
	if !want.IP.IsValid() {
		x.report(pod, ref, corev1.EventTypeWarning, "InvalidEIP", "EIP/SNAT needs an IPv4 pod address; this pod has "+pod.Annotations[annotations.IPAddress])
		return want, false, true
	}
	if vpc := x.deps.Net.PodVPC(want.Pod); vpc != "" {
		x.report(pod, ref, corev1.EventTypeWarning, "InvalidEIP", fmt.Sprintf("EIP/SNAT of the ovn-external-gw-config ConfigMap is the default VPC's; this pod is in VPC %q (its address may be another VPC's too): remove the %s/%s annotations; a custom VPC's pods get an OvnFip or OvnSnatRule on a Vpc with enableExternal: true", vpc, annotations.EIP, annotations.SNAT))
		return want, false, true
	}
	return want, true, false
}

// authorized checks the admin's address policy (namespace-external-addresses,
// reserved-external-addresses): a refused address gets a Warning naming
// the address, the rule and the fix, and the pod keeps nothing.
func (x *Reconciler) authorized(pod *corev1.Pod, ref string, cfg *ovnnet.ExternalGatewayConfig, key string, a netip.Addr) bool {
	err := cfg.Policy.AuthorizeExternalAddress(pod.Namespace, key, a)
	if err == nil {
		return true
	}
	reason := ovnnet.ReasonAddressNotAllowed
	if pe, ok := err.(*ovnnet.PolicyError); ok {
		reason = pe.Reason
	}
	x.report(pod, ref, corev1.EventTypeWarning, reason, err.Error())
	return false
}

// place makes a distributed EIP's rule name the pod's port when its node
// can NAT it, else returns why the rule stays centralized ("" otherwise).
func (x *Reconciler) place(pod *corev1.Pod, want *ovnnet.PodNAT, cfg *ovnnet.ExternalGatewayConfig) string {
	if !cfg.Distributed || !want.EIP.IsValid() {
		return ""
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	node := pod.Spec.NodeName
	switch {
	case node == "":
		return "the pod is not on a node yet"
	case x.bridged[node]:
		want.Port = ovnnet.PortName(pod.Namespace, pod.Name)
		return ""
	case x.unusable[node] != "":
		return "its node " + node + " " + x.unusable[node]
	default:
		return "its node " + node + " is unknown to the controller"
	}
}

// conflict says why want cannot be key's (the event's reason and
// message): one EIP, one pod (the holder keeps it), an EIP is not also
// anyone's SNAT, and an SNAT address is shared across namespaces only as
// the policy allows (x.mu held).
func (x *Reconciler) conflict(key string, want ovnnet.PodNAT, pol ovnnet.ExternalAddressPolicy) (reason, conflict string) {
	reason = "EIPConflict"
	if want.EIP.IsValid() {
		if owner := x.eips[want.EIP]; owner != "" && owner != key {
			conflict = fmt.Sprintf("EIP %s is held by pod %s; remove its %s annotation or choose another address (this pod gets it once %s lets it go)", want.EIP, owner, annotations.EIP, owner)
		} else if users := otherPods(x.snats[want.EIP], key); len(users) > 0 {
			conflict = fmt.Sprintf("EIP %s is the SNAT address of pod(s) %s; choose another address", want.EIP, strings.Join(users, ", "))
		}
	}
	if x.reserved != nil {
		for _, a := range []netip.Addr{want.EIP, want.SNAT} {
			if h := x.reserved(a); a.IsValid() && h != "" {
				return "EIPConflict", fmt.Sprintf("address %s is %s (a custom VPC's address on the external network); choose another address (this pod gets it once that object lets it go)", a, h)
			}
		}
	}
	if want.SNAT.IsValid() {
		if owner := x.eips[want.SNAT]; owner != "" && owner != key {
			conflict = fmt.Sprintf("SNAT address %s is the EIP of pod %s; choose another address", want.SNAT, owner)
		} else if err := pol.AuthorizeSharedSNAT(namespaceOf(key), want.SNAT, namespacesOf(otherPods(x.snats[want.SNAT], key))); err != nil {
			reason, conflict = ovnnet.ReasonSNATShared, err.Error()
		}
	}
	return reason, conflict
}

func namespaceOf(podKey string) string {
	ns, _, _ := strings.Cut(podKey, "/")
	return ns
}

// namespacesOf are the namespaces of pod keys, once each.
func namespacesOf(keys []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range keys {
		if ns := namespaceOf(k); !seen[ns] {
			seen[ns] = true
			out = append(out, ns)
		}
	}
	return out
}

// commit claims want for the pod and writes its NAT rules, unless another
// pod holds its addresses (the pod waits) or they are written already.
func (x *Reconciler) commit(ctx context.Context, pod *corev1.Pod, ref string, cfg *ovnnet.ExternalGatewayConfig, want ovnnet.PodNAT, centralWhy string) error {
	key := want.Pod
	x.mu.Lock()
	if reason, conflict := x.conflict(key, want, cfg.Policy); conflict != "" {
		x.waiting[key] = true
		x.mu.Unlock()
		x.report(pod, ref, corev1.EventTypeWarning, reason, conflict)
		return x.release(ctx, key)
	}
	old, had := x.held[key]
	if had && old == want && x.via[key] == cfg.GatewayIP {
		x.mu.Unlock()
		if centralWhy != "" {
			// Also when the rule is already so (switching to distributed changes nothing for it).
			x.reportNotDistributed(pod, ref, want.EIP, centralWhy, cfg.NIC)
		}
		return nil
	}
	x.claim(want) // before the NB write: a concurrent pod asking for it is refused
	x.mu.Unlock()
	if err := x.deps.Net.EnsurePodNAT(ctx, *cfg, want); err != nil {
		x.mu.Lock()
		x.unclaim(key)
		if had {
			x.claim(old)
		}
		x.mu.Unlock()
		return err
	}
	x.mu.Lock()
	x.via[key] = cfg.GatewayIP
	x.mu.Unlock()
	x.forget(ref)
	var parts []string
	switch {
	case want.Port != "":
		parts = append(parts, fmt.Sprintf("reached at and leaving from EIP %s on its node %s (distributed, MAC %s)", want.EIP, pod.Spec.NodeName, ovnnet.EIPMAC(want.EIP)))
	case want.EIP.IsValid():
		parts = append(parts, fmt.Sprintf("reached at and leaving from EIP %s", want.EIP))
	}
	if centralWhy != "" {
		x.reportNotDistributed(pod, ref, want.EIP, centralWhy, cfg.NIC)
	}
	if want.SNAT.IsValid() {
		parts = append(parts, fmt.Sprintf("leaving from SNAT address %s", want.SNAT))
	}
	x.report(pod, ref, corev1.EventTypeNormal, "ExternalNATProgrammed", strings.Join(parts, "; ")+" through "+ovnnet.ExternalRouterPort(ovnnet.DefaultRouter))
	if had && (old.EIP != want.EIP || old.SNAT != want.SNAT) {
		x.wakeAll()
	}
	if !had || old.EIP != want.EIP || old.SNAT != want.SNAT {
		x.notify()
	}
	return nil
}

func (x *Reconciler) reportNotDistributed(pod *corev1.Pod, ref string, eip netip.Addr, why, nic string) {
	x.report(pod, ref, corev1.EventTypeWarning, "EIPNotDistributed", fmt.Sprintf("EIP %s is NATed on the active gateway node, not on this pod's node: %s; it moves to the pod's node once that node has bridged %s",
		eip, why, nic))
}

func otherPods(m map[string]bool, self string) []string {
	var out []string
	for k := range m {
		if k != self {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (x *Reconciler) wait(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.waiting[key] = true
}

func (x *Reconciler) unwait(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.waiting, key)
}

// wakeAll requeues refused pods (an address was let go).
func (x *Reconciler) wakeAll() {
	x.mu.Lock()
	var keys []string
	for k := range x.waiting {
		keys = append(keys, k)
	}
	x.waiting = map[string]bool{}
	x.mu.Unlock()
	for _, k := range keys {
		x.q.Add(k)
	}
}

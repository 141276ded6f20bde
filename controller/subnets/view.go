package subnets

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// What the other reconcilers read and ask of subnets.

// SubnetFor is the Subnet of a namespace's pods that name none themselves
// (nor does the namespace): a valid Subnet listing the namespace or
// selecting its labels (nil: the namespace is unknown), else a Subnet that
// lists it but is not programmed yet (created with the namespace and its
// pods in one apply: the pod waits for it, woken when it is valid, instead
// of taking a default address for good), else the defaultSubnet of a Vpc
// listing the namespace (Kube-OVN's order: Subnet bindings first), else
// the default one.
func (r *Reconciler) SubnetFor(namespace string, nsLabels labels.Set) string {
	if s := r.subnetFor(namespace, nsLabels); s != "" {
		return s
	}
	if r.vpcs != nil {
		if s := r.vpcs.DefaultSubnetFor(namespace); s != "" {
			return s
		}
	}
	return r.defaultSubnet()
}

// defaultSubnet is a user Subnet of the default VPC marked default, else
// ovn-default.
func (r *Reconciler) defaultSubnet() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.valid))
	for n := range r.valid {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.valid[n].subnet
		// A user Subnet marked default wins over ovn-default (which the
		// controller creates as default); a custom VPC's never does.
		if s.Spec.Default && n != ovnnet.JoinSubnet && n != ovnnet.DefaultSubnet && !kubeovnv1.IsCustomVpc(s.Spec.Vpc) && !kubeovnv1.IsAttachment(s.Spec) {
			return n
		}
	}
	return ovnnet.DefaultSubnet
}

// subnetFor is SubnetFor's Subnet bindings ("" for none).
func (r *Reconciler) subnetFor(namespace string, nsLabels labels.Set) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.valid))
	for n := range r.valid {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := r.valid[n].subnet
		if kubeovnv1.IsAttachment(s.Spec) {
			continue // its namespaces may attach to it; it is not their subnet
		}
		if slices.Contains(s.Spec.Namespaces, namespace) {
			return n
		}
		for i := range s.Spec.NamespaceSelectors {
			if sel, err := metav1.LabelSelectorAsSelector(&s.Spec.NamespaceSelectors[i]); err == nil && nsLabels != nil && sel.Matches(nsLabels) {
				return n
			}
		}
	}
	for _, obj := range r.inf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		n := u.GetName()
		if _, valid := r.valid[n]; valid {
			continue
		}
		if _, invalid := r.problems[n]; invalid {
			continue
		}
		if p, _, _ := unstructured.NestedString(u.Object, "spec", "provider"); annotations.IsAttachmentProvider(p) {
			continue
		}
		if nss, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "namespaces"); slices.Contains(nss, namespace) {
			return n
		}
	}
	return ""
}

// SubnetsOf lists (sorted) the Subnets whose spec.provider is provider,
// programmed or not (a pod then waits for its Subnet, as for its default
// network).
func (r *Reconciler) SubnetsOf(provider string) []string {
	var out []string
	for _, obj := range r.inf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if p, _, _ := unstructured.NestedString(u.Object, "spec", "provider"); p == provider {
			out = append(out, u.GetName())
		}
	}
	sort.Strings(out)
	return out
}

// ProviderOf is a Subnet's spec.provider ("ovn" when it sets none, "" when
// the Subnet does not exist).
func (r *Reconciler) ProviderOf(name string) string {
	obj, ok, _ := r.inf.GetIndexer().GetByKey(name)
	u, isU := obj.(*unstructured.Unstructured)
	if !ok || !isU {
		return ""
	}
	if p, _, _ := unstructured.NestedString(u.Object, "spec", "provider"); p != "" {
		return p
	}
	return annotations.DefaultProvider
}

// Problem is why a Subnet is not valid (nil: valid, or not seen yet).
func (r *Reconciler) Problem(name string) *kubeovnv1.Problem {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.problems[name]
}

// Valid is a programmed Subnet and its configuration.
func (r *Reconciler) Valid(name string) (*kubeovnv1.Subnet, ipam.SubnetConfig, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.valid[name]
	return p.subnet, p.cfg, ok
}

// Underlay is the physical network of a valid underlay Subnet (false:
// overlay, or not valid).
func (r *Reconciler) Underlay(name string) (ovnnet.Underlay, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.valid[name]; ok && p.underlay != nil {
		return *p.underlay, true
	}
	return ovnnet.Underlay{}, false
}

// MTU is the mtu a valid Subnet asks for (0 when it sets none).
func (r *Reconciler) MTU(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.valid[name]; ok && p.subnet != nil {
		return p.subnet.Spec.MTU
	}
	return 0
}

// Terminating reports whether a Subnet waits for deletion.
func (r *Reconciler) Terminating(name string) bool {
	obj, ok, _ := r.inf.GetIndexer().GetByKey(name)
	return ok && obj.(*unstructured.Unstructured).GetDeletionTimestamp() != nil
}

// AddressesChanged batches a status write (an address was taken or freed).
func (r *Reconciler) AddressesChanged(name string) { r.statusQ.AddAfter(name, r.cfg.StatusDelay) }

// StatusChanged writes the status soon (a condition another reconciler
// reports changed).
func (r *Reconciler) StatusChanged(name string) { r.statusQ.Add(name) }

// Released: a user of the Subnet let its address go; a Subnet waiting for
// deletion looks again.
func (r *Reconciler) Released(name string) {
	if r.Terminating(name) {
		r.q.Add(name)
	}
}

// Admits says whether pods of namespace (with labels nsLabels; nil: the
// namespace is unknown) may have an address in the Subnet name, however the
// Subnet was chosen (the pod's or its namespace's logical_switch annotation,
// or SubnetFor). A Subnet that lists namespaces or namespaceSelectors admits
// only those namespaces; one bound to none, and the default Subnet (where
// the pods of every unbound namespace go), admit every namespace, as in
// Kube-OVN. When it refuses, rule describes the binding for the pod's event.
// A Subnet not known here admits: the pod then waits for it, and is looked
// at again once it is programmed.
func (r *Reconciler) Admits(name, namespace string, nsLabels labels.Set) (ok bool, rule string) {
	r.mu.Lock()
	p, valid := r.valid[name]
	r.mu.Unlock()
	s := p.subnet
	if !valid || s == nil {
		obj, found, _ := r.inf.GetIndexer().GetByKey(name)
		u, isU := obj.(*unstructured.Unstructured)
		if !found || !isU {
			return true, ""
		}
		var err error
		if s, err = kubeovnv1.FromUnstructured(u); err != nil {
			// Not readable: not valid either (the pod is refused as
			// SubnetNotValid); never admitted on a guess.
			return false, "its spec cannot be read (" + err.Error() + ")"
		}
	}
	if ok, rule := Binds(s, namespace, nsLabels); !ok {
		return ok, rule
	}
	if kubeovnv1.IsCustomVpc(s.Spec.Vpc) {
		// The VPC's own binding: a tenant's annotation naming another
		// tenant's VPC reaches nothing there.
		if r.vpcs == nil {
			return false, fmt.Sprintf("it is in VPC %q, which this controller does not run", s.Spec.Vpc)
		}
		if ok, rule := r.vpcs.Admits(s.Spec.Vpc, namespace); !ok {
			return false, fmt.Sprintf("it is in VPC %q, and %s", s.Spec.Vpc, rule)
		}
	}
	return true, ""
}

// Binds is Admits on a Subnet object.
func Binds(s *kubeovnv1.Subnet, namespace string, nsLabels labels.Set) (ok bool, rule string) {
	if s.Spec.Default || (len(s.Spec.Namespaces) == 0 && len(s.Spec.NamespaceSelectors) == 0) {
		return true, ""
	}
	if slices.Contains(s.Spec.Namespaces, namespace) {
		return true, ""
	}
	var sels []string
	for i := range s.Spec.NamespaceSelectors {
		sel, err := metav1.LabelSelectorAsSelector(&s.Spec.NamespaceSelectors[i])
		if err != nil {
			sels = append(sels, "(invalid selector)")
			continue
		}
		if nsLabels != nil && sel.Matches(nsLabels) {
			return true, ""
		}
		str := sel.String()
		if str == "" {
			str = "(empty selector: matches every labelled namespace)"
		}
		sels = append(sels, str)
	}
	var parts []string
	if len(s.Spec.Namespaces) > 0 {
		parts = append(parts, "spec.namespaces ["+strings.Join(s.Spec.Namespaces, ", ")+"]")
	}
	if len(sels) > 0 {
		parts = append(parts, "spec.namespaceSelectors ["+strings.Join(sels, "; ")+"]")
	}
	return false, "it admits only the namespaces in its " + strings.Join(parts, " and those matching its ")
}

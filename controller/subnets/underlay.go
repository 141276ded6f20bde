package subnets

import (
	"fmt"
	"net/netip"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// An underlay subnet (spec.vlan) reaches its physical network through the
// Vlan it names and that Vlan's ProviderNetwork. Both are read from the
// shared informers; a Subnet is programmed only once both exist and the
// Vlan is valid, and is judged again whenever either changes.

// watchUnderlay requeues the Subnets that use a Vlan or ProviderNetwork
// when it changes.
func (r *Reconciler) watchUnderlay() error {
	r.vlans, r.providers = r.cfg.Vlans, r.cfg.ProviderNetworks
	if r.vlans == nil || r.providers == nil {
		r.vlans, r.providers = nil, nil
		return nil
	}
	byVlan := func(obj any) {
		if name := objectName(obj); name != "" {
			r.requeueWhere(func(u *unstructured.Unstructured) bool { return specString(u, "vlan") == name })
		}
	}
	byProvider := func(obj any) {
		if name := objectName(obj); name != "" {
			r.requeueWhere(func(u *unstructured.Unstructured) bool { return r.providerOf(specString(u, "vlan")) == name })
		}
	}
	for inf, f := range map[cache.SharedIndexInformer]func(any){r.vlans: byVlan, r.providers: byProvider} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    f,
			UpdateFunc: func(_, n any) { f(n) },
			DeleteFunc: f,
		}); err != nil {
			return err
		}
	}
	return nil
}

// requeueWhere queues every Subnet for which match holds.
func (r *Reconciler) requeueWhere(match func(*unstructured.Unstructured) bool) {
	for _, obj := range r.inf.GetIndexer().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok && match(u) {
			r.q.Add(u.GetName())
		}
	}
}

// providerOf is the provider of the Vlan named vlan ("" when unknown).
func (r *Reconciler) providerOf(vlan string) string {
	if vlan == "" || r.vlans == nil {
		return ""
	}
	obj, ok, _ := r.vlans.GetIndexer().GetByKey(vlan)
	if !ok {
		return ""
	}
	v, _ := kubeovnv1.ValidateVlan(obj.(*unstructured.Unstructured))
	if v == nil {
		return ""
	}
	return v.Spec.ProviderName()
}

// underlay resolves a valid Subnet's spec.vlan: nil for an overlay subnet,
// else the network its switch joins, or the problem that keeps it off.
func (r *Reconciler) underlay(s *kubeovnv1.Subnet) (*ovnnet.Underlay, *kubeovnv1.Problem) {
	name := s.Spec.Vlan
	if name == "" {
		return nil, nil
	}
	if r.vlans == nil {
		return nil, &kubeovnv1.Problem{Reason: "VlanNotFound", Message: fmt.Sprintf(
			"spec.vlan %q: the Vlan and ProviderNetwork CRDs are not installed; apply packaging/kubernetes/base/crd-vlans.yaml and crd-provider-networks.yaml, then restart the controller", name)}
	}
	obj, ok, _ := r.vlans.GetIndexer().GetByKey(name)
	if !ok {
		return nil, &kubeovnv1.Problem{Reason: "VlanNotFound", Message: fmt.Sprintf(
			"spec.vlan %q names no Vlan; create it (kind: Vlan, spec.id: the VLAN tag, spec.provider: the ProviderNetwork) or correct spec.vlan", name)}
	}
	v, prob := kubeovnv1.ValidateVlan(obj.(*unstructured.Unstructured))
	if prob != nil {
		return nil, &kubeovnv1.Problem{Reason: "VlanNotValid", Message: fmt.Sprintf("spec.vlan %q: the Vlan is not valid: %s", name, prob.Message)}
	}
	if v.Status.Conflict {
		// Another Vlan of the provider network has the tag first (the
		// underlay reconciler's status): two objects for one VLAN.
		return nil, &kubeovnv1.Problem{Reason: "VlanConflict", Message: fmt.Sprintf(
			"spec.vlan %q: the Vlan conflicts with another Vlan of the same tag on its provider network (its status says which); point the Subnet at that Vlan, or give this one another id", name)}
	}
	pn := v.Spec.ProviderName()
	if _, ok, _ := r.providers.GetIndexer().GetByKey(pn); !ok {
		return nil, &kubeovnv1.Problem{Reason: "ProviderNetworkNotFound", Message: fmt.Sprintf(
			"spec.vlan %q is on ProviderNetwork %q, which does not exist; create it (kind: ProviderNetwork, spec.defaultInterface: the nodes' NIC) or correct the Vlan's spec.provider", name, pn)}
	}
	ul := &ovnnet.Underlay{Provider: pn, VlanID: v.Spec.Tag(), LogicalGateway: s.Spec.LogicalGateway,
		U2O: s.Spec.U2OInterconnection && !s.Spec.LogicalGateway}
	if ul.U2O && !r.started.Load() && r.u2oPending(s.Name) {
		// Not before the IPAM holds every pod's address: programmed
		// without the interconnection now, with it once started.
		ul.U2O = false
	}
	if ul.U2O {
		// The address asked for, else the one recorded: it survives restarts.
		want := s.Spec.U2OInterconnectionIP
		if want == "" {
			want = s.Status.U2OInterconnectionIP
		}
		for _, f := range strings.Split(want, ",") {
			if f = strings.TrimSpace(f); f == "" {
				continue
			}
			a, err := netip.ParseAddr(f)
			if err != nil {
				return nil, &kubeovnv1.Problem{Reason: "InvalidField", Message: fmt.Sprintf(
					"u2oInterconnectionIP %q is not an IP address; write an unused address of cidrBlock (e.g. 10.100.0.253), or remove it to have one allocated", want)}
			}
			ul.U2OIPs = append(ul.U2OIPs, a.Unmap())
		}
	}
	return ul, nil
}

func objectName(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetName()
	}
	return ""
}

func specString(u *unstructured.Unstructured, field string) string {
	v, _, _ := unstructured.NestedString(u.Object, "spec", field)
	return v
}

// u2oPending: a Subnet asks for an interconnection address that is not
// recorded yet. Before the start rebuilt the IPAM from the pods one is
// not picked (it could be a pod's); the start programs it again.
func (r *Reconciler) u2oPending(name string) bool {
	obj, ok, _ := r.inf.GetIndexer().GetByKey(name)
	if !ok {
		return false
	}
	s, err := kubeovnv1.FromUnstructured(obj.(*unstructured.Unstructured))
	return err == nil && s.Spec.Vlan != "" && s.Spec.U2OInterconnection && s.Spec.U2OInterconnectionIP == "" && s.Status.U2OInterconnectionIP == ""
}

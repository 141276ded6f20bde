package subnets

import (
	"fmt"
	"net/netip"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Subnets of custom VPCs (spec.vpc other than ovn-cluster): attached to
// the VPC's router once the VPC reconciler programmed it; until then the
// Subnet is not valid (VpcNotFound) and its pods wait.

// VpcNotFound is the Validated=False reason of a Subnet whose VPC is
// missing or not programmed yet.
const VpcNotFound = "VpcNotFound"

// vpcProblem: nil when vpc's router is programmed.
func (r *Reconciler) vpcProblem(vpc string) *kubeovnv1.Problem {
	if r.vpcs == nil {
		return &kubeovnv1.Problem{Reason: VpcNotFound, Message: fmt.Sprintf("spec.vpc %q: this controller runs no VPC reconciler; use spec.vpc %s or run the controller with the Vpc CRD", vpc, ovnnet.DefaultRouter)}
	}
	if ok, why := r.vpcs.Ready(vpc); !ok {
		return &kubeovnv1.Problem{Reason: VpcNotFound, Message: why}
	}
	return nil
}

// vpcOf is the custom VPC the Subnet was last programmed in ("" none).
func (r *Reconciler) vpcOf(name string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.valid[name]; ok && p.subnet != nil && kubeovnv1.IsCustomVpc(p.subnet.Spec.Vpc) {
		return p.subnet.Spec.Vpc
	}
	return ""
}

// queueVpcs tells the VPC reconciler about a Subnet of old and of s's VPC.
func (r *Reconciler) queueVpcs(old string, s *kubeovnv1.Subnet) {
	if r.vpcs == nil {
		return
	}
	if old != "" {
		r.vpcs.Queue(old)
	}
	if s != nil && kubeovnv1.IsCustomVpc(s.Spec.Vpc) && s.Spec.Vpc != old {
		r.vpcs.Queue(s.Spec.Vpc)
	}
}

// QueueVpc re-syncs the Subnets that name vpc (it was programmed or removed).
func (r *Reconciler) QueueVpc(vpc string) {
	for _, obj := range r.inf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if v, _, _ := unstructured.NestedString(u.Object, "spec", "vpc"); v == vpc {
			r.q.Add(u.GetName())
		}
	}
}

// VpcSubnets are the programmed Subnets of vpc ("" or ovn-cluster: the
// default VPC) and their CIDRs.
func (r *Reconciler) VpcSubnets(vpc string) map[string][]netip.Prefix {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]netip.Prefix{}
	for n, p := range r.valid {
		if p.subnet == nil {
			continue
		}
		in := p.subnet.Spec.Vpc
		if !kubeovnv1.IsCustomVpc(in) {
			in = kubeovnv1.DefaultVpc
		}
		if !kubeovnv1.IsCustomVpc(vpc) {
			vpc = kubeovnv1.DefaultVpc
		}
		if in == vpc {
			out[n] = slices.Clone(p.cfg.CIDRs)
		}
	}
	return out
}

// SubnetVpc is the VPC a programmed Subnet is in (ovn-cluster for the
// default one); false when it is not programmed.
func (r *Reconciler) SubnetVpc(name string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.valid[name]
	if !ok || p.subnet == nil {
		return "", false
	}
	if kubeovnv1.IsCustomVpc(p.subnet.Spec.Vpc) {
		return p.subnet.Spec.Vpc, true
	}
	return kubeovnv1.DefaultVpc, true
}

// Informer is the Subnet informer (tests await Subnet status on it).
func (r *Reconciler) Informer() cache.SharedIndexInformer { return r.inf }

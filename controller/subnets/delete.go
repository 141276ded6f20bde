package subnets

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// SubnetFinalizer keeps a Subnet that pods still use: deleting it waits
// until none holds an address in it (else its addresses would be handed
// out again while those pods run).
const SubnetFinalizer = "ovnhost.io/subnet-in-use"

// kubeOVNFinalizers are the finalizers kube-ovn-controller puts on Subnets
// (old and new spelling). ovnhost-controller, having taken over, removes
// them with its own once the Subnet is free, or the Subnet could never go.
var kubeOVNFinalizers = []string{"kube-ovn-controller", "kubeovn.io/kube-ovn-controller"}

// ensureFinalizer adds SubnetFinalizer to a live Subnet (optimistic: the
// patch carries the resourceVersion read, a conflict is retried).
func (r *Reconciler) ensureFinalizer(ctx context.Context, u *unstructured.Unstructured) error {
	if u.GetDeletionTimestamp() != nil || slices.Contains(u.GetFinalizers(), SubnetFinalizer) {
		return nil
	}
	return r.patchFinalizers(ctx, u, append(slices.Clone(u.GetFinalizers()), SubnetFinalizer))
}

func (r *Reconciler) patchFinalizers(ctx context.Context, u *unstructured.Unstructured, fins []string) error {
	if fins == nil {
		fins = []string{}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins, "resourceVersion": u.GetResourceVersion()}})
	_, err := r.cfg.Dynamic.Resource(kubeovnv1.SubnetGVR).Patch(ctx, u.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("finalizers of Subnet %s: %w", u.GetName(), err)
	}
	return nil
}

// users are the pods (namespace/name) and nodes ("node:<name>") holding
// addresses in subnet.
func (r *Reconciler) users(subnet string) []string {
	// The router's interconnection address is the subnet's own, not a user.
	return slices.DeleteFunc(r.cfg.IPAM.OwnersIn(subnet), func(o string) bool { return o == ovnnet.U2OOwner(subnet) })
}

// deletionBlockedMessage names (up to 10 of) the users still holding addresses.
func deletionBlockedMessage(users []string) string {
	shown := users
	if len(shown) > 10 {
		shown = shown[:10]
	}
	more := ""
	if len(users) > len(shown) {
		more = fmt.Sprintf(" and %d more", len(users)-len(shown))
	}
	return fmt.Sprintf("deletion waits for %d pod(s) or node(s) still using this subnet: %s%s; delete them (or move them to another subnet) and the Subnet goes",
		len(users), strings.Join(shown, ", "), more)
}

// finishDeletion handles a Subnet marked for deletion: while anything holds
// an address in it, it stays programmed and waits (the status names the
// users); once free, its switch is removed and the finalizers released.
// Before start-up has rebuilt the IPAM nothing is decided (every subnet
// would look free).
func (r *Reconciler) finishDeletion(ctx context.Context, u *unstructured.Unstructured) (done bool, err error) {
	name := u.GetName()
	if !r.started.Load() {
		return false, nil
	}
	if users := r.users(name); len(users) > 0 {
		r.mu.Lock()
		r.deleting[name] = deletionBlockedMessage(users)
		r.mu.Unlock()
		r.statusQ.Add(name)
		return false, nil
	}
	r.mu.Lock()
	r.forget(name)
	r.mu.Unlock()
	if err := r.gateways.Remove(ctx, name); err != nil {
		return false, err
	}
	if err := r.cfg.Net.RemoveSubnet(ctx, name); err != nil {
		return false, err
	}
	var keep []string
	for _, f := range u.GetFinalizers() {
		if f != SubnetFinalizer && !slices.Contains(kubeOVNFinalizers, f) {
			keep = append(keep, f)
		}
	}
	if len(keep) != len(u.GetFinalizers()) {
		if err := r.patchFinalizers(ctx, u, keep); err != nil {
			return false, err
		}
	}
	r.log.Info("subnet deleted: no pod uses it any more", "subnet", name)
	return true, nil
}

package pods

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// KubeVirt virtual machines (controller/README.md, "KubeVirt live
// migration"). A VM runs in a virt-launcher pod; a live migration starts a
// second pod (the target, labelled kubevirt.io/migrationJobUID) on another
// node, copies the VM's memory, and the source pod ends. The VM keeps its
// address, MAC and logical switch port "<vm>.<namespace>" (Kube-OVN's
// name) across its pods: they are the VM's (ovnnet.VMOwner), not a pod's.
// While both pods live, the port is requested on both chassis with
// activation-strategy=rarp: OVN binds it on the target too (flows ready)
// but passes the target's traffic only once the VM, resumed there, sends a
// RARP or GARP. When one pod remains, the port is requested on its chassis
// alone and the strategy goes.

// vmOf is the virtual machine a pod runs: its ovn.kubernetes.io/virtualmachine
// annotation, else its owner VirtualMachineInstance (Kube-OVN's rule),
// else KubeVirt's kubevirt.io/domain annotation; "" for other pods. A value
// that cannot name a VM of the pod's namespace is refused: reason and
// message for the pod's event.
func vmOf(p *corev1.Pod) (vm, reason, msg string) {
	key, v := annotations.VirtualMachine, p.Annotations[annotations.VirtualMachine]
	if v == "" {
		for _, o := range p.OwnerReferences {
			if o.Kind == "VirtualMachineInstance" && strings.HasPrefix(o.APIVersion, "kubevirt.io/") {
				key, v = "ownerReferences (VirtualMachineInstance)", o.Name
				break
			}
		}
	}
	if v == "" {
		key, v = annotations.KubeVirtDomain, p.Annotations[annotations.KubeVirtDomain]
	}
	if v == "" {
		return "", "", ""
	}
	if ns, name, ok := strings.Cut(v, "/"); ok {
		// A VM is named within its namespace: the pod's. Naming another
		// namespace's VM would take that VM's address.
		return "", "VirtualMachineNotInNamespace", fmt.Sprintf(
			"%s=%q names virtual machine %q of namespace %q; a pod runs only a VM of its own namespace %q and gets no address: set the VM's name alone (%q for a VM of %q)",
			key, v, name, ns, p.Namespace, name, p.Namespace)
	}
	if errs := validation.IsDNS1123Subdomain(v); len(errs) > 0 {
		return "", string(ipam.KindInvalid), fmt.Sprintf("%s=%q is not a virtual machine name (%s); the pod gets no address: fix the value",
			key, v, strings.Join(errs, "; "))
	}
	return v, "", ""
}

// vmPlan is who runs a VM now.
type vmPlan struct {
	source *corev1.Pod // runs the VM (the oldest of its live pods)
	target *corev1.Pod // a live migration's target (nil: none)
	// refused: pod name -> why it gets nothing (a third pod, a second one
	// that is no migration target, a target on the source's node).
	refused map[string]string
}

// vmPods are the pods of namespace that run vm and want an address, oldest
// first; those being deleted only when no other is left.
func (r *Reconciler) vmPods(namespace, vm string) ([]*corev1.Pod, error) {
	all, err := r.pods.Pods(namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	var live, leaving []*corev1.Pod
	for _, p := range all {
		if !reconcile.WantsAddress(p) {
			continue
		}
		if v, _, _ := vmOf(p); v != vm {
			continue
		}
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		} else {
			leaving = append(leaving, p)
		}
	}
	if len(live) == 0 {
		live = leaving
	}
	sort.Slice(live, func(i, j int) bool {
		ti, tj := live[i].CreationTimestamp, live[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		// Created in the same second (timestamps have no finer grain): a
		// migration's target comes after the pod it migrates from.
		mi, mj := live[i].Labels[annotations.KubeVirtMigrationJobUID] != "", live[j].Labels[annotations.KubeVirtMigrationJobUID] != ""
		if mi != mj {
			return mj
		}
		return live[i].Name < live[j].Name
	})
	return live, nil
}

// planVM decides from the VM's pods (oldest first) which runs it and which
// is its migration target.
func planVM(vm string, pods []*corev1.Pod) vmPlan {
	plan := vmPlan{refused: map[string]string{}}
	for _, p := range pods {
		switch {
		case plan.source == nil:
			plan.source = p
		case plan.target == nil && p.Labels[annotations.KubeVirtMigrationJobUID] == "":
			plan.refused[p.Name] = fmt.Sprintf("virtual machine %q runs in pod %s; a second pod of a VM gets its address only as a live migration's target (label %s, as KubeVirt sets it): delete the pod or label it",
				vm, plan.source.Name, annotations.KubeVirtMigrationJobUID)
		case plan.target == nil && p.Spec.NodeName == plan.source.Spec.NodeName:
			plan.refused[p.Name] = fmt.Sprintf("pod %s is the target of a live migration of virtual machine %q to node %s, where its source pod %s runs already; a VM migrates to another node",
				p.Name, vm, p.Spec.NodeName, plan.source.Name)
		case plan.target == nil:
			plan.target = p
		default:
			plan.refused[p.Name] = fmt.Sprintf("virtual machine %q runs in pod %s and migrates to pod %s; a third pod of the VM gets nothing until one of them ends",
				vm, plan.source.Name, plan.target.Name)
		}
	}
	return plan
}

// chassisOf is the OVN chassis of a node: its ovn.kubernetes.io/chassis
// annotation (the system-id its node daemon writes), else the node's name
// (OVN's requested-chassis also matches a chassis' hostname).
func (r *Reconciler) chassisOf(node string) string {
	if n, err := r.nodes.Get(node); err == nil && n.Annotations[annotations.Chassis] != "" {
		return n.Annotations[annotations.Chassis]
	}
	return node
}

// syncVMChassis requests the VM's port on the chassis of the plan: source
// and target during a migration; the source alone after one (a port that
// never migrated keeps no requested-chassis).
func (r *Reconciler) syncVMChassis(ctx context.Context, namespace, vm string, plan vmPlan) error {
	want := []string{r.chassisOf(plan.source.Spec.NodeName)}
	if plan.target != nil {
		want = append(want, r.chassisOf(plan.target.Spec.NodeName))
	} else {
		have, err := r.cfg.Net.VMChassis(ctx, namespace, vm)
		if err != nil || len(have) == 0 || slices.Equal(have, want) {
			return err
		}
	}
	if err := r.cfg.Net.SetVMChassis(ctx, namespace, vm, want); err != nil {
		return err
	}
	if plan.target != nil {
		r.log.Info("virtual machine migrating: port requested on both chassis, activation-strategy=rarp", "vm", namespace+"/"+vm,
			"source", plan.source.Name, "target", plan.target.Name, "chassis", strings.Join(want, ","))
	} else {
		r.log.Info("virtual machine settled: port requested on one chassis", "vm", namespace+"/"+vm, "pod", plan.source.Name, "chassis", want[0])
	}
	return nil
}

// targetOffNetwork says why a migration to node cannot reach the VM's
// Subnet ("" when it can): an underlay Subnet's provider network not ready
// on that node (its Node's label <network>.provider-network.kubernetes.io/ready).
// The port would be requested there and the VM, once moved, cut off; the
// target is refused instead and the VM stays on its source.
func (r *Reconciler) targetOffNetwork(subnet, node, vm string) string {
	ul, ok := r.cfg.Subnets.Underlay(subnet)
	if !ok {
		return ""
	}
	n, err := r.nodes.Get(node)
	if err != nil || n.Labels[ul.Provider+providernet.ReadyLabel] == "true" {
		return ""
	}
	return fmt.Sprintf("virtual machine %q cannot migrate to node %s: its Subnet %q is on provider network %s, which is not ready there (label %s%s is not \"true\"); the VM stays on its source: migrate it to a node of that network (nodeSelector %s%s: \"true\") or bring the network up on %s",
		vm, node, subnet, ul.Provider, ul.Provider, providernet.ReadyLabel, ul.Provider, providernet.ReadyLabel, node)
}

// rememberVM records the VM a pod runs (its release needs it once the pod
// object is gone).
func (r *Reconciler) rememberVM(key, vm string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vms[key] = vm
}

// releaseVMPod is a VM pod gone or finished: the VM's address and port go
// with its last pod; otherwise its other pods are synced again (the port
// follows the pod that remains).
func (r *Reconciler) releaseVMPod(ctx context.Context, namespace, name, vm string) error {
	r.mu.Lock()
	delete(r.vms, namespace+"/"+name)
	r.mu.Unlock()
	pods, err := r.vmPods(namespace, vm)
	if err != nil {
		return err
	}
	pods = slices.DeleteFunc(pods, func(p *corev1.Pod) bool { return p.Name == name })
	if len(pods) > 0 {
		for _, p := range pods {
			r.podQ.Add(p.Namespace + "/" + p.Name)
		}
		return nil
	}
	a, had := r.cfg.IPAM.Lookup(ovnnet.VMOwner(namespace, vm))
	if err := r.cfg.Net.DeleteVM(ctx, namespace, vm); err != nil {
		return err
	}
	r.log.Info("virtual machine's last pod gone: its address and port released", "vm", namespace+"/"+vm, "pod", name)
	r.cfg.IPs.Queue("vm/" + namespace + "/" + vm)
	if had {
		r.addressReleased(a.Subnet)
	}
	return nil
}

// vmOfGone is the VM a pod ran, from what the reconciler remembered or
// from the pod object when it still exists.
func (r *Reconciler) vmOfGone(key string, pod *corev1.Pod) string {
	r.mu.Lock()
	vm := r.vms[key]
	r.mu.Unlock()
	if vm == "" && pod != nil {
		vm, _, _ = vmOf(pod)
	}
	return vm
}

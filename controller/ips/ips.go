// Package ips reconciles IP objects (ips.kubeovn.io) in Kube-OVN's shape:
// one per pod address and node join address, written from what the IPAM
// holds after the pod and node reconcilers changed it (they Queue the
// pod's or node's key). Its own queue (ips) keeps them off the pods' path,
// so they cost pods no latency. Without the CRD it writes nothing.
package ips

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8slabels "k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Addresses is what IP objects read of the IPAM (ipam.IPAM).
type Addresses interface {
	Lookup(owner string) (ipam.Allocation, bool)
}

// NodePorts names a node's join port (ovnnet.Network).
type NodePorts interface {
	NodePort(ctx context.Context, node string) (string, error)
}

// Config is what the reconciler needs.
type Config struct {
	Log *slog.Logger
	// Discovery tells whether the CRD is installed.
	Discovery  discovery.DiscoveryInterface
	Dynamic    dynamic.Interface
	Informers  informers.SharedInformerFactory              // pods, nodes
	DInformers dynamicinformer.DynamicSharedInformerFactory // ips
	IPAM       Addresses
	Net        NodePorts
}

// Reconciler is the IP object reconciler.
type Reconciler struct {
	cfg   Config
	log   *slog.Logger
	pods  corelisters.PodLister
	nodes corelisters.NodeLister
	inf   cache.SharedIndexInformer // nil without the ips.kubeovn.io CRD
	// q: IP objects to bring in line ("pod/<ns>/<name>", "vm/<ns>/<vm>", "node/<name>").
	q reconcile.Queue
}

// New finds out whether the CRD is installed and, if so, registers its informer.
func New(cfg Config) *Reconciler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, pods: cfg.Informers.Core().V1().Pods().Lister(), nodes: cfg.Informers.Core().V1().Nodes().Lister(),
		q: reconcile.NewDefaultQueue("ips")}
	if rl, err := cfg.Discovery.ServerResourcesForGroupVersion(kubeovnv1.GroupVersion.String()); err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "ips" }) {
		r.inf = cfg.DInformers.ForResource(kubeovnv1.IPGVR).Informer()
	} else {
		cfg.Log.Warn("IP objects (ips.kubeovn.io) are not written: the CRD is not installed; apply packaging/kubernetes/base/crd-ips.yaml and restart")
	}
	return r
}

// ShutDown stops the queue.
func (r *Reconciler) ShutDown() { r.q.ShutDown() }

// Start runs the workers (none without the CRD).
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) {
	if r.inf != nil {
		reconcile.Workers(ctx, wg, r.log, 4, r.q, r.sync, "IP object")
	}
	reconcile.ShutDownWith(ctx, wg, r.q)
}

// IP objects (ips.kubeovn.io) in Kube-OVN's shape: one per pod address,
// named like the pod's port (<pod>.<namespace>), and one per node join
// address (named like the node's port, node-<node>), with Kube-OVN's labels.
// They are a record for users and tools (`kubectl get ips`); the IPAM is
// rebuilt from the pods' annotations, not from them. Without the CRD
// (packaging/kubernetes/base/crd-ips.yaml) none are written.
const (
	labelSubnet   = "ovn.kubernetes.io/subnet"
	labelNode     = "ovn.kubernetes.io/node-name"
	labelReserved = "ovn.kubernetes.io/ip_reserved"
)

// ipObject is the desired IP object of an allocation.
func ipObject(name, podName, namespace, node string, a ipam.Allocation) (labels map[string]string, spec map[string]any) {
	var v4, v6 string
	for _, ip := range a.IPs {
		if ip.Is4() {
			v4 = ip.String()
		} else {
			v6 = ip.String()
		}
	}
	labels = map[string]string{labelSubnet: a.Subnet, labelNode: node, labelReserved: "false"}
	if len(validation.IsQualifiedName(a.Subnet)) == 0 {
		labels[a.Subnet] = "" // Kube-OVN selects a subnet's IPs by this label too
	}
	if len(validation.IsValidLabelValue(node)) != 0 {
		delete(labels, labelNode)
	}
	spec = map[string]any{
		"podName": podName, "namespace": namespace, "subnet": a.Subnet, "nodeName": node,
		"ipAddress": a.IPString(), "v4IpAddress": v4, "v6IpAddress": v6, "macAddress": a.MAC,
		"attachSubnets": []any{}, "attachIps": []any{}, "attachMacs": []any{}, "containerID": "", "podType": "",
	}
	return labels, spec
}

// Queue asks for the IP object of a pod ("pod/<ns>/<name>"), a KubeVirt
// VM ("vm/<ns>/<vm>") or a node ("node/<name>") to be brought in line
// with the IPAM.
func (r *Reconciler) Queue(key string) {
	if r.inf != nil {
		r.q.Add(key)
	}
}

// sync writes or deletes one IP object from what the IPAM holds now.
func (r *Reconciler) sync(ctx context.Context, key string) error {
	kind, rest, _ := strings.Cut(key, "/")
	switch kind {
	case "pod":
		ns, name, _ := strings.Cut(rest, "/")
		port := ovnnet.PortName(ns, name)
		pod, err := r.pods.Pods(ns).Get(name)
		a, held := r.cfg.IPAM.Lookup(ovnnet.PodOwner(ns, name))
		if apierrors.IsNotFound(err) || !held || (err == nil && !reconcile.WantsAddress(pod)) {
			return r.deleteIP(ctx, port, name, ns)
		}
		if err != nil {
			return err
		}
		return r.ensureIP(ctx, port, name, ns, pod.Spec.NodeName, a)
	case "vm":
		// A KubeVirt VM's address, as Kube-OVN records it: <vm>.<ns>,
		// podName the VM, podType VirtualMachine, on the node of the
		// VM's oldest pod (the one running it).
		ns, vm, _ := strings.Cut(rest, "/")
		port := ovnnet.PortName(ns, vm)
		a, held := r.cfg.IPAM.Lookup(ovnnet.VMOwner(ns, vm))
		node := r.vmNode(ns, vm)
		if !held || node == "" {
			return r.deleteIP(ctx, port, vm, ns)
		}
		return r.ensureIPOf(ctx, port, vm, ns, node, "VirtualMachine", a)
	case "node":
		_, err := r.nodes.Get(rest)
		a, held := r.cfg.IPAM.Lookup(ovnnet.NodeOwner(rest))
		if apierrors.IsNotFound(err) || !held {
			return r.deleteIP(ctx, ovnnet.NodePortName(rest), rest, "")
		}
		if err != nil {
			return err
		}
		// A node renamed node_<name> gets no IP object: "_" is not allowed
		// in an object name, and node-<name> is the pod's holding that port name.
		port, err := r.cfg.Net.NodePort(ctx, rest)
		if err != nil || port != ovnnet.NodePortName(rest) {
			return err
		}
		return r.ensureIP(ctx, port, rest, "", rest, a)
	}
	return nil
}

// vmNode is the node of the oldest pod of namespace that runs vm (its
// controller-written ovn.kubernetes.io/virtualmachine) and wants an
// address; "" when none does.
func (r *Reconciler) vmNode(namespace, vm string) string {
	pods, err := r.pods.Pods(namespace).List(k8slabels.Everything())
	if err != nil {
		return ""
	}
	var oldest *corev1.Pod
	for _, p := range pods {
		if p.Annotations[annotations.VirtualMachine] != vm || !reconcile.WantsAddress(p) || p.DeletionTimestamp != nil {
			continue
		}
		if oldest == nil || p.CreationTimestamp.Before(&oldest.CreationTimestamp) {
			oldest = p
		}
	}
	if oldest == nil {
		return ""
	}
	return oldest.Spec.NodeName
}

// ensureIP creates or updates the IP object name to the allocation.
func (r *Reconciler) ensureIP(ctx context.Context, name, podName, namespace, node string, a ipam.Allocation) error {
	return r.ensureIPOf(ctx, name, podName, namespace, node, "", a)
}

// ensureIPOf is ensureIP with Kube-OVN's podType ("" a pod or node,
// "VirtualMachine").
func (r *Reconciler) ensureIPOf(ctx context.Context, name, podName, namespace, node, podType string, a ipam.Allocation) error {
	if r.inf == nil {
		return nil
	}
	labels, spec := ipObject(name, podName, namespace, node, a)
	spec["podType"] = podType
	res := r.cfg.Dynamic.Resource(kubeovnv1.IPGVR)
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": "IP",
			"metadata": map[string]any{"name": name, "labels": toAny(labels)}, "spec": spec}}
		_, err := res.Create(ctx, u, metav1.CreateOptions{})
		if err == nil || !apierrors.IsAlreadyExists(err) {
			if err != nil {
				return fmt.Errorf("creating IP %s: %w", name, err)
			}
			return nil
		}
		// Created meanwhile (cache behind): patched below.
	} else {
		cur := obj.(*unstructured.Unstructured)
		have, _, _ := unstructured.NestedMap(cur.Object, "spec")
		same := true
		for k, v := range spec {
			if !reflect.DeepEqual(normalize(have[k]), normalize(v)) {
				same = false
				break
			}
		}
		curLabels := cur.GetLabels()
		for k, v := range labels {
			if lv, ok := curLabels[k]; !ok || lv != v {
				same = false
			}
		}
		if same {
			return nil
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec})
	if _, err := res.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("updating IP %s: %w", name, err)
	}
	return nil
}

// deleteIP removes the IP object name if it records that owner (pod
// namespace/name, or node name with namespace "").
func (r *Reconciler) deleteIP(ctx context.Context, name, podName, namespace string) error {
	if r.inf == nil {
		return nil
	}
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured)
	pn, _, _ := unstructured.NestedString(u.Object, "spec", "podName")
	ns, _, _ := unstructured.NestedString(u.Object, "spec", "namespace")
	if pn != podName || ns != namespace {
		return nil
	}
	uid := u.GetUID()
	err = r.cfg.Dynamic.Resource(kubeovnv1.IPGVR).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("deleting IP %s: %w", name, err)
	}
	return nil
}

// Collect deletes, at start, the IP objects of pods and nodes that are
// gone. Only ordinary pod and node records are considered: reserved IPs,
// virtual machines' and other Kube-OVN records stay.
func (r *Reconciler) Collect(ctx context.Context) (int, error) {
	if r.inf == nil {
		return 0, nil
	}
	n := 0
	for _, obj := range r.inf.GetIndexer().List() {
		u := obj.(*unstructured.Unstructured)
		if u.GetLabels()[labelReserved] == "true" {
			continue
		}
		spec, _, _ := unstructured.NestedMap(u.Object, "spec")
		pn, _ := spec["podName"].(string)
		ns, _ := spec["namespace"].(string)
		pt, _ := spec["podType"].(string)
		if pn == "" || pt != "" {
			continue
		}
		gone := false
		switch {
		case ns != "" && u.GetName() == ovnnet.PortName(ns, pn):
			_, err := r.pods.Pods(ns).Get(pn)
			gone = apierrors.IsNotFound(err)
		case ns == "" && u.GetName() == ovnnet.NodePortName(pn):
			_, err := r.nodes.Get(pn)
			gone = apierrors.IsNotFound(err)
		}
		if gone {
			if err := r.deleteIP(ctx, u.GetName(), pn, ns); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func toAny(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// normalize makes []string and []any, and absent and empty, compare equal.
func normalize(v any) any {
	switch x := v.(type) {
	case nil:
		return ""
	case []any:
		if len(x) == 0 {
			return ""
		}
		out := make([]string, len(x))
		for i, e := range x {
			out[i] = fmt.Sprint(e)
		}
		return strings.Join(out, ",")
	case []string:
		return strings.Join(x, ",")
	}
	return v
}

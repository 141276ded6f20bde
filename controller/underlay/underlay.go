// Package underlay keeps the status of the underlay objects Kube-OVN users
// write, so `kubectl get vlans,provider-networks` tells them what is wrong
// and the admission rules that depend on status hold (a Vlan whose
// status.subnets is not empty keeps its tag and provider: crd-vlans.yaml):
//
//   - Vlan: status.subnets (the Subnets whose spec.vlan names it),
//     status.conflict (another Vlan of the same provider has the tag first),
//     conditions Validated and Ready with the reason and the fix;
//   - ProviderNetwork: status.vlans, a Validated condition (node ""), and
//     from the Nodes' labels that the node daemons write
//     (<network>.provider-network.kubernetes.io/ready, the reason in the
//     annotation <network>.provider-network.ovnhost.io/error), for each
//     node the network selects a Ready condition (node <name>), readyNodes,
//     notReadyNodes, and ready: every selected node ready (Kube-OVN's rule;
//     a selected node that has not reported is not ready).
//
// Its queue ("underlay") holds "vlan/<name>" and "provider-network/<name>".
// Without the CRDs it does nothing.
package underlay

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Recorder record.EventRecorder
	// Discovery tells whether the CRDs are installed.
	Discovery  discovery.DiscoveryInterface
	Dynamic    dynamic.Interface
	DInformers dynamicinformer.DynamicSharedInformerFactory // subnets, vlans, provider-networks
	// Nodes is the shared Node informer: their labels say where each
	// provider network is ready.
	Nodes cache.SharedIndexInformer
}

// Reconciler keeps Vlan and ProviderNetwork status.
type Reconciler struct {
	cfg                   Config
	log                   *slog.Logger
	vlans, pns, subnets   cache.SharedIndexInformer // nil without the CRDs
	q                     reconcile.Queue
	mu                    sync.Mutex
	reportedPN, reportedV map[string]string // last event message per object
}

// Queue keys.
const (
	vlanKey = "vlan/"
	pnKey   = "provider-network/"
)

// New registers the informers when both CRDs are installed.
func New(cfg Config) *Reconciler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, q: reconcile.NewDefaultQueue("underlay"),
		reportedPN: map[string]string{}, reportedV: map[string]string{}}
	rl, err := cfg.Discovery.ServerResourcesForGroupVersion(kubeovnv1.GroupVersion.String())
	has := func(name string) bool {
		return err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == name })
	}
	if !has(kubeovnv1.VlanGVR.Resource) || !has(kubeovnv1.ProviderNetworkGVR.Resource) {
		cfg.Log.Info("Vlan and ProviderNetwork status is not kept: the CRDs are not installed; apply packaging/kubernetes/base/crd-provider-networks.yaml and crd-vlans.yaml and restart to use underlay networks")
		return r
	}
	r.vlans = cfg.DInformers.ForResource(kubeovnv1.VlanGVR).Informer()
	r.pns = cfg.DInformers.ForResource(kubeovnv1.ProviderNetworkGVR).Informer()
	r.subnets = cfg.DInformers.ForResource(kubeovnv1.SubnetGVR).Informer()
	_, _ = r.vlans.AddEventHandler(handler(r.vlanChanged))
	_, _ = r.pns.AddEventHandler(handler(r.providerNetworkChanged))
	_, _ = r.subnets.AddEventHandler(handler(r.subnetChanged))
	if cfg.Nodes != nil {
		_, _ = cfg.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { r.queueProviderNetworks() },
			UpdateFunc: func(o, n any) { r.nodeChanged(o, n) },
			DeleteFunc: func(any) { r.queueProviderNetworks() },
		})
	}
	return r
}

// Informers are the Vlan and ProviderNetwork informers (nil, nil when the
// CRDs are not installed): the Subnet reconciler resolves spec.vlan on them.
func (r *Reconciler) Informers() (vlans, providerNetworks cache.SharedIndexInformer) {
	return r.vlans, r.pns
}

// handler calls changed with the old and new object (nil when absent).
func handler(changed func(old, cur *unstructured.Unstructured)) cache.ResourceEventHandlerFuncs {
	as := func(obj any) *unstructured.Unstructured {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		u, _ := obj.(*unstructured.Unstructured)
		return u
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { changed(nil, as(obj)) },
		UpdateFunc: func(o, n any) { changed(as(o), as(n)) },
		DeleteFunc: func(obj any) { changed(as(obj), nil) },
	}
}

func spec(u *unstructured.Unstructured, field string) string {
	if u == nil {
		return ""
	}
	s, _, _ := unstructured.NestedString(u.Object, "spec", field)
	return s
}

// vlanProvider is the provider a stored Vlan names (deprecated field too).
func vlanProvider(u *unstructured.Unstructured) string {
	if p := spec(u, "provider"); p != "" {
		return p
	}
	return spec(u, "providerInterfaceName")
}

func (r *Reconciler) vlanChanged(old, cur *unstructured.Unstructured) {
	for _, u := range []*unstructured.Unstructured{old, cur} {
		if u == nil {
			continue
		}
		r.q.Add(vlanKey + u.GetName())
		if p := vlanProvider(u); p != "" {
			r.q.Add(pnKey + p)
			r.queueVlansOf(p) // a tag taken or freed: conflicts change
		}
	}
}

func (r *Reconciler) providerNetworkChanged(old, cur *unstructured.Unstructured) {
	for _, u := range []*unstructured.Unstructured{old, cur} {
		if u != nil {
			r.q.Add(pnKey + u.GetName())
			r.queueVlansOf(u.GetName())
		}
	}
}

func (r *Reconciler) subnetChanged(old, cur *unstructured.Unstructured) {
	for _, u := range []*unstructured.Unstructured{old, cur} {
		if v := spec(u, "vlan"); v != "" {
			r.q.Add(vlanKey + v)
		}
	}
}

// nodeChanged requeues every provider network when a Node's labels (its
// reports, or what a nodeSelector matches) or annotations changed.
func (r *Reconciler) nodeChanged(old, cur any) {
	o, _ := old.(*corev1.Node)
	n, _ := cur.(*corev1.Node)
	if o != nil && n != nil && maps.Equal(o.Labels, n.Labels) && maps.Equal(o.Annotations, n.Annotations) {
		return
	}
	r.queueProviderNetworks()
}

func (r *Reconciler) queueProviderNetworks() {
	for _, k := range r.pns.GetStore().ListKeys() {
		r.q.Add(pnKey + k)
	}
}

func (r *Reconciler) queueVlansOf(provider string) {
	for _, obj := range r.vlans.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok && vlanProvider(u) == provider {
			r.q.Add(vlanKey + u.GetName())
		}
	}
}

// ShutDown stops the queue.
func (r *Reconciler) ShutDown() { r.q.ShutDown() }

// Start runs the workers (none without the CRDs) and queues every object
// once, so status written before a restart is checked again.
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	if r.vlans != nil {
		for _, k := range r.vlans.GetStore().ListKeys() {
			r.q.Add(vlanKey + k)
		}
		for _, k := range r.pns.GetStore().ListKeys() {
			r.q.Add(pnKey + k)
		}
		reconcile.Workers(ctx, wg, r.log, 2, r.q, r.sync, "underlay object")
	}
	reconcile.ShutDownWith(ctx, wg, r.q)
	return nil
}

func (r *Reconciler) sync(ctx context.Context, key string) error {
	switch {
	case strings.HasPrefix(key, vlanKey):
		return r.syncVlan(ctx, strings.TrimPrefix(key, vlanKey))
	case strings.HasPrefix(key, pnKey):
		return r.syncProviderNetwork(ctx, strings.TrimPrefix(key, pnKey))
	}
	return nil
}

func get(inf cache.SharedIndexInformer, name string) *unstructured.Unstructured {
	obj, ok, _ := inf.GetStore().GetByKey(name)
	if !ok {
		return nil
	}
	u, _ := obj.(*unstructured.Unstructured)
	return u
}

// VlanStatus is what a Vlan's status should be, given the objects around
// it: the Subnets naming it, its provider network (nil: absent) and the
// other Vlans. Pure, for the unit tests.
func VlanStatus(v *unstructured.Unstructured, subnets []*unstructured.Unstructured, provider *unstructured.Unstructured, vlans []*unstructured.Unstructured) (kubeovnv1.VlanStatus, string) {
	var st kubeovnv1.VlanStatus
	for _, s := range subnets {
		if spec(s, "vlan") == v.GetName() {
			st.Subnets = append(st.Subnets, s.GetName())
		}
	}
	sort.Strings(st.Subnets)
	valid := func() kubeovnv1.Condition {
		return kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "True", Reason: kubeovnv1.ValidationSucceeded}
	}
	notReady := func(reason, msg string) (kubeovnv1.VlanStatus, string) {
		st.Conditions = append(st.Conditions, valid(), kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: reason, Message: msg})
		return st, msg
	}
	vlan, p := kubeovnv1.ValidateVlan(v)
	if p != nil {
		st.Conditions = []kubeovnv1.Condition{
			{Type: kubeovnv1.Validated, Status: "False", Reason: p.Reason, Message: p.Message},
			{Type: kubeovnv1.Ready, Status: "False", Reason: p.Reason, Message: "not valid: " + p.Message},
		}
		return st, p.Message
	}
	pname := vlan.Spec.ProviderName()
	if provider == nil {
		return notReady("ProviderNetworkNotFound", fmt.Sprintf("provider network %q does not exist; create it (`kubectl get provider-networks` lists those that do) or set spec.provider", pname))
	}
	if _, pp := kubeovnv1.ValidateProviderNetwork(provider); pp != nil {
		return notReady("ProviderNetworkInvalid", fmt.Sprintf("provider network %q is not valid (%s); fix it first", pname, pp.Message))
	}
	// Kube-OVN's rule: two Vlans of one provider network cannot carry the
	// same tag (0, untagged, excepted). The one created first keeps it.
	if tag := vlan.Spec.Tag(); tag != 0 {
		for _, o := range vlans {
			ov, op := kubeovnv1.ValidateVlan(o)
			if op != nil || o.GetName() == v.GetName() || ov.Spec.ProviderName() != pname || ov.Spec.Tag() != tag {
				continue
			}
			if first(o, v) {
				st.Conflict = true
				return notReady("VlanConflict", fmt.Sprintf("Vlan %q already carries tag %d on provider network %q; use another id, or delete one of the two", o.GetName(), tag, pname))
			}
		}
	}
	st.Conditions = append(st.Conditions, valid(), kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: "VlanReady"})
	return st, ""
}

// first reports whether a was created before b (by name when at once).
func first(a, b *unstructured.Unstructured) bool {
	ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
	if !ta.Equal(&tb) {
		return ta.Before(&tb)
	}
	return a.GetName() < b.GetName()
}

func list(inf cache.SharedIndexInformer) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, obj := range inf.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

func (r *Reconciler) syncVlan(ctx context.Context, name string) error {
	v := get(r.vlans, name)
	if v == nil {
		r.mu.Lock()
		delete(r.reportedV, name)
		r.mu.Unlock()
		return nil
	}
	want, problem := VlanStatus(v, list(r.subnets), get(r.pns, vlanProvider(v)), list(r.vlans))
	var have kubeovnv1.VlanStatus
	if raw, ok := v.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &have)
	}
	want.Conditions = carryTimes(have.Conditions, want.Conditions)
	r.report(r.reportedV, v, "Vlan", problem)
	if reflect.DeepEqual(normalise(have), normalise(want)) {
		return nil
	}
	return r.writeStatus(ctx, kubeovnv1.VlanGVR, v, &want)
}

// normalise makes nil and empty lists compare equal.
func normalise(s kubeovnv1.VlanStatus) kubeovnv1.VlanStatus {
	if len(s.Subnets) == 0 {
		s.Subnets = nil
	}
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	return s
}

// carryTimes keeps a condition's transition time while its status holds,
// and stamps the others now.
func carryTimes(have, want []kubeovnv1.Condition) []kubeovnv1.Condition {
	now := time.Now().UTC().Format(time.RFC3339)
	for i := range want {
		want[i].LastTransitionTime, want[i].LastUpdateTime = now, now
		for _, h := range have {
			if h.Type == want[i].Type && h.Status == want[i].Status {
				want[i].LastTransitionTime = h.LastTransitionTime
				if h.Reason == want[i].Reason && h.Message == want[i].Message {
					want[i].LastUpdateTime = h.LastUpdateTime
				}
			}
		}
	}
	return want
}

// report records a Warning event once per distinct problem.
func (r *Reconciler) report(seen map[string]string, u *unstructured.Unstructured, kind, problem string) {
	r.mu.Lock()
	changed := seen[u.GetName()] != problem
	seen[u.GetName()] = problem
	r.mu.Unlock()
	if !changed || problem == "" || r.cfg.Recorder == nil {
		return
	}
	ref := &corev1.ObjectReference{APIVersion: kubeovnv1.GroupVersion.String(), Kind: kind, Name: u.GetName(), UID: u.GetUID()}
	r.cfg.Recorder.Event(ref, corev1.EventTypeWarning, "Invalid"+kind, problem)
	r.log.Warn("underlay object not usable", "kind", kind, "name", u.GetName(), "problem", problem)
}

// statusFields are the status fields of each resource, for writeStatus.
var statusFields = map[string][]string{
	kubeovnv1.VlanGVR.Resource:            {"subnets", "conflict", "conditions"},
	kubeovnv1.ProviderNetworkGVR.Resource: {"ready", "readyNodes", "notReadyNodes", "vlans", "conditions"},
}

// writeStatus replaces u's status (the controller is its only writer; the
// node side reports through Node labels). A merge patch replaces lists
// whole, so the written status is exactly status.
func (r *Reconciler) writeStatus(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, status any) error {
	raw, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return err
	}
	// A field the new status leaves out (omitempty) is deleted: null.
	for _, k := range statusFields[gvr.Resource] {
		if _, ok := raw[k]; !ok {
			raw[k] = nil
		}
	}
	body, err := json.Marshal(map[string]any{"status": raw})
	if err != nil {
		return err
	}
	_, err = r.cfg.Dynamic.Resource(gvr).Patch(ctx, u.GetName(), types.MergePatchType, body, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Kube-OVN's reasons of a node's Ready condition.
const (
	nodeReady    = "InitOVSBridgeSucceeded"
	nodeNotReady = "InitOVSBridgeFailed"
)

// ProviderNetworkStatus is what a ProviderNetwork's status should be: the
// Vlans on it, a Validated condition (node ""), and for each node it
// selects (nodes) a Ready condition from the node's labels, the node
// lists and ready. An invalid network is not ready and lists no node (no
// node acts on it). Pure.
func ProviderNetworkStatus(pn *unstructured.Unstructured, have kubeovnv1.ProviderNetworkStatus, vlans []*unstructured.Unstructured, nodes []*corev1.Node) (kubeovnv1.ProviderNetworkStatus, string) {
	want := kubeovnv1.ProviderNetworkStatus{}
	for _, v := range vlans {
		if vlanProvider(v) == pn.GetName() {
			want.Vlans = append(want.Vlans, v.GetName())
		}
	}
	sort.Strings(want.Vlans)
	old := map[string][]kubeovnv1.Condition{}
	for _, c := range have.Conditions {
		old[c.Node] = append(old[c.Node], c.Condition)
	}
	cond := kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "True", Reason: kubeovnv1.ValidationSucceeded}
	valid, p := kubeovnv1.ValidateProviderNetwork(pn)
	problem := ""
	if p != nil {
		cond = kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "False", Reason: p.Reason, Message: p.Message}
		problem = p.Message
	} else if na := valid.Spec.NotApplied(); na != "" {
		cond.Reason, cond.Message = kubeovnv1.AcceptedNotApplied, na
	}
	cond = carryTimes(old[""], []kubeovnv1.Condition{cond})[0]
	want.Conditions = []kubeovnv1.ProviderNetworkCondition{{Node: "", Condition: cond}}
	if p != nil {
		return want, problem
	}
	name := pn.GetName()
	sorted := slices.SortedFunc(slices.Values(nodes), func(a, b *corev1.Node) int { return strings.Compare(a.Name, b.Name) })
	for _, n := range sorted {
		if _, selected, err := valid.NodeInterface(n.Name, n.Labels); err != nil || !selected {
			continue
		}
		c := kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: nodeReady}
		switch n.Labels[name+providernet.ReadyLabel] {
		case "true":
			want.ReadyNodes = append(want.ReadyNodes, n.Name)
		case "false":
			msg := n.Annotations[name+providernet.ErrorAnnotation]
			if msg == "" {
				msg = "the node reports it not ready without a reason"
			}
			c = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: nodeNotReady, Message: msg}
			want.NotReadyNodes = append(want.NotReadyNodes, n.Name)
		default:
			c = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: nodeNotReady,
				Message: fmt.Sprintf("the node has not reported this network (no label %s%s): check that ovnhost runs there and reads provider-networks (`kubectl -n ovnhost logs` of its ovnhost-node pod)", name, providernet.ReadyLabel)}
			want.NotReadyNodes = append(want.NotReadyNodes, n.Name)
		}
		c = carryTimes(old[n.Name], []kubeovnv1.Condition{c})[0]
		want.Conditions = append(want.Conditions, kubeovnv1.ProviderNetworkCondition{Node: n.Name, Condition: c})
	}
	want.Ready = len(want.NotReadyNodes) == 0
	return want, problem
}

func (r *Reconciler) syncProviderNetwork(ctx context.Context, name string) error {
	pn := get(r.pns, name)
	if pn == nil {
		r.mu.Lock()
		delete(r.reportedPN, name)
		r.mu.Unlock()
		return nil
	}
	var have kubeovnv1.ProviderNetworkStatus
	if raw, ok := pn.Object["status"].(map[string]any); ok {
		_ = runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &have)
	}
	var nodes []*corev1.Node
	if r.cfg.Nodes != nil {
		for _, obj := range r.cfg.Nodes.GetStore().List() {
			if n, ok := obj.(*corev1.Node); ok {
				nodes = append(nodes, n)
			}
		}
	}
	want, problem := ProviderNetworkStatus(pn, have, list(r.vlans), nodes)
	r.report(r.reportedPN, pn, "ProviderNetwork", problem)
	if reflect.DeepEqual(pnNormalise(have), pnNormalise(want)) {
		return nil
	}
	return r.writeStatus(ctx, kubeovnv1.ProviderNetworkGVR, pn, &want)
}

func pnNormalise(s kubeovnv1.ProviderNetworkStatus) kubeovnv1.ProviderNetworkStatus {
	for _, l := range []*[]string{&s.ReadyNodes, &s.NotReadyNodes, &s.Vlans} {
		if len(*l) == 0 {
			*l = nil
		}
	}
	if len(s.Conditions) == 0 {
		s.Conditions = nil
	}
	return s
}

package underlay

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// Desired is the set a Kubernetes node bridges: from every valid
// ProviderNetwork that selects it (providernet's rules, the controller's),
// {name, NIC}, sorted by name. An invalid object is left out: the
// controller reports it (status condition Validated, an event); a name the
// node's other features own is left out with a warning. Pure.
func Desired(node string, nodeLabels map[string]string, objects []*unstructured.Unstructured, log *slog.Logger) []nodeconfig.ProviderNetwork {
	var out []nodeconfig.ProviderNetwork
	for _, u := range objects {
		spec, p := providernet.Validate(u)
		if p != nil {
			continue
		}
		if why := providernet.NameProblem(u.GetName()); why != "" {
			log.Warn("underlay: provider network ignored on this node", "network", u.GetName(), "problem", "its name "+why, "fix", "recreate it under another name")
			continue
		}
		nic, selected, err := spec.NodeInterface(u.GetName(), node, nodeLabels)
		if err != nil || !selected {
			continue
		}
		out = append(out, nodeconfig.ProviderNetwork{Name: u.GetName(), NIC: nic})
	}
	slices.SortFunc(out, func(a, b nodeconfig.ProviderNetwork) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Objects reads the wanted networks from the ProviderNetwork objects and
// the node's own labels (a nodeSelector), from shared informers.
type Objects struct {
	Node string
	// Discovery says whether the CRD is installed: without it there is
	// no informer (it would fail its list forever), and no network.
	Discovery discovery.DiscoveryInterface
	// KubeOVN is the node's shared kubeovn.io factory, started by the
	// caller; the ProviderNetwork informer is added to it (and started)
	// here, when the CRD is there.
	KubeOVN dynamicinformer.DynamicSharedInformerFactory
	Nodes   cache.SharedIndexInformer // this node only, started by the caller
	Log     *slog.Logger

	providerNetworks cache.SharedIndexInformer
}

// Watch calls set with the wanted networks once the informers have
// listed, and again whenever they change, until ctx ends (Options.Watch).
func (o *Objects) Watch(ctx context.Context, set func([]nodeconfig.ProviderNetwork)) {
	rl, err := o.Discovery.ServerResourcesForGroupVersion(providernet.GVR.GroupVersion().String())
	if err != nil || !slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == providernet.GVR.Resource }) {
		o.Log.Info("underlay: no ProviderNetwork objects are read: the CRD is not installed (or not readable)", "err", err,
			"fix", "apply packaging/kubernetes/base/crd-provider-networks.yaml and restart ovnhost to use underlay networks")
		return
	}
	o.providerNetworks = o.KubeOVN.ForResource(providernet.GVR).Informer()
	o.KubeOVN.Start(ctx.Done()) // starts only the informer just added
	nudge := make(chan struct{}, 1)
	poke := func() {
		select {
		case nudge <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: func(any) { poke() }, UpdateFunc: func(any, any) { poke() }, DeleteFunc: func(any) { poke() }}
	for _, inf := range []cache.SharedIndexInformer{o.providerNetworks, o.Nodes} {
		reg, err := inf.AddEventHandler(h)
		if err != nil {
			o.Log.Error("underlay: cannot follow the ProviderNetwork objects", "err", err)
			return
		}
		defer func() { _ = inf.RemoveEventHandler(reg) }()
	}
	if !cache.WaitForCacheSync(ctx.Done(), o.providerNetworks.HasSynced, o.Nodes.HasSynced) {
		return
	}
	var last []nodeconfig.ProviderNetwork
	first := true
	for {
		want := o.desired()
		if first || !slices.Equal(want, last) {
			set(want)
			last, first = want, false
		}
		select {
		case <-ctx.Done():
			return
		case <-nudge:
		}
	}
}

func (o *Objects) desired() []nodeconfig.ProviderNetwork {
	var labels map[string]string
	if obj, ok, _ := o.Nodes.GetStore().GetByKey(o.Node); ok {
		if n, ok := obj.(*corev1.Node); ok {
			labels = n.Labels
		}
	}
	var objs []*unstructured.Unstructured
	for _, obj := range o.providerNetworks.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			objs = append(objs, u)
		}
	}
	return Desired(o.Node, labels, objs, o.Log)
}

// The Node's labels and annotation per provider network (providernet's
// names, which the controller reads).
const (
	ReadyLabel      = providernet.ReadyLabel
	InterfaceLabel  = providernet.InterfaceLabel
	MTULabel        = providernet.MTULabel
	ErrorAnnotation = providernet.ErrorAnnotation
)

// NodeLabels are the labels and annotations statuses give the Node: a key
// for each of the networks, and nil for each of ours in have (the Node's
// current labels and annotations) no longer wanted. Pure.
func NodeLabels(statuses []Status, haveLabels, haveAnnotations map[string]string) (labels, annotations map[string]*string) {
	labels, annotations = map[string]*string{}, map[string]*string{}
	set := func(m map[string]*string, have map[string]string, k, v string) {
		if cur, ok := have[k]; !ok || cur != v {
			m[k] = &v
		}
	}
	keep := map[string]bool{}
	for _, st := range statuses {
		set(labels, haveLabels, st.Name+ReadyLabel, strconv.FormatBool(st.Ready))
		set(labels, haveLabels, st.Name+InterfaceLabel, st.NIC)
		keep[st.Name+ReadyLabel], keep[st.Name+InterfaceLabel] = true, true
		if st.MTU > 0 {
			set(labels, haveLabels, st.Name+MTULabel, strconv.Itoa(st.MTU))
			keep[st.Name+MTULabel] = true
		}
		if !st.Ready {
			set(annotations, haveAnnotations, st.Name+ErrorAnnotation, st.Problem)
			keep[st.Name+ErrorAnnotation] = true
		}
	}
	for k := range haveLabels {
		if isOurs(k, ReadyLabel, InterfaceLabel, MTULabel) && !keep[k] {
			labels[k] = nil
		}
	}
	for k := range haveAnnotations {
		if isOurs(k, ErrorAnnotation) && !keep[k] {
			annotations[k] = nil
		}
	}
	return labels, annotations
}

func isOurs(key string, suffixes ...string) bool {
	for _, s := range suffixes {
		if name, ok := strings.CutSuffix(key, s); ok && name != "" && !strings.Contains(name, "/") {
			return true
		}
	}
	return false
}

// NodeReporter writes the underlay unit's statuses (Options.Report) as
// its own Node's labels and annotation, with a merge patch of what
// differs; it writes again when the Node changes (someone removed a
// label), until Stop.
type NodeReporter struct {
	Node  string
	Kube  kubernetes.Interface
	Nodes cache.SharedIndexInformer // this node only
	Log   *slog.Logger

	mu       sync.Mutex
	statuses []Status
	reported bool
	nudge    chan struct{}
	retry    time.Duration // after a failed write; 0: none failed
}

// Run writes until ctx ends; statuses are taken from Report.
func (r *NodeReporter) Run(ctx context.Context) {
	nudge := r.nudged()
	reg, err := r.Nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(any) { r.poke() }, UpdateFunc: func(any, any) { r.poke() }})
	if err != nil {
		r.Log.Error("underlay: cannot follow the Node; provider network labels are not written", "err", err)
		return
	}
	defer func() { _ = r.Nodes.RemoveEventHandler(reg) }()
	if !cache.WaitForCacheSync(ctx.Done(), r.Nodes.HasSynced) {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-nudge:
		}
		r.write(ctx)
	}
}

// Report takes the unit's statuses (Options.Report).
func (r *NodeReporter) Report(statuses []Status) {
	r.mu.Lock()
	r.statuses, r.reported = slices.Clone(statuses), true
	r.mu.Unlock()
	r.poke()
}

func (r *NodeReporter) nudged() chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nudge == nil {
		r.nudge = make(chan struct{}, 1)
	}
	return r.nudge
}

func (r *NodeReporter) poke() {
	select {
	case r.nudged() <- struct{}{}:
	default:
	}
}

func (r *NodeReporter) write(ctx context.Context) {
	r.mu.Lock()
	statuses, reported := r.statuses, r.reported
	r.mu.Unlock()
	obj, ok, _ := r.Nodes.GetStore().GetByKey(r.Node)
	n, _ := obj.(*corev1.Node)
	if !reported || !ok || n == nil {
		return
	}
	labels, annotations := NodeLabels(statuses, n.Labels, n.Annotations)
	if len(labels) == 0 && len(annotations) == 0 {
		return
	}
	body, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}})
	if _, err := r.Kube.CoreV1().Nodes().Patch(ctx, r.Node, types.MergePatchType, body, metav1.PatchOptions{}); err != nil && ctx.Err() == nil {
		// Tried again after a back-off, or at the Node's next change.
		r.mu.Lock()
		r.retry = min(max(2*r.retry, time.Second), 30*time.Second)
		time.AfterFunc(r.retry, r.poke)
		r.mu.Unlock()
		r.Log.Warn("underlay: the provider network labels of the Node cannot be written; `kubectl get provider-networks` shows this node as not ready", "node", r.Node, "err", err,
			"fix", "check that the node's service account may patch its Node (rbac-node.yaml) and that admission-node.yaml allows the <network>.provider-network.kubernetes.io/* labels")
		return
	}
	r.mu.Lock()
	r.retry = 0
	r.mu.Unlock()
	r.Log.Info("underlay: provider network labels of the Node written", "node", r.Node, "labels", maps.Collect(func(yield func(string, string) bool) {
		for k, v := range labels {
			s := "(removed)"
			if v != nil {
				s = *v
			}
			if !yield(k, s) {
				return
			}
		}
	}))
}

// Package vpcs reconciles Kube-OVN's Vpcs (vpcs.kubeovn.io): one OVN
// logical router per custom VPC, named as the VPC, with the VPC's static
// routes, policy routes and peering ports; status written back (standby,
// router, subnets, conditions). The default VPC, ovn-cluster, is created at
// start if absent and stands for the cluster router: its status is kept,
// its routes are the controller's own (egress, nodes) and its spec's
// routes are not applied.
//
// An entry that cannot be programmed (a next hop outside every Subnet and
// peering link of the VPC, a peering to a missing VPC, a bad field) is
// named in the Validated condition and a Warning event with the fix; the
// rest of the VPC is programmed, other VPCs are untouched.
//
// Its queue ("vpcs") holds VPC names. Without the CRD it does nothing, and
// a Subnet naming a custom VPC waits.
package vpcs

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Network is the OVN work of VPCs (ovnnet.Network).
type Network interface {
	EnsureVPC(ctx context.Context, v ovnnet.VPC) error
	EnsureVPCRouter(ctx context.Context, name string) error
	RemoveVPC(ctx context.Context, name string) error
	VPCRouters(ctx context.Context) ([]string, error)
}

// Subnets is the Subnet reconciler as VPCs see it.
type Subnets interface {
	// VpcSubnets are the programmed Subnets of vpc and their CIDRs.
	VpcSubnets(vpc string) map[string][]netip.Prefix
	// QueueVpc re-syncs the Subnets naming vpc (it appeared or went).
	QueueVpc(vpc string)
}

// Config is what the reconciler needs.
type Config struct {
	Log        *slog.Logger
	Recorder   record.EventRecorder
	Discovery  discovery.DiscoveryInterface
	Dynamic    dynamic.Interface
	DInformers dynamicinformer.DynamicSharedInformerFactory
	Net        Network
	Subnets    Subnets
	// Changed, when set, is told (without blocking) that a VPC was
	// programmed or removed (its external gateway follows it).
	Changed func(vpc string)
}

// Condition reasons of a Vpc.
const (
	ReasonInvalidEntries = "InvalidEntries" // some entries were not programmed
	ReasonNotApplied     = "AcceptedNotApplied"
	ReasonSucceeded      = "ValidationSucceeded"
	ReasonProgrammed     = "Programmed"
	EventInvalidVpc      = "InvalidVpc"
)

// state is what the reconciler knows of one VPC.
type state struct {
	programmed bool // its router is programmed (custom) or it is ovn-cluster
	namespaces []string
	defSubnet  string
	problems   []string // entries not programmed, each with its fix
	announced  string   // the last problems/not-applied message sent as an event
}

// Reconciler is the Vpc reconciler.
type Reconciler struct {
	cfg Config
	log *slog.Logger
	inf cache.SharedIndexInformer // nil without the CRD
	q   reconcile.Queue

	mu    sync.Mutex
	vpcs  map[string]*state
	saved map[string]string // name -> the status this process last patched
}

// New registers the Vpc informer when the CRD is installed.
func New(cfg Config) *Reconciler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, q: reconcile.NewDefaultQueue("vpcs"), vpcs: map[string]*state{}, saved: map[string]string{}}
	if !Installed(cfg.Discovery) {
		cfg.Log.Info("Vpcs are not reconciled: the Vpc CRD is not installed; apply packaging/kubernetes/base/crd-vpcs.yaml and restart to use custom VPCs")
		return r
	}
	r.inf = cfg.DInformers.ForResource(kubeovnv1.VpcGVR).Informer()
	_, _ = r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: r.enqueue,
		UpdateFunc: func(o, n any) {
			// Status writes come back as updates: only spec changes matter.
			ou, nu := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured)
			if ou.GetGeneration() != nu.GetGeneration() {
				r.enqueue(n)
			}
		},
		DeleteFunc: r.enqueue,
	})
	return r
}

// Installed says whether the API server serves the Vpc CRD.
func Installed(d discovery.DiscoveryInterface) bool {
	if d == nil {
		return false
	}
	rl, err := d.ServerResourcesForGroupVersion(kubeovnv1.GroupVersion.String())
	return err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == kubeovnv1.VpcGVR.Resource })
}

func (r *Reconciler) enqueue(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if u, ok := obj.(*unstructured.Unstructured); ok {
		r.queueAll() // a peering may name it
		r.q.Add(u.GetName())
	}
}

// queueAll requeues every VPC whose peerings name another VPC.
func (r *Reconciler) queueAll() {
	if r.inf == nil {
		return
	}
	for _, obj := range r.inf.GetStore().List() {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			if p, _, _ := unstructured.NestedSlice(u.Object, "spec", "vpcPeerings"); len(p) > 0 {
				r.q.Add(u.GetName())
			}
		}
	}
}

// Queue looks at vpc again (one of its Subnets changed).
func (r *Reconciler) Queue(vpc string) {
	if r.inf != nil {
		r.q.Add(vpc)
	}
}

// EnsureDefault creates the Vpc ovn-cluster if the CRD is installed and it
// is absent (Kube-OVN does): the cluster router as users see it.
func EnsureDefault(ctx context.Context, d discovery.DiscoveryInterface, dc dynamic.Interface) error {
	if !Installed(d) {
		return nil
	}
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Vpc",
		"metadata": map[string]any{"name": kubeovnv1.DefaultVpc}, "spec": map[string]any{}}}
	if _, err := dc.Resource(kubeovnv1.VpcGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("kube: creating Vpc %q: %w", kubeovnv1.DefaultVpc, err)
	}
	return nil
}

// ProgramAll makes sure every custom Vpc in the cache has its router,
// removes the routers of VPCs that are gone, and queues every Vpc for a
// full sync once the workers run (start-up, before the Subnets are
// programmed: a custom VPC's Subnets need its router). The routes,
// policies and peering ports are left as they are until then: they are
// checked against the VPC's Subnets, which are not programmed yet, so a
// full sync here would remove every route through a Subnet and put it
// back moments later (a restarted controller would cut the VPC's paths).
func (r *Reconciler) ProgramAll(ctx context.Context) error {
	if r.inf == nil {
		return nil
	}
	names := r.inf.GetIndexer().ListKeys()
	sort.Strings(names)
	for _, n := range names {
		if err := r.ensureRouter(ctx, n); err != nil {
			return fmt.Errorf("programming vpc %q: %w", n, err)
		}
		r.q.Add(n)
	}
	routers, err := r.cfg.Net.VPCRouters(ctx)
	if err != nil {
		return err
	}
	for _, name := range routers {
		if !slices.Contains(names, name) {
			r.log.Info("removing the router of a VPC that is gone", "vpc", name)
			if err := r.cfg.Net.RemoveVPC(ctx, name); err != nil {
				return err
			}
		}
	}
	return nil
}

// ensureRouter is the start-up part of sync: the router of a valid custom
// Vpc (an existing one untouched) and what the Subnets read of it.
func (r *Reconciler) ensureRouter(ctx context.Context, name string) error {
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured)
	v, _ := kubeovnv1.ValidateVpc(u)
	if v == nil || u.GetDeletionTimestamp() != nil {
		return nil // the worker's sync reports or removes it
	}
	if kubeovnv1.IsCustomVpc(name) {
		if err := r.cfg.Net.EnsureVPCRouter(ctx, name); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.vpcs[name] = &state{programmed: true, namespaces: v.Spec.Namespaces, defSubnet: v.Spec.DefaultSubnet}
	r.mu.Unlock()
	return nil
}

// Start runs the worker.
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	if r.inf == nil {
		return nil
	}
	reconcile.Workers(ctx, wg, r.log, 1, r.q, r.sync, "vpc")
	reconcile.ShutDownWith(ctx, wg, r.q)
	return nil
}

// ShutDown stops the queue.
func (r *Reconciler) ShutDown() { r.q.ShutDown() }

// Ready says whether the custom VPC's router is programmed; else why a
// Subnet naming it waits, with the fix.
func (r *Reconciler) Ready(vpc string) (bool, string) {
	if r.inf == nil {
		return false, fmt.Sprintf("spec.vpc %q: the Vpc CRD is not installed; apply packaging/kubernetes/base/crd-vpcs.yaml, restart the controller and create the Vpc", vpc)
	}
	r.mu.Lock()
	st, ok := r.vpcs[vpc]
	r.mu.Unlock()
	if ok && st.programmed {
		return true, ""
	}
	if _, exists, _ := r.inf.GetIndexer().GetByKey(vpc); exists {
		return false, fmt.Sprintf("spec.vpc %q: the Vpc is not programmed yet (or is being deleted); the Subnet is programmed once it is", vpc)
	}
	return false, fmt.Sprintf("spec.vpc %q: no such Vpc; create the Vpc %q (kind: Vpc, apiVersion: kubeovn.io/v1) or set spec.vpc to an existing one; the Subnet is programmed as soon as the Vpc exists", vpc, vpc)
}

// Admits says whether namespace may use vpc's Subnets: the Vpc's
// spec.namespaces, when it lists any, names it.
func (r *Reconciler) Admits(vpc, namespace string) (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st, ok := r.vpcs[vpc]
	if !ok {
		return false, fmt.Sprintf("the Vpc %q is not programmed", vpc)
	}
	if len(st.namespaces) == 0 || slices.Contains(st.namespaces, namespace) {
		return true, ""
	}
	return false, fmt.Sprintf("the Vpc admits only the namespaces in its spec.namespaces [%s] (an admin adds %q there to admit it)", strings.Join(st.namespaces, ", "), namespace)
}

// DefaultSubnetFor is the defaultSubnet of the first Vpc (by name) whose
// spec.namespaces lists namespace, "" for none.
func (r *Reconciler) DefaultSubnetFor(namespace string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	names := make([]string, 0, len(r.vpcs))
	for n := range r.vpcs {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if st := r.vpcs[n]; st.defSubnet != "" && slices.Contains(st.namespaces, namespace) {
			return st.defSubnet
		}
	}
	return ""
}

// sync programs one Vpc, or removes it.
func (r *Reconciler) sync(ctx context.Context, name string) error {
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists || obj.(*unstructured.Unstructured).GetDeletionTimestamp() != nil {
		r.mu.Lock()
		delete(r.vpcs, name)
		delete(r.saved, name)
		r.mu.Unlock()
		if kubeovnv1.IsCustomVpc(name) {
			if err := r.cfg.Net.RemoveVPC(ctx, name); err != nil {
				return err
			}
			r.log.Info("vpc removed", "vpc", name)
		}
		r.cfg.Subnets.QueueVpc(name) // they wait now
		r.changed(name)
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	v, problems := kubeovnv1.ValidateVpc(u)
	if v == nil {
		r.record(u, nil, &state{problems: problems})
		return r.writeStatus(ctx, u, nil, &state{problems: problems})
	}
	st := &state{namespaces: v.Spec.Namespaces, defSubnet: v.Spec.DefaultSubnet}
	subnets := r.cfg.Subnets.VpcSubnets(name)
	if kubeovnv1.IsCustomVpc(name) {
		plan, more := Translate(v, subnets, r.exists)
		st.problems = append(problems, more...)
		if err := r.cfg.Net.EnsureVPC(ctx, plan); err != nil {
			return err
		}
	} else {
		st.problems = problems
		if len(v.Spec.StaticRoutes) > 0 || len(v.Spec.PolicyRoutes) > 0 || len(v.Spec.VpcPeerings) > 0 {
			st.problems = append(st.problems, fmt.Sprintf("spec.staticRoutes, policyRoutes and vpcPeerings of the default VPC %s are not applied: its router carries the cluster's egress and node routes; put such routes on a custom VPC", name))
		}
	}
	st.programmed = true
	r.mu.Lock()
	_, had := r.vpcs[name]
	if old, ok := r.vpcs[name]; ok {
		st.announced = old.announced
	}
	r.vpcs[name] = st
	r.mu.Unlock()
	if !had {
		r.cfg.Subnets.QueueVpc(name) // Subnets waiting for it
	}
	r.changed(name)
	r.record(u, v, st)
	return r.writeStatus(ctx, u, v, st)
}

func (r *Reconciler) changed(vpc string) {
	if r.cfg.Changed != nil {
		r.cfg.Changed(vpc)
	}
}

// exists: a Vpc of that name is in the cache (and not being deleted).
func (r *Reconciler) exists(name string) bool {
	if !kubeovnv1.IsCustomVpc(name) || r.inf == nil {
		return false
	}
	obj, ok, _ := r.inf.GetIndexer().GetByKey(name)
	return ok && obj.(*unstructured.Unstructured).GetDeletionTimestamp() == nil
}

// message is the Validated condition's message: the entries not
// programmed, then the fields not applied.
func message(v *kubeovnv1.Vpc, st *state) string {
	var parts []string
	if len(st.problems) > 0 {
		parts = append(parts, "not programmed: "+strings.Join(st.problems, "; ")+".")
	}
	if v != nil {
		if m := kubeovnv1.VpcNotAppliedMessage(v.Spec); m != "" {
			parts = append(parts, m)
		}
	}
	return strings.Join(parts, " ")
}

// record announces, once per change, what was not programmed.
func (r *Reconciler) record(u *unstructured.Unstructured, v *kubeovnv1.Vpc, st *state) {
	msg := message(v, st)
	r.mu.Lock()
	if cur := r.vpcs[u.GetName()]; cur != nil && cur != st {
		st.announced = cur.announced
	}
	same := st.announced == msg
	st.announced = msg
	r.mu.Unlock()
	if same || msg == "" {
		return
	}
	r.log.Warn("vpc: entries not programmed or fields not applied", "vpc", u.GetName(), "message", msg)
	typ, reason := corev1.EventTypeWarning, EventInvalidVpc
	if len(st.problems) == 0 {
		reason = ReasonNotApplied
	}
	r.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: kubeovnv1.GroupVersion.String(), Kind: kubeovnv1.VpcGVK.Kind,
		Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}, typ, reason, msg)
}

// writeStatus patches the Vpc's status when it changed.
func (r *Reconciler) writeStatus(ctx context.Context, u *unstructured.Unstructured, v *kubeovnv1.Vpc, st *state) error {
	name := u.GetName()
	custom := kubeovnv1.IsCustomVpc(name)
	subnets := r.cfg.Subnets.VpcSubnets(name)
	status := kubeovnv1.VpcStatus{Standby: st.programmed, Default: !custom, Router: name, Subnets: []string{}, VpcPeerings: []string{}, ExtraExternalSubnets: []string{}}
	for s := range subnets {
		status.Subnets = append(status.Subnets, s)
	}
	sort.Strings(status.Subnets)
	if !custom {
		status.DefaultLogicalSwitch = ovnnet.DefaultSubnet
	}
	if v != nil {
		if v.Spec.DefaultSubnet != "" {
			status.DefaultLogicalSwitch = v.Spec.DefaultSubnet
		}
		// The gateway port itself is controller/vpcnat's (its events say
		// when it cannot be programmed).
		status.EnableExternal = custom && v.Spec.EnableExternal
		for _, p := range v.Spec.VpcPeerings {
			if p != nil && p.RemoteVpc != "" && r.exists(p.RemoteVpc) && kubeovnv1.PeeringProblem(name, p) == "" {
				status.VpcPeerings = append(status.VpcPeerings, p.RemoteVpc)
			}
		}
	}
	msg := message(v, st)
	validated := kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "True", Reason: ReasonSucceeded}
	switch {
	case len(st.problems) > 0:
		validated = kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "False", Reason: ReasonInvalidEntries, Message: msg}
	case msg != "":
		validated.Reason, validated.Message = ReasonNotApplied, msg
	}
	ready := kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: ReasonProgrammed,
		Message: fmt.Sprintf("router %s programmed", name)}
	if !st.programmed {
		ready = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: ReasonInvalidEntries, Message: msg}
	}
	var cur *kubeovnv1.Vpc
	if c, err := kubeovnv1.VpcFromUnstructured(u); err == nil {
		cur = c
	}
	now := time.Now().UTC().Format(time.RFC3339)
	for _, c := range []*kubeovnv1.Condition{&validated, &ready} {
		c.ObservedGeneration = u.GetGeneration()
		c.LastUpdateTime, c.LastTransitionTime = now, now
		if old := cur.Condition(c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			if old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
				c.LastUpdateTime = old.LastUpdateTime
			}
		}
	}
	status.Conditions = []kubeovnv1.Condition{validated, ready}
	if cur != nil {
		// Kube-OVN's load balancer names and BFD status: none here.
		status.BFDPort = cur.Status.BFDPort
	}
	b, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	r.mu.Lock()
	same := r.saved[name] == string(b)
	r.mu.Unlock()
	if same || (cur != nil && reflect.DeepEqual(cur.Status, status)) {
		return nil
	}
	if _, err := r.cfg.Dynamic.Resource(kubeovnv1.VpcGVR).Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("vpc %s: status: %w", name, err)
	}
	r.mu.Lock()
	r.saved[name] = string(b)
	r.mu.Unlock()
	return nil
}

// Package subnets reconciles Subnets (subnets.kubeovn.io): it validates
// each one, programs its logical switch and isolation ACLs, keeps its
// finalizer and finishes its deletion once nothing uses it, and writes its
// status (conditions, address counts). It owns two queues: subnets (the
// programming) and subnet-status (status writes, batched).
//
// It talks to the other reconcilers through small interfaces: the pod
// reconciler (Pods: wake the pods waiting for a subnet, count those that
// wait for an address) and the centralized gateways (Gateways: the
// GatewayReady condition, a gateway to remove before its subnet). They see
// it through its exported methods (SubnetFor, Problem, Valid, ...).
package subnets

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Network is the OVN and IPAM work of a subnet (ovnnet.Network).
type Network interface {
	AddSubnet(ctx context.Context, cfg ipam.SubnetConfig, ul *ovnnet.Underlay) error
	RemoveSubnet(ctx context.Context, name string) error
	SetIsolation(ctx context.Context, subnet string, iso ovnnet.Isolation) error
	// U2O is an underlay subnet's interconnection address(es) and MAC.
	U2O(ctx context.Context, subnet string) (ips []string, mac string, ok bool)
}

// Addresses is what subnets read of the IPAM (ipam.IPAM, shared with the pods).
type Addresses interface {
	Usage(name string) (ipam.Usage, bool)
	OwnersIn(subnet string) []string
}

// Pods is the pod reconciler as subnets see it.
type Pods interface {
	// Wake requeues the pods that wait for subnet (it is programmed, or an
	// address was freed).
	Wake(subnet string)
	// Exhausted counts the pods that wait because subnet has no free address.
	Exhausted(subnet string) int
	// Recheck requeues the pods in subnet: its namespace binding changed.
	Recheck(subnet string)
}

// Gateways is the centralized gateway reconciler as subnets see it.
type Gateways interface {
	// Condition is subnet's GatewayReady condition (nil: none).
	Condition(subnet string) *kubeovnv1.Condition
	// Queue asks for subnet's gateway to be brought in line (the subnet was programmed).
	Queue(subnet string)
	// Remove removes subnet's gateway now (the subnet goes).
	Remove(ctx context.Context, subnet string) error
}

// Vpcs is the VPC reconciler as subnets see it.
type Vpcs interface {
	// Ready says whether the custom VPC's router is programmed; if not,
	// why (the Subnet's condition message, with the fix).
	Ready(vpc string) (ok bool, why string)
	// Admits says whether pods of namespace may use the VPC's subnets
	// (its spec.namespaces; empty admits all); rule says why not.
	Admits(vpc, namespace string) (ok bool, rule string)
	// DefaultSubnetFor is the defaultSubnet of the VPC whose spec.namespaces
	// lists namespace ("" for none).
	DefaultSubnetFor(namespace string) string
	// Queue asks for the VPC's status and routes to be looked at again
	// (one of its Subnets changed).
	Queue(vpc string)
}

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Recorder record.EventRecorder
	Dynamic  dynamic.Interface
	// Informers holds the shared Subnet informer.
	Informers dynamicinformer.DynamicSharedInformerFactory
	Net       Network
	IPAM      Addresses
	Registry  prometheus.Registerer
	// StatusDelay batches status writes after address changes.
	StatusDelay time.Duration
	// EnableLB: Services are load balancers (enableLb: false is then not applied).
	EnableLB bool
	// Vlans and ProviderNetworks resolve an underlay Subnet's spec.vlan
	// (nil when their CRDs are not installed: such a Subnet is refused).
	Vlans, ProviderNetworks cache.SharedIndexInformer
}

// programmed is a valid Subnet as programmed.
type programmed struct {
	subnet   *kubeovnv1.Subnet
	cfg      ipam.SubnetConfig
	underlay *ovnnet.Underlay // nil: overlay
}

// Reconciler is the Subnet reconciler.
type Reconciler struct {
	cfg Config
	log *slog.Logger
	inf cache.SharedIndexInformer
	// vlans, providers: what an underlay subnet's spec.vlan resolves through.
	vlans, providers cache.SharedIndexInformer
	q                reconcile.Queue // subnets
	statusQ          reconcile.Queue // subnet-status
	ipsGauge         *prometheus.GaugeVec
	pods             Pods
	gateways         Gateways
	vpcs             Vpcs
	// started: the IPAM holds every recorded address (a deletion may be decided).
	started atomic.Bool

	mu       sync.Mutex
	valid    map[string]programmed         // programmed subnets
	problems map[string]*kubeovnv1.Problem // invalid subnets
	// notApplied: valid subnet -> NotAppliedMessage of the fields it asks for
	// but the controller does not program ("" for none); the last one announced
	// with an AcceptedNotApplied event.
	notApplied map[string]string
	// deleting: Subnet marked for deletion -> why it still waits (its users).
	deleting map[string]string
	// statusWritten: Subnet -> fingerprint of the status this process last
	// patched. The informer may still show the status before that patch; a
	// status computed right after would look unchanged against the cache and
	// be skipped, leaving the older patch on the server.
	statusWritten map[string]string
}

// New registers the Subnet informer's handlers; Use must be called before Start.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.StatusDelay == 0 {
		cfg.StatusDelay = 500 * time.Millisecond
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, inf: cfg.Informers.ForResource(kubeovnv1.SubnetGVR).Informer(),
		q: reconcile.NewDefaultQueue("subnets"), statusQ: reconcile.NewDefaultQueue("subnet-status"),
		valid: map[string]programmed{}, problems: map[string]*kubeovnv1.Problem{}, notApplied: map[string]string{},
		deleting: map[string]string{}, statusWritten: map[string]string{}}
	r.ipsGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ovnhost_controller_subnet_ips",
		Help: "Addresses of a subnet by family and state (available, using), as in the Subnet status."}, []string{"subnet", "family", "state"})
	_ = cfg.Registry.Register(r.ipsGauge)
	enqueue := reconcile.Enqueue(r.q)
	if _, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(o, n any) {
			// Status writes come back as updates: only spec changes matter,
			// deletion and finalizers (Subnet deletion).
			ou, nu := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured)
			if ou.GetGeneration() != nu.GetGeneration() || (ou.GetDeletionTimestamp() == nil) != (nu.GetDeletionTimestamp() == nil) ||
				!slices.Equal(ou.GetFinalizers(), nu.GetFinalizers()) {
				enqueue(n)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	if err := r.watchUnderlay(); err != nil {
		return nil, err
	}
	return r, nil
}

// Use wires the reconcilers subnets depend on (they depend on subnets too).
func (r *Reconciler) Use(pods Pods, gateways Gateways) { r.pods, r.gateways = pods, gateways }

// UseVpcs wires the VPC reconciler (nil: a Subnet of a custom VPC waits).
func (r *Reconciler) UseVpcs(v Vpcs) { r.vpcs = v }

// ShutDown stops the queues (their workers return).
func (r *Reconciler) ShutDown() {
	r.q.ShutDown()
	r.statusQ.ShutDown()
}

// ProgramAll programs every Subnet in the cache, join and ovn-default
// first, and returns their names (start-up: pods need them).
func (r *Reconciler) ProgramAll(ctx context.Context) ([]string, error) {
	names := r.inf.GetIndexer().ListKeys()
	sort.Slice(names, func(i, j int) bool {
		return subnetOrder(names[i]) < subnetOrder(names[j]) || (subnetOrder(names[i]) == subnetOrder(names[j]) && names[i] < names[j])
	})
	for _, n := range names {
		if err := r.sync(ctx, n); err != nil {
			return nil, fmt.Errorf("programming subnet %q: %w", n, err)
		}
	}
	return names, nil
}

func subnetOrder(n string) int {
	switch n {
	case ovnnet.JoinSubnet:
		return 0
	case ovnnet.DefaultSubnet:
		return 1
	}
	return 2
}

// Start runs the workers once start-up has rebuilt the IPAM: names (from
// ProgramAll) get their status, and those being deleted are decided now.
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup, names []string) {
	r.started.Store(true)
	for _, n := range names {
		r.statusQ.Add(n)
		if r.Terminating(n) || r.u2oPending(n) {
			// Decided now that the IPAM holds every recorded address.
			r.q.Add(n)
		}
	}
	reconcile.Workers(ctx, wg, r.log, 1, r.q, r.sync, "subnet")
	reconcile.Workers(ctx, wg, r.log, 1, r.statusQ, r.syncStatus, "subnet status")
	reconcile.ShutDownWith(ctx, wg, r.q)
	reconcile.ShutDownWith(ctx, wg, r.statusQ)
}

// sync programs one Subnet, or removes it.
func (r *Reconciler) sync(ctx context.Context, name string) error {
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		return r.removed(ctx, name)
	}
	u := obj.(*unstructured.Unstructured)
	if u.GetDeletionTimestamp() != nil {
		if done, err := r.finishDeletion(ctx, u); done || err != nil {
			return err
		}
		// Still in use: stays programmed for the pods that hold addresses.
	} else if err := r.ensureFinalizer(ctx, u); err != nil {
		return err
	}
	cfg, s, prob := kubeovnv1.Validate(u)
	var ul *ovnnet.Underlay
	if prob == nil {
		ul, prob = r.underlay(s)
	}
	if prob == nil && kubeovnv1.IsCustomVpc(s.Spec.Vpc) {
		prob = r.vpcProblem(s.Spec.Vpc)
	}
	if prob == nil {
		if err := r.cfg.Net.AddSubnet(ctx, cfg, ul); err != nil {
			if ipam.KindOf(err) == "" {
				return err
			}
			prob = &kubeovnv1.Problem{Reason: "InvalidField", Message: ipamMessage(err)}
		}
	}
	if prob == nil {
		if err := r.cfg.Net.SetIsolation(ctx, name, isolation(s)); err != nil {
			return fmt.Errorf("subnet %s: isolation ACLs: %w", name, err)
		}
	}
	oldVpc := r.vpcOf(name)
	r.record(u, s, cfg, ul, prob)
	r.queueVpcs(oldVpc, s)
	r.gateways.Queue(name)
	r.statusQ.Add(name)
	return nil
}

// removed forgets a Subnet that is gone and removes its switch.
func (r *Reconciler) removed(ctx context.Context, name string) error {
	oldVpc := r.vpcOf(name)
	r.mu.Lock()
	_, was := r.valid[name]
	r.forget(name)
	delete(r.statusWritten, name)
	r.mu.Unlock()
	if err := r.gateways.Remove(ctx, name); err != nil {
		return err
	}
	if users := r.users(name); len(users) > 0 {
		// Only when someone removed the finalizer by hand.
		r.log.Warn("subnet deleted while pods still hold addresses in it (its finalizer was removed by hand); their addresses are free again", "subnet", name, "users", users)
	}
	if was {
		r.ipsGauge.DeletePartialMatch(prometheus.Labels{"subnet": name})
		if err := r.cfg.Net.RemoveSubnet(ctx, name); err != nil {
			return err
		}
	}
	r.queueVpcs(oldVpc, nil)
	return nil
}

// forget drops what is known of a Subnet (r.mu held).
func (r *Reconciler) forget(name string) {
	delete(r.valid, name)
	delete(r.problems, name)
	delete(r.notApplied, name)
	delete(r.deleting, name)
}

// record keeps the outcome of a sync, wakes the pods waiting for a valid
// subnet, and announces what is not valid or not applied.
func (r *Reconciler) record(u *unstructured.Unstructured, s *kubeovnv1.Subnet, cfg ipam.SubnetConfig, ul *ovnnet.Underlay, prob *kubeovnv1.Problem) {
	name := u.GetName()
	notApplied := ""
	if prob == nil {
		notApplied = kubeovnv1.NotAppliedMessage(kubeovnv1.NotAppliedFields(s.Spec, kubeovnv1.Settings{EnableLB: r.cfg.EnableLB}))
	}
	r.mu.Lock()
	old, known := r.problems[name]
	announced, seen := r.notApplied[name]
	prev, wasValid := r.valid[name]
	// Its binding changed, or it is valid again after being invalid (its
	// binding may have changed meanwhile): the pods in it are checked again.
	rebound := prob == nil && ((wasValid && prev.subnet != nil && !sameBinding(prev.subnet, s)) || known)
	if prob == nil {
		r.valid[name] = programmed{subnet: s, cfg: cfg, underlay: ul}
		delete(r.problems, name)
	} else {
		delete(r.valid, name)
		r.problems[name] = prob
	}
	r.notApplied[name] = notApplied
	r.mu.Unlock()
	if rebound {
		// Namespaces added or taken away: the pods there are checked again
		// (those of a namespace no longer admitted lose their port there).
		r.pods.Recheck(name)
	}
	if prob == nil {
		r.pods.Wake(name)
	} else if !known || old.Message != prob.Message {
		r.log.Warn("subnet not valid", "subnet", name, "reason", prob.Reason, "message", prob.Message)
	}
	if !seen {
		// First sight in this process (start, new leader): what an earlier
		// run announced is in the stored Validated condition.
		if cur, _ := kubeovnv1.FromUnstructured(u); cur != nil {
			if v := cur.Condition(kubeovnv1.Validated); v != nil && v.Status == "True" && v.Reason == kubeovnv1.AcceptedNotApplied {
				announced = v.Message
			}
		}
	}
	if notApplied != "" && notApplied != announced {
		// Once per change of the set of such fields, not on every sync.
		r.log.Warn("subnet accepted but some fields are not applied", "subnet", name, "message", notApplied)
		r.cfg.Recorder.Event(subnetRef(u), corev1.EventTypeWarning, kubeovnv1.AcceptedNotApplied, notApplied)
	}
}

// ipamMessage is an IPAM error without its kind prefix (the event reason carries it).
func ipamMessage(err error) string {
	var ie *ipam.Error
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return err.Error()
}

// isolation is what a valid Subnet asks of its switch's ACLs (private,
// allowSubnets, acls).
func isolation(s *kubeovnv1.Subnet) ovnnet.Isolation {
	iso := ovnnet.Isolation{Private: s.Spec.Private}
	iso.AllowSubnets, _ = ovnnet.ParseAllowSubnets(s.Name, s.Spec.AllowSubnets) // checked by Validate
	for _, a := range s.Spec.Acls {
		iso.ACLs = append(iso.ACLs, ovnnb.ACL{Direction: a.Direction, Priority: a.Priority, Match: a.Match, Action: a.Action})
	}
	return iso
}

// subnetRef is the event's object (Subnets are cluster-scoped: their events
// land in the default namespace).
func subnetRef(u *unstructured.Unstructured) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: kubeovnv1.GroupVersion.String(), Kind: kubeovnv1.SubnetGVK.Kind,
		Name: u.GetName(), UID: u.GetUID(), ResourceVersion: u.GetResourceVersion()}
}

// sameBinding: the two Subnets admit the same namespaces (namespaces,
// namespaceSelectors, default).
func sameBinding(a, b *kubeovnv1.Subnet) bool {
	return a.Spec.Default == b.Spec.Default && slices.Equal(a.Spec.Namespaces, b.Spec.Namespaces) &&
		equality.Semantic.DeepEqual(a.Spec.NamespaceSelectors, b.Spec.NamespaceSelectors)
}

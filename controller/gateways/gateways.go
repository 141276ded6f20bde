// Package gateways reconciles the centralized gateways of Subnets
// (gatewayType: centralized): the gateway port, its HA chassis group
// ranking the gateway nodes, the reroute of the subnet's outside traffic,
// and the GatewayReady condition the subnet's status carries. Its own queue
// (centralized-gateways) takes a Subnet's key when its gatewayNode, the
// active gateway a node reports or the failback annotation change, when
// the subnet reconciler has programmed it, and when a node's chassis or
// readiness changes. It reads the programmed Subnet from the subnet
// reconciler (Subnets) and asks it to write the status.
package gateways

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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

// Network is the OVN work of centralized gateways (ovnnet.Network).
type Network interface {
	EnsureCentralizedGateway(ctx context.Context, subnet string, cidrs []netip.Prefix, nodes []ovnnet.GatewayNode) (ovnnet.Transit, error)
	RemoveCentralizedGateway(ctx context.Context, subnet string) error
	CentralizedSubnets(ctx context.Context) ([]string, error)
}

// Subnets is the subnet reconciler as gateways see it.
type Subnets interface {
	// Valid is a programmed Subnet and its configuration.
	Valid(name string) (*kubeovnv1.Subnet, ipam.SubnetConfig, bool)
	// StatusChanged writes the subnet's status soon.
	StatusChanged(name string)
}

// Config is what the reconciler needs.
type Config struct {
	Log        *slog.Logger
	Dynamic    dynamic.Interface
	Informers  informers.SharedInformerFactory              // nodes
	DInformers dynamicinformer.DynamicSharedInformerFactory // subnets
	Net        Network
	Subnets    Subnets
}

// Reconciler is the centralized gateway reconciler.
type Reconciler struct {
	cfg   Config
	log   *slog.Logger
	nodes corelisters.NodeLister
	inf   cache.SharedIndexInformer // subnets
	q     reconcile.Queue
	// syncMu: a subnet's gateway is written by one sync at a time, and not
	// while Remove takes it away.
	syncMu sync.Mutex

	mu sync.Mutex
	// conds: centralized subnet -> its GatewayReady condition.
	conds map[string]*kubeovnv1.Condition
	// rank: centralized subnet -> the HA group order last programmed.
	rank map[string]gatewayRanking
}

// New registers the informers' handlers.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	nodeInf := cfg.Informers.Core().V1().Nodes()
	r := &Reconciler{cfg: cfg, log: cfg.Log, nodes: nodeInf.Lister(), inf: cfg.DInformers.ForResource(kubeovnv1.SubnetGVR).Informer(),
		q: reconcile.NewDefaultQueue("centralized-gateways"), conds: map[string]*kubeovnv1.Condition{}, rank: map[string]gatewayRanking{}}
	enqueue := reconcile.Enqueue(r.q)
	if _, err := r.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue,
		UpdateFunc: func(o, n any) {
			// Status writes come back as updates: what the gateway reads is the
			// spec, deletion, which node is active and whether traffic should
			// go back to the first (the ranking follows them).
			ou, nu := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured)
			oa, _, _ := unstructured.NestedString(ou.Object, "status", "activateGateway")
			na, _, _ := unstructured.NestedString(nu.Object, "status", "activateGateway")
			if ou.GetGeneration() != nu.GetGeneration() || oa != na ||
				ou.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] != nu.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] ||
				(ou.GetDeletionTimestamp() == nil) != (nu.GetDeletionTimestamp() == nil) {
				enqueue(n)
			}
		},
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, err
	}
	// A node's chassis annotation or readiness decides whether it is in
	// the HA groups of the subnets that name it.
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { r.requeueNode(obj) },
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Node), n.(*corev1.Node)
			if !maps.Equal(on.Annotations, nn.Annotations) || reconcile.ReadyOf(on) != reconcile.ReadyOf(nn) {
				r.requeueNode(n)
			}
		},
		DeleteFunc: func(obj any) { r.requeueNode(obj) },
	}); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Reconciler) requeueNode(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if n, ok := obj.(*corev1.Node); ok {
		r.requeueGateways(n.Name)
	}
}

// Queue asks for a subnet's gateway to be brought in line.
func (r *Reconciler) Queue(subnet string) { r.q.Add(subnet) }

// Condition is a subnet's GatewayReady condition (nil: none).
func (r *Reconciler) Condition(subnet string) *kubeovnv1.Condition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conds[subnet]
}

// ShutDown stops the queue.
func (r *Reconciler) ShutDown() { r.q.ShutDown() }

// ProgramAll brings the gateway of every programmed Subnet in line, then
// removes the gateways of subnets that are gone (deleted while no
// controller ran): start-up, after the subnets.
func (r *Reconciler) ProgramAll(ctx context.Context) error {
	for _, name := range r.inf.GetIndexer().ListKeys() {
		if err := r.sync(ctx, name); err != nil {
			return fmt.Errorf("programming the gateway of subnet %q: %w", name, err)
		}
	}
	if err := r.collectGateways(ctx); err != nil {
		return fmt.Errorf("removing gateways of deleted subnets: %w", err)
	}
	return nil
}

// Start runs the worker.
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) {
	reconcile.Workers(ctx, wg, r.log, 1, r.q, r.sync, "centralized gateway")
	reconcile.ShutDownWith(ctx, wg, r.q)
}

// sync brings one subnet's gateway in line and reports its condition to
// the subnet's status. A subnet that is not valid (or not programmed yet)
// keeps what it has and gets no condition.
func (r *Reconciler) sync(ctx context.Context, name string) error {
	obj, exists, err := r.inf.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		return r.Remove(ctx, name)
	}
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	var cond *kubeovnv1.Condition
	if s, cfg, ok := r.cfg.Subnets.Valid(name); ok {
		if cond, err = r.syncGateway(ctx, obj.(*unstructured.Unstructured), s, cfg); err != nil {
			return err
		}
	}
	r.mu.Lock()
	r.conds[name] = cond
	r.mu.Unlock()
	r.cfg.Subnets.StatusChanged(name)
	return nil
}

// Remove removes a subnet's gateway and forgets it (the subnet goes).
func (r *Reconciler) Remove(ctx context.Context, name string) error {
	r.syncMu.Lock()
	defer r.syncMu.Unlock()
	r.mu.Lock()
	delete(r.conds, name)
	delete(r.rank, name)
	r.mu.Unlock()
	return r.removeGateway(ctx, name, nil)
}

// GatewayReady is the condition of a centralized subnet's gateway: True
// once its gateway port and HA chassis group are programmed, False with the
// reason when gatewayNode cannot be applied (nothing is touched then).
const GatewayReady = "GatewayReady"

// syncGateway programs or removes a valid subnet's centralized gateway and
// returns its GatewayReady condition (nil for a distributed subnet). Which
// gateway is active is OVN's decision (BFD between the HA chassis), not the
// controller's: the controller only ranks the nodes, leaving out NotReady ones.
func (r *Reconciler) syncGateway(ctx context.Context, u *unstructured.Unstructured, s *kubeovnv1.Subnet, cfg ipam.SubnetConfig) (*kubeovnv1.Condition, error) {
	name := u.GetName()
	if s == nil || s.Spec.GatewayType != "centralized" || s.Spec.Vlan != "" || kubeovnv1.IsCustomVpc(s.Spec.Vpc) {
		// An underlay subnet leaves through its physical network: its
		// gatewayType is not applied (fields.go), as in Kube-OVN; a
		// custom VPC's subnet does not leave through gateway nodes.
		return nil, r.removeGateway(ctx, name, u)
	}
	bad := func(reason, msg string) (*kubeovnv1.Condition, error) {
		r.log.Warn("centralized gateway not applied", "subnet", name, "reason", reason, "message", msg)
		return &kubeovnv1.Condition{Type: GatewayReady, Status: "False", Reason: reason, Message: msg}, nil
	}
	specs, err := ovnnet.ParseGatewayNode(s.Spec.GatewayNode)
	if err != nil {
		return bad("InvalidGatewayNode", err.Error())
	}
	var nodes []ovnnet.GatewayNode
	var unknown, noChassis, notReady, used []string
	for _, g := range specs {
		nd, err := r.nodes.Get(g.Node)
		if apierrors.IsNotFound(err) {
			unknown = append(unknown, g.Node)
			continue
		}
		if err != nil {
			return nil, err
		}
		ch := nd.Annotations[annotations.Chassis]
		switch {
		case ch == "":
			noChassis = append(noChassis, g.Node)
		case !reconcile.NodeReady(nd):
			notReady = append(notReady, g.Node)
		default:
			nodes = append(nodes, ovnnet.GatewayNode{Node: g.Node, Chassis: ch})
			used = append(used, g.Node)
		}
	}
	if len(unknown) > 0 {
		all, _ := r.nodes.List(labels.Everything())
		var names []string
		for _, n := range all {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		return bad("UnknownGatewayNode", fmt.Sprintf("gatewayNode %q names node(s) %s that do not exist; list existing nodes (%s)",
			s.Spec.GatewayNode, strings.Join(unknown, ", "), strings.Join(names, ", ")))
	}
	if len(nodes) == 0 {
		// Keep what is programmed: OVN still fails over among those chassis.
		msg := "no gateway node can take the subnet's traffic:"
		if len(noChassis) > 0 {
			msg += fmt.Sprintf(" %s without annotation %s (is ovnhost running there?);", strings.Join(noChassis, ", "), annotations.Chassis)
		}
		if len(notReady) > 0 {
			msg += fmt.Sprintf(" %s NotReady;", strings.Join(notReady, ", "))
		}
		return bad("NoGatewayNode", strings.TrimSuffix(msg, ";")+"; start ovnhost on a gateway node or list another node in gatewayNode")
	}
	nodes = r.rankGateways(name, u, nodes)
	used = used[:0]
	for _, g := range nodes {
		used = append(used, g.Node)
	}
	cidrs, noIPv6 := r.gatewayFamilies(cfg.CIDRs, used)
	if len(cidrs) == 0 {
		return bad("GatewayNodesWithoutIPv6", fmt.Sprintf("the subnet is IPv6 only and gateway node(s) %s run an ovnhost without IPv6 gateways (node annotation %s without %s); upgrade ovnhost on them",
			strings.Join(noIPv6, ", "), annotations.NodeFeatures, annotations.FeatureGatewayIPv6))
	}
	transit, err := r.cfg.Net.EnsureCentralizedGateway(ctx, name, cidrs, nodes)
	if err != nil {
		return nil, err
	}
	if want := transitAnnotations(transit); !transitAnnotated(u, want) {
		if err := r.annotateSubnet(ctx, name, want); err != nil {
			return nil, err
		}
	}
	msg := "gateway nodes in priority order: " + strings.Join(used, ", ")
	if len(noChassis)+len(notReady) > 0 {
		msg += "; left out: " + strings.Join(append(noChassis, notReady...), ", ") + " (no chassis or NotReady)"
	}
	if len(noIPv6) > 0 {
		msg += fmt.Sprintf("; IPv6 traffic leaves through each pod's own node until %s run(s) an ovnhost with IPv6 gateways (node annotation %s without %s): upgrade them",
			strings.Join(noIPv6, ", "), annotations.NodeFeatures, annotations.FeatureGatewayIPv6)
	}
	return &kubeovnv1.Condition{Type: GatewayReady, Status: "True", Reason: "GatewayProgrammed", Message: msg}, nil
}

// gatewayFamilies are the CIDRs the gateway takes: the IPv6 ones only once
// every gateway node announces IPv6 gateways. A node daemon older than
// that ignores the IPv6 transit network, so during a rolling upgrade that
// starts with the controller an IPv6 reroute to it would be a black hole;
// until then IPv6 leaves through each pod's node, as it did before.
// noIPv6 names the nodes waited for (none when the subnet has no IPv6).
func (r *Reconciler) gatewayFamilies(cidrs []netip.Prefix, nodes []string) (out []netip.Prefix, noIPv6 []string) {
	if !slices.ContainsFunc(cidrs, func(p netip.Prefix) bool { return p.Addr().Is6() }) {
		return cidrs, nil
	}
	for _, name := range nodes {
		if nd, err := r.nodes.Get(name); err != nil || !annotations.HasFeature(nd.Annotations[annotations.NodeFeatures], annotations.FeatureGatewayIPv6) {
			noIPv6 = append(noIPv6, name)
		}
	}
	if len(noIPv6) == 0 {
		return cidrs, nil
	}
	for _, p := range cidrs {
		if p.Addr().Is4() {
			out = append(out, p)
		}
	}
	return out, noIPv6
}

// removeGateway removes a subnet's gateway if it has one (subnet deleted or
// distributed again); u is nil for a deleted subnet.
func (r *Reconciler) removeGateway(ctx context.Context, name string, u *unstructured.Unstructured) error {
	subs, err := r.cfg.Net.CentralizedSubnets(ctx)
	if err != nil || !slices.Contains(subs, name) {
		return err
	}
	if err := r.cfg.Net.RemoveCentralizedGateway(ctx, name); err != nil {
		return err
	}
	r.log.Info("centralized gateway removed", "subnet", name)
	if u == nil {
		return nil
	}
	if err := r.annotateSubnet(ctx, name, transitAnnotations(ovnnet.Transit{})); err != nil {
		return err
	}
	patch := []byte(`{"status":{"activateGateway":null}}`)
	_, err = r.cfg.Dynamic.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// transitAnnotations are the Subnet annotations that record transit, one
// per family ("" for a family it does not have).
func transitAnnotations(t ovnnet.Transit) map[string]string {
	str := func(p netip.Prefix) string {
		if !p.IsValid() {
			return ""
		}
		return p.String()
	}
	return map[string]string{ovnnet.TransitAnnotation: str(t.V4), ovnnet.TransitAnnotation6: str(t.V6)}
}

// transitAnnotated: u's annotations already say want.
func transitAnnotated(u *unstructured.Unstructured, want map[string]string) bool {
	have := u.GetAnnotations()
	for k, v := range want {
		if have[k] != v {
			return false
		}
	}
	return true
}

// annotateSubnet records the transit networks for the gateway nodes (an
// empty value removes that annotation).
func (r *Reconciler) annotateSubnet(ctx context.Context, name string, transit map[string]string) error {
	anns := map[string]any{}
	for k, v := range transit {
		if v == "" {
			anns[k] = nil
		} else {
			anns[k] = v
		}
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": anns}})
	_, err := r.cfg.Dynamic.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// collectGateways removes gateways of subnets that are gone (deleted while
// no controller ran).
func (r *Reconciler) collectGateways(ctx context.Context) error {
	subs, err := r.cfg.Net.CentralizedSubnets(ctx)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if _, ok, _ := r.inf.GetIndexer().GetByKey(s); !ok {
			if err := r.cfg.Net.RemoveCentralizedGateway(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// requeueGateways re-syncs the centralized subnets that name node: its
// chassis annotation or readiness decides whether it is in their HA group.
func (r *Reconciler) requeueGateways(node string) {
	for _, obj := range r.inf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		typ, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayType")
		gw, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayNode")
		if typ != "centralized" {
			continue
		}
		specs, err := ovnnet.ParseGatewayNode(gw)
		if err != nil || slices.ContainsFunc(specs, func(g ovnnet.GatewaySpec) bool { return g.Node == node }) {
			r.q.Add(u.GetName())
		}
	}
}

// gatewaySettle is how long after the controller changed a subnet's HA
// chassis group the active gateway reported by the nodes is not taken as a
// failover: until BFD between the new members is up, every member sees
// itself as the best live chassis and claims the port for a moment.
const gatewaySettle = 5 * time.Second

// gatewayRanking is the HA group order the controller last programmed.
type gatewayRanking struct {
	nodes   []string
	changed time.Time
}

// rankGateways orders a centralized subnet's gateway nodes: gatewayNode
// order, with the active gateway moved first (no failback) once the group
// has settled; a report that comes sooner is re-examined when it has.
func (r *Reconciler) rankGateways(name string, u *unstructured.Unstructured, base []ovnnet.GatewayNode) []ovnnet.GatewayNode {
	active, _, _ := unstructured.NestedString(u.Object, "status", "activateGateway")
	want := ovnnet.RankGateways(base, active, u.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] == "true")
	r.mu.Lock()
	defer r.mu.Unlock()
	last, known := r.rank[name]
	if since := time.Since(last.changed); known && !sameOrder(want, base) && since < gatewaySettle {
		r.q.AddAfter(name, gatewaySettle-since)
		if prev := byNames(base, last.nodes); prev != nil {
			return prev
		}
		want = base
	}
	if !known || !sameOrder(want, nil, last.nodes...) {
		r.rank[name] = gatewayRanking{nodes: gatewayNames(want), changed: time.Now()}
	}
	return want
}

func gatewayNames(gs []ovnnet.GatewayNode) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Node
	}
	return out
}

// sameOrder: a and b (or, with b nil, a and names) list the same nodes in the same order.
func sameOrder(a, b []ovnnet.GatewayNode, names ...string) bool {
	if b != nil {
		names = gatewayNames(b)
	}
	return slices.Equal(gatewayNames(a), names)
}

// byNames orders gs as names, or nil when they are not the same nodes.
func byNames(gs []ovnnet.GatewayNode, names []string) []ovnnet.GatewayNode {
	if len(gs) != len(names) {
		return nil
	}
	out := make([]ovnnet.GatewayNode, 0, len(gs))
	for _, n := range names {
		i := slices.IndexFunc(gs, func(g ovnnet.GatewayNode) bool { return g.Node == n })
		if i < 0 {
			return nil
		}
		out = append(out, gs[i])
	}
	return out
}

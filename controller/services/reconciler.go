package services

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Recorder record.EventRecorder
	// Informers holds the shared Service, EndpointSlice and Node informers.
	Informers informers.SharedInformerFactory
	NB        *ovnnb.Client
	Router    string // the cluster router ("" = ovn-cluster)
	// DInformers holds the Subnet informer: no Service may take an
	// address inside a Subnet's cidrBlock (nil: Subnets are not checked).
	DInformers dynamicinformer.DynamicSharedInformerFactory
	// ServiceCIDRs are the cluster's Service ranges (ClusterIPs, the
	// cluster DNS among them): no external address may fall inside.
	ServiceCIDRs []netip.Prefix
	// JoinCIDR is the nodes' join subnet ("" = 100.64.0.0/16; comma-separated
	// for dual stack): no external address may fall inside.
	JoinCIDR string
	// PodVPC is the custom VPC of a pod ("ns/name"), "" for the default
	// VPC (nil: every endpoint counts). A custom VPC's pod is no backend
	// of the cluster's load balancers: its address is another VPC's.
	PodVPC func(owner string) string
}

// defaultVPCEndpoints drops the endpoints of pods in custom VPCs.
func defaultVPCEndpoints(eps []*discoveryv1.EndpointSlice, podVPC func(string) string) []*discoveryv1.EndpointSlice {
	if podVPC == nil {
		return eps
	}
	inVPC := func(e discoveryv1.Endpoint) bool {
		return e.TargetRef != nil && e.TargetRef.Kind == "Pod" && podVPC(e.TargetRef.Namespace+"/"+e.TargetRef.Name) != ""
	}
	out := make([]*discoveryv1.EndpointSlice, 0, len(eps))
	for _, es := range eps {
		if !slices.ContainsFunc(es.Endpoints, inVPC) {
			out = append(out, es)
			continue
		}
		c := es.DeepCopy()
		c.Endpoints = slices.DeleteFunc(c.Endpoints, inVPC)
		out = append(out, c)
	}
	return out
}

// joinSubnet is the name of the nodes' Subnet.
const joinSubnet = ovnnet.JoinSubnet

var everything = labels.Everything()

// Reconciler programs Services (from EndpointSlices) as OVN load
// balancers: Translate translates, internal/ovnnb writes one transaction
// per Service sync. A Service OVN cannot express gets a Warning event and
// keeps whatever it had.
type Reconciler struct {
	cfg    Config
	log    *slog.Logger
	nb     *ovnnb.Client
	svcs   corelisters.ServiceLister
	svcI   cache.SharedIndexInformer
	nodes  corelisters.NodeLister
	sliceI cache.SharedIndexInformer
	// subnetI holds the Subnets (nil without DInformers).
	subnetI      cache.SharedIndexInformer
	serviceCIDRs []netip.Prefix
	joinCIDRs    []netip.Prefix
	q            reconcile.Queue

	mu       sync.Mutex
	reported map[string]string // service -> last InputError announced (one event per new problem)
	// claims: which Service holds an external address, protocol and port.
	claims map[claimKey]string
	// refused: service -> refusal messages announced (one event per new refusal).
	refused map[string][]string
}

// serviceWorkers sync Services in parallel (one NB transaction each).
const serviceWorkers = 8

// byServiceIndex finds a Service's EndpointSlices without scanning its namespace.
const byServiceIndex = "service"

// New registers the informers' handlers.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Router == "" {
		cfg.Router = ovnnet.DefaultRouter
	}
	s := &Reconciler{cfg: cfg, log: cfg.Log, nb: cfg.NB, q: reconcile.NewDefaultQueue("services"), reported: map[string]string{},
		claims: map[claimKey]string{}, refused: map[string][]string{}, serviceCIDRs: cfg.ServiceCIDRs}
	join := cfg.JoinCIDR
	if join == "" {
		join = ovnnet.JoinSubnetCIDR
	}
	for _, c := range strings.Split(join, ",") {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("join CIDR %q: %w", join, err)
		}
		s.joinCIDRs = append(s.joinCIDRs, pfx.Masked())
	}
	svcInf := cfg.Informers.Core().V1().Services()
	s.svcs = svcInf.Lister()
	s.svcI = svcInf.Informer()
	if err := s.svcI.AddIndexers(cache.Indexers{byAddressIndex: addressIndex}); err != nil {
		return nil, err
	}
	s.nodes = cfg.Informers.Core().V1().Nodes().Lister()
	s.sliceI = cfg.Informers.Discovery().V1().EndpointSlices().Informer()
	if err := s.sliceI.AddIndexers(cache.Indexers{byServiceIndex: func(obj any) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		return nil, err
	}
	enqueueSvc := reconcile.Enqueue(s.q)
	// A Service's addresses changing wakes the Services that share one
	// (a contender takes over a freed external address; a new ClusterIP
	// refuses an externalIP equal to it).
	wakeSharing := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		svc, ok := obj.(*corev1.Service)
		if !ok {
			return
		}
		addrs, _ := addressIndex(svc)
		for _, a := range addrs {
			s.requeueAddress(a, svc.Namespace+"/"+svc.Name)
		}
	}
	if _, err := s.svcI.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueueSvc(obj); wakeSharing(obj) },
		UpdateFunc: func(o, n any) {
			if o.(*corev1.Service).ResourceVersion != n.(*corev1.Service).ResourceVersion {
				enqueueSvc(n)
				wakeSharing(o)
				wakeSharing(n)
			}
		},
		DeleteFunc: func(obj any) { enqueueSvc(obj); wakeSharing(obj) },
	}); err != nil {
		return nil, err
	}
	enqueueSlice := func(obj any) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		if es, ok := obj.(*discoveryv1.EndpointSlice); ok && es.Labels[discoveryv1.LabelServiceName] != "" {
			s.q.Add(es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName])
		}
	}
	if _, err := s.sliceI.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueSlice,
		UpdateFunc: func(_, n any) { enqueueSlice(n) },
		DeleteFunc: enqueueSlice,
	}); err != nil {
		return nil, err
	}
	chassisOf := func(obj any) string {
		if n, ok := obj.(*corev1.Node); ok {
			return n.Annotations[annotations.Chassis]
		}
		return ""
	}
	addrsOf := func(obj any) string {
		n, ok := obj.(*corev1.Node)
		if !ok {
			return ""
		}
		var out []string
		for _, a := range n.Status.Addresses {
			if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
				out = append(out, a.Address)
			}
		}
		return strings.Join(out, ",")
	}
	// (Start queues every Service: the initial list wakes nobody.)
	if _, err := cfg.Informers.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(_ any, initial bool) {
			if !initial {
				s.requeueLocalServices()
				s.requeueExternal()
			}
		},
		UpdateFunc: func(o, n any) {
			if chassisOf(o) != chassisOf(n) {
				s.requeueLocalServices()
			}
			if addrsOf(o) != addrsOf(n) {
				s.requeueExternal()
			}
		},
		DeleteFunc: func(any) { s.requeueLocalServices(); s.requeueExternal() },
	}); err != nil {
		return nil, err
	}
	if cfg.DInformers != nil {
		s.subnetI = cfg.DInformers.ForResource(kubeovnv1.SubnetGVR).Informer()
		cidrOf := func(obj any) string {
			if u, ok := obj.(*unstructured.Unstructured); ok {
				c, _, _ := unstructured.NestedString(u.Object, "spec", "cidrBlock")
				return c
			}
			return ""
		}
		if _, err := s.subnetI.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
			AddFunc: func(_ any, initial bool) {
				if !initial {
					s.requeueExternal()
				}
			},
			UpdateFunc: func(o, n any) {
				if cidrOf(o) != cidrOf(n) {
					s.requeueExternal()
				}
			},
			DeleteFunc: func(any) { s.requeueExternal() },
		}); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ShutDown stops the queue.
func (s *Reconciler) ShutDown() { s.q.ShutDown() }

// Start creates the load balancer group, attaches it to every switch and the
// cluster router, removes load balancers of Services that are gone, and
// starts the workers.
func (s *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	nb := s.nb
	uuid, err := nb.EnsureLBGroup(ctx, ClusterLBGroup)
	if err != nil {
		return fmt.Errorf("kube: services: %w", err)
	}
	router := s.cfg.Router
	if err := nb.AttachLBGroup(ctx, ClusterLBGroup, uuid, router); err != nil {
		return fmt.Errorf("kube: services: %w", err)
	}
	// Load balancers whose Service no longer exists (deleted while no
	// controller ran): their Service key is queued and the sync deletes them.
	lbs, err := nb.LoadBalancers(ctx, nil)
	if err != nil {
		return err
	}
	for _, lb := range lbs {
		if k := lb.ExternalIDs[KeyService]; k != "" {
			s.q.Add(k)
			s.seedClaims(k, lb)
		}
	}
	keys, err := s.svcs.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, svc := range keys {
		s.q.Add(svc.Namespace + "/" + svc.Name)
	}
	reconcile.Workers(ctx, wg, s.log, serviceWorkers, s.q, s.sync, "service")
	reconcile.ShutDownWith(ctx, wg, s.q)
	return nil
}

// sync makes the load balancers of one Service match it and its EndpointSlices.
func (s *Reconciler) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	names := Names(ns, name)
	svc, err := s.svcs.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.mu.Lock()
		delete(s.reported, key)
		delete(s.refused, key)
		s.mu.Unlock()
		if err := s.nb.SetLoadBalancers(ctx, ClusterLBGroup, names, nil); err != nil {
			return err
		}
		s.release(key, nil)
		return s.nb.SetTemplateVars(ctx, VarPrefix(ns, name), s.chassis(), nil)
	}
	if err != nil {
		return err
	}
	objs, err := s.sliceI.GetIndexer().ByIndex(byServiceIndex, key)
	if err != nil {
		return err
	}
	eps := make([]*discoveryv1.EndpointSlice, 0, len(objs))
	for _, o := range objs {
		if es, ok := o.(*discoveryv1.EndpointSlice); ok {
			eps = append(eps, es)
		}
	}
	want, err := Translate(svc, defaultVPCEndpoints(eps, s.cfg.PodVPC))
	var bad *InputError
	if errors.As(err, &bad) {
		// Nothing changes in OVN: the Service keeps what it had.
		s.mu.Lock()
		seen := s.reported[key] == bad.Error()
		s.reported[key] = bad.Error()
		s.mu.Unlock()
		if !seen {
			s.cfg.Recorder.Event(svc, corev1.EventTypeWarning, "UnsupportedService", bad.Error())
		}
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.reported, key)
	s.mu.Unlock()
	refused, keep := s.screen(svc)
	s.announce(svc, refused)
	want = withoutRefused(svc, want, refused)
	// Template variables first: a template load balancer whose variable is
	// not there yet balances nothing on that chassis for a moment, instead
	// of naming a variable that never comes.
	chassisOf := s.chassisByNode()
	vars := map[string]map[string]string{}
	for _, w := range want {
		for v, perNode := range w.Vars {
			m := map[string]string{}
			for node, backends := range perNode {
				if ch := chassisOf[node]; ch != "" {
					m[ch] = backends
				}
			}
			vars[v] = m
		}
	}
	if err := s.nb.SetTemplateVars(ctx, VarPrefix(ns, name), s.chassis(), vars); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	lbs := make([]ovnnb.LoadBalancer, len(want))
	for i, w := range want {
		lbs[i] = ovnnb.LoadBalancer{Name: w.Name, Protocol: w.Protocol, VIPs: w.VIPs, Options: w.Options, SelectionFields: w.SelectionFields, ExternalIDs: w.ExternalIDs}
	}
	if err := s.nb.SetLoadBalancers(ctx, ClusterLBGroup, names, lbs); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	s.release(key, keep)
	return nil
}

// chassisByNode maps node names to their chassis (annotation
// ovn.kubernetes.io/chassis, written by each node daemon).
func (s *Reconciler) chassisByNode() map[string]string {
	out := map[string]string{}
	nodes, _ := s.nodes.List(labels.Everything())
	for _, n := range nodes {
		if ch := n.Annotations[annotations.Chassis]; ch != "" {
			out[n.Name] = ch
		}
	}
	return out
}

// chassis lists every node's chassis, sorted.
func (s *Reconciler) chassis() []string {
	var out []string
	for _, ch := range s.chassisByNode() {
		out = append(out, ch)
	}
	slices.Sort(out)
	return out
}

// requeueLocalServices re-syncs the Services with internalTrafficPolicy
// Local: their per-chassis backends follow the nodes' chassis.
func (s *Reconciler) requeueLocalServices() {
	svcs, _ := s.svcs.List(labels.Everything())
	for _, svc := range svcs {
		if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
			s.q.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

// svcByKey reads a Service from the cache by "namespace/name".
func (s *Reconciler) svcByKey(key string) (*corev1.Service, error) {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil, err
	}
	return s.svcs.Services(ns).Get(name)
}

// seedClaims records, at start, the external addresses a Service's load
// balancer already serves: after a restart their holder keeps them.
func (s *Reconciler) seedClaims(key string, lb ovnnb.LoadBalancer) {
	svc, err := s.svcByKey(key)
	if err != nil {
		return
	}
	proto := corev1.Protocol(lb.ExternalIDs[KeyProtocol])
	own := clusterIPs(svc)
	s.mu.Lock()
	defer s.mu.Unlock()
	for vip := range lb.VIPs {
		ap, err := netip.ParseAddrPort(vip)
		if err != nil || slices.Contains(own, ap.Addr().Unmap()) {
			continue
		}
		k := claimKey{addr: ap.Addr().Unmap(), proto: proto, port: int32(ap.Port())}
		if _, taken := s.claims[k]; !taken {
			s.claims[k] = key
		}
	}
}

// announce records a Warning event per refused address not announced
// before, and logs when a Service's refusals are gone.
func (s *Reconciler) announce(svc *corev1.Service, refused []refusal) {
	key := svc.Namespace + "/" + svc.Name
	msgs := make([]string, 0, len(refused))
	for _, r := range refused {
		msgs = append(msgs, r.message(key))
	}
	s.mu.Lock()
	prev := s.refused[key]
	if len(msgs) == 0 {
		delete(s.refused, key)
	} else {
		s.refused[key] = msgs
	}
	s.mu.Unlock()
	for _, m := range msgs {
		if !slices.Contains(prev, m) {
			s.cfg.Recorder.Event(svc, corev1.EventTypeWarning, ReasonAddrRefused, m)
			s.log.Warn("external address refused", "service", key, "problem", m)
		}
	}
	if len(prev) > 0 && len(msgs) == 0 {
		s.log.Info("every external address of the Service is programmed again", "service", key)
	}
}

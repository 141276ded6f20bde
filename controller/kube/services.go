package kube

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// serviceController programs Services (from EndpointSlices) as OVN load
// balancers: controller/services translates, internal/ovnnb writes one
// transaction per Service sync. A Service OVN cannot express gets a Warning
// event and keeps whatever it had.
type serviceController struct {
	c      *Controller
	svcs   corelisters.ServiceLister
	sliceI cache.SharedIndexInformer
	q      workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	reported map[string]string // service -> last InputError announced (one event per new problem)
}

// serviceWorkers sync Services in parallel (one NB transaction each).
const serviceWorkers = 8

// byServiceIndex finds a Service's EndpointSlices without scanning its namespace.
const byServiceIndex = "service"

func newServiceController(c *Controller) (addon, error) {
	s := &serviceController{c: c, reported: map[string]string{}}
	s.q = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "services"})
	svcInf := c.factory.Core().V1().Services()
	s.svcs = svcInf.Lister()
	s.sliceI = c.factory.Discovery().V1().EndpointSlices().Informer()
	if err := s.sliceI.AddIndexers(cache.Indexers{byServiceIndex: func(obj any) ([]string, error) {
		es, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok || es.Labels[discoveryv1.LabelServiceName] == "" {
			return nil, nil
		}
		return []string{es.Namespace + "/" + es.Labels[discoveryv1.LabelServiceName]}, nil
	}}); err != nil {
		return nil, err
	}
	enqueueSvc := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			s.q.Add(key)
		}
	}
	if _, err := svcInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueSvc,
		UpdateFunc: func(o, n any) {
			if o.(*corev1.Service).ResourceVersion != n.(*corev1.Service).ResourceVersion {
				enqueueSvc(n)
			}
		},
		DeleteFunc: enqueueSvc,
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
	if _, err := c.factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { s.requeueLocalServices() },
		UpdateFunc: func(o, n any) {
			if chassisOf(o) != chassisOf(n) {
				s.requeueLocalServices()
			}
		},
		DeleteFunc: func(any) { s.requeueLocalServices() },
	}); err != nil {
		return nil, err
	}
	return s, nil
}

// start creates the load balancer group, attaches it to every switch and the
// cluster router, removes load balancers of Services that are gone, and
// starts the workers.
func (s *serviceController) start(ctx context.Context, wg *sync.WaitGroup) error {
	nb := s.c.net.NB
	uuid, err := nb.EnsureLBGroup(ctx, services.ClusterLBGroup)
	if err != nil {
		return fmt.Errorf("kube: services: %w", err)
	}
	router := s.c.net.Config().Router
	if router == "" {
		router = ovnnet.DefaultRouter
	}
	if err := nb.AttachLBGroup(ctx, services.ClusterLBGroup, uuid, router); err != nil {
		return fmt.Errorf("kube: services: %w", err)
	}
	// Load balancers whose Service no longer exists (deleted while no
	// controller ran): their Service key is queued and the sync deletes them.
	lbs, err := nb.LoadBalancers(ctx, nil)
	if err != nil {
		return err
	}
	for _, lb := range lbs {
		if k := lb.ExternalIDs[services.KeyService]; k != "" {
			s.q.Add(k)
		}
	}
	keys, err := s.svcs.List(everything)
	if err != nil {
		return err
	}
	for _, svc := range keys {
		s.q.Add(svc.Namespace + "/" + svc.Name)
	}
	for i := 0; i < serviceWorkers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s.c.processNext(ctx, s.q, s.sync, "service") {
			}
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); <-ctx.Done(); s.q.ShutDown() }()
	return nil
}

// sync makes the load balancers of one Service match it and its EndpointSlices.
func (s *serviceController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	names := services.Names(ns, name)
	svc, err := s.svcs.Services(ns).Get(name)
	if apierrors.IsNotFound(err) {
		s.mu.Lock()
		delete(s.reported, key)
		s.mu.Unlock()
		if err := s.c.net.NB.SetLoadBalancers(ctx, services.ClusterLBGroup, names, nil); err != nil {
			return err
		}
		return s.c.net.NB.SetTemplateVars(ctx, services.VarPrefix(ns, name), s.chassis(), nil)
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
	want, err := services.Translate(svc, eps)
	var bad *services.InputError
	if errors.As(err, &bad) {
		// Nothing changes in OVN: the Service keeps what it had.
		s.mu.Lock()
		seen := s.reported[key] == bad.Error()
		s.reported[key] = bad.Error()
		s.mu.Unlock()
		if !seen {
			s.c.recorder.Event(svc, corev1.EventTypeWarning, "UnsupportedService", bad.Error())
		}
		return nil
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.reported, key)
	s.mu.Unlock()
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
	if err := s.c.net.NB.SetTemplateVars(ctx, services.VarPrefix(ns, name), s.chassis(), vars); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	lbs := make([]ovnnb.LoadBalancer, len(want))
	for i, w := range want {
		lbs[i] = ovnnb.LoadBalancer{Name: w.Name, Protocol: w.Protocol, VIPs: w.VIPs, Options: w.Options, SelectionFields: w.SelectionFields, ExternalIDs: w.ExternalIDs}
	}
	if err := s.c.net.NB.SetLoadBalancers(ctx, services.ClusterLBGroup, names, lbs); err != nil {
		return fmt.Errorf("service %s: %w", key, err)
	}
	return nil
}

// chassisByNode maps node names to their chassis (annotation
// ovn.kubernetes.io/chassis, written by each node daemon).
func (s *serviceController) chassisByNode() map[string]string {
	out := map[string]string{}
	nodes, _ := s.c.nodes.List(everything)
	for _, n := range nodes {
		if ch := n.Annotations[annotations.Chassis]; ch != "" {
			out[n.Name] = ch
		}
	}
	return out
}

// chassis lists every node's chassis, sorted.
func (s *serviceController) chassis() []string {
	var out []string
	for _, ch := range s.chassisByNode() {
		out = append(out, ch)
	}
	slices.Sort(out)
	return out
}

// requeueLocalServices re-syncs the Services with internalTrafficPolicy
// Local: their per-chassis backends follow the nodes' chassis.
func (s *serviceController) requeueLocalServices() {
	svcs, _ := s.svcs.List(everything)
	for _, svc := range svcs {
		if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
			s.q.Add(svc.Namespace + "/" + svc.Name)
		}
	}
}

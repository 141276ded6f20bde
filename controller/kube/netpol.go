package kube

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ovnhost/ovnhost/controller/netpol"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// keyPolicy is the external ID naming the NetworkPolicy ("namespace/name")
// a port group or address set belongs to.
const keyPolicy = "np"

// policyController enforces NetworkPolicy with OVN port groups, address
// sets and ACLs (controller/netpol computes them). One queue key per
// policy; pod and namespace events enqueue the policies they can affect,
// and the sync writes only the differences, so pod churn becomes port
// group and address set mutations.
type policyController struct {
	c    *Controller
	nps  netlisters.NetworkPolicyLister
	inf  cache.SharedIndexInformer
	q    workqueue.TypedRateLimitingInterface[string]
	host []netip.Prefix

	mu      sync.Mutex
	invalid map[string]string    // policy -> message of the last event
	applied map[string]time.Time // policy -> last successful sync
	workers int
}

func newPolicyController(c *Controller) (addon, error) {
	p := &policyController{c: c, invalid: map[string]string{}, applied: map[string]time.Time{}, workers: 4}
	join := c.cfg.JoinCIDR
	if join == "" {
		join = ovnnet.JoinSubnetCIDR
	}
	for _, s := range strings.Split(join, ",") {
		pfx, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("join CIDR %q: %w", join, err)
		}
		p.host = append(p.host, pfx)
	}
	p.q = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](20*time.Millisecond, 10*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "network-policies"})
	npInf := c.factory.Networking().V1().NetworkPolicies()
	p.nps, p.inf = npInf.Lister(), npInf.Informer()
	enq := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			p.q.Add(key)
		}
	}
	if _, err := p.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enq,
		UpdateFunc: func(o, n any) {
			if o.(*networkingv1.NetworkPolicy).ResourceVersion != n.(*networkingv1.NetworkPolicy).ResourceVersion {
				enq(n)
			}
		},
		DeleteFunc: enq,
	}); err != nil {
		return nil, err
	}
	if _, err := c.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.podChanged(nil, obj) },
		UpdateFunc: func(o, n any) {
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			// Status updates from kubelet change nothing a policy reads.
			if op.UID == np.UID && maps2Equal(op.Labels, np.Labels) && op.Annotations[annotations.IPAddress] == np.Annotations[annotations.IPAddress] &&
				op.Annotations[annotations.Allocated] == np.Annotations[annotations.Allocated] && op.Status.Phase == np.Status.Phase &&
				op.Spec.NodeName == np.Spec.NodeName {
				return
			}
			p.podChanged(o, n)
		},
		DeleteFunc: func(obj any) { p.podChanged(obj, nil) },
	}); err != nil {
		return nil, err
	}
	if _, err := c.factory.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { p.enqueueAll() },
		UpdateFunc: func(o, n any) {
			if !maps2Equal(o.(*corev1.Namespace).Labels, n.(*corev1.Namespace).Labels) {
				p.enqueueAll()
			}
		},
		DeleteFunc: func(any) { p.enqueueAll() },
	}); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *policyController) enqueueAll() {
	for _, k := range p.inf.GetIndexer().ListKeys() {
		p.q.Add(k)
	}
}

// podChanged enqueues the policies the pod's old or new state matters to.
func (p *policyController) podChanged(old, cur any) {
	for _, obj := range []any{old, cur} {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod == nil {
			continue
		}
		var nsLabels map[string]string
		if ns, err := p.c.nss.Get(pod.Namespace); err == nil {
			nsLabels = ns.Labels
		}
		pp := netpol.Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, ContainerPorts: netpol.NamedPorts(pod.Spec.Containers)}
		nps, _ := p.nps.List(everything)
		for _, np := range nps {
			if netpol.Relevant(np, &pp, nsLabels) {
				p.q.Add(np.Namespace + "/" + np.Name)
			}
		}
	}
}

func (p *policyController) start(ctx context.Context, wg *sync.WaitGroup) error {
	nb := p.c.net.NB
	if !nb.MonitorsPortGroups() {
		return errors.New("kube: network policies: the NB connection does not cache Port_Group and ACL; connect with ovnnb.Options.PortGroups")
	}
	// Rows of policies deleted while no controller ran.
	if err := nb.DeletePortGroups(ctx, map[string]string{}, func(ids map[string]string) bool {
		key := ids[keyPolicy]
		if key == "" {
			return true // not a policy's
		}
		_, exists, _ := p.inf.GetIndexer().GetByKey(key)
		return exists
	}); err != nil {
		return fmt.Errorf("collecting port groups of deleted policies: %w", err)
	}
	p.enqueueAll()
	go func() { <-ctx.Done(); p.q.ShutDown() }()
	for i := 0; i < p.workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.c.processNext(ctx, p.q, p.sync, "network policy") {
			}
		}()
	}
	return nil
}

// errPortsPending: selected pods whose logical switch port is not in the
// NB yet (the pod worker creates it); the key is retried with back-off.
var errPortsPending = errors.New("ports not in the northbound database yet")

func (p *policyController) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	nb := p.c.net.NB
	np, err := p.nps.NetworkPolicies(ns).Get(name)
	if apierrors.IsNotFound(err) {
		p.mu.Lock()
		delete(p.invalid, key)
		delete(p.applied, key)
		p.mu.Unlock()
		return nb.DeletePortGroups(ctx, map[string]string{keyPolicy: key}, nil)
	}
	if err != nil {
		return err
	}
	pods, err := p.pods()
	if err != nil {
		return err
	}
	nsObjs, err := p.c.nss.List(everything)
	if err != nil {
		return err
	}
	nss := make([]netpol.Namespace, len(nsObjs))
	for i, n := range nsObjs {
		nss[i] = netpol.Namespace{Name: n.Name, Labels: n.Labels}
	}
	d, err := netpol.Translate(np, pods, nss, netpol.Options{HostCIDRs: p.host})
	var inv *netpol.InvalidError
	if errors.As(err, &inv) {
		// What is in the NB for an earlier version stays; say why once per message.
		p.mu.Lock()
		seen := p.invalid[key] == inv.Msg
		p.invalid[key] = inv.Msg
		p.mu.Unlock()
		if !seen {
			p.c.log.Warn("network policy not applied", "policy", key, "reason", inv.Msg)
			p.c.recorder.Event(np, corev1.EventTypeWarning, "PolicyNotApplied", inv.Msg+"; nothing was changed")
		}
		return nil
	}
	if err != nil {
		return err
	}
	p.mu.Lock()
	delete(p.invalid, key)
	p.mu.Unlock()
	pg := ovnnb.PortGroup{Name: d.PortGroup, ExternalIDs: map[string]string{keyPolicy: key}, Ports: d.Ports}
	for _, a := range d.ACLs {
		pg.ACLs = append(pg.ACLs, ovnnb.ACL{Direction: a.Direction, Priority: a.Priority, Match: a.Match, Action: a.Action,
			Log: a.Log, Name: a.Name, Severity: a.Severity, Options: a.Options})
	}
	for _, s := range d.AddressSets {
		pg.AddressSets = append(pg.AddressSets, ovnnb.AddressSet{Name: s.Name, Addresses: s.Addresses})
	}
	missing, err := nb.EnsurePortGroup(ctx, pg)
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		return fmt.Errorf("policy %s: %w: %s", key, errPortsPending, strings.Join(missing, ", "))
	}
	p.mu.Lock()
	p.applied[key] = time.Now()
	p.mu.Unlock()
	return nil
}

// pods are the pods policies can see: with an address, not host-network,
// not finished.
func (p *policyController) pods() ([]netpol.Pod, error) {
	all, err := p.c.pods.List(everything)
	if err != nil {
		return nil, err
	}
	out := make([]netpol.Pod, 0, len(all))
	for _, pod := range all {
		if pod.Spec.HostNetwork || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			continue
		}
		s := pod.Annotations[annotations.IPAddress]
		if s == "" || pod.Annotations[annotations.Allocated] != "true" {
			continue
		}
		ips, err := ipam.ParseIPs(s)
		if err != nil {
			continue
		}
		out = append(out, netpol.Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, IPs: ips,
			Port: ovnnet.PortName(pod.Namespace, pod.Name), ContainerPorts: netpol.NamedPorts(pod.Spec.Containers)})
	}
	return out, nil
}

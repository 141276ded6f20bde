package netpol

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	netlisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// keyPolicy is the external ID naming the NetworkPolicy ("namespace/name")
// a port group or address set belongs to.
const keyPolicy = ovnnb.KeyPolicy

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Recorder record.EventRecorder
	// Informers holds the shared NetworkPolicy, Pod and Namespace informers.
	Informers informers.SharedInformerFactory
	// NB must cache Port_Group and ACL (ovnnb.Options.PortGroups).
	NB       *ovnnb.Client
	JoinCIDR string // the nodes' join subnet ("" = 100.64.0.0/16): their probes always pass
	// ACLLogRate is the packets per second each logging ACL may send to
	// ovn-controller (meter ovnnb.ACLLogMeter); 0 = ovnnb.DefaultACLLogRate.
	ACLLogRate int
}

// Reconciler enforces NetworkPolicy with OVN port groups, address sets and
// ACLs (Translate computes them). One queue key per policy; pod and
// namespace events enqueue the policies they can affect, and the sync
// writes only the differences, so pod churn becomes port group and address
// set mutations.
type Reconciler struct {
	cfg  Config
	log  *slog.Logger
	nb   *ovnnb.Client
	nps  netlisters.NetworkPolicyLister
	podL corelisters.PodLister
	nss  corelisters.NamespaceLister
	inf  cache.SharedIndexInformer
	q    reconcile.Queue
	host []netip.Prefix

	meterMu sync.Mutex // one worker creates the log meter (its name is unique in the NB)
	mu      sync.Mutex
	invalid map[string]string    // policy -> message of the last event
	applied map[string]time.Time // policy -> last successful sync
	// cluster holds the policies that are not Local: the only ones a pod
	// of another namespace, or a namespace's labels, can matter to.
	cluster map[string]bool
	workers int
}

// New registers the informers' handlers.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.ACLLogRate < 0 {
		return nil, fmt.Errorf("ACL log rate %d: give a positive number of packets per second (0: the default %d)", cfg.ACLLogRate, ovnnb.DefaultACLLogRate)
	}
	if cfg.ACLLogRate == 0 {
		cfg.ACLLogRate = ovnnb.DefaultACLLogRate
	}
	p := &Reconciler{cfg: cfg, log: cfg.Log, nb: cfg.NB, invalid: map[string]string{}, applied: map[string]time.Time{}, cluster: map[string]bool{}, workers: 4,
		podL: cfg.Informers.Core().V1().Pods().Lister(), nss: cfg.Informers.Core().V1().Namespaces().Lister()}
	join := cfg.JoinCIDR
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
	p.q = reconcile.NewQueue("network-policies", 20*time.Millisecond, 10*time.Second)
	npInf := cfg.Informers.Networking().V1().NetworkPolicies()
	p.nps, p.inf = npInf.Lister(), npInf.Informer()
	enq := reconcile.Enqueue(p.q)
	if _, err := p.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.scope(obj, false); enq(obj) },
		UpdateFunc: func(o, n any) {
			if o.(*networkingv1.NetworkPolicy).ResourceVersion != n.(*networkingv1.NetworkPolicy).ResourceVersion {
				p.scope(n, false)
				enq(n)
			}
		},
		DeleteFunc: func(obj any) { p.scope(obj, true); enq(obj) },
	}); err != nil {
		return nil, err
	}
	if _, err := cfg.Informers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.podChanged(nil, obj) },
		UpdateFunc: func(o, n any) {
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			// Status updates from kubelet change nothing a policy reads.
			if op.UID == np.UID && maps.Equal(op.Labels, np.Labels) && op.Annotations[annotations.IPAddress] == np.Annotations[annotations.IPAddress] &&
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
	// Namespaces matter to the policies with a namespaceSelector only (a
	// namespace's pods come and go with their own events).
	if _, err := cfg.Informers.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { p.enqueueCluster() },
		UpdateFunc: func(o, n any) {
			if !maps.Equal(o.(*corev1.Namespace).Labels, n.(*corev1.Namespace).Labels) {
				p.enqueueCluster()
			}
		},
		DeleteFunc: func(any) { p.enqueueCluster() },
	}); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Reconciler) enqueueAll() {
	for _, k := range p.inf.GetIndexer().ListKeys() {
		p.q.Add(k)
	}
}

// scope records whether a policy is Local (gone: forgotten).
func (p *Reconciler) scope(obj any, gone bool) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	np, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok || np == nil {
		return
	}
	key := np.Namespace + "/" + np.Name
	p.mu.Lock()
	defer p.mu.Unlock()
	if gone || Local(np) {
		delete(p.cluster, key)
	} else {
		p.cluster[key] = true
	}
}

// clusterPolicies lists the keys of the policies that are not Local.
func (p *Reconciler) clusterPolicies() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.cluster))
	for k := range p.cluster {
		out = append(out, k)
	}
	return out
}

func (p *Reconciler) enqueueCluster() {
	for _, k := range p.clusterPolicies() {
		p.q.Add(k)
	}
}

// podChanged enqueues the policies the pod's old or new state matters to.
func (p *Reconciler) podChanged(old, cur any) {
	for _, obj := range []any{old, cur} {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = t.Obj
		}
		pod, ok := obj.(*corev1.Pod)
		if !ok || pod == nil {
			continue
		}
		var nsLabels map[string]string
		if ns, err := p.nss.Get(pod.Namespace); err == nil {
			nsLabels = ns.Labels
		}
		pp := Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, ContainerPorts: NamedPorts(pod.Spec.Containers)}
		// The policies of the pod's namespace, and those that reach
		// across namespaces: no other can select or peer it (Local).
		nps, _ := p.nps.NetworkPolicies(pod.Namespace).List(labels.Everything())
		for _, key := range p.clusterPolicies() {
			ns, name, _ := cache.SplitMetaNamespaceKey(key)
			if ns == pod.Namespace {
				continue // listed above
			}
			if np, err := p.nps.NetworkPolicies(ns).Get(name); err == nil {
				nps = append(nps, np)
			}
		}
		for _, np := range nps {
			if Relevant(np, &pp, nsLabels) {
				p.q.Add(np.Namespace + "/" + np.Name)
			}
		}
	}
}

// ShutDown stops the queue.
func (p *Reconciler) ShutDown() { p.q.ShutDown() }

// Start removes the rows of policies deleted while no controller ran and
// starts the workers.
func (p *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	nb := p.nb
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
	reconcile.ShutDownWith(ctx, wg, p.q)
	reconcile.Workers(ctx, wg, p.log, p.workers, p.q, p.sync, "network policy")
	return nil
}

// errPortsPending: selected pods whose logical switch port is not in the
// NB yet (the pod worker creates it); the key is retried with back-off.
var errPortsPending = errors.New("ports not in the northbound database yet")

func (p *Reconciler) sync(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	nb := p.nb
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
	// A Local policy reads its own namespace's pods only: its sync costs
	// what that namespace holds, not what the cluster holds.
	podNS := ""
	if Local(np) {
		podNS = ns
	}
	pods, err := p.pods(podNS)
	if err != nil {
		return err
	}
	nsObjs, err := p.nss.List(labels.Everything())
	if err != nil {
		return err
	}
	nss := make([]Namespace, len(nsObjs))
	for i, n := range nsObjs {
		nss[i] = Namespace{Name: n.Name, Labels: n.Labels}
	}
	d, err := Translate(np, pods, nss, Options{HostCIDRs: p.host})
	var inv *InvalidError
	if errors.As(err, &inv) {
		// What is in the NB for an earlier version stays; say why once per message.
		p.mu.Lock()
		seen := p.invalid[key] == inv.Msg
		p.invalid[key] = inv.Msg
		p.mu.Unlock()
		if !seen {
			p.log.Warn("network policy not applied", "policy", key, "reason", inv.Msg)
			p.cfg.Recorder.Event(np, corev1.EventTypeWarning, "PolicyNotApplied", inv.Msg+"; nothing was changed")
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
	logs := false
	for _, a := range d.ACLs {
		acl := ovnnb.ACL{Direction: a.Direction, Priority: a.Priority, Match: a.Match, Action: a.Action,
			Log: a.Log, Name: a.Name, Severity: a.Severity, Options: a.Options}
		if a.Log {
			// Logged packets reach ovn-controller only within the meter's rate:
			// a tenant logging a flood of drops cannot flood it.
			acl.Meter, logs = ovnnb.ACLLogMeter, true
		}
		pg.ACLs = append(pg.ACLs, acl)
	}
	if logs {
		// From the cache: no transaction when the meter is already so.
		p.meterMu.Lock()
		err := nb.EnsureMeter(ctx, p.logMeter())
		p.meterMu.Unlock()
		if err != nil {
			return fmt.Errorf("policy %s: ACL log meter: %w", key, err)
		}
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
// not finished; those of one namespace, or of all when namespace is "".
func (p *Reconciler) pods(namespace string) ([]Pod, error) {
	var all []*corev1.Pod
	var err error
	if namespace != "" {
		all, err = p.podL.Pods(namespace).List(labels.Everything())
	} else {
		all, err = p.podL.List(labels.Everything())
	}
	if err != nil {
		return nil, err
	}
	out := make([]Pod, 0, len(all))
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
		out = append(out, Pod{Namespace: pod.Namespace, Name: pod.Name, Labels: pod.Labels, IPs: ips,
			Port: ovnnet.PortName(pod.Namespace, pod.Name), ContainerPorts: NamedPorts(pod.Spec.Containers)})
	}
	return out, nil
}

// logMeter is the meter of the logging ACLs: a drop band at the configured
// rate, one second's worth of burst, fair (each ACL its own rate).
func (p *Reconciler) logMeter() ovnnb.Meter {
	return ovnnb.Meter{Name: ovnnb.ACLLogMeter, Unit: "pktps", Rate: p.cfg.ACLLogRate, Burst: p.cfg.ACLLogRate, Fair: true}
}

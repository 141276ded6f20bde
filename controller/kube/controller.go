// Package kube is the Kubernetes side of ovnhost-controller: client-go
// informers on Pods, Nodes, Namespaces and Subnets drive the ovnnet library
// (IPAM + OVN northbound), write Kube-OVN annotations, Subnet status and
// events, with leader election and /healthz, /readyz, /metrics.
//
// Start-up order: connect to the NB, make sure the default Subnets exist,
// sync the informer caches, program every Subnet, rebuild the IPAM from the
// pod and node annotations (oldest pod first, so an older holder keeps a
// contested address), garbage-collect ports whose pod or node is gone, then
// start the workers. /readyz turns 200 only after that.
package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/netpol"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Config configures the controller.
type Config struct {
	Rest        *rest.Config
	NBEndpoints string // OVN NB, e.g. "tcp:10.0.0.1:6641" (from OVN_DB_IPS)
	DefaultCIDR string // default subnet CIDR, "" = 10.16.0.0/16
	DefaultGW   string // "" = first address
	DefaultExcl []string
	JoinCIDR    string // "" = 100.64.0.0/16
	Workers     int    // pod workers, default 32
	Logger      *slog.Logger
	Registry    prometheus.Registerer // nil = a private registry
	// StatusDelay batches Subnet status writes (default 500ms).
	StatusDelay time.Duration
	// ServiceCIDRs are the cluster's Service ranges (--service-cluster-ip-range,
	// default 10.96.0.0/12): never routed out, and where ClusterIPs live.
	ServiceCIDRs []netip.Prefix
	// EnableLB programs Services as OVN load balancers (Kube-OVN's --enable-lb).
	EnableLB bool
	// EnableNP enforces NetworkPolicy with OVN ACLs (Kube-OVN's --enable-np).
	EnableNP bool
}

// addon is a part of the controller with its own informers and workers
// (Services, NetworkPolicy). Its constructor registers informers on the
// shared factories in New; start runs once caches are synced and the
// topology is programmed, and its workers end when ctx does (tracked by wg).
type addon interface {
	start(ctx context.Context, wg *sync.WaitGroup) error
}

// Controller is one running controller (the leader's work).
type Controller struct {
	cfg Config
	log *slog.Logger
	kc  kubernetes.Interface
	dc  dynamic.Interface
	net *ovnnet.Network

	factory   informers.SharedInformerFactory
	dfactory  dynamicinformer.DynamicSharedInformerFactory
	pods      corelisters.PodLister
	nodes     corelisters.NodeLister
	nss       corelisters.NamespaceLister
	subnetInf cache.SharedIndexInformer
	ipInf     cache.SharedIndexInformer // nil without the ips.kubeovn.io CRD

	podQ, nodeQ, subnetQ, statusQ workqueue.TypedRateLimitingInterface[string]
	// ipQ: IP objects to bring in line ("pod/<ns>/<name>", "node/<name>"),
	// written off the pods' path so they cost pods no latency.
	ipQ         workqueue.TypedRateLimitingInterface[string]
	recorder    record.EventRecorder
	broadcaster record.EventBroadcaster

	mu       sync.Mutex
	valid    map[string]*kubeovnv1.Subnet    // programmed subnets
	problems map[string]*kubeovnv1.Problem   // invalid subnets
	waiting  map[string]map[string]ipam.Kind // subnet -> pod key -> why it waits
	// notApplied: valid subnet -> NotAppliedMessage of the fields it asks for
	// but the controller does not program ("" for none); the last one announced
	// with an AcceptedNotApplied event.
	notApplied map[string]string
	// gateways: centralized subnet -> its GatewayReady condition.
	gateways map[string]*kubeovnv1.Condition
	// deleting: Subnet marked for deletion -> why it still waits (its users).
	deleting map[string]string
	// statusWritten: Subnet -> fingerprint of the status this process last
	// patched. The informer may still show the status before that patch; a
	// status computed right after would look unchanged against the cache and
	// be skipped, leaving the older patch on the server.
	statusWritten map[string]string
	// gwRank: centralized subnet -> the HA group order last programmed.
	gwRank map[string]gatewayRanking

	ready atomic.Bool
	m     *metrics

	addons []addon
}

// New builds a controller; Run starts it.
func New(cfg Config, nb *ovnnb.Client) (*Controller, error) {
	if cfg.Rest == nil {
		return nil, errors.New("kube: no Kubernetes client configuration")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.StatusDelay == 0 {
		cfg.StatusDelay = 500 * time.Millisecond
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	rc := rest.CopyConfig(cfg.Rest)
	rc.ContentType = "application/vnd.kubernetes.protobuf"
	rc.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dc, err := dynamic.NewForConfig(cfg.Rest)
	if err != nil {
		return nil, err
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, kc: kc, dc: dc, net: ovnnet.New(nb, ovnnet.Config{ServiceCIDRs: cfg.ServiceCIDRs}),
		valid: map[string]*kubeovnv1.Subnet{}, problems: map[string]*kubeovnv1.Problem{}, waiting: map[string]map[string]ipam.Kind{},
		notApplied: map[string]string{}, gateways: map[string]*kubeovnv1.Condition{}, deleting: map[string]string{}, statusWritten: map[string]string{}, gwRank: map[string]gatewayRanking{}}
	c.m = newMetrics(cfg.Registry, nb)
	rl := func() workqueue.TypedRateLimiter[string] {
		return workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second)
	}
	c.podQ = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "pods"})
	c.nodeQ = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "nodes"})
	c.subnetQ = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "subnets"})
	c.statusQ = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "subnet-status"})
	c.ipQ = workqueue.NewTypedRateLimitingQueueWithConfig(rl(), workqueue.TypedRateLimitingQueueConfig[string]{Name: "ips"})

	c.factory = informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTransform(slimPod))
	podInf := c.factory.Core().V1().Pods()
	nodeInf := c.factory.Core().V1().Nodes()
	nsInf := c.factory.Core().V1().Namespaces()
	c.pods, c.nodes, c.nss = podInf.Lister(), nodeInf.Lister(), nsInf.Lister()
	c.dfactory = dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)
	c.subnetInf = c.dfactory.ForResource(kubeovnv1.SubnetGVR).Informer()
	if rl, err := kc.Discovery().ServerResourcesForGroupVersion(kubeovnv1.GroupVersion.String()); err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == "ips" }) {
		c.ipInf = c.dfactory.ForResource(kubeovnv1.IPGVR).Informer()
	} else {
		cfg.Logger.Warn("IP objects (ips.kubeovn.io) are not written: the CRD is not installed; apply packaging/kubernetes/base/crd-ips.yaml and restart")
	}

	enqueue := func(q workqueue.TypedRateLimitingInterface[string]) func(any) {
		return func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				q.Add(key)
			}
		}
	}
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue(c.podQ),
		UpdateFunc: func(o, n any) {
			// kubelet status updates (10k pods: many per second) change nothing we read.
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			if op.UID != np.UID || op.Spec.NodeName != np.Spec.NodeName || op.Status.Phase != np.Status.Phase ||
				!maps2Equal(op.Annotations, np.Annotations) || (op.DeletionTimestamp == nil) != (np.DeletionTimestamp == nil) {
				enqueue(c.podQ)(n)
			}
		},
		DeleteFunc: enqueue(c.podQ),
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue(c.nodeQ),
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Node), n.(*corev1.Node)
			// Readiness too: a NotReady gateway node leaves its subnets' HA groups.
			if !slices.Equal(on.Status.Addresses, nn.Status.Addresses) || !maps2Equal(on.Annotations, nn.Annotations) || readyOf(on) != readyOf(nn) {
				enqueue(c.nodeQ)(n)
			}
		},
		DeleteFunc: enqueue(c.nodeQ),
	}); err != nil {
		return nil, err
	}
	if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A namespace now pointing at another subnet: pods still without an address try again.
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Namespace), n.(*corev1.Namespace)
			// Labels too: Subnets may pick namespaces by namespaceSelectors.
			if on.Annotations[annotations.LogicalSwitch] == nn.Annotations[annotations.LogicalSwitch] && maps2Equal(on.Labels, nn.Labels) {
				return
			}
			pods, _ := c.pods.Pods(nn.Name).List(everything)
			for _, p := range pods {
				if p.Annotations[annotations.Allocated] != "true" {
					c.podQ.Add(p.Namespace + "/" + p.Name)
				}
			}
		},
	}); err != nil {
		return nil, err
	}
	if _, err := c.subnetInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue(c.subnetQ),
		UpdateFunc: func(o, n any) {
			// Status writes come back as updates: only spec changes matter,
			// deletion and finalizers (Subnet deletion), and for centralized
			// gateways which node is active and whether traffic should go
			// back to the first (the ranking follows them).
			ou, nu := o.(*unstructured.Unstructured), n.(*unstructured.Unstructured)
			oa, _, _ := unstructured.NestedString(ou.Object, "status", "activateGateway")
			na, _, _ := unstructured.NestedString(nu.Object, "status", "activateGateway")
			if ou.GetGeneration() != nu.GetGeneration() || oa != na ||
				ou.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] != nu.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] ||
				(ou.GetDeletionTimestamp() == nil) != (nu.GetDeletionTimestamp() == nil) || !slices.Equal(ou.GetFinalizers(), nu.GetFinalizers()) {
				enqueue(c.subnetQ)(n)
			}
		},
		DeleteFunc: enqueue(c.subnetQ),
	}); err != nil {
		return nil, err
	}
	c.broadcaster = record.NewBroadcaster()
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ovnhost-controller"})
	if cfg.EnableLB {
		a, err := newServiceController(c)
		if err != nil {
			return nil, fmt.Errorf("kube: services: %w", err)
		}
		c.addons = append(c.addons, a)
	}
	if cfg.EnableNP {
		a, err := newPolicyController(c)
		if err != nil {
			return nil, fmt.Errorf("kube: network policies: %w", err)
		}
		c.addons = append(c.addons, a)
	}
	// EIP/SNAT (ovn-external-gw-config): idle while the ConfigMap is absent.
	ext, err := newExternalGateway(c)
	if err != nil {
		return nil, fmt.Errorf("kube: external gateway: %w", err)
	}
	c.addons = append(c.addons, ext)
	return c, nil
}

func maps2Equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if bv, ok := b[k]; !ok || bv != v {
			return false
		}
	}
	return true
}

// slimPod keeps only what the controller reads, so 10k pods cost little memory.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	s := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, Annotations: p.Annotations, CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase},
	}
	// ip_pool: a StatefulSet pod takes the pool entry of its ordinal.
	if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "StatefulSet" {
		s.OwnerReferences = []metav1.OwnerReference{*ref}
	}
	// NetworkPolicy reads labels and the named container ports (only those).
	if ports := netpol.NamedPorts(p.Spec.Containers); len(ports) > 0 {
		s.Spec.Containers = []corev1.Container{{Ports: ports}}
	}
	return s, nil
}

// Ready reports whether start-up finished and the NB is connected.
func (c *Controller) Ready() bool { return c.ready.Load() && c.net.NB.Connected() }

// Network exposes the library state (tests, diagnostics).
func (c *Controller) Network() *ovnnet.Network { return c.net }

// Run starts informers and workers and blocks until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: c.kc.CoreV1().Events("")})
	defer c.broadcaster.Shutdown()
	defer c.podQ.ShutDown()
	defer c.nodeQ.ShutDown()
	defer c.subnetQ.ShutDown()
	defer c.statusQ.ShutDown()
	defer c.ipQ.ShutDown()

	t0 := time.Now()
	if err := c.ensureDefaultSubnets(ctx); err != nil {
		return err
	}
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("kube: informer cache for %v did not sync", typ)
		}
	}
	for typ, ok := range c.dfactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("kube: informer cache for %v did not sync (is the Subnet CRD installed? apply packaging/kubernetes/base/crd-subnets.yaml)", typ)
		}
	}
	tSynced := time.Now()
	if err := c.net.EnsureRouter(ctx); err != nil {
		return err
	}
	// Program subnets synchronously: pods need them.
	names := []string{}
	for _, k := range c.subnetInf.GetIndexer().ListKeys() {
		names = append(names, k)
	}
	sort.Slice(names, func(i, j int) bool {
		return subnetOrder(names[i]) < subnetOrder(names[j]) || (subnetOrder(names[i]) == subnetOrder(names[j]) && names[i] < names[j])
	})
	for _, n := range names {
		if err := c.syncSubnet(ctx, n); err != nil {
			return fmt.Errorf("kube: programming subnet %q: %w", n, err)
		}
	}
	if err := c.collectGateways(ctx); err != nil {
		return fmt.Errorf("kube: removing gateways of deleted subnets: %w", err)
	}
	tRebuild := time.Now()
	npods, err := c.rebuild(ctx)
	if err != nil {
		return err
	}
	rebuildDur := time.Since(tRebuild)
	c.m.rebuild.Set(rebuildDur.Seconds())
	deleted, err := c.net.GarbageCollect(ctx, c.keepPort)
	if err != nil {
		return fmt.Errorf("kube: garbage-collecting ports: %w", err)
	}
	ipsDeleted, err := c.collectIPs(ctx)
	if err != nil {
		return fmt.Errorf("kube: garbage-collecting IP objects: %w", err)
	}
	c.log.Info("controller ready", "caches_synced", tSynced.Sub(t0).Round(time.Millisecond).String(),
		"ipam_rebuild", rebuildDur.Round(time.Millisecond).String(), "pods_restored", npods,
		"ports_collected", len(deleted), "ips_collected", ipsDeleted, "startup", time.Since(t0).Round(time.Millisecond).String())
	if len(deleted) > 0 {
		c.log.Info("garbage-collected ports whose pod or node is gone", "ports", deleted)
	}
	if foreign := c.net.NB.ForeignRows(ovnnb.KubeOVNVendor); len(foreign) > 0 {
		// After a migration: what kube-ovn-controller made for features
		// ovnhost does not manage stays, and is named once here.
		for table, rows := range foreign {
			shown := rows
			if len(shown) > 10 {
				shown = shown[:10]
			}
			c.log.Info("left in place: northbound rows made by Kube-OVN that ovnhost does not manage", "table", table, "count", len(rows), "rows", shown)
		}
	}
	c.ready.Store(true)
	for _, n := range names {
		c.statusQ.Add(n)
		if c.subnetDeleting(n) {
			// Decided now that the IPAM holds every recorded address.
			c.subnetQ.Add(n)
		}
	}
	defer c.ready.Store(false)

	var wg sync.WaitGroup
	run := func(n int, q workqueue.TypedRateLimitingInterface[string], f func(context.Context, string) error, what string) {
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for c.processNext(ctx, q, f, what) {
				}
			}()
		}
	}
	run(c.cfg.Workers, c.podQ, c.syncPod, "pod")
	run(2, c.nodeQ, c.syncNode, "node")
	run(1, c.subnetQ, c.syncSubnet, "subnet")
	run(1, c.statusQ, c.syncStatus, "subnet status")
	if c.ipInf != nil {
		run(4, c.ipQ, c.syncIP, "IP object")
	}
	for _, a := range c.addons {
		if err := a.start(ctx, &wg); err != nil {
			return err
		}
	}
	<-ctx.Done()
	c.podQ.ShutDown()
	c.nodeQ.ShutDown()
	c.subnetQ.ShutDown()
	c.statusQ.ShutDown()
	c.ipQ.ShutDown()
	wg.Wait()
	return nil
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

func (c *Controller) processNext(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], f func(context.Context, string) error, what string) bool {
	key, quit := q.Get()
	if quit {
		return false
	}
	defer q.Done(key)
	if err := f(ctx, key); err != nil {
		if ctx.Err() != nil {
			return false
		}
		c.log.Warn("sync failed, will retry", "kind", what, "key", key, "error", err)
		q.AddRateLimited(key)
		return true
	}
	q.Forget(key)
	return true
}

// ensureDefaultSubnets creates the Subnets join and ovn-default if absent.
func (c *Controller) ensureDefaultSubnets(ctx context.Context) error {
	def := c.cfg.DefaultCIDR
	if def == "" {
		def = ovnnet.DefaultSubnetCIDR
	}
	join := c.cfg.JoinCIDR
	if join == "" {
		join = ovnnet.JoinSubnetCIDR
	}
	excl := []any{}
	for _, e := range c.cfg.DefaultExcl {
		excl = append(excl, e)
	}
	defSpec := map[string]any{"default": true, "protocol": "IPv4", "cidrBlock": def, "natOutgoing": true, "gatewayType": "distributed", "provider": "ovn", "excludeIps": excl}
	if c.cfg.DefaultGW != "" {
		defSpec["gateway"] = c.cfg.DefaultGW
	}
	for _, s := range []struct {
		name string
		spec map[string]any
	}{
		{ovnnet.JoinSubnet, map[string]any{"protocol": "IPv4", "cidrBlock": join, "gatewayType": "distributed", "provider": "ovn"}},
		{ovnnet.DefaultSubnet, defSpec},
	} {
		if strings.Contains(s.spec["cidrBlock"].(string), ":") {
			s.spec["protocol"] = "IPv6"
			if strings.Contains(s.spec["cidrBlock"].(string), ",") {
				s.spec["protocol"] = "Dual"
			}
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "kubeovn.io/v1", "kind": "Subnet",
			"metadata": map[string]any{"name": s.name}, "spec": s.spec}}
		_, err := c.dc.Resource(kubeovnv1.SubnetGVR).Create(ctx, u, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("kube: creating Subnet %q: the Subnet CRD is not installed; apply packaging/kubernetes/base/crd-subnets.yaml: %w", s.name, err)
			}
			return fmt.Errorf("kube: creating Subnet %q: %w", s.name, err)
		}
	}
	return nil
}

// rebuild re-claims every recorded address: pods oldest first, then nodes.
// Pods whose record conflicts are queued and get a new address.
func (c *Controller) rebuild(ctx context.Context) (int, error) {
	pods, err := c.pods.List(everything)
	if err != nil {
		return 0, err
	}
	sort.Slice(pods, func(i, j int) bool {
		ti, tj := pods[i].CreationTimestamp, pods[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return pods[i].Namespace+"/"+pods[i].Name < pods[j].Namespace+"/"+pods[j].Name
	})
	// Ports written before a crash whose annotation never landed: their
	// addresses are claimed too, so nobody else gets them meanwhile.
	ports, err := c.net.NB.Ports(ctx, nil)
	if err != nil {
		return 0, err
	}
	portOf := make(map[string]ovnnb.Port, len(ports))
	for _, p := range ports {
		if o := p.ExternalIDs[ovnnb.KeyPod]; o != "" {
			portOf[o] = p
		}
	}
	n := 0
	for _, p := range pods {
		if !wantsAddress(p) {
			continue
		}
		owner := ovnnet.PodOwner(p.Namespace, p.Name)
		a := p.Annotations
		if a[annotations.Allocated] == "true" && a[annotations.IPAddress] != "" {
			ips, err := ipam.ParseIPs(a[annotations.IPAddress])
			if err == nil {
				_, err = c.net.Restore(owner, a[annotations.LogicalSwitch], ips, a[annotations.MACAddress])
			}
			if err != nil {
				c.log.Warn("recorded pod address not restored; the pod gets a new one", "pod", owner, "error", err)
			} else {
				n++
			}
			continue
		}
		if port, ok := portOf[owner]; ok && port.Switch != "" && port.Switch != ovnnet.JoinSubnet {
			_, _ = c.net.Restore(owner, port.Switch, port.IPs, port.MAC)
		}
	}
	nodes, err := c.nodes.List(everything)
	if err != nil {
		return n, err
	}
	for _, nd := range nodes {
		a := nd.Annotations
		if ips, err := ipam.ParseIPs(a[annotations.IPAddress]); err == nil {
			if _, err := c.net.Restore(ovnnet.NodeOwner(nd.Name), ovnnet.JoinSubnet, ips, a[annotations.MACAddress]); err != nil {
				c.log.Warn("recorded node address not restored; the node gets a new one", "node", nd.Name, "error", err)
			}
		}
	}
	return n, nil
}

// unimplemented lists (sorted, comma-separated) the pod's annotations that
// ovnhost does not implement.
func unimplemented(p *corev1.Pod) string {
	var out []string
	for _, k := range annotations.Unimplemented {
		if _, ok := p.Annotations[k]; ok {
			out = append(out, k)
		}
	}
	// port_security "true" is what every ovnhost port has; "false" would
	// let the pod send from any address, and its author is not trusted.
	if p.Annotations[annotations.PortSecurity] == "false" {
		out = append(out, annotations.PortSecurity)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

// statefulSetOrdinal is a StatefulSet pod's ordinal (the number after the
// last "-" of its name), else -1: Kube-OVN gives such a pod the ip_pool
// entry of that index, other pods the first free one.
func statefulSetOrdinal(p *corev1.Pod) int {
	ref := metav1.GetControllerOf(p)
	if ref == nil || ref.Kind != "StatefulSet" {
		return -1
	}
	i := strings.LastIndex(p.Name, "-")
	n, err := strconv.Atoi(p.Name[i+1:])
	if err != nil || n < 0 {
		return -1
	}
	return n
}

// nodeOfPortName is the node whose join port is (or would be) named port,
// if that node exists: a pod port "node-<x>" equals node <x>'s. A pod that
// holds the port already (it came first; the node took AltNodePortName)
// keeps it: then "".
func (c *Controller) nodeOfPortName(ctx context.Context, port, owner string) string {
	rest, ok := strings.CutPrefix(port, "node-")
	if !ok {
		return ""
	}
	if _, err := c.nodes.Get(rest); err != nil {
		return ""
	}
	if p, ok, err := c.net.NB.GetPort(ctx, port); err == nil && ok && ovnnb.OwnerOf(p.ExternalIDs) == owner {
		return ""
	}
	return rest
}

func wantsAddress(p *corev1.Pod) bool {
	return !p.Spec.HostNetwork && p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// keepPort says whether a port's pod or node still exists.
func (c *Controller) keepPort(p ovnnb.Port) bool {
	owner := p.ExternalIDs[ovnnb.KeyPod]
	if node := p.ExternalIDs[ovnnb.KeyNode]; node != "" && owner == "" {
		_, err := c.nodes.Get(node)
		return !apierrors.IsNotFound(err)
	}
	if owner == "" {
		return true
	}
	ns, name, _ := strings.Cut(owner, "/")
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return false
	}
	return err != nil || wantsAddress(pod)
}

// subnetForPod: pod annotation, namespace annotation, a Subnet listing the namespace, the default.
func (c *Controller) subnetForPod(p *corev1.Pod) string {
	if s := p.Annotations[annotations.LogicalSwitch]; s != "" {
		return s
	}
	var nsLabels labels.Set
	if ns, err := c.nss.Get(p.Namespace); err == nil {
		if s := ns.Annotations[annotations.LogicalSwitch]; s != "" {
			return s
		}
		nsLabels = ns.Labels
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	def := ovnnet.DefaultSubnet
	names := make([]string, 0, len(c.valid))
	for n := range c.valid {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		s := c.valid[n]
		if slices.Contains(s.Spec.Namespaces, p.Namespace) {
			return n
		}
		for i := range s.Spec.NamespaceSelectors {
			if sel, err := metav1.LabelSelectorAsSelector(&s.Spec.NamespaceSelectors[i]); err == nil && nsLabels != nil && sel.Matches(nsLabels) {
				return n
			}
		}
		// A user Subnet marked default wins over ovn-default (which the controller creates as default).
		if s.Spec.Default && n != ovnnet.JoinSubnet && n != ovnnet.DefaultSubnet {
			def = n
		}
	}
	// A Subnet that lists the namespace but is not programmed yet (created
	// with the namespace and its pods in one apply): the pod waits for it
	// (woken when it is valid) instead of taking a default address for good.
	for _, obj := range c.subnetInf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		n := u.GetName()
		if _, valid := c.valid[n]; valid {
			continue
		}
		if _, invalid := c.problems[n]; invalid {
			continue
		}
		if nss, _, _ := unstructured.NestedStringSlice(u.Object, "spec", "namespaces"); slices.Contains(nss, p.Namespace) {
			return n
		}
	}
	return def
}

func (c *Controller) wait(subnet, key string, k ipam.Kind) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.waiting[subnet] == nil {
		c.waiting[subnet] = map[string]ipam.Kind{}
	}
	c.waiting[subnet][key] = k
}

func (c *Controller) unwait(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for s, m := range c.waiting {
		if k, ok := m[key]; ok {
			delete(m, key)
			if k == ipam.KindExhausted {
				c.statusQ.AddAfter(s, c.cfg.StatusDelay)
			}
		}
	}
}

// wake requeues the pods waiting on a subnet (an address was freed, the subnet appeared).
func (c *Controller) wake(subnet string) {
	c.mu.Lock()
	m := c.waiting[subnet]
	delete(c.waiting, subnet)
	c.mu.Unlock()
	for k := range m {
		c.podQ.Add(k)
	}
}

func (c *Controller) syncPod(ctx context.Context, key string) error {
	t0 := time.Now()
	defer func() { c.m.podSync.Observe(time.Since(t0).Seconds()) }()
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	pod, err := c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		c.unwait(key)
		return c.releasePod(ctx, ns, name)
	}
	if err != nil {
		return err
	}
	if pod.Spec.HostNetwork || pod.Spec.NodeName == "" {
		return nil
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		c.unwait(key)
		return c.releasePod(ctx, ns, name)
	}
	ann := pod.Annotations
	owner := ovnnet.PodOwner(ns, name)
	recorded := ann[annotations.Allocated] == "true" && ann[annotations.IPAddress] != ""
	var ips []netip.Addr
	if s := ann[annotations.IPAddress]; s != "" {
		ips, err = ipam.ParseIPs(s)
		if err != nil {
			c.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: %v", annotations.IPAddress, s, err))
			return nil
		}
	}
	req := ovnnet.PodRequest{Namespace: ns, Name: name, Subnet: c.subnetForPod(pod), IPs: ips, MAC: ann[annotations.MACAddress], Node: pod.Spec.NodeName, PoolIndex: -1}
	if req.Subnet == ovnnet.JoinSubnet {
		// join holds the nodes' own ports (ovn0): a pod there would sit
		// among them and take their addresses.
		c.fail(pod, "", "SubnetNotAllowed", fmt.Sprintf("subnet %q is the nodes' join subnet; pods cannot use it: remove or change the %s annotation of the pod (or of its namespace)", ovnnet.JoinSubnet, annotations.LogicalSwitch))
		return nil
	}
	if v := ann[annotations.PortSecurity]; v != "" && v != "true" && v != "false" {
		c.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: not true or false", annotations.PortSecurity, v))
		return nil
	}
	if v := ann[annotations.IPPool]; v != "" && len(ips) == 0 {
		pool, err := ipam.ParsePool(v)
		if err != nil {
			c.fail(pod, "", ipam.KindInvalid, fmt.Sprintf("annotation %s=%q: %s", annotations.IPPool, v, ipamMessage(err)))
			return nil
		}
		req.Pool = pool
		req.PoolIndex = statefulSetOrdinal(pod)
	}
	notImpl := unimplemented(pod)
	if notImpl != ann[annotations.NotImplemented] && notImpl != "" {
		// Once per pod and change of the set (the set is recorded on the pod).
		msg := fmt.Sprintf("ovnhost does not implement %s: ignored, the pod is wired without it", strings.ReplaceAll(notImpl, ",", ", "))
		if strings.Contains(notImpl, annotations.PortSecurity) {
			msg += `; port_security "false" is not applied: ovnhost's ports always have port security (Kube-OVN's "true"), the pod sends only from its own MAC and addresses`
		}
		c.recorder.Event(pod, corev1.EventTypeWarning, "AnnotationNotImplemented", msg)
	}
	if node := c.nodeOfPortName(ctx, ovnnet.PortName(ns, name), ovnnb.PodPortOwner(ns, name)); node != "" {
		c.fail(pod, "", "PortNameCollision", fmt.Sprintf("the pod's logical switch port name %s is node %s's join port; rename the pod (no pod may be named node-<x> in a namespace that makes <x>.<namespace> a node name)",
			ovnnet.PortName(ns, name), node))
		return nil
	}
	if c.subnetDeleting(req.Subnet) {
		if held, ok := c.net.IPAM.Lookup(owner); !ok || held.Subnet != req.Subnet {
			c.fail(pod, "", "SubnetTerminating", fmt.Sprintf("subnet %q is being deleted; it hands out no new addresses: choose another subnet", req.Subnet))
			return nil
		}
	}
	c.mu.Lock()
	prob := c.problems[req.Subnet]
	c.mu.Unlock()
	if prob != nil {
		c.fail(pod, req.Subnet, "SubnetNotValid", fmt.Sprintf("subnet %q is not valid (%s: %s); fix the Subnet and the pod gets its address", req.Subnet, prob.Reason, prob.Message))
		return nil
	}
	a, err := c.net.AddPod(ctx, req)
	if err != nil && recorded && ipam.KindOf(err) != "" {
		// The recorded address is not this pod's to keep (another pod holds
		// it, or the subnet changed): give it a new one, say so.
		if held, ok := c.net.IPAM.Lookup(owner); !ok || held.IPString() != ann[annotations.IPAddress] {
			c.recorder.Eventf(pod, corev1.EventTypeWarning, "AddressReassigned",
				"recorded address %s cannot be kept (%v); allocating a new one", ann[annotations.IPAddress], err)
			req.IPs, req.MAC = nil, ""
			a, err = c.net.AddPod(ctx, req)
		}
	}
	if err != nil {
		if k := ipam.KindOf(err); k != "" {
			c.fail(pod, req.Subnet, k, ipamMessage(err))
			return nil
		}
		if errors.Is(err, ovnnb.ErrNoSwitch) {
			c.fail(pod, req.Subnet, ipam.KindUnknownSubnet, err.Error())
			return nil
		}
		if errors.Is(err, ovnnb.ErrNotOwner) {
			c.fail(pod, "", "PortNameCollision", err.Error()+"; rename the pod")
			return nil
		}
		return err
	}
	c.unwait(key)
	want := map[string]string{
		annotations.Allocated: "true", annotations.IPAddress: a.IPString(), annotations.MACAddress: a.MAC,
		annotations.CIDR: a.CIDR, annotations.Gateway: a.Gateway, annotations.LogicalSwitch: a.Subnet, annotations.Routed: "true",
	}
	if mtu := c.subnetMTU(a.Subnet); mtu > 0 {
		want[annotations.MTU] = strconv.Itoa(mtu)
	}
	if notImpl != "" {
		want[annotations.NotImplemented] = notImpl
	}
	same := true
	for k, v := range want {
		if ann[k] != v {
			same = false
			break
		}
	}
	if notImpl == "" && ann[annotations.NotImplemented] != "" {
		same = false
	}
	if same {
		c.queueIP("pod/" + key)
		return nil
	}
	// Server-side apply: the controller's field manager then owns every
	// key it confirms, also the values a user set before (static address,
	// chosen subnet), which a merge patch that changes nothing would leave
	// with the user. The node honours only keys the controller owns
	// (cni/README.md, Trust). A key the controller applied before and now
	// leaves out (NotImplemented once nothing is) is removed by the apply.
	// The uid makes a replaced pod's apply invalid.
	patch, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns, "uid": pod.UID, "annotations": want}})
	force := true
	_, err = c.kc.CoreV1().Pods(ns).Patch(ctx, name, types.ApplyPatchType, patch, metav1.PatchOptions{FieldManager: annotations.ControllerFieldManager, Force: &force})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) || apierrors.IsInvalid(err) {
		// Gone or replaced: the next event for the key decides.
		return nil
	}
	if err != nil {
		return fmt.Errorf("annotating pod %s: %w", key, err)
	}
	c.m.allocated.Inc()
	c.statusQ.AddAfter(a.Subnet, c.cfg.StatusDelay)
	c.queueIP("pod/" + key)
	return nil
}

// ipamMessage is an IPAM error without its kind prefix (the event reason carries it).
func ipamMessage(err error) string {
	var ie *ipam.Error
	if errors.As(err, &ie) {
		return ie.Msg
	}
	return err.Error()
}

// fail records why a pod got no address: an event on the pod, a metric,
// and (for exhaustion and conflicts) a wait on the subnet until an address is freed.
func (c *Controller) fail(pod *corev1.Pod, subnet string, k ipam.Kind, msg string) {
	c.m.failures.WithLabelValues(string(k)).Inc()
	c.recorder.Event(pod, corev1.EventTypeWarning, string(k), msg)
	key := pod.Namespace + "/" + pod.Name
	if subnet != "" {
		c.wait(subnet, key, k)
		if k == ipam.KindExhausted {
			c.statusQ.AddAfter(subnet, c.cfg.StatusDelay)
		}
	}
}

func (c *Controller) releasePod(ctx context.Context, ns, name string) error {
	owner := ovnnet.PodOwner(ns, name)
	a, had := c.net.IPAM.Lookup(owner)
	if err := c.net.DeletePod(ctx, ns, name); err != nil {
		return err
	}
	c.queueIP("pod/" + ns + "/" + name)
	if had {
		c.statusQ.AddAfter(a.Subnet, c.cfg.StatusDelay)
		c.wake(a.Subnet)
		if c.subnetDeleting(a.Subnet) {
			c.subnetQ.Add(a.Subnet)
		}
	}
	return nil
}

func (c *Controller) syncNode(ctx context.Context, name string) error {
	defer c.requeueGateways(name)
	node, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		a, had := c.net.IPAM.Lookup(ovnnet.NodeOwner(name))
		if err := c.net.DeleteNode(ctx, name); err != nil {
			return err
		}
		c.queueIP("node/" + name)
		if had {
			c.statusQ.AddAfter(a.Subnet, c.cfg.StatusDelay)
		}
		return nil
	}
	if err != nil {
		return err
	}
	var internal []netip.Addr
	for _, ad := range node.Status.Addresses {
		if ad.Type == corev1.NodeInternalIP {
			if ip, err := netip.ParseAddr(ad.Address); err == nil {
				internal = append(internal, ip)
			}
		}
	}
	req := ovnnet.NodeRequest{Name: name, InternalIPs: internal, MAC: node.Annotations[annotations.MACAddress]}
	if ips, err := ipam.ParseIPs(node.Annotations[annotations.IPAddress]); err == nil {
		req.IPs = ips
	}
	a, err := c.net.AddNode(ctx, req)
	if err != nil {
		if k := ipam.KindOf(err); k != "" {
			c.recorder.Event(node, corev1.EventTypeWarning, string(k), err.Error())
			return nil
		}
		return err
	}
	port, err := c.net.NodePort(ctx, name)
	if err != nil {
		return err
	}
	if port != ovnnet.NodePortName(name) && node.Annotations[annotations.PortName] != port {
		// Once, when the annotation moves to the other name.
		c.recorder.Eventf(node, corev1.EventTypeWarning, "PortNameCollision",
			"logical switch port %s belongs to a pod; this node's join port is %s (annotation %s)", ovnnet.NodePortName(name), port, annotations.PortName)
	}
	want := map[string]string{
		annotations.Allocated: "true", annotations.IPAddress: a.IPString(), annotations.MACAddress: a.MAC,
		annotations.CIDR: a.CIDR, annotations.Gateway: a.Gateway, annotations.LogicalSwitch: a.Subnet,
		annotations.PortName: port,
	}
	// A node renamed node_<name> gets no IP object: "_" is not allowed in an
	// object name, and node-<name> is the pod's that holds that port name.
	c.queueIP("node/" + name)
	same := true
	for k, v := range want {
		if node.Annotations[k] != v {
			same = false
		}
	}
	if same {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": want}})
	if _, err := c.kc.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: annotations.ControllerFieldManager}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating node %s: %w", name, err)
	}
	c.statusQ.AddAfter(a.Subnet, c.cfg.StatusDelay)
	return nil
}

// subnetMTU is the mtu a valid Subnet asks for (0 when it sets none).
func (c *Controller) subnetMTU(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.valid[name]; ok && s != nil {
		return s.Spec.MTU
	}
	return 0
}

func (c *Controller) syncSubnet(ctx context.Context, name string) error {
	obj, exists, err := c.subnetInf.GetIndexer().GetByKey(name)
	if err != nil {
		return err
	}
	if !exists {
		c.mu.Lock()
		_, was := c.valid[name]
		delete(c.valid, name)
		delete(c.problems, name)
		delete(c.notApplied, name)
		delete(c.gateways, name)
		delete(c.deleting, name)
		delete(c.statusWritten, name)
		delete(c.gwRank, name)
		c.mu.Unlock()
		if err := c.removeGateway(ctx, name, nil); err != nil {
			return err
		}
		if users := c.users(name); len(users) > 0 {
			// Only when someone removed the finalizer by hand.
			c.log.Warn("subnet deleted while pods still hold addresses in it (its finalizer was removed by hand); their addresses are free again", "subnet", name, "users", users)
		}
		if was {
			c.m.subnetIPs.DeletePartialMatch(prometheus.Labels{"subnet": name})
			return c.net.RemoveSubnet(ctx, name)
		}
		return nil
	}
	u := obj.(*unstructured.Unstructured)
	if u.GetDeletionTimestamp() != nil {
		if done, err := c.finishDeletion(ctx, u); done || err != nil {
			return err
		}
		// Still in use: stays programmed for the pods that hold addresses.
	} else if err := c.ensureFinalizer(ctx, u); err != nil {
		return err
	}
	cfg, s, prob := kubeovnv1.Validate(u)
	if prob == nil {
		if err := c.net.AddSubnet(ctx, cfg); err != nil {
			if ipam.KindOf(err) == "" {
				return err
			}
			prob = &kubeovnv1.Problem{Reason: "InvalidField", Message: ipamMessage(err)}
		}
	}
	if prob == nil {
		if err := c.net.SetIsolation(ctx, name, isolation(s)); err != nil {
			return fmt.Errorf("subnet %s: isolation ACLs: %w", name, err)
		}
	}
	notApplied := ""
	var gw *kubeovnv1.Condition
	if prob == nil {
		notApplied = kubeovnv1.NotAppliedMessage(kubeovnv1.NotAppliedFields(s.Spec, kubeovnv1.Settings{EnableLB: c.cfg.EnableLB}))
		if gw, err = c.syncGateway(ctx, u, s, cfg); err != nil {
			return err
		}
	}
	c.mu.Lock()
	old, known := c.problems[name]
	announced, seen := c.notApplied[name]
	if prob == nil {
		c.valid[name] = s
		delete(c.problems, name)
	} else {
		delete(c.valid, name)
		c.problems[name] = prob
	}
	c.notApplied[name] = notApplied
	c.gateways[name] = gw
	c.mu.Unlock()
	if prob == nil {
		c.wake(name)
	} else if !known || old.Message != prob.Message {
		c.log.Warn("subnet not valid", "subnet", name, "reason", prob.Reason, "message", prob.Message)
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
		c.log.Warn("subnet accepted but some fields are not applied", "subnet", name, "message", notApplied)
		c.recorder.Event(subnetRef(u), corev1.EventTypeWarning, kubeovnv1.AcceptedNotApplied, notApplied)
	}
	c.statusQ.Add(name)
	return nil
}

// statusFingerprint is what syncStatus compares between writes: counts and
// conditions without their times.
func statusFingerprint(st kubeovnv1.SubnetStatus, conds []kubeovnv1.Condition) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v/%v/%s/%s/%v/%v", st.V4AvailableIPs, st.V4UsingIPs, st.V4AvailableIPRange, st.V4UsingIPRange, st.V6AvailableIPs, st.V6UsingIPs)
	for _, c := range conds {
		fmt.Fprintf(&b, "|%s=%s/%s/%s/%d", c.Type, c.Status, c.Reason, c.Message, c.ObservedGeneration)
	}
	return b.String()
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

func (c *Controller) syncStatus(ctx context.Context, name string) error {
	obj, exists, err := c.subnetInf.GetIndexer().GetByKey(name)
	if err != nil || !exists {
		return err
	}
	u := obj.(*unstructured.Unstructured)
	cur, _ := kubeovnv1.FromUnstructured(u)
	var st kubeovnv1.SubnetStatus
	c.mu.Lock()
	prob := c.problems[name]
	_, valid := c.valid[name]
	notApplied := c.notApplied[name]
	gw := c.gateways[name]
	blocked := c.deleting[name]
	exhausted := 0
	for _, k := range c.waiting[name] {
		if k == ipam.KindExhausted {
			exhausted++
		}
	}
	c.mu.Unlock()
	if usage, ok := c.net.IPAM.Usage(name); ok && valid {
		st.V4AvailableIPs, st.V4UsingIPs, st.V4AvailableIPRange, st.V4UsingIPRange = usage.V4Available, usage.V4Using, usage.V4AvailableRange, usage.V4UsingRange
		st.V6AvailableIPs, st.V6UsingIPs, st.V6AvailableIPRange, st.V6UsingIPRange = usage.V6Available, usage.V6Using, usage.V6AvailableRange, usage.V6UsingRange
		c.m.subnetIPs.WithLabelValues(name, "ipv4", "available").Set(st.V4AvailableIPs)
		c.m.subnetIPs.WithLabelValues(name, "ipv4", "using").Set(st.V4UsingIPs)
		c.m.subnetIPs.WithLabelValues(name, "ipv6", "available").Set(st.V6AvailableIPs)
		c.m.subnetIPs.WithLabelValues(name, "ipv6", "using").Set(st.V6UsingIPs)
	}
	conds := []kubeovnv1.Condition{}
	switch {
	case prob != nil:
		conds = append(conds,
			kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "False", Reason: prob.Reason, Message: prob.Message},
			kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: "ValidationFailed", Message: "see the Validated condition"},
		)
	case valid:
		v := kubeovnv1.Condition{Type: kubeovnv1.Validated, Status: "True", Reason: kubeovnv1.ValidationSucceeded}
		if notApplied != "" {
			v.Reason, v.Message = kubeovnv1.AcceptedNotApplied, notApplied
		}
		ready := kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: "ResourceReady", Message: "logical switch and router port programmed"}
		if blocked != "" && u.GetDeletionTimestamp() != nil {
			ready = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: "DeletionWaitsForPods", Message: blocked}
		}
		conds = append(conds, v, ready)
	default:
		return nil // not processed yet
	}
	if exhausted > 0 {
		conds = append(conds, kubeovnv1.Condition{Type: kubeovnv1.Error, Status: "True", Reason: string(ipam.KindExhausted),
			Message: fmt.Sprintf("%d pod(s) wait for an address: subnet has no free address; widen cidrBlock, shrink excludeIps or delete pods", exhausted)})
	} else {
		conds = append(conds, kubeovnv1.Condition{Type: kubeovnv1.Error, Status: "False", Reason: "NoError"})
	}
	if gw != nil && valid {
		conds = append(conds, *gw)
	}
	now := time.Now().UTC().Format(time.RFC3339)
	same := cur != nil && len(cur.Status.Conditions) == len(conds) &&
		cur.Status.V4AvailableIPs == st.V4AvailableIPs && cur.Status.V4UsingIPs == st.V4UsingIPs &&
		cur.Status.V4AvailableIPRange == st.V4AvailableIPRange && cur.Status.V4UsingIPRange == st.V4UsingIPRange &&
		cur.Status.V6AvailableIPs == st.V6AvailableIPs && cur.Status.V6UsingIPs == st.V6UsingIPs
	for i := range conds {
		conds[i].ObservedGeneration = u.GetGeneration()
		conds[i].LastUpdateTime = now
		conds[i].LastTransitionTime = now
		if cur == nil {
			continue
		}
		for _, old := range cur.Status.Conditions {
			if old.Type == conds[i].Type {
				if old.Status == conds[i].Status {
					conds[i].LastTransitionTime = old.LastTransitionTime
				}
				if old.Status != conds[i].Status || old.Reason != conds[i].Reason || old.Message != conds[i].Message || old.ObservedGeneration != conds[i].ObservedGeneration {
					same = false
				}
			}
		}
	}
	fp := statusFingerprint(st, conds)
	c.mu.Lock()
	written, wrote := c.statusWritten[name]
	c.mu.Unlock()
	if same && (!wrote || written == fp) {
		return nil
	}
	st.Conditions = conds
	patch, _ := json.Marshal(map[string]any{"status": st})
	_, err = c.dc.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if err == nil {
		c.mu.Lock()
		c.statusWritten[name] = fp
		c.mu.Unlock()
	}
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// Package kube is ovnhost-controller's assembly: it builds the Kubernetes
// clients, the shared informer factories and the reconcilers (one package
// each, with its own queue and state), wires them to one another through
// their small interfaces, and runs them in order under leader election,
// with /healthz, /readyz and /metrics.
//
// Start-up order: connect to the NB, make sure the default Subnets exist,
// sync the informer caches, program every Subnet and then their centralized
// gateways, rebuild the IPAM from the pod and node annotations (oldest pod
// first, so an older holder keeps a contested address), garbage-collect
// ports whose pod or node is gone and IP objects of pods and nodes gone,
// then start the workers: pods and nodes, subnets, gateways, IP objects,
// then Services, NetworkPolicy and EIP/SNAT. /readyz turns 200 only after
// that.
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/ovnhost/ovnhost/controller/extgw"
	"github.com/ovnhost/ovnhost/controller/gateways"
	"github.com/ovnhost/ovnhost/controller/ips"
	"github.com/ovnhost/ovnhost/controller/netpol"
	"github.com/ovnhost/ovnhost/controller/pods"
	"github.com/ovnhost/ovnhost/controller/services"
	"github.com/ovnhost/ovnhost/controller/subnets"
	"github.com/ovnhost/ovnhost/controller/underlay"
	"github.com/ovnhost/ovnhost/controller/vpcnat"
	"github.com/ovnhost/ovnhost/controller/vpcs"
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
	// ACLLogRate: packets per second each logging NetworkPolicy ACL may send
	// to ovn-controller (meter acl-log-meter); 0 = 20.
	ACLLogRate int
}

// addon is a reconciler started after the topology is programmed and the
// IPAM rebuilt (Services, NetworkPolicy, EIP/SNAT); its workers end when
// ctx does (tracked by wg).
type addon interface {
	Start(ctx context.Context, wg *sync.WaitGroup) error
	ShutDown()
}

// Controller is one running controller (the leader's work).
type Controller struct {
	cfg Config
	log *slog.Logger
	kc  kubernetes.Interface
	dc  dynamic.Interface
	net *ovnnet.Network

	factory     informers.SharedInformerFactory
	dfactory    dynamicinformer.DynamicSharedInformerFactory
	broadcaster record.EventBroadcaster

	subnets  *subnets.Reconciler
	pods     *pods.Reconciler
	gateways *gateways.Reconciler
	ips      *ips.Reconciler
	vpcs     *vpcs.Reconciler
	addons   []addon

	ready  atomic.Bool
	leader prometheus.Gauge
}

// New builds a controller; Run starts it.
func New(cfg Config, nb *ovnnb.Client) (*Controller, error) {
	if cfg.Rest == nil {
		return nil, errors.New("kube: no Kubernetes client configuration")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
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
	return newWith(cfg, kc, dc, nb)
}

// newWith builds the controller on these clients (the unit test's are fakes).
func newWith(cfg Config, kc kubernetes.Interface, dc dynamic.Interface, nb *ovnnb.Client) (*Controller, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	c := &Controller{cfg: cfg, log: cfg.Logger, kc: kc, dc: dc, net: ovnnet.New(nb, ovnnet.Config{ServiceCIDRs: cfg.ServiceCIDRs}),
		factory:  informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithTransform(slimPod)),
		dfactory: dynamicinformer.NewDynamicSharedInformerFactory(dc, 0)}
	c.leader = registerMetrics(cfg.Registry, nb)
	c.broadcaster = record.NewBroadcaster()
	rec := c.broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ovnhost-controller"})
	if err := c.wire(rec, nb); err != nil {
		return nil, err
	}
	return c, nil
}

// wire builds the reconcilers on the shared factories and connects them.
func (c *Controller) wire(rec record.EventRecorder, nb *ovnnb.Client) error {
	cfg, log, n := c.cfg, c.log, c.net
	var err error
	// Vlan and ProviderNetwork status (idle without their CRDs); its
	// informers resolve the underlay Subnets' spec.vlan.
	ul := underlay.New(underlay.Config{Log: log, Recorder: rec, Discovery: c.kc.Discovery(), Dynamic: c.dc, DInformers: c.dfactory,
		Nodes: c.factory.Core().V1().Nodes().Informer()})
	vlans, providerNetworks := ul.Informers()
	c.subnets, err = subnets.New(subnets.Config{Log: log, Recorder: rec, Dynamic: c.dc, Informers: c.dfactory, Net: n, IPAM: n.IPAM,
		Registry: cfg.Registry, StatusDelay: cfg.StatusDelay, EnableLB: cfg.EnableLB, Vlans: vlans, ProviderNetworks: providerNetworks})
	if err != nil {
		return err
	}
	c.gateways, err = gateways.New(gateways.Config{Log: log, Dynamic: c.dc, Informers: c.factory, DInformers: c.dfactory, Net: n, Subnets: c.subnets})
	if err != nil {
		return err
	}
	c.ips = ips.New(ips.Config{Log: log, Discovery: c.kc.Discovery(), Dynamic: c.dc, Informers: c.factory, DInformers: c.dfactory, IPAM: n.IPAM, Net: n})
	// Attachment networks through Multus (idle without the NAD CRD).
	var wakeNAD func(namespace, name string)
	nads, err := watchNADs(c.kc.Discovery(), c.dfactory, func(ns, name string) {
		if wakeNAD != nil {
			wakeNAD(ns, name)
		}
	})
	if err != nil {
		return fmt.Errorf("kube: network attachment definitions: %w", err)
	}
	pcfg := pods.Config{Log: log, Kube: c.kc, Recorder: rec, Informers: c.factory, Net: n, IPAM: n.IPAM, NB: nb,
		Subnets: c.subnets, IPs: c.ips, Registry: cfg.Registry, Workers: cfg.Workers}
	if nads != nil {
		pcfg.NADs = nads
	}
	c.pods, err = pods.New(pcfg)
	if err != nil {
		return err
	}
	wakeNAD = c.pods.WakeNAD
	c.subnets.Use(c.pods, c.gateways)
	// Custom VPCs (idle without the Vpc CRD: their Subnets wait).
	var nat *vpcnat.Reconciler // built after extgw, whose gateway it joins
	c.vpcs = vpcs.New(vpcs.Config{Log: log, Recorder: rec, Discovery: c.kc.Discovery(), Dynamic: c.dc, DInformers: c.dfactory,
		Net: n, Subnets: c.subnets, Changed: func(string) {
			if nat != nil {
				nat.Queue()
			}
		}})
	c.subnets.UseVpcs(c.vpcs)
	c.addons = append(c.addons, c.vpcs)
	if cfg.EnableLB {
		// The Subnets, the Service CIDRs and the join CIDR: no Service's
		// external address may fall in them (controller/README.md).
		a, err := services.New(services.Config{Log: log, Recorder: rec, Informers: c.factory, NB: nb, Router: n.Config().Router,
			DInformers: c.dfactory, ServiceCIDRs: cfg.ServiceCIDRs, JoinCIDR: cfg.JoinCIDR, PodVPC: n.PodVPC})
		if err != nil {
			return fmt.Errorf("kube: services: %w", err)
		}
		c.addons = append(c.addons, a)
	}
	if cfg.EnableNP {
		a, err := netpol.New(netpol.Config{Log: log, Recorder: rec, Informers: c.factory, NB: nb, JoinCIDR: cfg.JoinCIDR, ACLLogRate: cfg.ACLLogRate})
		if err != nil {
			return fmt.Errorf("kube: network policies: %w", err)
		}
		c.addons = append(c.addons, a)
	}
	c.addons = append(c.addons, ul)
	// EIP/SNAT (ovn-external-gw-config): idle while the ConfigMap is absent.
	ext, err := extgw.New(extgw.Config{Log: log, Kube: c.kc, Recorder: rec, Informers: c.factory, Net: n})
	if err != nil {
		return fmt.Errorf("kube: external gateway: %w", err)
	}
	c.addons = append(c.addons, ext)
	// OVN-native NAT of custom VPCs (enableExternal, OvnEip, OvnFip,
	// OvnSnatRule): idle without the CRDs. It follows the VPCs (their
	// Subnets' changes reach it through the Vpc reconciler) and extgw.
	nat = vpcnat.New(vpcnat.Config{Log: log, Recorder: rec, Discovery: c.kc.Discovery(), Dynamic: c.dc, DInformers: c.dfactory,
		Net: n, Gateway: ext, Vpcs: c.vpcs, Subnets: c.subnets, IPAM: n.IPAM})
	ext.UseReserved(nat.Reserved)
	ext.OnChange(nat.Queue)
	c.addons = append(c.addons, nat)
	return nil
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
	defer c.pods.ShutDown()
	defer c.subnets.ShutDown()
	defer c.gateways.ShutDown()
	defer c.ips.ShutDown()
	for _, a := range c.addons {
		defer a.ShutDown()
	}
	names, err := c.startUp(ctx)
	if err != nil {
		return err
	}
	c.ready.Store(true)
	defer c.ready.Store(false)

	var wg sync.WaitGroup
	c.subnets.Start(ctx, &wg, names)
	c.pods.Start(ctx, &wg)
	c.gateways.Start(ctx, &wg)
	c.ips.Start(ctx, &wg)
	for _, a := range c.addons {
		if err := a.Start(ctx, &wg); err != nil {
			return err
		}
	}
	<-ctx.Done()
	wg.Wait()
	return nil
}

// startUp brings OVN and the IPAM in line with the cluster before any
// worker runs, and returns the Subnets' names.
func (c *Controller) startUp(ctx context.Context) ([]string, error) {
	t0 := time.Now()
	if err := subnets.EnsureDefaults(ctx, c.dc, subnets.Defaults{CIDR: c.cfg.DefaultCIDR, Gateway: c.cfg.DefaultGW, Exclude: c.cfg.DefaultExcl, JoinCIDR: c.cfg.JoinCIDR}); err != nil {
		return nil, err
	}
	if err := vpcs.EnsureDefault(ctx, c.kc.Discovery(), c.dc); err != nil {
		return nil, err
	}
	c.factory.Start(ctx.Done())
	c.dfactory.Start(ctx.Done())
	for typ, ok := range c.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("kube: informer cache for %v did not sync", typ)
		}
	}
	for typ, ok := range c.dfactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return nil, fmt.Errorf("kube: informer cache for %v did not sync (is the Subnet CRD installed? apply packaging/kubernetes/base/crd-subnets.yaml)", typ)
		}
	}
	tSynced := time.Now()
	if err := c.net.EnsureRouter(ctx); err != nil {
		return nil, err
	}
	// The VPCs' routers first: their Subnets attach to them.
	if err := c.vpcs.ProgramAll(ctx); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	// Program subnets synchronously: pods need them.
	names, err := c.subnets.ProgramAll(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	if err := c.gateways.ProgramAll(ctx); err != nil {
		return nil, fmt.Errorf("kube: %w", err)
	}
	tRebuild := time.Now()
	npods, err := c.pods.Rebuild(ctx)
	if err != nil {
		return nil, err
	}
	rebuildDur := time.Since(tRebuild)
	deleted, err := c.pods.CollectPorts(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube: garbage-collecting ports: %w", err)
	}
	ipsDeleted, err := c.ips.Collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("kube: garbage-collecting IP objects: %w", err)
	}
	c.log.Info("controller ready", "caches_synced", tSynced.Sub(t0).Round(time.Millisecond).String(),
		"ipam_rebuild", rebuildDur.Round(time.Millisecond).String(), "pods_restored", npods,
		"ports_collected", len(deleted), "ips_collected", ipsDeleted, "startup", time.Since(t0).Round(time.Millisecond).String())
	if len(deleted) > 0 {
		c.log.Info("garbage-collected ports whose pod or node is gone", "ports", deleted)
	}
	c.reportForeignRows()
	return names, nil
}

// reportForeignRows names, after a migration, what kube-ovn-controller made
// for features ovnhost does not manage: it stays, and is named once here.
func (c *Controller) reportForeignRows() {
	for table, rows := range c.net.NB.ForeignRows(ovnnb.KubeOVNVendor) {
		shown := rows
		if len(shown) > 10 {
			shown = shown[:10]
		}
		c.log.Info("left in place: northbound rows made by Kube-OVN that ovnhost does not manage", "table", table, "count", len(rows), "rows", shown)
	}
}

package vpcnat

import (
	"context"
	"encoding/json"
	"errors"
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
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
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

// Network is the OVN work of the VPCs' external gateways (ovnnet.Network).
type Network interface {
	EnsureVPCExternal(ctx context.Context, v ovnnet.VPCExternal) error
	RemoveVPCExternal(ctx context.Context, vpc string) error
	VPCExternals(ctx context.Context) ([]string, error)
	ExternalGatewayProgrammed(ctx context.Context) (bool, error)
}

// DefaultGateway is the default VPC's external gateway (controller/extgw):
// the VPCs' gateway ports join its switch and use its nodes.
type DefaultGateway interface {
	Gateway() (cfg ovnnet.ExternalGatewayConfig, nodes []ovnnet.GatewayNode, ok bool, why string)
	PodHolder(a netip.Addr) string
	WakeWaiting()
	Started() <-chan struct{}
}

// Vpcs says whether a custom VPC's router is programmed (controller/vpcs).
type Vpcs interface {
	Ready(vpc string) (bool, string)
}

// Subnets are the programmed Subnets (controller/subnets).
type Subnets interface {
	VpcSubnets(vpc string) map[string][]netip.Prefix
}

// IPAM confirms an IP object against the live allocation.
type IPAM interface {
	Lookup(owner string) (ipam.Allocation, bool)
}

// Config is what the reconciler needs.
type Config struct {
	Log        *slog.Logger
	Recorder   record.EventRecorder
	Discovery  discovery.DiscoveryInterface
	Dynamic    dynamic.Interface
	DInformers dynamicinformer.DynamicSharedInformerFactory
	Net        Network
	Gateway    DefaultGateway
	Vpcs       Vpcs
	Subnets    Subnets
	IPAM       IPAM
}

// Condition reasons and event reasons.
const (
	ReasonProgrammed = "Programmed"
	ReasonInvalid    = "Invalid"
	ReasonWaiting    = "Waiting"
	EventVpcExternal = "VpcExternalNotProgrammed"
)

// key is the one queue key: the plan is computed for every VPC at once
// (one OvnEip serves one object, addresses are shared by all VPCs).
const key = "all"

// Reconciler programs the custom VPCs' external gateways and NAT rows and
// writes the NAT objects' statuses.
type Reconciler struct {
	cfg Config
	log *slog.Logger
	q   reconcile.Queue

	eips, fips, snats, dnats cache.SharedIndexInformer // nil without the CRDs
	vpcInf, ipInf            cache.SharedIndexInformer // nil without those CRDs

	mu       sync.Mutex
	held     map[netip.Addr]string // address -> "OvnEip <name>" (extgw's pods cannot take it)
	reported map[string]string     // object -> last Warning message
}

// Installed says whether the API server serves the OvnEip CRD (the four
// NAT CRDs come together: packaging/kubernetes/base/crd-ovn-*.yaml).
func Installed(d discovery.DiscoveryInterface, resource string) bool {
	if d == nil {
		return false
	}
	rl, err := d.ServerResourcesForGroupVersion(kubeovnv1.GroupVersion.String())
	return err == nil && slices.ContainsFunc(rl.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
}

// New registers the informers when the CRDs are installed.
func New(cfg Config) *Reconciler {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	r := &Reconciler{cfg: cfg, log: cfg.Log, q: reconcile.NewDefaultQueue("vpc-nat"), held: map[netip.Addr]string{}, reported: map[string]string{}}
	if !Installed(cfg.Discovery, kubeovnv1.OvnEipGVR.Resource) || !Installed(cfg.Discovery, kubeovnv1.VpcGVR.Resource) {
		cfg.Log.Info("VPC NAT is not reconciled: the Vpc or OvnEip CRD is not installed; apply packaging/kubernetes/base/crd-vpcs.yaml and crd-ovn-eips.yaml, crd-ovn-fips.yaml, crd-ovn-snat-rules.yaml, crd-ovn-dnat-rules.yaml and restart to use enableExternal, OvnEip, OvnFip and OvnSnatRule")
		return r
	}
	specOnly := cache.ResourceEventHandlerFuncs{
		AddFunc: r.touch,
		UpdateFunc: func(o, n any) {
			// Our own status writes come back as updates: the spec matters.
			if o.(*unstructured.Unstructured).GetGeneration() != n.(*unstructured.Unstructured).GetGeneration() {
				r.touch(n)
			}
		},
		DeleteFunc: r.touch,
	}
	watch := func(gvr schema.GroupVersionResource, h cache.ResourceEventHandler) cache.SharedIndexInformer {
		if !Installed(cfg.Discovery, gvr.Resource) {
			cfg.Log.Warn("VPC NAT: a CRD is not installed; apply packaging/kubernetes/base/crd-<resource>.yaml and restart", "resource", gvr.Resource)
			return nil
		}
		inf := cfg.DInformers.ForResource(gvr).Informer()
		_, _ = inf.AddEventHandler(h)
		return inf
	}
	r.eips = watch(kubeovnv1.OvnEipGVR, specOnly)
	r.fips = watch(kubeovnv1.OvnFipGVR, specOnly)
	r.snats = watch(kubeovnv1.OvnSnatRuleGVR, specOnly)
	r.dnats = watch(kubeovnv1.OvnDnatRuleGVR, specOnly)
	r.vpcInf = watch(kubeovnv1.VpcGVR, specOnly)
	// IP objects: a pod's address comes and goes with the pod.
	r.ipInf = watch(kubeovnv1.IPGVR, cache.ResourceEventHandlerFuncs{AddFunc: r.touch, UpdateFunc: func(_, n any) { r.touch(n) }, DeleteFunc: r.touch})
	return r
}

func (r *Reconciler) touch(any) { r.Queue() }

// Queue looks at every VPC's NAT again (a Vpc, a Subnet or the external
// gateway changed).
func (r *Reconciler) Queue() {
	if r.eips != nil {
		r.q.Add(key)
	}
}

// Reserved names the OvnEip holding a ("" for none): a default-VPC pod
// cannot take it as its EIP or SNAT address.
func (r *Reconciler) Reserved(a netip.Addr) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[a]
}

// ShutDown stops the queue.
func (r *Reconciler) ShutDown() { r.q.ShutDown() }

// Start runs the worker once the external gateway has been looked at (so
// a restarted controller does not take the VPCs' gateways for gone).
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	if r.eips == nil {
		return nil
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case <-ctx.Done():
			r.q.ShutDown()
			return
		case <-r.cfg.Gateway.Started():
		}
		r.q.Add(key)
		var inner sync.WaitGroup
		reconcile.Workers(ctx, &inner, r.log, 1, r.q, r.sync, "vpc nat")
		<-ctx.Done()
		r.q.ShutDown()
		inner.Wait()
	}()
	return nil
}

// list converts an informer's objects (nil informer: none).
func list[T any](inf cache.SharedIndexInformer) ([]*T, map[string]*unstructured.Unstructured) {
	if inf == nil {
		return nil, nil
	}
	var out []*T
	raw := map[string]*unstructured.Unstructured{}
	for _, obj := range inf.GetStore().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || u.GetDeletionTimestamp() != nil {
			continue
		}
		t := new(T)
		if err := kubeovnv1.ConvertUnstructured(u, t); err != nil {
			continue // a schema-valid object always converts
		}
		out = append(out, t)
		raw[u.GetName()] = u
	}
	return out, raw
}

// input reads everything Translate needs.
func (r *Reconciler) input() (Input, map[string]map[string]*unstructured.Unstructured) {
	cfg, nodes, ok, why := r.cfg.Gateway.Gateway()
	in := Input{Vpcs: map[string]*kubeovnv1.Vpc{}, Subnets: map[string]SubnetInfo{}, IPs: map[string]IPInfo{}}
	in.Ext = External{Ready: ok && len(nodes) > 0, Why: why}
	if ok && len(nodes) == 0 {
		in.Ext.Why = "the external gateway has no ready gateway node"
	}
	if ok {
		in.Ext.Prefix, in.Ext.RouterIP, in.Ext.GatewayIP, in.Ext.Policy = cfg.PortIP.Masked(), cfg.PortIP.Addr(), cfg.GatewayIP, cfg.Policy
		in.Ext.PodHolder = r.cfg.Gateway.PodHolder
	}
	raw := map[string]map[string]*unstructured.Unstructured{}
	in.Eips, raw["eip"] = list[kubeovnv1.OvnEip](r.eips)
	in.Fips, raw["fip"] = list[kubeovnv1.OvnFip](r.fips)
	in.Snats, raw["snat"] = list[kubeovnv1.OvnSnatRule](r.snats)
	in.Dnats, raw["dnat"] = list[kubeovnv1.OvnDnatRule](r.dnats)
	vpcs, vraw := list[kubeovnv1.Vpc](r.vpcInf)
	raw["vpc"] = vraw
	vpcNames := []string{kubeovnv1.DefaultVpc}
	for _, v := range vpcs {
		if !kubeovnv1.IsCustomVpc(v.Name) {
			continue
		}
		vpcNames = append(vpcNames, v.Name)
		if ok, _ := r.cfg.Vpcs.Ready(v.Name); ok {
			in.Vpcs[v.Name] = v
		}
	}
	for _, vpc := range vpcNames {
		for name, cidrs := range r.cfg.Subnets.VpcSubnets(vpc) {
			in.Subnets[name] = SubnetInfo{Vpc: vpc, CIDRs: cidrs}
		}
	}
	// IP objects are the controller's own record; each is confirmed
	// against the live allocation (a stale one names no address).
	if r.ipInf != nil {
		for _, obj := range r.ipInf.GetStore().List() {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			pod, _, _ := unstructured.NestedString(u.Object, "spec", "podName")
			ns, _, _ := unstructured.NestedString(u.Object, "spec", "namespace")
			sub, _, _ := unstructured.NestedString(u.Object, "spec", "subnet")
			v4s, _, _ := unstructured.NestedString(u.Object, "spec", "v4IpAddress")
			v4, err := netip.ParseAddr(v4s)
			if pod == "" || ns == "" || err != nil {
				continue
			}
			a, held := r.cfg.IPAM.Lookup(ns + "/" + pod)
			if !held || a.Subnet != sub || !slices.Contains(a.IPs, v4) {
				continue
			}
			in.IPs[u.GetName()] = IPInfo{Subnet: sub, V4: v4}
		}
	}
	return in, raw
}

// sync computes the plan and applies it: gateway ports and NAT rows,
// statuses, events.
func (r *Reconciler) sync(ctx context.Context, _ string) error {
	in, raw := r.input()
	plan := Translate(in)
	var errs []error
	for name, a := range plan.CreateLRPEips {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": kubeovnv1.GroupVersion.String(), "kind": kubeovnv1.OvnEipGVK.Kind,
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"externalSubnet": ovnnet.ExternalSwitch, "v4Ip": a.String(), "type": kubeovnv1.OvnEipTypeLRP}}}
		if _, err := r.cfg.Dynamic.Resource(kubeovnv1.OvnEipGVR).Create(ctx, u, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("creating OvnEip %s: %w", name, err))
		} else if err == nil {
			r.log.Info("VPC NAT: created the VPC's gateway address", "ovneip", name, "address", a)
		}
	}
	// Reserve the OvnEips' addresses before any NB write: a pod asking
	// for one now is refused.
	held := map[netip.Addr]string{}
	for name, res := range plan.Eips {
		if a, err := netip.ParseAddr(res.V4Eip); err == nil && res.Problem == "" {
			held[a] = "OvnEip " + name
		}
	}
	for name, a := range plan.CreateLRPEips {
		held[a] = "OvnEip " + name
	}
	r.mu.Lock()
	freed := false
	for a := range r.held {
		if _, ok := held[a]; !ok {
			freed = true
		}
	}
	r.held = held
	r.mu.Unlock()
	if freed {
		r.cfg.Gateway.WakeWaiting()
	}
	gwCfg, nodes, _, _ := r.cfg.Gateway.Gateway()
	vpcNames := make([]string, 0, len(plan.Gateways))
	for v := range plan.Gateways {
		vpcNames = append(vpcNames, v)
	}
	sort.Strings(vpcNames)
	for _, v := range vpcNames {
		g := plan.Gateways[v]
		ext := ovnnet.VPCExternal{VPC: v, Address: g.Address, GatewayIP: gwCfg.GatewayIP, DefaultRoute: !hasDefaultRoute(in.Vpcs[v]),
			Nodes: nodes, NATs: plan.NATs[v], Forwards: plan.Forwards[v]}
		if err := r.cfg.Net.EnsureVPCExternal(ctx, ext); err != nil {
			errs = append(errs, fmt.Errorf("vpc %s: external gateway: %w", v, err))
		}
	}
	// Gateways no longer wanted. While the external gateway is programmed
	// but not usable now (its ConfigMap turned invalid, its nodes not
	// ready, a failed read), what is programmed stays, as extgw keeps the
	// default VPC's.
	have, err := r.cfg.Net.VPCExternals(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	keep := false
	if !in.Ext.Ready {
		if keep, err = r.cfg.Net.ExternalGatewayProgrammed(ctx); err != nil {
			errs = append(errs, err)
			keep = true
		}
	}
	for _, v := range have {
		if _, ok := plan.Gateways[v]; ok {
			continue
		}
		if vpc := in.Vpcs[v]; keep && vpc != nil && vpc.Spec.EnableExternal {
			continue
		}
		if err := r.cfg.Net.RemoveVPCExternal(ctx, v); err != nil {
			errs = append(errs, fmt.Errorf("vpc %s: removing the external gateway: %w", v, err))
			continue
		}
		r.log.Info("VPC NAT: external gateway removed", "vpc", v)
	}
	if len(errs) > 0 {
		// Statuses wait for the NB: "ready" must be true when it says so.
		return errors.Join(errs...)
	}
	for v, why := range plan.VpcProblems {
		if u := raw["vpc"][v]; u != nil {
			r.warn(u, kubeovnv1.VpcGVK.Kind, "vpc/"+v, EventVpcExternal, why)
		}
	}
	for v := range plan.Gateways {
		r.forget("vpc/" + v)
	}
	for _, e := range in.Eips {
		res := plan.Eips[e.Name]
		st := kubeovnv1.OvnEipStatus{Type: eipType(e), Nat: res.Nat, Ready: res.Ready, V4Ip: res.V4Eip}
		if res.Nat == "lrp" {
			st.MacAddress = ovnnb.RouterPortMAC(ovnnet.ExternalRouterPort(res.Vpc))
		}
		errs = append(errs, r.status(ctx, kubeovnv1.OvnEipGVR, kubeovnv1.OvnEipGVK.Kind, raw["eip"][e.Name], &st, &st.Conditions, res))
	}
	for _, f := range in.Fips {
		res := plan.Fips[f.Name]
		st := kubeovnv1.OvnFipStatus{Vpc: res.Vpc, V4Eip: res.V4Eip, V4Ip: res.V4Ip, Ready: res.Ready}
		errs = append(errs, r.status(ctx, kubeovnv1.OvnFipGVR, kubeovnv1.OvnFipGVK.Kind, raw["fip"][f.Name], &st, &st.Conditions, res))
	}
	for _, s := range in.Snats {
		res := plan.Snats[s.Name]
		st := kubeovnv1.OvnSnatRuleStatus{Vpc: res.Vpc, V4Eip: res.V4Eip, V4IpCidr: res.V4Ip, Ready: res.Ready}
		errs = append(errs, r.status(ctx, kubeovnv1.OvnSnatRuleGVR, kubeovnv1.OvnSnatRuleGVK.Kind, raw["snat"][s.Name], &st, &st.Conditions, res))
	}
	for _, d := range in.Dnats {
		res := plan.Dnats[d.Name]
		st := kubeovnv1.OvnDnatRuleStatus{Vpc: res.Vpc, V4Eip: res.V4Eip, V4Ip: res.V4Ip, Ready: res.Ready, ExternalPort: res.ExternalPort,
			InternalPort: res.InternalPort, Protocol: res.Protocol, IPName: d.Spec.IPName}
		errs = append(errs, r.status(ctx, kubeovnv1.OvnDnatRuleGVR, kubeovnv1.OvnDnatRuleGVK.Kind, raw["dnat"][d.Name], &st, &st.Conditions, res))
	}
	return errors.Join(errs...)
}

func eipType(e *kubeovnv1.OvnEip) string {
	if e.Spec.Type == "" {
		return kubeovnv1.OvnEipTypeNAT
	}
	return e.Spec.Type
}

// hasDefaultRoute: the Vpc's own staticRoutes route 0.0.0.0/0 (by
// destination), so its gateway adds none.
func hasDefaultRoute(v *kubeovnv1.Vpc) bool {
	if v == nil {
		return false
	}
	for _, rt := range v.Spec.StaticRoutes {
		if rt == nil || rt.Policy == kubeovnv1.PolicySrc {
			continue
		}
		if p, err := kubeovnv1.ParseRouteCIDR(rt.CIDR); err == nil && p.Addr().Is4() && p.Bits() == 0 {
			return true
		}
	}
	return false
}

// status writes an object's status (st, whose conditions are *conds)
// when it differs from what the object has, and announces a problem once.
func (r *Reconciler) status(ctx context.Context, gvr schema.GroupVersionResource, kind string, u *unstructured.Unstructured, st any, conds *[]kubeovnv1.Condition, res Result) error {
	if u == nil {
		return nil
	}
	ref := strings.ToLower(kind) + "/" + u.GetName()
	c := kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "True", Reason: ReasonProgrammed, Message: programmedMessage(kind, res)}
	if !res.Ready {
		c = kubeovnv1.Condition{Type: kubeovnv1.Ready, Status: "False", Reason: ReasonInvalid, Message: res.Problem}
		if strings.Contains(res.Problem, "waiting for") || strings.Contains(res.Problem, "not programmed") {
			c.Reason = ReasonWaiting
		}
		r.warn(u, kind, ref, "Invalid"+kind, res.Problem)
	} else {
		r.forget(ref)
	}
	c.ObservedGeneration = u.GetGeneration()
	now := time.Now().UTC().Format(time.RFC3339)
	c.LastUpdateTime, c.LastTransitionTime = now, now
	// The current status, typed as st is.
	cur := reflect.New(reflect.TypeOf(st).Elem()).Interface()
	if m, ok := u.Object["status"].(map[string]any); ok {
		_ = kubeovnv1.ConvertUnstructured(&unstructured.Unstructured{Object: m}, cur)
	}
	curConds := reflect.ValueOf(cur).Elem().FieldByName("Conditions").Interface().([]kubeovnv1.Condition)
	for _, old := range curConds {
		if old.Type == c.Type && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
			if old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
				c.LastUpdateTime = old.LastUpdateTime
			}
		}
	}
	*conds = []kubeovnv1.Condition{c}
	if reflect.DeepEqual(cur, st) {
		return nil
	}
	b, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return err
	}
	if _, err := r.cfg.Dynamic.Resource(gvr).Patch(ctx, u.GetName(), types.MergePatchType, b, metav1.PatchOptions{}, "status"); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s %s: status: %w", kind, u.GetName(), err)
	}
	return nil
}

func programmedMessage(kind string, res Result) string {
	switch kind {
	case kubeovnv1.OvnEipGVK.Kind:
		if res.Nat == "" {
			return fmt.Sprintf("address %s held (nothing uses it yet)", res.V4Eip)
		}
		return fmt.Sprintf("address %s used by %s of Vpc %s", res.V4Eip, res.Nat, res.Vpc)
	case kubeovnv1.OvnFipGVK.Kind:
		return fmt.Sprintf("%s of Vpc %s reached at and leaving from %s (dnat_and_snat on %s)", res.V4Ip, res.Vpc, res.V4Eip, ovnnet.ExternalRouterPort(res.Vpc))
	case kubeovnv1.OvnSnatRuleGVK.Kind:
		return fmt.Sprintf("%s of Vpc %s leaving from %s (snat on %s)", res.V4Ip, res.Vpc, res.V4Eip, ovnnet.ExternalRouterPort(res.Vpc))
	case kubeovnv1.OvnDnatRuleGVK.Kind:
		return fmt.Sprintf("%s %s:%s forwarded to %s:%s of Vpc %s (load balancer %s on its router)", res.Protocol, res.V4Eip, res.ExternalPort,
			res.V4Ip, res.InternalPort, res.Vpc, ovnnet.VPCForwardLB(res.Vpc, res.Protocol))
	}
	return "programmed"
}

// warn records a Warning event on the object once per new message.
func (r *Reconciler) warn(u *unstructured.Unstructured, kind, ref, reason, msg string) {
	r.mu.Lock()
	same := r.reported[ref] == msg
	r.reported[ref] = msg
	r.mu.Unlock()
	if same {
		return
	}
	r.log.Warn("VPC NAT: "+reason, "object", ref, "message", msg)
	r.cfg.Recorder.Event(&corev1.ObjectReference{APIVersion: kubeovnv1.GroupVersion.String(), Kind: kind, Name: u.GetName(), UID: u.GetUID(),
		ResourceVersion: u.GetResourceVersion()}, corev1.EventTypeWarning, reason, msg)
}

func (r *Reconciler) forget(ref string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.reported, ref)
}

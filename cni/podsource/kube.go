package podsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Kube reads pod networks from the controller's annotations through a
// node-local pod informer (field selector spec.nodeName) and signals waiting
// ADDs on every change of the pod: no polling.
type Kube struct {
	cs   kubernetes.Interface
	node string
	log  *slog.Logger
	// serviceCIDRs are never masqueraded to (the egress plan's Cluster).
	serviceCIDRs []netip.Prefix

	factory informers.SharedInformerFactory
	nodeFac informers.SharedInformerFactory // nil: nodes is the owner's
	pods    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	nodeReg cache.ResourceEventHandlerRegistration
	// subnets: the shared Subnet informer given, or one of its own when
	// the source has a dynamic client (subnetFac); none, no egress plan.
	dyn       dynamic.Interface
	subnetFac dynamicinformer.DynamicSharedInformerFactory
	subnets   cache.SharedIndexInformer
	subnetReg cache.ResourceEventHandlerRegistration
	stop      chan struct{}
	synced    chan struct{}

	// trusted are the field managers whose annotations the node honours.
	trusted map[string]bool
	// ovn is what OVN holds for the pods' ports (nil: not compared, tests only).
	ovn           OVNPorts
	mismatchGrace time.Duration

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // pod key or "node" -> waiters
	onRates func(key string, r Rates)             // rate annotation change on a running pod (under mu)
}

// nodeKey is the waiters' key for the node's own object.
const nodeKey = "node"

// KubeOptions are the node's identity and trust.
type KubeOptions struct {
	Node string
	Log  *slog.Logger
	// TrustedManagers are the field managers whose pod annotations the
	// node waits for (nil: DefaultControllerManagers).
	TrustedManagers []string
	// OVN is what OVN holds for the pods' logical switch ports: a pod is
	// wired only when its annotations equal it (the server always sets
	// it; nil, in unit tests only, skips the comparison).
	OVN OVNPorts
	// MismatchGrace is how long a pod whose annotations differ from OVN
	// waits for them to agree (the southbound database lags the
	// controller's northbound writes) before its ADD is refused
	// (default DefaultMismatchGrace).
	MismatchGrace time.Duration
	// Subnets is the node's shared Subnet informer, run by its owner (the
	// agent); nil: the source runs its own when it has a dynamic client.
	Subnets cache.SharedIndexInformer
	// Nodes is the node's shared informer of its own Node (field selector
	// metadata.name), run by its owner; nil: the source runs its own.
	Nodes cache.SharedIndexInformer
	// ServiceCIDRs are the cluster's Service ranges (SVC_CIDR), never
	// masqueraded to (nil: Kube-OVN's default, 10.96.0.0/12).
	ServiceCIDRs []netip.Prefix
}

// DefaultMismatchGrace is KubeOptions.MismatchGrace's default.
const DefaultMismatchGrace = 5 * time.Second

// NewKubeFromConfig is NewKube with clients built from cfg (QPS 50, burst
// 100), the Subnet informer included.
func NewKubeFromConfig(cfg *rest.Config, o KubeOptions) (*Kube, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewKube(cs, dyn, o), nil
}

// NewKube reads the pods of node o.Node through cs; dyn, when not nil,
// adds the Subnet informer (the node's Subnet view: ovn0's routes, the
// egress plan, pods checked against their Subnet).
func NewKube(cs kubernetes.Interface, dyn dynamic.Interface, o KubeOptions) *Kube {
	k := &Kube{cs: cs, dyn: dyn, subnets: o.Subnets, nodes: o.Nodes, node: o.Node, log: o.Log, waiters: map[string]map[chan struct{}]struct{}{},
		ovn: o.OVN, mismatchGrace: o.MismatchGrace, serviceCIDRs: o.ServiceCIDRs}
	if len(k.serviceCIDRs) == 0 {
		k.serviceCIDRs = []netip.Prefix{netip.MustParsePrefix(ovnnet.DefaultServiceCIDR)}
	}
	if k.mismatchGrace <= 0 {
		k.mismatchGrace = DefaultMismatchGrace
	}
	if k.log == nil {
		k.log = slog.Default()
	}
	k.setTrusted(o.TrustedManagers)
	return k
}

// setTrusted sets the trusted field managers (nil: DefaultControllerManagers).
func (k *Kube) setTrusted(managers []string) {
	if len(managers) == 0 {
		managers = DefaultControllerManagers
	}
	k.trusted = map[string]bool{}
	for _, m := range managers {
		k.trusted[m] = true
	}
}

// Rates are a pod's rate annotations in Mbit/s (0: no limit).
type Rates struct{ IngressMbps, EgressMbps int }

// OnRatesChanged installs the hook called when a pod's rate annotations
// change (a running pod's QoS follows them).
func (k *Kube) OnRatesChanged(f func(key string, r Rates)) {
	k.mu.Lock()
	k.onRates = f
	k.mu.Unlock()
}

// PodRates reads the rate annotations of pod key ("namespace/name") from
// the informer's cache; ok is false when the pod is not known. An invalid
// rate is returned as 0 (no limit) with the error that names it (ratesOf).
func (k *Kube) PodRates(key string) (_ Rates, ok bool, _ error) {
	p := k.getPod(key)
	if p == nil {
		return Rates{}, false, nil
	}
	r, err := ratesOf(p.Annotations)
	return r, true, err
}

// ratesOf reads the rate annotations. An invalid one counts as no limit
// (and is returned as the error, to be logged): what a running pod's QoS
// becomes depends only on its current annotations, so a bad value removes
// the limit it replaces instead of leaving it in place, and a restart
// (which reapplies the annotations) gives the same result as the update
// event did. The rates are the pod author's own: a limit its author can
// delete is no protection the node would lose.
func ratesOf(ann map[string]string) (Rates, error) {
	in, ierr := parseRate(ann, annotations.IngressRate)
	eg, eerr := parseRate(ann, annotations.EgressRate)
	return Rates{IngressMbps: in, EgressMbps: eg}, errors.Join(ierr, eerr)
}

// Kubernetes is true.
func (k *Kube) Kubernetes() bool { return true }

// WatchNode signals node when the node's annotations change and subnets
// when a Subnet does (ovn0's routes, the egress plan); stop ends both.
func (k *Kube) WatchNode() (node, subnets <-chan struct{}, stop func()) {
	nch, ncancel := k.subscribe(nodeKey)
	sch, scancel := k.subscribe(subnetsKey)
	return nch, sch, func() { scancel(); ncancel() }
}

// Start starts the informers; it does not wait for them to list.
func (k *Kube) Start(ctx context.Context) error {
	k.stop = make(chan struct{})
	k.factory = informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", k.node).String()
		}))
	k.pods = k.factory.Core().V1().Pods().Informer()
	// Keep only what the server reads: a node's pods stay small in memory.
	if err := k.pods.SetTransform(slimPod); err != nil {
		return err
	}
	_, err := k.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { k.podChanged(nil, obj) },
		UpdateFunc: func(old, obj any) {
			k.podChanged(old, obj)
		},
		DeleteFunc: func(obj any) { k.podChanged(nil, obj) },
	})
	if err != nil {
		return err
	}
	if k.nodes == nil {
		k.nodeFac = informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
			informers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.node).String()
			}))
		k.nodes = k.nodeFac.Core().V1().Nodes().Informer()
	}
	reg, err := k.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.signal(nodeKey) },
		UpdateFunc: func(any, any) { k.signal(nodeKey) },
	})
	if err != nil {
		return err
	}
	k.nodeReg = reg
	k.factory.Start(k.stop)
	if k.nodeFac != nil {
		k.nodeFac.Start(k.stop)
	}
	if k.ovn != nil {
		k.ovn.Start(ctx)
	}
	synced := []cache.InformerSynced{k.pods.HasSynced, k.nodes.HasSynced}
	if k.subnets != nil || k.dyn != nil {
		if err := k.startSubnets(); err != nil {
			return err
		}
		synced = append(synced, k.subnets.HasSynced)
	}
	// Start does not wait for the API server: OVS and the pods already
	// wired must not depend on it. Requests wait for the sync instead.
	k.synced = make(chan struct{})
	stop := k.stop
	go func() {
		if cache.WaitForCacheSync(stop, synced...) {
			close(k.synced)
		}
	}()
	return nil
}

// WaitSynced waits until the informers have listed once.
func (k *Kube) WaitSynced(ctx context.Context) error {
	select {
	case <-k.synced:
		return nil
	case <-ctx.Done():
		return &AnnotationTimeout{fmt.Sprintf("the Kubernetes API server has not answered the node-local pod informer of node %s yet; try again later", k.node)}
	}
}

// Stop stops the informers.
func (k *Kube) Stop() {
	if k.stop != nil {
		close(k.stop)
		k.factory.Shutdown()
		if k.nodeReg != nil {
			_ = k.nodes.RemoveEventHandler(k.nodeReg)
			k.nodeReg = nil
		}
		if k.nodeFac != nil {
			k.nodeFac.Shutdown()
		}
		if k.subnetReg != nil {
			_ = k.subnets.RemoveEventHandler(k.subnetReg)
			k.subnetReg = nil
		}
		if k.subnetFac != nil {
			k.subnetFac.Shutdown()
		}
		if k.ovn != nil {
			k.ovn.Stop()
		}
		k.stop = nil
	}
}

func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Annotations: p.Annotations, DeletionTimestamp: p.DeletionTimestamp, ManagedFields: slimOwners(p.ManagedFields)},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
	}, nil
}

func podKey(obj any) (*corev1.Pod, string) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, ""
	}
	return p, p.Namespace + "/" + p.Name
}

func (k *Kube) podChanged(old, obj any) {
	p, key := podKey(obj)
	if p == nil {
		return
	}
	k.signal(key)
	k.mu.Lock()
	onRates := k.onRates
	k.mu.Unlock()
	if old == nil || onRates == nil {
		return
	}
	op, _ := podKey(old)
	if op == nil {
		return
	}
	for _, a := range []string{annotations.IngressRate, annotations.EgressRate} {
		if op.Annotations[a] != p.Annotations[a] {
			r, err := ratesOf(p.Annotations)
			if err != nil {
				k.log.Warn("pod rate annotation is invalid; its limit is removed until it is valid again", "pod", key, "err", err)
			}
			onRates(key, r)
			return
		}
	}
}

func (k *Kube) signal(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for ch := range k.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (k *Kube) subscribe(key string) (chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	k.mu.Lock()
	if k.waiters[key] == nil {
		k.waiters[key] = map[chan struct{}]struct{}{}
	}
	k.waiters[key][ch] = struct{}{}
	k.mu.Unlock()
	return ch, func() {
		k.mu.Lock()
		delete(k.waiters[key], ch)
		if len(k.waiters[key]) == 0 {
			delete(k.waiters, key)
		}
		k.mu.Unlock()
	}
}

func (k *Kube) getPod(key string) *corev1.Pod {
	obj, ok, err := k.pods.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// PodNetwork waits until the controller has annotated the pod.
func (k *Kube) PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error) {
	if err := k.WaitSynced(ctx); err != nil {
		return nil, err
	}
	key := ref.Key()
	ch, cancel := k.subscribe(key)
	defer cancel()
	subCh, subCancel := k.subscribe(subnetsKey)
	defer subCancel()
	// A mismatch with OVN is refused once it has lasted mismatchGrace:
	// the southbound database may still be catching up with the
	// controller (a port it just changed), a forged annotation never does.
	var grace *time.Timer
	var graceC <-chan time.Time
	defer func() {
		if grace != nil {
			grace.Stop()
		}
	}()
	for {
		var ovnCh <-chan struct{}
		if k.ovn != nil {
			ovnCh = k.ovn.Changed() // before reading: no change is missed
		}
		p := k.getPod(key)
		var miss []string
		var mismatch *MismatchError
		if p != nil {
			miss = missingFor(ref, p.Annotations)
			if len(miss) == 0 {
				n, wait, err := k.confirmedNetwork(ctx, ref, p)
				switch {
				case errors.As(err, &mismatch):
					miss = []string{mismatch.Error()}
				case err != nil || wait == "":
					return n, err
				default:
					miss = []string{wait}
				}
			}
		}
		switch {
		case mismatch != nil && grace == nil:
			grace = time.NewTimer(k.mismatchGrace)
			graceC = grace.C
		case mismatch == nil && grace != nil:
			grace.Stop()
			grace, graceC = nil, nil
		}
		select {
		case <-ch:
		case <-subCh:
		case <-ovnCh:
		case <-graceC:
			return nil, mismatch
		case <-ctx.Done():
			if mismatch != nil {
				return nil, mismatch
			}
			return nil, k.waitError(p, ref, miss)
		}
	}
}

// confirmedNetwork is the pod's network when the controller confirmed
// every value the node acts on and they are what OVN holds; wait says
// what is still awaited; a *MismatchError says what differs from OVN.
func (k *Kube) confirmedNetwork(ctx context.Context, ref PodRef, p *corev1.Pod) (_ *PodNetwork, wait string, _ error) {
	if te := checkConfirmedFor(ref, p, k.trusted); te != nil {
		return nil, te.msg, nil
	}
	n, err := ParseNetwork(ref, p.Annotations)
	if err != nil {
		return nil, "", err
	}
	if err := validatePodNetwork(n); err != nil {
		var ae *AnnotationError
		if errors.As(err, &ae) {
			ae.Key = renameKey(ref, ae.Key)
		}
		return nil, "", err
	}
	// The checks below compare the default network's keys; an attachment's
	// are read under those names and renamed in what refuses the pod.
	ann := networkAnnotations(ref, p.Annotations)
	lsp, err := ref.VMPort(p.Annotations)
	if err != nil {
		return nil, "", err
	}
	if lsp == "" {
		lsp = ref.LSP()
	}
	n.LSP = lsp
	if k.ovn != nil {
		port, ok, err := k.ovn.Port(ctx, lsp)
		switch {
		case errors.Is(err, errOVNNotConnected):
			return nil, fmt.Sprintf("%s has not answered yet (the node compares the pod's annotations with the port the controller programmed there)", k.ovn.Where()), nil
		case err != nil:
			return nil, fmt.Sprintf("reading Port_Binding %s from %s: %v", lsp, k.ovn.Where(), err), nil
		case !ok:
			return nil, fmt.Sprintf("%s holds no Port_Binding for logical switch port %s yet (the controller programs it in the northbound database, ovn-northd copies it)", k.ovn.Where(), lsp), nil
		}
		if mm := matchOVN(ref.Key(), ann, n, port, k.ovn.Where()); mm != nil {
			mm.Field = renameKey(ref, mm.Field)
			return nil, "", mm
		}
		if lsp != ref.LSP() {
			if w := vmBound(lsp, port, k.ownChassis(), k.ovn.Where()); w != "" {
				return nil, w, nil
			}
		}
		n.Switch = port.Switch
	}
	w, mm := k.checkAgainstSubnet(ref, ann, n)
	if mm != nil {
		mm.Field = renameKey(ref, mm.Field)
		return nil, "", mm
	}
	if w != "" {
		return nil, w, nil
	}
	return n, "", nil
}

func (k *Kube) waitError(p *corev1.Pod, ref PodRef, miss []string) error {
	if p == nil {
		return &AnnotationTimeout{fmt.Sprintf("pod %s is not known on node %s: the node-local informer (spec.nodeName=%s) has not seen it; check that the pod is scheduled to this node", ref.Key(), k.node, k.node)}
	}
	of := ""
	if ref.Provider != "" {
		of = " for " + ref.Network()
	}
	msg := fmt.Sprintf("timed out waiting for the controller to annotate pod %s%s: missing %s", ref.Key(), of, strings.Join(miss, ", "))
	if len(miss) == 1 && !annotations.IsNetworkKey(strings.TrimSuffix(miss[0], "=true")) {
		msg = fmt.Sprintf("timed out waiting for the controller to confirm pod %s%s: %s", ref.Key(), of, miss[0])
	}
	if ev := k.lastEvent(p); ev != "" {
		msg += "; the controller reported: " + ev
	} else {
		msg += "; no event from the controller about this pod (is ovnhost-controller running?)"
	}
	return &AnnotationTimeout{msg}
}

// lastEvent returns the newest event about the pod from anything but the
// kubelet and scheduler, "reason: message".
func (k *Kube) lastEvent(p *corev1.Pod) string {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	evs, err := k.cs.CoreV1().Events(p.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.Set{"involvedObject.name": p.Name, "involvedObject.namespace": p.Namespace}.AsSelector().String(),
	})
	if err != nil || len(evs.Items) == 0 {
		return ""
	}
	items := evs.Items
	sort.Slice(items, func(i, j int) bool { return eventTime(items[i]).After(eventTime(items[j])) })
	for _, e := range items {
		if e.Source.Component == "kubelet" || e.Source.Component == "default-scheduler" || e.ReportingController == "kubelet" {
			continue
		}
		if strings.HasPrefix(e.Message, e.Reason) {
			return e.Message
		}
		return e.Reason + ": " + e.Message
	}
	return ""
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	}
	return e.CreationTimestamp.Time
}

// Release has nothing to free: the controller owns the address.
func (k *Kube) Release(context.Context, PodRef) error { return nil }

// ownChassis is this node's chassis name as its node daemon published it
// on its Node ("" not yet).
func (k *Kube) ownChassis() string {
	if obj, ok, _ := k.nodes.GetStore().GetByKey(k.node); ok {
		return obj.(*corev1.Node).Annotations[annotations.Chassis]
	}
	return ""
}

// vmBound says what a virtual machine's pod still waits for before it is
// wired here ("" nothing): while the VM's port is bound to another chassis,
// this node's chassis must be one OVN may bind it to (a live migration's
// target: the controller requests the port on both chassis first). Wired
// before that, ovn-controller here would either never bind the port (its
// ADD waiting for ovn-installed until the timeout, Kube-OVN's issue 6823)
// or, with no chassis requested, take it from the VM's running pod.
// Once requested here, ovn-controller binds the port as an additional
// chassis and sets ovn-installed; activation-strategy=rarp holds the
// traffic until the VM announces itself.
func vmBound(lsp string, port OVNPort, own, where string) string {
	if own == "" || port.Chassis == "" || port.Chassis == own || slices.Contains(port.Requested, own) {
		return ""
	}
	return fmt.Sprintf("virtual machine port %s is bound to chassis %s in %s and not requested on this node's chassis %s (options:requested-chassis %q); waiting for the controller to start the live migration (a pod of a running VM is wired only as a migration target, label %s)",
		lsp, port.Chassis, where, own, strings.Join(port.Requested, ","), annotations.KubeVirtMigrationJobUID)
}

// NodeNetwork waits for the controller's node annotations.
func (k *Kube) NodeNetwork(ctx context.Context) (*NodeNetwork, error) {
	if err := k.WaitSynced(ctx); err != nil {
		return nil, err
	}
	ch, cancel := k.subscribe(nodeKey)
	defer cancel()
	for {
		if obj, ok, _ := k.nodes.GetStore().GetByKey(k.node); ok {
			n := obj.(*corev1.Node)
			if nn, err := parseNodeAnnotations(n.Annotations); err == nil {
				nn.PodCIDRs = k.routedCIDRs(nn.Joins())
				nn.Egress = k.egressPlan(nn.Joins())
				return nn, nil
			}
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("node %s has no complete ovn.kubernetes.io node annotations (ip_address, mac_address, cidr, gateway, port_name): %w", k.node, ctx.Err())
		}
	}
}

func parseNodeAnnotations(ann map[string]string) (*NodeNetwork, error) {
	addrs, gws, err := nodeNetwork(ann[annotations.IPAddress], ann[annotations.CIDR], ann[annotations.Gateway])
	if err != nil {
		return nil, err
	}
	mac, err := net.ParseMAC(ann[annotations.MACAddress])
	if err != nil {
		return nil, err
	}
	name := ann[annotations.PortName]
	if name == "" {
		return nil, errors.New("no port_name")
	}
	return &NodeNetwork{PortName: name, Addrs: addrs, Gateways: gws, MAC: mac}, nil
}

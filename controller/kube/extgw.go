package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// externalGateway is Kube-OVN's default-VPC EIP/SNAT: the ConfigMap
// kube-system/ovn-external-gw-config programs the external gateway port
// (internal/ovnnet/external.go), the pod annotations ovn.kubernetes.io/eip
// and ovn.kubernetes.io/snat program each pod's NAT rules and policy. One
// EIP belongs to one pod: the pod that holds it keeps it, a second pod is
// refused with an event and gets it once the first lets go. A bad
// ConfigMap or annotation gets an event and changes nothing else. With
// type: distributed an EIP's rule names its pod's port, so the NAT happens
// on the pod's node, when that node has bridged the NIC; otherwise the
// rule stays centralized and a Warning EIPNotDistributed says why.
type externalGateway struct {
	c       *Controller
	factory informers.SharedInformerFactory // the one ConfigMap
	cms     corelisters.ConfigMapLister
	cmInf   cache.SharedIndexInformer
	q       workqueue.TypedRateLimitingInterface[string]

	mu       sync.Mutex
	cfg      *ovnnet.ExternalGatewayConfig // programmed (nil: none)
	why      string                        // why pods cannot get NAT now ("" when cfg is programmed)
	bridged  map[string]bool               // nodes with a chassis that bridged cfg.NIC (distributed EIPs go there)
	unusable map[string]string             // other nodes -> why not (for the pods' events)
	held     map[string]ovnnet.PodNAT      // pod key -> what is programmed for it
	via      map[string]netip.Addr         // pod key -> the next hop its policy was written with
	eips     map[netip.Addr]string         // EIP -> the pod holding it
	snats    map[netip.Addr]map[string]bool
	waiting  map[string]bool   // pods refused for a conflict or waiting for the gateway
	reported map[string]string // object+reason -> last message (one event per new problem)
}

// configKey is the queue key of the ConfigMap (pod keys contain a '/').
const configKey = "!config"

// extWorkers sync pods with EIP/SNAT (and the ConfigMap) in parallel.
const extWorkers = 4

func newExternalGateway(c *Controller) (addon, error) {
	x := &externalGateway{c: c, held: map[string]ovnnet.PodNAT{}, via: map[string]netip.Addr{}, eips: map[netip.Addr]string{},
		snats: map[netip.Addr]map[string]bool{}, waiting: map[string]bool{}, reported: map[string]string{},
		why: "ConfigMap " + cmName() + " not read yet"}
	x.q = workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](50*time.Millisecond, 30*time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "external-gateway"})
	// Only the one ConfigMap: its Role can name it (resourceNames).
	x.factory = informers.NewSharedInformerFactoryWithOptions(c.kc, 0, informers.WithNamespace(ovnnet.ExternalGatewayNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ovnnet.ExternalGatewayConfigMap).String()
		}))
	cmi := x.factory.Core().V1().ConfigMaps()
	x.cms, x.cmInf = cmi.Lister(), cmi.Informer()
	if _, err := x.cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { x.q.Add(configKey) },
		UpdateFunc: func(o, n any) {
			// Our own digest annotation comes back as an update: data is what matters.
			if !maps2Equal(o.(*corev1.ConfigMap).Data, n.(*corev1.ConfigMap).Data) {
				x.q.Add(configKey)
			}
		},
		DeleteFunc: func(any) { x.q.Add(configKey) },
	}); err != nil {
		return nil, err
	}
	// Gateway nodes: their chassis, bridged NIC and readiness rank them.
	if _, err := c.factory.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { x.q.Add(configKey) },
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Node), n.(*corev1.Node)
			if on.Annotations[annotations.Chassis] != nn.Annotations[annotations.Chassis] ||
				on.Annotations[annotations.ExternalGatewayNIC] != nn.Annotations[annotations.ExternalGatewayNIC] ||
				on.Labels[annotations.ExternalGatewayLabel] != nn.Labels[annotations.ExternalGatewayLabel] || readyOf(on) != readyOf(nn) {
				x.q.Add(configKey)
			}
		},
		DeleteFunc: func(any) { x.q.Add(configKey) },
	}); err != nil {
		return nil, err
	}
	podKey := func(obj any) (string, *corev1.Pod) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = d.Obj
		}
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return "", nil
		}
		return p.Namespace + "/" + p.Name, p
	}
	if _, err := c.factory.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if k, p := podKey(obj); p != nil && (wantsExternal(p) || x.holds(k)) {
				x.q.Add(k)
			}
		},
		UpdateFunc: func(o, n any) {
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			k, _ := podKey(n)
			if !wantsExternal(op) && !wantsExternal(np) && !x.holds(k) {
				return
			}
			for _, a := range []string{annotations.EIP, annotations.SNAT, annotations.IPAddress, annotations.Allocated} {
				if op.Annotations[a] != np.Annotations[a] {
					x.q.Add(k)
					return
				}
			}
			if op.UID != np.UID || op.Status.Phase != np.Status.Phase || op.Spec.NodeName != np.Spec.NodeName {
				x.q.Add(k)
			}
		},
		DeleteFunc: func(obj any) {
			if k, p := podKey(obj); p != nil && (wantsExternal(p) || x.holds(k)) {
				x.q.Add(k)
			}
		},
	}); err != nil {
		return nil, err
	}
	return x, nil
}

func cmName() string { return ovnnet.ExternalGatewayNamespace + "/" + ovnnet.ExternalGatewayConfigMap }

func wantsExternal(p *corev1.Pod) bool {
	return p.Annotations[annotations.EIP] != "" || p.Annotations[annotations.SNAT] != ""
}

func (x *externalGateway) holds(key string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.held[key]
	return ok
}

// start learns from the NB which pod holds which EIP (so the earlier
// holder keeps it across a controller restart), then, once the ConfigMap
// cache has synced, programs the gateway before any pod.
func (x *externalGateway) start(ctx context.Context, wg *sync.WaitGroup) error {
	nats, err := x.c.net.PodNATs(ctx)
	if err != nil {
		return fmt.Errorf("kube: external gateway: reading NAT rules: %w", err)
	}
	x.mu.Lock()
	for _, p := range nats {
		x.claim(p)
	}
	x.mu.Unlock()
	x.factory.Start(ctx.Done())
	wg.Add(1)
	go func() {
		defer wg.Done()
		// Without the RBAC to read the ConfigMap this never syncs: say so
		// and keep waiting (the rest of the controller works).
		synced := make(chan bool, 1)
		go func() { synced <- cache.WaitForCacheSync(ctx.Done(), x.cmInf.HasSynced) }()
		select {
		case ok := <-synced:
			if !ok {
				return
			}
		case <-time.After(30 * time.Second):
			x.c.log.Warn("EIP/SNAT: the ConfigMap cache has not synced after 30s; can the controller read it?", "configmap", cmName())
			if !<-synced {
				return
			}
		}
		// The gateway first, so the pods' first sync finds it.
		if err := x.syncConfig(ctx); err != nil && ctx.Err() == nil {
			x.c.log.Warn("EIP/SNAT: first ConfigMap sync failed, will retry", "err", err)
			x.q.AddRateLimited(configKey)
		}
		pods, _ := x.c.pods.List(everything)
		for _, p := range pods {
			if wantsExternal(p) {
				x.q.Add(p.Namespace + "/" + p.Name)
			}
		}
		for _, p := range nats {
			x.q.Add(p.Pod)
		}
		var inner sync.WaitGroup
		for i := 0; i < extWorkers; i++ {
			inner.Add(1)
			go func() {
				defer inner.Done()
				for x.c.processNext(ctx, x.q, x.sync, "external gateway") {
				}
			}()
		}
		<-ctx.Done()
		x.q.ShutDown()
		inner.Wait()
	}()
	return nil
}

func (x *externalGateway) sync(ctx context.Context, key string) error {
	if key == configKey {
		return x.syncConfig(ctx)
	}
	return x.syncPod(ctx, key)
}

// report records an event once per new message for that object and reason.
func (x *externalGateway) report(obj any, ref, typ, reason, msg string) {
	k := ref + "|" + reason
	x.mu.Lock()
	same := x.reported[k] == msg
	x.reported[k] = msg
	x.mu.Unlock()
	if same {
		return
	}
	if typ == corev1.EventTypeWarning {
		x.c.log.Warn("EIP/SNAT: "+reason, "object", ref, "message", msg)
	} else {
		x.c.log.Info("EIP/SNAT: "+reason, "object", ref, "message", msg)
	}
	switch v := obj.(type) {
	case *corev1.Pod:
		x.c.recorder.Event(v, typ, reason, msg)
	case *corev1.ConfigMap:
		x.c.recorder.Event(v, typ, reason, msg)
	}
}

func (x *externalGateway) forget(ref string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := range x.reported {
		if strings.HasPrefix(k, ref+"|") {
			delete(x.reported, k)
		}
	}
}

// syncConfig validates the ConfigMap and programs (or removes) the gateway.
func (x *externalGateway) syncConfig(ctx context.Context) error {
	cm, err := x.cms.ConfigMaps(ovnnet.ExternalGatewayNamespace).Get(ovnnet.ExternalGatewayConfigMap)
	if apierrors.IsNotFound(err) {
		return x.disable(ctx, nil, "there is no ConfigMap "+cmName()+"; create it to use EIP/SNAT (README, Egress)")
	}
	if err != nil {
		return err
	}
	ref := "configmap/" + cmName()
	cfg, err := ovnnet.ParseExternalGatewayConfig(cm.Data)
	if err != nil {
		// Nothing else changes: what an earlier version programmed stays.
		msg := strings.ReplaceAll(err.Error(), "\n", "; ")
		x.report(cm, ref, corev1.EventTypeWarning, "InvalidExternalGatewayConfig", msg+" (nothing was changed)")
		x.setWhy("ConfigMap " + cmName() + " is not valid: " + msg)
		return nil
	}
	x.forget(ref)
	if !cfg.Enabled {
		if err := x.disable(ctx, cm, "enable-external-gw is false in "+cmName()); err != nil {
			return err
		}
		return x.confirm(ctx, cm)
	}
	var unknown []string
	var listed []*corev1.Node
	all, err := x.c.nodes.List(everything)
	if err != nil {
		return err
	}
	for _, name := range cfg.Nodes {
		if _, err := x.c.nodes.Get(name); apierrors.IsNotFound(err) {
			unknown = append(unknown, name)
		}
	}
	var allNames []string
	for _, n := range all {
		allNames = append(allNames, n.Name)
	}
	for _, name := range cfg.GatewayOrder(allNames) {
		nd, err := x.c.nodes.Get(name)
		if apierrors.IsNotFound(err) {
			continue // gone since the List
		}
		if err != nil {
			return err
		}
		listed = append(listed, nd)
	}
	if len(unknown) > 0 {
		names := slices.Clone(allNames)
		sort.Strings(names)
		msg := fmt.Sprintf("%s: external-gw-nodes names node(s) %s that do not exist; list existing nodes (%s) (nothing was changed)",
			cmName(), strings.Join(unknown, ", "), strings.Join(names, ", "))
		x.report(cm, ref, corev1.EventTypeWarning, "UnknownGatewayNode", msg)
		x.setWhy(msg)
		return nil
	}
	if len(cfg.Ignored) > 0 {
		x.report(cm, ref, corev1.EventTypeWarning, "ExternalGatewayKeyIgnored",
			fmt.Sprintf("%s: key(s) %s mean nothing to ovnhost and are ignored; remove them", cmName(), strings.Join(cfg.Ignored, ", ")))
	}
	var gwNames []string
	for _, nd := range listed {
		gwNames = append(gwNames, nd.Name)
	}
	if err := x.labelNodes(ctx, gwNames); err != nil {
		return err
	}
	if err := x.confirm(ctx, cm); err != nil {
		return err
	}
	// A gateway node counts once its daemon has bridged the NIC (and has a chassis, and is Ready).
	var ready []ovnnet.GatewayNode
	var names, waiting []string
	bridged, unusable := map[string]bool{}, map[string]string{}
	for _, nd := range listed {
		ch := nd.Annotations[annotations.Chassis]
		nic := nd.Annotations[annotations.ExternalGatewayNIC]
		// A distributed EIP needs the pod's node to have the NIC in
		// br-external (its localnet port), not the node to be Ready: a
		// node whose kubelet is down still forwards its pods' packets.
		switch {
		case ch == "":
			unusable[nd.Name] = "has no chassis annotation (is ovnhost running there?)"
		case nic != cfg.NIC:
			unusable[nd.Name] = fmt.Sprintf("has not bridged %s (its daemon reports why in the events of %s)", cfg.NIC, cmName())
		default:
			bridged[nd.Name] = true
		}
		switch {
		case ch == "" || nic != cfg.NIC || !nodeReady(nd):
			why := "not Ready"
			if ch == "" {
				why = "no chassis annotation (is ovnhost running there?)"
			} else if nic != cfg.NIC {
				why = fmt.Sprintf("has not bridged %s (annotation %s=%q; its daemon reports why in the ConfigMap's events)", cfg.NIC, annotations.ExternalGatewayNIC, nic)
			}
			waiting = append(waiting, nd.Name+": "+why)
		default:
			ready = append(ready, ovnnet.GatewayNode{Node: nd.Name, Chassis: ch})
			names = append(names, nd.Name)
		}
	}
	if len(ready) == 0 {
		// Keep what is programmed: OVN still fails over among those chassis.
		msg := "no gateway node can carry EIP/SNAT yet: " + strings.Join(waiting, "; ")
		x.report(cm, ref, corev1.EventTypeNormal, "WaitingForGatewayNodes", msg)
		x.mu.Lock()
		programmed := x.cfg != nil
		x.mu.Unlock()
		if !programmed {
			x.setWhy(msg)
		}
		return nil
	}
	if err := x.c.net.EnsureExternalGateway(ctx, cfg, ready); err != nil {
		return err
	}
	x.mu.Lock()
	x.cfg, x.why, x.bridged, x.unusable = &cfg, "", bridged, unusable
	x.mu.Unlock()
	where := "on gateway nodes"
	if cfg.Distributed {
		where = "distributed (each EIP NATed on its pod's node); SNAT and the router's own address on gateway nodes"
	}
	msg := fmt.Sprintf("external gateway %s (%s, MAC %s, next hop %s) %s in priority order: %s", ovnnet.ExternalRouterPort(ovnnet.DefaultRouter),
		cfg.PortIP, cfg.PortMAC, cfg.GatewayIP, where, strings.Join(names, ", "))
	if len(waiting) > 0 {
		msg += "; left out: " + strings.Join(waiting, "; ")
	}
	x.report(cm, ref, corev1.EventTypeNormal, "ExternalGatewayProgrammed", msg)
	x.requeuePods()
	return nil
}

func (x *externalGateway) setWhy(msg string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cfg == nil {
		x.why = msg
	}
}

// confirm writes the digest of the data the controller accepted: gateway
// nodes act only on a ConfigMap that carries the digest of its own data.
func (x *externalGateway) confirm(ctx context.Context, cm *corev1.ConfigMap) error {
	d := ovnnet.ExternalGatewayDigest(cm.Data)
	if cm.Annotations[ovnnet.ExternalDigestAnnotation] == d {
		return nil
	}
	// The resourceVersion precondition: the digest is of the data we read.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cm.ResourceVersion,
		"annotations": map[string]string{ovnnet.ExternalDigestAnnotation: d}}})
	_, err := x.c.kc.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed meanwhile: its own event follows
	}
	return err
}

// labelNodes puts Kube-OVN's external-gw=true label on the gateway nodes
// and takes it off the others.
func (x *externalGateway) labelNodes(ctx context.Context, gw []string) error {
	all, err := x.c.nodes.List(everything)
	if err != nil {
		return err
	}
	for _, n := range all {
		want := slices.Contains(gw, n.Name)
		has := n.Labels[annotations.ExternalGatewayLabel] == "true"
		if want == has {
			continue
		}
		var v any
		if want {
			v = "true"
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{annotations.ExternalGatewayLabel: v}}})
		if _, err := x.c.kc.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("labelling node %s %s: %w", n.Name, annotations.ExternalGatewayLabel, err)
		}
	}
	return nil
}

// disable removes the gateway and every pod's NAT (ConfigMap gone or
// enable-external-gw false).
func (x *externalGateway) disable(ctx context.Context, cm *corev1.ConfigMap, why string) error {
	x.mu.Lock()
	had := x.cfg != nil || len(x.held) > 0
	x.mu.Unlock()
	programmed, err := x.c.net.ExternalGatewayProgrammed(ctx)
	if err != nil {
		return err
	}
	if had || programmed {
		if err := x.c.net.RemoveExternalGateway(ctx); err != nil {
			return err
		}
		x.c.log.Info("EIP/SNAT: external gateway removed", "why", why)
		if cm != nil {
			x.c.recorder.Event(cm, corev1.EventTypeNormal, "ExternalGatewayRemoved", "external gateway and every pod's EIP/SNAT removed: "+why)
		}
	}
	if err := x.labelNodes(ctx, nil); err != nil {
		return err
	}
	x.mu.Lock()
	x.cfg, x.why, x.bridged, x.unusable = nil, why, nil, nil
	x.held, x.via, x.eips, x.snats = map[string]ovnnet.PodNAT{}, map[string]netip.Addr{}, map[netip.Addr]string{}, map[netip.Addr]map[string]bool{}
	x.mu.Unlock()
	if had {
		x.requeuePods()
	}
	return nil
}

// requeuePods queues every pod that asks for or holds EIP/SNAT.
func (x *externalGateway) requeuePods() {
	pods, _ := x.c.pods.List(everything)
	for _, p := range pods {
		if wantsExternal(p) {
			x.q.Add(p.Namespace + "/" + p.Name)
		}
	}
	x.mu.Lock()
	keys := make([]string, 0, len(x.held)+len(x.waiting))
	for k := range x.held {
		keys = append(keys, k)
	}
	for k := range x.waiting {
		keys = append(keys, k)
	}
	x.waiting = map[string]bool{}
	x.mu.Unlock()
	for _, k := range keys {
		x.q.Add(k)
	}
}

// claim records p as programmed (x.mu held).
func (x *externalGateway) claim(p ovnnet.PodNAT) {
	x.unclaim(p.Pod)
	x.held[p.Pod] = p
	if p.EIP.IsValid() {
		x.eips[p.EIP] = p.Pod
	}
	if p.SNAT.IsValid() {
		if x.snats[p.SNAT] == nil {
			x.snats[p.SNAT] = map[string]bool{}
		}
		x.snats[p.SNAT][p.Pod] = true
	}
}

// unclaim forgets what pod holds and reports whether it held an EIP (x.mu held).
func (x *externalGateway) unclaim(pod string) bool {
	p, ok := x.held[pod]
	if !ok {
		return false
	}
	delete(x.held, pod)
	delete(x.via, pod)
	freed := false
	if p.EIP.IsValid() && x.eips[p.EIP] == pod {
		delete(x.eips, p.EIP)
		freed = true
	}
	if p.SNAT.IsValid() {
		delete(x.snats[p.SNAT], pod)
		if len(x.snats[p.SNAT]) == 0 {
			delete(x.snats, p.SNAT)
			freed = true
		}
	}
	return freed
}

// release removes what a pod holds; pods refused for a conflict try again.
func (x *externalGateway) release(ctx context.Context, key string) error {
	x.mu.Lock()
	_, had := x.held[key]
	x.mu.Unlock()
	if !had {
		return nil
	}
	if err := x.c.net.RemovePodNAT(ctx, key); err != nil {
		return err
	}
	x.mu.Lock()
	freed := x.unclaim(key)
	var wake []string
	if freed {
		for k := range x.waiting {
			wake = append(wake, k)
		}
		x.waiting = map[string]bool{}
	}
	x.mu.Unlock()
	x.c.log.Info("EIP/SNAT removed", "pod", key)
	for _, k := range wake {
		x.q.Add(k)
	}
	return nil
}

func (x *externalGateway) syncPod(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	ref := "pod/" + key
	pod, err := x.c.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		x.forget(ref)
		x.unwait(key)
		return x.release(ctx, key)
	}
	if err != nil {
		return err
	}
	if !wantsAddress(pod) || pod.DeletionTimestamp != nil || !wantsExternal(pod) {
		x.forget(ref)
		x.unwait(key)
		return x.release(ctx, key)
	}
	x.mu.Lock()
	cfg, why := x.cfg, x.why
	x.mu.Unlock()
	if cfg == nil {
		// What an earlier configuration programmed stays until the gateway is removed.
		x.wait(key)
		x.report(pod, ref, corev1.EventTypeWarning, "ExternalGatewayNotReady", fmt.Sprintf("EIP/SNAT of this pod cannot be programmed: %s", why))
		return nil
	}
	want := ovnnet.PodNAT{Pod: key}
	if s := pod.Annotations[annotations.EIP]; s != "" {
		a, err := cfg.CheckExternalAddress(annotations.EIP, s)
		if err != nil {
			x.report(pod, ref, corev1.EventTypeWarning, "InvalidEIP", err.Error())
			return x.release(ctx, key)
		}
		want.EIP = a
	}
	if s := pod.Annotations[annotations.SNAT]; s != "" {
		a, err := cfg.CheckExternalAddress(annotations.SNAT, s)
		if err != nil {
			x.report(pod, ref, corev1.EventTypeWarning, "InvalidSNAT", err.Error())
			return x.release(ctx, key)
		}
		if want.EIP.IsValid() {
			// dnat_and_snat already gives the pod's connections the EIP as source.
			x.report(pod, ref, corev1.EventTypeWarning, "SNATIgnored", fmt.Sprintf("annotation %s=%s is not applied: the pod has %s=%s, and its connections leave from the EIP; remove one of them",
				annotations.SNAT, s, annotations.EIP, want.EIP))
		} else {
			want.SNAT = a
		}
	}
	if pod.Annotations[annotations.Allocated] != "true" {
		return nil // the pod's own sync annotates it; that update queues it again
	}
	ips, err := ipam.ParseIPs(pod.Annotations[annotations.IPAddress])
	if err != nil {
		return nil
	}
	for _, ip := range ips {
		if ip.Is4() {
			want.IP = ip
		}
	}
	if !want.IP.IsValid() {
		x.report(pod, ref, corev1.EventTypeWarning, "InvalidEIP", "EIP/SNAT needs an IPv4 pod address; this pod has "+pod.Annotations[annotations.IPAddress])
		return x.release(ctx, key)
	}
	// Distributed: the EIP is NATed on the pod's node when that node can.
	centralWhy := ""
	if cfg.Distributed && want.EIP.IsValid() {
		x.mu.Lock()
		node := pod.Spec.NodeName
		switch {
		case node == "":
			centralWhy = "the pod is not on a node yet"
		case x.bridged[node]:
			want.Port = ovnnet.PortName(pod.Namespace, pod.Name)
		case x.unusable[node] != "":
			centralWhy = "its node " + node + " " + x.unusable[node]
		default:
			centralWhy = "its node " + node + " is unknown to the controller"
		}
		x.mu.Unlock()
	}
	// One EIP, one pod: the holder keeps it. An EIP is not also anyone's SNAT.
	x.mu.Lock()
	var conflict string
	if want.EIP.IsValid() {
		if owner := x.eips[want.EIP]; owner != "" && owner != key {
			conflict = fmt.Sprintf("EIP %s is held by pod %s; remove its %s annotation or choose another address (this pod gets it once %s lets it go)", want.EIP, owner, annotations.EIP, owner)
		} else if users := otherPods(x.snats[want.EIP], key); len(users) > 0 {
			conflict = fmt.Sprintf("EIP %s is the SNAT address of pod(s) %s; choose another address", want.EIP, strings.Join(users, ", "))
		}
	}
	if want.SNAT.IsValid() {
		if owner := x.eips[want.SNAT]; owner != "" && owner != key {
			conflict = fmt.Sprintf("SNAT address %s is the EIP of pod %s; choose another address", want.SNAT, owner)
		}
	}
	if conflict != "" {
		x.waiting[key] = true
		x.mu.Unlock()
		x.report(pod, ref, corev1.EventTypeWarning, "EIPConflict", conflict)
		return x.release(ctx, key)
	}
	old, had := x.held[key]
	if had && old == want && x.via[key] == cfg.GatewayIP {
		x.mu.Unlock()
		if centralWhy != "" {
			// Also when the rule is already so (switching to distributed changes nothing for it).
			x.reportNotDistributed(pod, ref, want.EIP, centralWhy, cfg.NIC)
		}
		return nil
	}
	x.claim(want) // before the NB write: a concurrent pod asking for it is refused
	x.mu.Unlock()
	if err := x.c.net.EnsurePodNAT(ctx, *cfg, want); err != nil {
		x.mu.Lock()
		x.unclaim(key)
		if had {
			x.claim(old)
		}
		x.mu.Unlock()
		return err
	}
	x.mu.Lock()
	x.via[key] = cfg.GatewayIP
	x.mu.Unlock()
	x.forget(ref)
	var parts []string
	switch {
	case want.Port != "":
		parts = append(parts, fmt.Sprintf("reached at and leaving from EIP %s on its node %s (distributed, MAC %s)", want.EIP, pod.Spec.NodeName, ovnnet.EIPMAC(want.EIP)))
	case want.EIP.IsValid():
		parts = append(parts, fmt.Sprintf("reached at and leaving from EIP %s", want.EIP))
	}
	if centralWhy != "" {
		x.reportNotDistributed(pod, ref, want.EIP, centralWhy, cfg.NIC)
	}
	if want.SNAT.IsValid() {
		parts = append(parts, fmt.Sprintf("leaving from SNAT address %s", want.SNAT))
	}
	x.report(pod, ref, corev1.EventTypeNormal, "ExternalNATProgrammed", strings.Join(parts, "; ")+" through "+ovnnet.ExternalRouterPort(ovnnet.DefaultRouter))
	if had && (old.EIP != want.EIP || old.SNAT != want.SNAT) {
		x.wakeAll()
	}
	return nil
}

func (x *externalGateway) reportNotDistributed(pod *corev1.Pod, ref string, eip netip.Addr, why, nic string) {
	x.report(pod, ref, corev1.EventTypeWarning, "EIPNotDistributed", fmt.Sprintf("EIP %s is NATed on the active gateway node, not on this pod's node: %s; it moves to the pod's node once that node has bridged %s",
		eip, why, nic))
}

func otherPods(m map[string]bool, self string) []string {
	var out []string
	for k := range m {
		if k != self {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func (x *externalGateway) wait(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.waiting[key] = true
}

func (x *externalGateway) unwait(key string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.waiting, key)
}

// wakeAll requeues refused pods (an address was let go).
func (x *externalGateway) wakeAll() {
	x.mu.Lock()
	var keys []string
	for k := range x.waiting {
		keys = append(keys, k)
	}
	x.waiting = map[string]bool{}
	x.mu.Unlock()
	for _, k := range keys {
		x.q.Add(k)
	}
}

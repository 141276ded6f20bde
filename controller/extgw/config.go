package extgw

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// syncConfig validates the ConfigMap and programs (or removes) the gateway.
func (x *Reconciler) syncConfig(ctx context.Context) error {
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
	listed, unknown, allNames, err := x.gatewayNodes(cfg)
	if err != nil {
		return err
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
	if len(cfg.Policy.Allowed) == 0 {
		x.report(cm, ref, corev1.EventTypeWarning, "NoNamespaceMayUseExternalAddresses",
			fmt.Sprintf("%s: key %s lists no namespace, so every pod's EIP/SNAT is refused; add one line per namespace, \"<namespace>: <addresses>\" (README, EIP and SNAT)", cmName(), ovnnet.KeyNamespaceAddresses))
	} else {
		x.forgetReason(ref, "NoNamespaceMayUseExternalAddresses")
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
	return x.program(ctx, cm, ref, cfg, classify(cfg, listed))
}

// gatewayNodes are the nodes that carry the gateway, in priority order,
// the ones external-gw-nodes names that do not exist, and every node's name.
func (x *Reconciler) gatewayNodes(cfg ovnnet.ExternalGatewayConfig) (listed []*corev1.Node, unknown, allNames []string, err error) {
	all, err := x.nodes.List(labels.Everything())
	if err != nil {
		return nil, nil, nil, err
	}
	for _, name := range cfg.Nodes {
		if _, err := x.nodes.Get(name); apierrors.IsNotFound(err) {
			unknown = append(unknown, name)
		}
	}
	for _, n := range all {
		allNames = append(allNames, n.Name)
	}
	for _, name := range cfg.GatewayOrder(allNames) {
		nd, err := x.nodes.Get(name)
		if apierrors.IsNotFound(err) {
			continue // gone since the List
		}
		if err != nil {
			return nil, nil, nil, err
		}
		listed = append(listed, nd)
	}
	return listed, unknown, allNames, nil
}

// gatewayState is what the gateway nodes can do now.
type gatewayState struct {
	ready    []ovnnet.GatewayNode // in the HA group, in priority order
	names    []string             // their names
	waiting  []string             // "<node>: why it is left out"
	bridged  map[string]bool      // nodes with a chassis that bridged cfg.NIC (distributed EIPs go there)
	unusable map[string]string    // other nodes -> why not (for the pods' events)
}

// classify sorts the listed nodes: a gateway node counts once its daemon
// has bridged the NIC (and has a chassis, and is Ready).
func classify(cfg ovnnet.ExternalGatewayConfig, listed []*corev1.Node) gatewayState {
	st := gatewayState{bridged: map[string]bool{}, unusable: map[string]string{}}
	for _, nd := range listed {
		ch := nd.Annotations[annotations.Chassis]
		nic := nd.Annotations[annotations.ExternalGatewayNIC]
		// A distributed EIP needs the pod's node to have the NIC in
		// br-external (its localnet port), not the node to be Ready: a
		// node whose kubelet is down still forwards its pods' packets.
		switch {
		case ch == "":
			st.unusable[nd.Name] = "has no chassis annotation (is ovnhost running there?)"
		case nic != cfg.NIC:
			st.unusable[nd.Name] = fmt.Sprintf("has not bridged %s (its daemon reports why in the events of %s)", cfg.NIC, cmName())
		default:
			st.bridged[nd.Name] = true
		}
		switch {
		case ch == "" || nic != cfg.NIC || !reconcile.NodeReady(nd):
			why := "not Ready"
			if ch == "" {
				why = "no chassis annotation (is ovnhost running there?)"
			} else if nic != cfg.NIC {
				why = fmt.Sprintf("has not bridged %s (annotation %s=%q; its daemon reports why in the ConfigMap's events)", cfg.NIC, annotations.ExternalGatewayNIC, nic)
			}
			st.waiting = append(st.waiting, nd.Name+": "+why)
		default:
			st.ready = append(st.ready, ovnnet.GatewayNode{Node: nd.Name, Chassis: ch})
			st.names = append(st.names, nd.Name)
		}
	}
	return st
}

// program writes the gateway with the ready nodes' chassis, or, with none
// ready, keeps what is programmed (OVN still fails over among those
// chassis) and says what it waits for.
func (x *Reconciler) program(ctx context.Context, cm *corev1.ConfigMap, ref string, cfg ovnnet.ExternalGatewayConfig, st gatewayState) error {
	if len(st.ready) == 0 {
		msg := "no gateway node can carry EIP/SNAT yet: " + strings.Join(st.waiting, "; ")
		x.report(cm, ref, corev1.EventTypeNormal, "WaitingForGatewayNodes", msg)
		x.mu.Lock()
		programmed := x.cfg != nil
		policyChanged := programmed && !reflect.DeepEqual(x.cfg.Policy, cfg.Policy)
		if policyChanged {
			// What is programmed stays, but who may hold which address is
			// the admin's current word: the pods are checked again now.
			kept := *x.cfg
			kept.Policy = cfg.Policy
			x.cfg = &kept
		}
		x.mu.Unlock()
		if !programmed {
			x.setWhy(msg)
		}
		if policyChanged {
			x.requeuePods()
		}
		return nil
	}
	if err := x.deps.Net.EnsureExternalGateway(ctx, cfg, st.ready); err != nil {
		return err
	}
	x.mu.Lock()
	x.cfg, x.why, x.bridged, x.unusable, x.ready = &cfg, "", st.bridged, st.unusable, st.ready
	x.mu.Unlock()
	x.notify()
	where := "on gateway nodes"
	if cfg.Distributed {
		where = "distributed (each EIP NATed on its pod's node); SNAT and the router's own address on gateway nodes"
	}
	msg := fmt.Sprintf("external gateway %s (%s, MAC %s, next hop %s) %s in priority order: %s", ovnnet.ExternalRouterPort(ovnnet.DefaultRouter),
		cfg.PortIP, cfg.PortMAC, cfg.GatewayIP, where, strings.Join(st.names, ", "))
	if len(st.waiting) > 0 {
		msg += "; left out: " + strings.Join(st.waiting, "; ")
	}
	x.report(cm, ref, corev1.EventTypeNormal, "ExternalGatewayProgrammed", msg)
	x.requeuePods()
	return nil
}

func (x *Reconciler) setWhy(msg string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cfg == nil {
		x.why = msg
	}
}

// confirm writes the digest of the data the controller accepted: gateway
// nodes act only on a ConfigMap that carries the digest of its own data.
func (x *Reconciler) confirm(ctx context.Context, cm *corev1.ConfigMap) error {
	d := ovnnet.ExternalGatewayDigest(cm.Data)
	if cm.Annotations[ovnnet.ExternalDigestAnnotation] == d {
		return nil
	}
	// The resourceVersion precondition: the digest is of the data we read.
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": cm.ResourceVersion,
		"annotations": map[string]string{ovnnet.ExternalDigestAnnotation: d}}})
	_, err := x.deps.Kube.CoreV1().ConfigMaps(cm.Namespace).Patch(ctx, cm.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil // changed meanwhile: its own event follows
	}
	return err
}

// labelNodes puts Kube-OVN's external-gw=true label on the gateway nodes
// and takes it off the others.
func (x *Reconciler) labelNodes(ctx context.Context, gw []string) error {
	all, err := x.nodes.List(labels.Everything())
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
		if _, err := x.deps.Kube.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("labelling node %s %s: %w", n.Name, annotations.ExternalGatewayLabel, err)
		}
	}
	return nil
}

// disable removes the gateway and every pod's NAT (ConfigMap gone or
// enable-external-gw false).
func (x *Reconciler) disable(ctx context.Context, cm *corev1.ConfigMap, why string) error {
	x.mu.Lock()
	had := x.cfg != nil || len(x.held) > 0
	x.mu.Unlock()
	programmed, err := x.deps.Net.ExternalGatewayProgrammed(ctx)
	if err != nil {
		return err
	}
	if had || programmed {
		if err := x.deps.Net.RemoveExternalGateway(ctx); err != nil {
			return err
		}
		x.log.Info("EIP/SNAT: external gateway removed", "why", why)
		if cm != nil {
			x.deps.Recorder.Event(cm, corev1.EventTypeNormal, "ExternalGatewayRemoved", "external gateway and every pod's EIP/SNAT removed: "+why)
		}
	}
	if err := x.labelNodes(ctx, nil); err != nil {
		return err
	}
	x.mu.Lock()
	x.cfg, x.why, x.bridged, x.unusable, x.ready = nil, why, nil, nil, nil
	x.held, x.via, x.eips, x.snats = map[string]ovnnet.PodNAT{}, map[string]netip.Addr{}, map[netip.Addr]string{}, map[netip.Addr]map[string]bool{}
	x.mu.Unlock()
	if had {
		x.requeuePods()
	}
	x.notify()
	return nil
}

// requeuePods queues every pod that asks for or holds EIP/SNAT.
func (x *Reconciler) requeuePods() {
	pods, _ := x.pods.List(labels.Everything())
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

package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// GatewayReady is the condition of a centralized subnet's gateway: True
// once its gateway port and HA chassis group are programmed, False with the
// reason when gatewayNode cannot be applied (nothing is touched then).
const GatewayReady = "GatewayReady"

// syncGateway programs or removes a valid subnet's centralized gateway and
// returns its GatewayReady condition (nil for a distributed subnet). Which
// gateway is active is OVN's decision (BFD between the HA chassis), not the
// controller's: the controller only ranks the nodes, leaving out NotReady ones.
func (c *Controller) syncGateway(ctx context.Context, u *unstructured.Unstructured, s *kubeovnv1.Subnet, cfg ipam.SubnetConfig) (*kubeovnv1.Condition, error) {
	name := u.GetName()
	if s == nil || s.Spec.GatewayType != "centralized" {
		return nil, c.removeGateway(ctx, name, u)
	}
	bad := func(reason, msg string) (*kubeovnv1.Condition, error) {
		c.log.Warn("centralized gateway not applied", "subnet", name, "reason", reason, "message", msg)
		return &kubeovnv1.Condition{Type: GatewayReady, Status: "False", Reason: reason, Message: msg}, nil
	}
	specs, err := ovnnet.ParseGatewayNode(s.Spec.GatewayNode)
	if err != nil {
		return bad("InvalidGatewayNode", err.Error())
	}
	var nodes []ovnnet.GatewayNode
	var unknown, noChassis, notReady, used []string
	for _, g := range specs {
		nd, err := c.nodes.Get(g.Node)
		if apierrors.IsNotFound(err) {
			unknown = append(unknown, g.Node)
			continue
		}
		if err != nil {
			return nil, err
		}
		ch := nd.Annotations[annotations.Chassis]
		switch {
		case ch == "":
			noChassis = append(noChassis, g.Node)
		case !nodeReady(nd):
			notReady = append(notReady, g.Node)
		default:
			nodes = append(nodes, ovnnet.GatewayNode{Node: g.Node, Chassis: ch})
			used = append(used, g.Node)
		}
	}
	if len(unknown) > 0 {
		all, _ := c.nodes.List(everything)
		var names []string
		for _, n := range all {
			names = append(names, n.Name)
		}
		slices.Sort(names)
		return bad("UnknownGatewayNode", fmt.Sprintf("gatewayNode %q names node(s) %s that do not exist; list existing nodes (%s)",
			s.Spec.GatewayNode, strings.Join(unknown, ", "), strings.Join(names, ", ")))
	}
	if len(nodes) == 0 {
		// Keep what is programmed: OVN still fails over among those chassis.
		msg := "no gateway node can take the subnet's traffic:"
		if len(noChassis) > 0 {
			msg += fmt.Sprintf(" %s without annotation %s (is ovnhost running there?);", strings.Join(noChassis, ", "), annotations.Chassis)
		}
		if len(notReady) > 0 {
			msg += fmt.Sprintf(" %s NotReady;", strings.Join(notReady, ", "))
		}
		return bad("NoGatewayNode", strings.TrimSuffix(msg, ";")+"; start ovnhost on a gateway node or list another node in gatewayNode")
	}
	nodes = c.rankGateways(name, u, nodes)
	used = used[:0]
	for _, g := range nodes {
		used = append(used, g.Node)
	}
	transit, err := c.net.EnsureCentralizedGateway(ctx, name, cfg.CIDRs, nodes)
	if err != nil {
		return nil, err
	}
	if u.GetAnnotations()[ovnnet.TransitAnnotation] != transit.String() {
		if err := c.annotateSubnet(ctx, name, transit.String()); err != nil {
			return nil, err
		}
	}
	msg := "gateway nodes in priority order: " + strings.Join(used, ", ")
	if len(noChassis)+len(notReady) > 0 {
		msg += "; left out: " + strings.Join(append(noChassis, notReady...), ", ") + " (no chassis or NotReady)"
	}
	return &kubeovnv1.Condition{Type: GatewayReady, Status: "True", Reason: "GatewayProgrammed", Message: msg}, nil
}

// removeGateway removes a subnet's gateway if it has one (subnet deleted or
// distributed again); u is nil for a deleted subnet.
func (c *Controller) removeGateway(ctx context.Context, name string, u *unstructured.Unstructured) error {
	subs, err := c.net.CentralizedSubnets(ctx)
	if err != nil || !slices.Contains(subs, name) {
		return err
	}
	if err := c.net.RemoveCentralizedGateway(ctx, name); err != nil {
		return err
	}
	c.log.Info("centralized gateway removed", "subnet", name)
	if u == nil {
		return nil
	}
	if err := c.annotateSubnet(ctx, name, ""); err != nil {
		return err
	}
	patch := []byte(`{"status":{"activateGateway":null}}`)
	_, err = c.dc.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status")
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// annotateSubnet records the transit network for the gateway nodes ("" removes it).
func (c *Controller) annotateSubnet(ctx context.Context, name, transit string) error {
	var v any = transit
	if transit == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{ovnnet.TransitAnnotation: v}}})
	_, err := c.dc.Resource(kubeovnv1.SubnetGVR).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// collectGateways removes gateways of subnets that are gone (deleted while
// no controller ran).
func (c *Controller) collectGateways(ctx context.Context) error {
	subs, err := c.net.CentralizedSubnets(ctx)
	if err != nil {
		return err
	}
	for _, s := range subs {
		if _, ok, _ := c.subnetInf.GetIndexer().GetByKey(s); !ok {
			if err := c.net.RemoveCentralizedGateway(ctx, s); err != nil {
				return err
			}
		}
	}
	return nil
}

// requeueGateways re-syncs the centralized subnets that name node: its
// chassis annotation or readiness decides whether it is in their HA group.
func (c *Controller) requeueGateways(node string) {
	for _, obj := range c.subnetInf.GetIndexer().List() {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		typ, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayType")
		gw, _, _ := unstructured.NestedString(u.Object, "spec", "gatewayNode")
		if typ != "centralized" {
			continue
		}
		specs, err := ovnnet.ParseGatewayNode(gw)
		if err != nil || slices.ContainsFunc(specs, func(g ovnnet.GatewaySpec) bool { return g.Node == node }) {
			c.subnetQ.Add(u.GetName())
		}
	}
}

// nodeReady: no Ready condition (not reported yet) counts as ready; False
// or Unknown (kubelet gone) does not.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return true
}

func readyOf(n *corev1.Node) corev1.ConditionStatus {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status
		}
	}
	return ""
}

// gatewaySettle is how long after the controller changed a subnet's HA
// chassis group the active gateway reported by the nodes is not taken as a
// failover: until BFD between the new members is up, every member sees
// itself as the best live chassis and claims the port for a moment.
const gatewaySettle = 5 * time.Second

// gatewayRanking is the HA group order the controller last programmed.
type gatewayRanking struct {
	nodes   []string
	changed time.Time
}

// rankGateways orders a centralized subnet's gateway nodes: gatewayNode
// order, with the active gateway moved first (no failback) once the group
// has settled; a report that comes sooner is re-examined when it has.
func (c *Controller) rankGateways(name string, u *unstructured.Unstructured, base []ovnnet.GatewayNode) []ovnnet.GatewayNode {
	active, _, _ := unstructured.NestedString(u.Object, "status", "activateGateway")
	want := ovnnet.RankGateways(base, active, u.GetAnnotations()[ovnnet.GatewayFailbackAnnotation] == "true")
	c.mu.Lock()
	defer c.mu.Unlock()
	last, known := c.gwRank[name]
	if since := time.Since(last.changed); known && !sameOrder(want, base) && since < gatewaySettle {
		c.subnetQ.AddAfter(name, gatewaySettle-since)
		if prev := byNames(base, last.nodes); prev != nil {
			return prev
		}
		want = base
	}
	if !known || !sameOrder(want, nil, last.nodes...) {
		c.gwRank[name] = gatewayRanking{nodes: gatewayNames(want), changed: time.Now()}
	}
	return want
}

func gatewayNames(gs []ovnnet.GatewayNode) []string {
	out := make([]string, len(gs))
	for i, g := range gs {
		out[i] = g.Node
	}
	return out
}

// sameOrder: a and b (or, with b nil, a and names) list the same nodes in the same order.
func sameOrder(a, b []ovnnet.GatewayNode, names ...string) bool {
	if b != nil {
		names = gatewayNames(b)
	}
	return slices.Equal(gatewayNames(a), names)
}

// byNames orders gs as names, or nil when they are not the same nodes.
func byNames(gs []ovnnet.GatewayNode, names []string) []ovnnet.GatewayNode {
	if len(gs) != len(names) {
		return nil
	}
	out := make([]ovnnet.GatewayNode, 0, len(gs))
	for _, n := range names {
		i := slices.IndexFunc(gs, func(g ovnnet.GatewayNode) bool { return g.Node == n })
		if i < 0 {
			return nil
		}
		out = append(out, gs[i])
	}
	return out
}

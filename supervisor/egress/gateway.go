package egress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// The host side of a centralized gateway node (ovnnet/gateway.go has the
// OVN side): br-egw mapped to the gateway network, the transit addresses
// with the shared MAC on its host port, routes back to the subnets through
// the transit link, and the masquerade (the host-nat rules). The node also
// announces its chassis on its Node (the controller ranks chassis, not
// nodes) and reports in the Subnet status when OVN made it the active
// gateway, so the status is right without the controller.

// subnetGVR is Kube-OVN's Subnet (the node daemon does not import the controller's API package).
var subnetGVR = schema.GroupVersionResource{Group: "kubeovn.io", Version: "v1", Resource: "subnets"}

// applyGateways converges the host to plan's gateways (none: br-egw goes).
func (u *Unit) applyGateways(ctx context.Context, plan Plan) error {
	if len(plan.Gateways) == 0 {
		u.mu.Lock()
		had := u.gwApplied
		u.gwApplied = false
		u.mu.Unlock()
		if !had {
			return nil
		}
		_, err := RemoveGatewayReturnRoutes()
		return errors.Join(err, RemoveGatewayBridge(ctx, u.n.OVS(), ovnnet.GatewayNetwork))
	}
	if err := EnsureGatewayBridge(ctx, u.n.OVS(), u.datapath, ovnnet.GatewayNetwork, ovnnet.GatewayMAC); err != nil {
		return fmt.Errorf("centralized gateway: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := podnet.WaitLink(wctx, GatewayBridge); err != nil {
		return fmt.Errorf("centralized gateway: ovs-vswitchd did not create %s: %w", GatewayBridge, err)
	}
	var addrs []netip.Prefix
	var back []GatewayReturn
	ipv6 := false
	for _, g := range plan.Gateways {
		for _, t := range g.Transit.Prefixes() {
			addrs = append(addrs, ovnnet.TransitHost(t))
		}
		for _, c := range g.CIDRs {
			t := g.Transit.V4
			if c.Addr().Is6() {
				t, ipv6 = g.Transit.V6, true
			}
			back = append(back, GatewayReturn{CIDR: c, Transit: t.Addr()})
		}
	}
	if err := podnet.ConfigureHostPort(podnet.HostPort{Name: GatewayBridge, MAC: ovnnet.GatewayHardwareAddr(), Addrs: addrs}); err != nil {
		return fmt.Errorf("centralized gateway: %w", err)
	}
	// Pod packets come in on br-egw but the subnet is also routed via ovn0
	// for the node's own traffic: loose reverse-path filtering.
	if err := os.WriteFile("/proc/sys/net/ipv4/conf/"+GatewayBridge+"/rp_filter", []byte("2"), 0o644); err != nil {
		return fmt.Errorf("centralized gateway: loose rp_filter on %s: %w", GatewayBridge, err)
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("centralized gateway: enable IPv4 forwarding: %w", err)
	}
	if ipv6 {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
			return fmt.Errorf("centralized gateway: enable IPv6 forwarding (net.ipv6.conf.all.forwarding) for the IPv6 side of %v: %w", back, err)
		}
	}
	if err := SetGatewayReturnRoutes(GatewayBridge, back); err != nil {
		return err
	}
	u.mu.Lock()
	u.gwApplied = true
	u.mu.Unlock()
	var names []string
	for _, g := range plan.Gateways {
		names = append(names, g.Subnet)
	}
	u.log.Info("centralized gateway host side applied", "subnets", names, "bridge", GatewayBridge, "transit", addrs)
	return nil
}

// runGatewayAgent announces the chassis on the Node and reports the active
// gateway of centralized subnets, until ctx ends. Kubernetes mode only.
func (u *Unit) runGatewayAgent(ctx context.Context) {
	kc, dc := u.kube, u.dyn
	full, err := sbdb.FullDatabaseModel()
	if err != nil {
		u.log.Warn("centralized gateways: SB model", "err", err)
		return
	}
	pb, ch := &sbdb.PortBinding{}, &sbdb.Chassis{}
	// Only the two tables it reads: libovsdb checks every table of the
	// model against the central's schema.
	dbm, err := ovsdbconn.Subset(full, pb, ch)
	if err != nil {
		u.log.Warn("centralized gateways: SB model", "err", err)
		return
	}
	conn, err := ovsdbconn.Dial(ctx, dbm, u.sb.Endpoint, ovsdbconn.Options{
		Monitor: []ovsdbconn.Table{
			{Model: pb, Where: []model.Condition{{Field: &pb.Type, Function: ovsdb.ConditionEqual, Value: "chassisredirect"}}, Fields: []any{&pb.LogicalPort, &pb.Chassis, &pb.Type}},
			{Model: ch, Where: []model.Condition{{Field: &ch.Name, Function: ovsdb.ConditionEqual, Value: u.n.SystemID()}}, Fields: []any{&ch.Name}},
		},
		TLS: u.sb.TLS, Log: u.log.With("component", "libovsdb"), Name: "OVN_Southbound at " + u.sb.Endpoint,
	})
	if err != nil {
		if ctx.Err() == nil {
			u.log.Warn("centralized gateways: the active gateway is not reported in Subnet status", "err", err)
		}
		return
	}
	defer conn.Close()
	// The Subnets' status as the API server has it: a node that claimed
	// the port for a moment (before its BFD session to a higher-priority
	// gateway came up) may write its name after the active node wrote
	// its own; the active node puts its name back.
	statusChanged := make(chan struct{}, 1)
	subnets := u.subnets
	poke := func(any) {
		select {
		case statusChanged <- struct{}{}:
		default:
		}
	}
	if subnets != nil {
		if reg, err := subnets.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }}); err == nil {
			defer func() { _ = subnets.RemoveEventHandler(reg) }()
		}
	}
	statusOf := func(name string) (string, bool) {
		if subnets == nil {
			return "", false
		}
		o, ok, _ := subnets.GetStore().GetByKey(name)
		su, isU := o.(*unstructured.Unstructured)
		if !ok || !isU {
			return "", false
		}
		v, _, _ := unstructured.NestedString(su.Object, "status", "activateGateway")
		return v, true
	}
	reported := map[string]bool{}
	corrected := map[string]time.Time{}
	holding := map[string]time.Time{} // subnet -> since when this node holds its gateway port
	announced := false
	for {
		changed := conn.Changed()
		var mine []sbdb.Chassis
		_ = conn.List(ctx, &mine)
		var pbs []sbdb.PortBinding
		_ = conn.List(ctx, &pbs)
		failed := false
		var wake time.Duration // a claim to report once it has held
		if !announced && len(mine) > 0 {
			// Once the Chassis row exists (as upstream kube-ovn-cni
			// does): the controller puts only chassis it knows into HA
			// groups, and upstream kube-ovn-controller deletes the
			// chassis of a node without this annotation.
			if err := announceChassis(ctx, kc, u.nodeName, u.n.SystemID()); err != nil {
				u.log.Warn("cannot annotate the node with its chassis; retrying", "node", u.nodeName, "annotation", annotations.Chassis, "err", err)
				failed = true
			} else {
				announced = true
				u.log.Info("node annotated with its chassis", "node", u.nodeName, "annotation", annotations.Chassis, "system_id", u.n.SystemID())
			}
		}
		for _, p := range pbs {
			subnet, ok := ovnnet.SubnetOfRedirectPort(ovnnet.DefaultRouter, p.LogicalPort)
			if !ok {
				continue
			}
			active := len(mine) > 0 && p.Chassis != nil && *p.Chassis == mine[0].UUID
			if !active {
				reported[subnet] = false
				delete(holding, subnet)
				continue
			}
			// A claim is reported once it has held for claimSettle: a
			// node that (re)starts claims the port until its BFD session
			// to a higher-priority gateway is up, for a moment; reported,
			// that moment would make the controller rank it first (no
			// failback) and keep the traffic there.
			if _, ok := holding[subnet]; !ok {
				holding[subnet] = time.Now()
			}
			if held := time.Since(holding[subnet]); !reported[subnet] && held < claimSettle {
				if next := claimSettle - held; wake == 0 || next < wake {
					wake = next
				}
				continue
			}
			if reported[subnet] {
				cur, known := statusOf(subnet)
				if !known || cur == u.nodeName {
					continue
				}
				if time.Since(corrected[subnet]) < time.Second {
					failed = true // look again shortly: never a write per event
					continue
				}
				corrected[subnet] = time.Now()
				u.log.Info("the Subnet status names another gateway while this node holds the gateway port; correcting it", "subnet", subnet, "status", cur)
			}
			body := []byte(fmt.Sprintf(`{"status":{"activateGateway":%q}}`, u.nodeName))
			_, err := dc.Resource(subnetGVR).Patch(ctx, subnet, types.MergePatchType, body, metav1.PatchOptions{}, "status")
			if err != nil && !apierrors.IsNotFound(err) {
				u.log.Warn("cannot report this node as the active gateway in the Subnet status; retrying", "subnet", subnet, "err", err)
				failed = true
				continue
			}
			reported[subnet] = true
			u.log.Info("this node is now the active gateway", "subnet", subnet)
		}
		var retry <-chan time.Time
		switch {
		case failed:
			retry = time.After(2 * time.Second)
		case wake > 0:
			retry = time.After(wake)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-statusChanged:
		case <-retry:
		}
	}
}

// claimSettle is how long this node must hold a centralized subnet's
// gateway port before it reports itself the active gateway: longer than a
// BFD session takes to come up (OVN's default interval 1 s, detection
// after 3), so a claim made while the sessions start is not reported.
const claimSettle = 5 * time.Second

// nodeFeatures is what this node daemon announces in annotations.NodeFeatures.
const nodeFeatures = annotations.FeatureGatewayIPv6

// announceChassis writes ovn.kubernetes.io/chassis=<system-id> on the
// node's own Node, and the node features the controller waits for
// (annotations.NodeFeatures): keys admission-node.yaml's policy allows.
func announceChassis(ctx context.Context, kc kubernetes.Interface, nodeName, systemID string) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{
		annotations.Chassis: systemID, annotations.NodeFeatures: nodeFeatures}}})
	_, err := kc.CoreV1().Nodes().Patch(ctx, nodeName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "ovnhost-node"})
	return err
}

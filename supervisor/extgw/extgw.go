// Package extgw is the node side of EIP/SNAT: on a gateway node, the
// external NIC in br-external mapped to the external network, following
// the controller's validated ConfigMap, with the Node annotation the
// controller ranks gateways by and events on the ConfigMap when the NIC is
// unusable. Kubernetes mode only.
package extgw

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/nldump"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// Node is what the external gateway needs of the node's supervisor.
type Node interface {
	// OVS is the long-lived conf.db connection (nil while ovsdb-server
	// is not connected).
	OVS() *ovsdbconn.Conn
	// KeepingDatapath reports whether a stop leaves the datapath in
	// place (--keep-datapath, or an upgrade).
	KeepingDatapath() bool
}

// Options are the unit's configuration and collaborators.
type Options struct {
	Config *nodeconfig.NodeConfig
	Node   Node
	// Kube is the node's Kubernetes client; ConfigMaps the informer
	// factory of the one ConfigMap it reads (NewConfigMapInformers).
	Kube       kubernetes.Interface
	ConfigMaps informers.SharedInformerFactory
	Log        *slog.Logger
}

// NewConfigMapInformers is the informer factory of the EIP/SNAT
// ConfigMap alone (namespace and name): the node reads nothing else there.
func NewConfigMapInformers(kc kubernetes.Interface) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(kc, 0, informers.WithNamespace(ovnnet.ExternalGatewayNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ovnnet.ExternalGatewayConfigMap).String()
		}))
}

// Unit is the node side of EIP/SNAT (Kube-OVN's
// br-external): on a node listed in external-gw-nodes (on every node with
// type: distributed, where the node's own pods' EIPs are NATed) it puts the NIC
// named by external-gw-nic into br-external, maps the external network to
// it, and says so in its Node annotation ovn.kubernetes.io/external-gw-nic
// (the controller ranks only such nodes). It reads the ConfigMap only for
// that, and only data the controller has validated (its digest
// annotation). A NIC that is missing or unusable here is logged and
// reported as a Warning event on the ConfigMap; nothing is changed then.
// Removed at stop (unless --keep-datapath); `ovnhost cleanup` removes the
// device a killed daemon leaves.
type Unit struct {
	n           Node
	datapath    nodeconfig.Datapath
	nodeName    string
	tunnelIface string
	kc          kubernetes.Interface
	fac         informers.SharedInformerFactory
	log         *slog.Logger

	cancel context.CancelFunc
	done   chan struct{}

	mu        sync.Mutex
	annotated *string           // our Node's external-gw-nic as last written (nil: not yet)
	reported  map[string]string // reason -> last message sent as an event
}

// New plans the unit; nothing is started.
func New(o Options) *Unit {
	return &Unit{n: o.Node, datapath: o.Config.Datapath, nodeName: o.Config.Name, tunnelIface: o.Config.TunnelIface,
		kc: o.Kube, fac: o.ConfigMaps, log: o.Log}
}

func (u *Unit) Name() string { return "external-gateway" }

func (u *Unit) Start(ctx context.Context) error {
	u.reported = map[string]string{}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	u.cancel, u.done = cancel, make(chan struct{})
	go func() { defer close(u.done); u.run(rctx, u.kc) }()
	return nil
}

func (u *Unit) Stop(ctx context.Context) error {
	if u.cancel == nil {
		return nil
	}
	u.cancel()
	<-u.done
	if u.n.KeepingDatapath() {
		return nil // an upgrade: EIP traffic keeps flowing
	}
	if !HasExternalBridge(ctx, u.n.OVS()) {
		return nil
	}
	if err := RemoveExternalBridge(ctx, u.n.OVS(), ovnnet.ExternalNetwork); err != nil {
		return fmt.Errorf("removing %s: %w", ExternalBridge, err)
	}
	u.log.Info("EIP/SNAT: external gateway bridge removed", "bridge", ExternalBridge)
	return nil
}

// run follows the ConfigMap, and the NIC appearing, until ctx ends.
func (u *Unit) run(ctx context.Context, kc kubernetes.Interface) {
	fac := u.fac
	cms := fac.Core().V1().ConfigMaps()
	kick := make(chan struct{}, 1)
	signal := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	_, _ = cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { signal() }, UpdateFunc: func(any, any) { signal() }, DeleteFunc: func(any) { signal() },
	})
	fac.Start(ctx.Done())
	defer fac.Shutdown()
	// A NIC plugged in (or renamed) after a "not found" report.
	links := make(chan netlink.LinkUpdate, 16)
	if err := netlink.LinkSubscribeWithOptions(links, ctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}}); err != nil {
		u.log.Warn("EIP/SNAT: cannot follow link changes; a missing external NIC is looked for again only when the ConfigMap changes", "err", err)
	}
	if !cache.WaitForCacheSync(ctx.Done(), cms.Informer().HasSynced) {
		return
	}
	var retry <-chan time.Time
	delay := 500 * time.Millisecond
	for {
		cm, err := cms.Lister().ConfigMaps(ovnnet.ExternalGatewayNamespace).Get(ovnnet.ExternalGatewayConfigMap)
		var plan ovnnet.ExternalBridgePlan
		switch {
		case apierrors.IsNotFound(err):
			cm, plan = nil, ovnnet.PlanExternalBridge(u.nodeName, false, nil, nil)
		case err != nil:
			plan = ovnnet.ExternalBridgePlan{Action: ovnnet.BridgeKeep, Why: err.Error()}
		default:
			plan = ovnnet.PlanExternalBridge(u.nodeName, true, cm.Data, cm.Annotations)
		}
		if err := u.apply(ctx, kc, cm, plan); err != nil {
			if ctx.Err() != nil {
				return
			}
			u.log.Warn("EIP/SNAT: external gateway bridge not applied; retrying", "err", err, "retry_in", delay)
			retry, delay = time.After(delay), min(2*delay, 30*time.Second)
		} else {
			retry, delay = nil, 500*time.Millisecond
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-kick:
				break wait
			case <-retry:
				break wait
			case lu, ok := <-links:
				if !ok {
					links = nil
				} else if plan.Action == ovnnet.BridgeEnsure && lu.Attrs() != nil && lu.Attrs().Name == plan.NIC {
					break wait
				}
			}
		}
	}
}

// apply converges the node to plan; a problem with the NIC is reported, not returned.
func (u *Unit) apply(ctx context.Context, kc kubernetes.Interface, cm *corev1.ConfigMap, plan ovnnet.ExternalBridgePlan) error {
	switch plan.Action {
	case ovnnet.BridgeKeep:
		u.log.Debug("EIP/SNAT: external gateway bridge left as it is", "why", plan.Why)
		return nil
	case ovnnet.BridgeRemove:
		if HasExternalBridge(ctx, u.n.OVS()) {
			if err := RemoveExternalBridge(ctx, u.n.OVS(), ovnnet.ExternalNetwork); err != nil {
				return err
			}
			u.log.Info("EIP/SNAT: external gateway bridge removed", "bridge", ExternalBridge, "why", plan.Why)
		}
		return u.annotate(ctx, kc, "")
	}
	nic := plan.NIC
	if problem := u.checkNIC(nic); problem != "" {
		msg := fmt.Sprintf("node %s: %s=%s: %s; nothing was changed on this node, and it carries no EIP/SNAT until this is fixed", u.nodeName, ovnnet.KeyNIC, nic, problem)
		if plan.Distributed {
			msg += " (meanwhile the EIPs of its pods are NATed on the active gateway node)"
		}
		u.log.Error("EIP/SNAT: external NIC unusable", "nic", nic, "problem", problem, "fix", "correct "+ovnnet.KeyNIC+" in "+ovnnet.ExternalGatewayNamespace+"/"+ovnnet.ExternalGatewayConfigMap+" or add the NIC")
		u.event(ctx, kc, cm, "ExternalGatewayNICNotFound", msg)
		return u.annotate(ctx, kc, "")
	}
	link, _ := netlink.LinkByName(nic)
	if err := netlink.LinkSetUp(link); err != nil {
		return fmt.Errorf("setting %s up: %w", nic, err)
	}
	if err := EnsureExternalBridge(ctx, u.n.OVS(), u.datapath, ovnnet.ExternalNetwork, nic); err != nil {
		u.event(ctx, kc, cm, "ExternalGatewayNICUnusable", fmt.Sprintf("node %s: %s=%s: %v", u.nodeName, ovnnet.KeyNIC, nic, err))
		return errors.Join(err, u.annotate(ctx, kc, ""))
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := WaitExternalNIC(wctx, u.n.OVS(), nic); err != nil {
		u.event(ctx, kc, cm, "ExternalGatewayNICUnusable", fmt.Sprintf("node %s: %s=%s: %v", u.nodeName, ovnnet.KeyNIC, nic, err))
		return errors.Join(err, u.annotate(ctx, kc, ""))
	}
	u.mu.Lock()
	delete(u.reported, "ExternalGatewayNICNotFound")
	delete(u.reported, "ExternalGatewayNICUnusable")
	u.mu.Unlock()
	if err := u.annotate(ctx, kc, nic); err != nil {
		return err
	}
	u.log.Info("EIP/SNAT: external gateway bridge ready", "bridge", ExternalBridge, "nic", nic, "network", ovnnet.ExternalNetwork)
	return nil
}

// checkNIC says what is wrong with nic as this node's external NIC ("" nothing).
func (u *Unit) checkNIC(nic string) string {
	if nic == u.tunnelIface {
		return "is this node's tunnel interface (IFACE); the external NIC must be another one"
	}
	if _, err := netlink.LinkByName(nic); err != nil {
		var names []string
		if all, err := nldump.Retry(netlink.LinkList); err == nil {
			for _, l := range all {
				if n := l.Attrs().Name; n != "lo" && !strings.HasPrefix(n, "ovh") && n != "ovn0" && n != "br-int" && n != "ovs-netdev" {
					names = append(names, n)
				}
			}
		}
		slices.Sort(names)
		return fmt.Sprintf("no such interface on this node (it has %s)", strings.Join(names, ", "))
	}
	return ""
}

// annotate writes (or with "" removes) the Node's external-gw-nic annotation.
func (u *Unit) annotate(ctx context.Context, kc kubernetes.Interface, nic string) error {
	u.mu.Lock()
	same := u.annotated != nil && *u.annotated == nic
	u.mu.Unlock()
	if same {
		return nil
	}
	var v any = nic
	if nic == "" {
		v = nil
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{annotations.ExternalGatewayNIC: v}}})
	if _, err := kc.CoreV1().Nodes().Patch(ctx, u.nodeName, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("annotating node %s %s: %w", u.nodeName, annotations.ExternalGatewayNIC, err)
	}
	u.mu.Lock()
	u.annotated = &nic
	u.mu.Unlock()
	return nil
}

// event records a Warning event on the ConfigMap, once per new message.
func (u *Unit) event(ctx context.Context, kc kubernetes.Interface, cm *corev1.ConfigMap, reason, msg string) {
	u.mu.Lock()
	same := u.reported[reason] == msg
	u.reported[reason] = msg
	u.mu.Unlock()
	if same || cm == nil {
		return
	}
	now := metav1.NewTime(time.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cm.Name + ".", Namespace: cm.Namespace},
		InvolvedObject: corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: cm.Namespace, Name: cm.Name,
			UID: cm.UID, ResourceVersion: cm.ResourceVersion},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source:              corev1.EventSource{Component: "ovnhost", Host: u.nodeName},
		ReportingController: "ovnhost.io/node", ReportingInstance: u.nodeName,
	}
	if _, err := kc.CoreV1().Events(cm.Namespace).Create(ctx, ev, metav1.CreateOptions{}); err != nil && !errors.Is(err, context.Canceled) {
		u.log.Warn("EIP/SNAT: cannot record the event on the ConfigMap", "reason", reason, "err", err)
	}
}

// Package extgw reconciles Kube-OVN's default-VPC EIP/SNAT: the ConfigMap
// kube-system/ovn-external-gw-config programs the external gateway port,
// the pod annotations ovn.kubernetes.io/eip and ovn.kubernetes.io/snat each
// pod's NAT rules. Its own queue (external-gateway) holds the ConfigMap's
// key and the keys of pods that ask for or hold EIP/SNAT; its own informer
// factory watches that one ConfigMap (its Role names it: resourceNames).
package extgw

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Network is the OVN work of EIP/SNAT (ovnnet.Network).
type Network interface {
	PodNATs(ctx context.Context) ([]ovnnet.PodNAT, error)
	EnsureExternalGateway(ctx context.Context, cfg ovnnet.ExternalGatewayConfig, nodes []ovnnet.GatewayNode) error
	ExternalGatewayProgrammed(ctx context.Context) (bool, error)
	RemoveExternalGateway(ctx context.Context) error
	EnsurePodNAT(ctx context.Context, cfg ovnnet.ExternalGatewayConfig, p ovnnet.PodNAT) error
	RemovePodNAT(ctx context.Context, pod string) error
	// PodVPC is the custom VPC the pod's address is in ("" the default
	// VPC): its address may be another VPC's too, NAT on the cluster
	// router would give that pod's traffic.
	PodVPC(owner string) string
}

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Kube     kubernetes.Interface
	Recorder record.EventRecorder
	// Informers holds the shared Pod and Node informers.
	Informers informers.SharedInformerFactory
	Net       Network
}

// Reconciler is Kube-OVN's default-VPC EIP/SNAT: the ConfigMap
// kube-system/ovn-external-gw-config programs the external gateway port
// (internal/ovnnet/external.go), the pod annotations ovn.kubernetes.io/eip
// and ovn.kubernetes.io/snat program each pod's NAT rules and policy. One
// EIP belongs to one pod: the pod that holds it keeps it, a second pod is
// refused with an event and gets it once the first lets go. A bad
// ConfigMap or annotation gets an event and changes nothing else. With
// type: distributed an EIP's rule names its pod's port, so the NAT happens
// on the pod's node, when that node has bridged the NIC; otherwise the
// rule stays centralized and a Warning EIPNotDistributed says why.
type Reconciler struct {
	deps    Config
	log     *slog.Logger
	pods    corelisters.PodLister
	nodes   corelisters.NodeLister
	factory informers.SharedInformerFactory // the one ConfigMap
	cms     corelisters.ConfigMapLister
	cmInf   cache.SharedIndexInformer
	q       reconcile.Queue

	mu       sync.Mutex
	cfg      *ovnnet.ExternalGatewayConfig // programmed (nil: none)
	why      string                        // why pods cannot get NAT now ("" when cfg is programmed)
	bridged  map[string]bool               // nodes with a chassis that bridged cfg.NIC (distributed EIPs go there)
	unusable map[string]string             // other nodes -> why not (for the pods' events)
	held     map[string]ovnnet.PodNAT      // pod key -> what is programmed for it
	via      map[string]netip.Addr         // pod key -> the next hop its policy was written with
	eips     map[netip.Addr]string         // EIP -> the pod holding it
	snats    map[netip.Addr]map[string]bool
	waiting  map[string]bool      // pods refused for a conflict or waiting for the gateway
	reported map[string]string    // object+reason -> last message (one event per new problem)
	ready    []ovnnet.GatewayNode // the programmed gateway's nodes, highest priority first

	// reserved names the object (a custom VPC's OvnEip) holding an
	// address, "" for none: pods cannot take it (UseReserved).
	reserved func(netip.Addr) string
	// changed is told when the programmed gateway or a pod's EIP/SNAT
	// address changes (OnChange).
	changed []func()
	// first is closed once the ConfigMap has been looked at (Started).
	first chan struct{}
}

// configKey is the queue key of the ConfigMap (pod keys contain a '/').
const configKey = "!config"

// extWorkers sync pods with EIP/SNAT (and the ConfigMap) in parallel.
const extWorkers = 4

// New registers the informers' handlers; the ConfigMap's informer starts with Start.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	x := &Reconciler{deps: cfg, log: cfg.Log, pods: cfg.Informers.Core().V1().Pods().Lister(), nodes: cfg.Informers.Core().V1().Nodes().Lister(), held: map[string]ovnnet.PodNAT{}, via: map[string]netip.Addr{}, eips: map[netip.Addr]string{},
		snats: map[netip.Addr]map[string]bool{}, waiting: map[string]bool{}, reported: map[string]string{},
		why: "ConfigMap " + cmName() + " not read yet", first: make(chan struct{})}
	x.q = reconcile.NewDefaultQueue("external-gateway")
	// Only the one ConfigMap: its Role can name it (resourceNames).
	x.factory = informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(ovnnet.ExternalGatewayNamespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", ovnnet.ExternalGatewayConfigMap).String()
		}))
	cmi := x.factory.Core().V1().ConfigMaps()
	x.cms, x.cmInf = cmi.Lister(), cmi.Informer()
	if _, err := x.cmInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { x.q.Add(configKey) },
		UpdateFunc: func(o, n any) {
			// Our own digest annotation comes back as an update: data is what matters.
			if !maps.Equal(o.(*corev1.ConfigMap).Data, n.(*corev1.ConfigMap).Data) {
				x.q.Add(configKey)
			}
		},
		DeleteFunc: func(any) { x.q.Add(configKey) },
	}); err != nil {
		return nil, err
	}
	// Gateway nodes: their chassis, bridged NIC and readiness rank them.
	if _, err := cfg.Informers.Core().V1().Nodes().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(any) { x.q.Add(configKey) },
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Node), n.(*corev1.Node)
			if on.Annotations[annotations.Chassis] != nn.Annotations[annotations.Chassis] ||
				on.Annotations[annotations.ExternalGatewayNIC] != nn.Annotations[annotations.ExternalGatewayNIC] ||
				on.Labels[annotations.ExternalGatewayLabel] != nn.Labels[annotations.ExternalGatewayLabel] || reconcile.ReadyOf(on) != reconcile.ReadyOf(nn) {
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
	if _, err := cfg.Informers.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
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

func (x *Reconciler) holds(key string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	_, ok := x.held[key]
	return ok
}

// ShutDown stops the queue.
func (x *Reconciler) ShutDown() { x.q.ShutDown() }

// Start learns from the NB which pod holds which EIP (so the earlier
// holder keeps it across a controller restart), then, once the ConfigMap
// cache has synced, programs the gateway before any pod.
func (x *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) error {
	nats, err := x.deps.Net.PodNATs(ctx)
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
			x.log.Warn("EIP/SNAT: the ConfigMap cache has not synced after 30s; can the controller read it?", "configmap", cmName())
			if !<-synced {
				return
			}
		}
		// The gateway first, so the pods' first sync finds it.
		if err := x.syncConfig(ctx); err != nil && ctx.Err() == nil {
			x.log.Warn("EIP/SNAT: first ConfigMap sync failed, will retry", "err", err)
			x.q.AddRateLimited(configKey)
		}
		close(x.first)
		pods, _ := x.pods.List(labels.Everything())
		for _, p := range pods {
			if wantsExternal(p) {
				x.q.Add(p.Namespace + "/" + p.Name)
			}
		}
		for _, p := range nats {
			x.q.Add(p.Pod)
		}
		var inner sync.WaitGroup
		reconcile.Workers(ctx, &inner, x.log, extWorkers, x.q, x.sync, "external gateway")
		<-ctx.Done()
		x.q.ShutDown()
		inner.Wait()
	}()
	return nil
}

func (x *Reconciler) sync(ctx context.Context, key string) error {
	if key == configKey {
		return x.syncConfig(ctx)
	}
	return x.syncPod(ctx, key)
}

// report records an event once per new message for that object and reason.
func (x *Reconciler) report(obj any, ref, typ, reason, msg string) {
	k := ref + "|" + reason
	x.mu.Lock()
	same := x.reported[k] == msg
	x.reported[k] = msg
	x.mu.Unlock()
	if same {
		return
	}
	if typ == corev1.EventTypeWarning {
		x.log.Warn("EIP/SNAT: "+reason, "object", ref, "message", msg)
	} else {
		x.log.Info("EIP/SNAT: "+reason, "object", ref, "message", msg)
	}
	switch v := obj.(type) {
	case *corev1.Pod:
		x.deps.Recorder.Event(v, typ, reason, msg)
	case *corev1.ConfigMap:
		x.deps.Recorder.Event(v, typ, reason, msg)
	}
}

func (x *Reconciler) forget(ref string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for k := range x.reported {
		if strings.HasPrefix(k, ref+"|") {
			delete(x.reported, k)
		}
	}
}

// forgetReason forgets the last event of one reason on ref (it may be said again).
func (x *Reconciler) forgetReason(ref, reason string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	delete(x.reported, ref+"|"+reason)
}

// UseReserved makes the addresses f names (a custom VPC's OvnEips) unusable
// as a pod's EIP or SNAT address. Call before Start.
func (x *Reconciler) UseReserved(f func(netip.Addr) string) { x.reserved = f }

// OnChange calls f (which must not block) whenever the programmed gateway
// or the addresses pods hold change. Call before Start.
func (x *Reconciler) OnChange(f func()) { x.changed = append(x.changed, f) }

func (x *Reconciler) notify() {
	for _, f := range x.changed {
		f()
	}
}

// WakeWaiting looks again at the pods refused for a conflict (an address
// was let go elsewhere).
func (x *Reconciler) WakeWaiting() { x.wakeAll() }

// Gateway is the programmed external gateway and its nodes (highest
// priority first), or why there is none.
func (x *Reconciler) Gateway() (cfg ovnnet.ExternalGatewayConfig, nodes []ovnnet.GatewayNode, ok bool, why string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.cfg == nil {
		return ovnnet.ExternalGatewayConfig{}, nil, false, x.why
	}
	return *x.cfg, slices.Clone(x.ready), true, ""
}

// PodHolder is the default-VPC pod holding a as its EIP or SNAT address
// ("" for none).
func (x *Reconciler) PodHolder(a netip.Addr) string {
	x.mu.Lock()
	defer x.mu.Unlock()
	if p := x.eips[a]; p != "" {
		return p
	}
	if users := otherPods(x.snats[a], ""); len(users) > 0 {
		return users[0]
	}
	return ""
}

// Started is closed once the ConfigMap has been looked at after start:
// Gateway then says what is programmed, not "not read yet".
func (x *Reconciler) Started() <-chan struct{} { return x.first }

package server

import (
	"github.com/ovnhost/ovnhost/internal/annotations"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
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
	"k8s.io/client-go/tools/clientcmd"
)

// kubeSource reads pod networks from the controller's annotations through a
// node-local pod informer (field selector spec.nodeName) and signals waiting
// ADDs on every change of the pod: no polling.
type kubeSource struct {
	cs   kubernetes.Interface
	node string
	log  *slog.Logger

	factory informers.SharedInformerFactory
	nodeFac informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	nodes   cache.SharedIndexInformer
	// subnets, when the source has a dynamic client (egress plan).
	dyn       dynamic.Interface
	subnetFac dynamicinformer.DynamicSharedInformerFactory
	subnets   cache.SharedIndexInformer
	stop      chan struct{}
	synced    chan struct{}

	// trusted are the field managers whose annotations the node honours.
	trusted map[string]bool

	mu      sync.Mutex
	waiters map[string]map[chan struct{}]struct{} // pod key or "node" -> waiters
	onQoS   func(key string, n *PodNetwork)       // annotation change on a running pod (under mu)
}

// restConfig returns the Kubernetes client configuration: the kubeconfig
// when given, else the in-cluster configuration, else nil (standalone).
func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		c, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return c, nil
	}
	c, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, nil
	}
	return c, err
}

func newKubeSource(cfg *rest.Config, node string, log *slog.Logger) (*kubeSource, error) {
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
	k := newKubeSourceFor(cs, node, log)
	k.dyn = dyn
	return k, nil
}

func newKubeSourceFor(cs kubernetes.Interface, node string, log *slog.Logger) *kubeSource {
	k := &kubeSource{cs: cs, node: node, log: log, waiters: map[string]map[chan struct{}]struct{}{}}
	k.setTrusted(nil)
	return k
}

// setTrusted sets the trusted field managers (nil: DefaultControllerManagers).
func (k *kubeSource) setTrusted(managers []string) {
	if len(managers) == 0 {
		managers = DefaultControllerManagers
	}
	k.trusted = map[string]bool{}
	for _, m := range managers {
		k.trusted[m] = true
	}
}

// setOnQoS installs the hook called when a running pod's rates change.
func (k *kubeSource) setOnQoS(f func(key string, n *PodNetwork)) {
	k.mu.Lock()
	k.onQoS = f
	k.mu.Unlock()
}

func (k *kubeSource) Start(ctx context.Context) error {
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
	k.nodeFac = informers.NewSharedInformerFactoryWithOptions(k.cs, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", k.node).String()
		}))
	k.nodes = k.nodeFac.Core().V1().Nodes().Informer()
	if _, err := k.nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { k.signal("node") },
		UpdateFunc: func(any, any) { k.signal("node") },
	}); err != nil {
		return err
	}
	k.factory.Start(k.stop)
	k.nodeFac.Start(k.stop)
	synced := []cache.InformerSynced{k.pods.HasSynced, k.nodes.HasSynced}
	if k.dyn != nil {
		if err := k.startSubnets(k.dyn); err != nil {
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

// waitSynced waits until the informers have listed once.
func (k *kubeSource) waitSynced(ctx context.Context) error {
	select {
	case <-k.synced:
		return nil
	case <-ctx.Done():
		return &annotationTimeout{fmt.Sprintf("the Kubernetes API server has not answered the node-local pod informer of node %s yet; try again later", k.node)}
	}
}

func (k *kubeSource) Stop() {
	if k.stop != nil {
		close(k.stop)
		k.factory.Shutdown()
		k.nodeFac.Shutdown()
		if k.subnetFac != nil {
			k.subnetFac.Shutdown()
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

func (k *kubeSource) podChanged(old, obj any) {
	p, key := podKey(obj)
	if p == nil {
		return
	}
	k.signal(key)
	k.mu.Lock()
	onQoS := k.onQoS
	k.mu.Unlock()
	if old == nil || onQoS == nil {
		return
	}
	op, _ := podKey(old)
	if op == nil {
		return
	}
	for _, a := range []string{annotations.IngressRate, annotations.EgressRate} {
		if op.Annotations[a] != p.Annotations[a] {
			var n PodNetwork
			if err := parseOptional(p.Annotations, &n); err != nil {
				k.log.Warn("pod rate annotation is invalid; QoS left unchanged", "pod", key, "err", err)
				return
			}
			onQoS(key, &n)
			return
		}
	}
}

func (k *kubeSource) signal(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for ch := range k.waiters[key] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

func (k *kubeSource) subscribe(key string) (chan struct{}, func()) {
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

func (k *kubeSource) getPod(key string) *corev1.Pod {
	obj, ok, err := k.pods.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	p, _ := obj.(*corev1.Pod)
	return p
}

// PodNetwork waits until the controller has annotated the pod.
func (k *kubeSource) PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error) {
	if err := k.waitSynced(ctx); err != nil {
		return nil, err
	}
	key := ref.Key()
	ch, cancel := k.subscribe(key)
	defer cancel()
	subCh, subCancel := k.subscribe(subnetsKey)
	defer subCancel()
	for {
		p := k.getPod(key)
		var miss []string
		if p != nil {
			miss = missingAnnotations(p.Annotations)
			if len(miss) == 0 {
				n, wait, err := k.confirmedNetwork(p)
				if err != nil || wait == "" {
					return n, err
				}
				miss = []string{wait}
			}
		}
		select {
		case <-ch:
		case <-subCh:
		case <-ctx.Done():
			return nil, k.waitError(p, ref, miss)
		}
	}
}

// confirmedNetwork is the pod's network when the controller confirmed
// every value the node acts on; wait says what is still awaited.
func (k *kubeSource) confirmedNetwork(p *corev1.Pod) (_ *PodNetwork, wait string, _ error) {
	if te := checkConfirmed(p, k.trusted); te != nil {
		return nil, te.msg, nil
	}
	n, err := ParseAnnotations(p.Annotations)
	if err != nil {
		return nil, "", err
	}
	if err := validatePodNetwork(n); err != nil {
		return nil, "", err
	}
	if w := k.checkAgainstSubnet(p, n); w != "" {
		return nil, w, nil
	}
	return n, "", nil
}

// annotationTimeout is returned when the controller did not annotate in time.
type annotationTimeout struct{ msg string }

func (e *annotationTimeout) Error() string { return e.msg }

func (k *kubeSource) waitError(p *corev1.Pod, ref PodRef, miss []string) error {
	if p == nil {
		return &annotationTimeout{fmt.Sprintf("pod %s is not known on node %s: the node-local informer (spec.nodeName=%s) has not seen it; check that the pod is scheduled to this node", ref.Key(), k.node, k.node)}
	}
	msg := fmt.Sprintf("timed out waiting for the controller to annotate pod %s: missing %s", ref.Key(), strings.Join(miss, ", "))
	if len(miss) == 1 && !strings.HasPrefix(miss[0], annotations.Prefix) {
		msg = fmt.Sprintf("timed out waiting for the controller to confirm pod %s: %s", ref.Key(), miss[0])
	}
	if ev := k.lastEvent(p); ev != "" {
		msg += "; the controller reported: " + ev
	} else {
		msg += "; no event from the controller about this pod (is ovnhost-controller running?)"
	}
	return &annotationTimeout{msg}
}

// lastEvent returns the newest event about the pod from anything but the
// kubelet and scheduler, "reason: message".
func (k *kubeSource) lastEvent(p *corev1.Pod) string {
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

func (k *kubeSource) Release(context.Context, PodRef) error { return nil }

// NodeNetwork waits for the controller's node annotations.
func (k *kubeSource) NodeNetwork(ctx context.Context) (*NodeNetwork, error) {
	if err := k.waitSynced(ctx); err != nil {
		return nil, err
	}
	ch, cancel := k.subscribe("node")
	defer cancel()
	for {
		if obj, ok, _ := k.nodes.GetStore().GetByKey(k.node); ok {
			n := obj.(*corev1.Node)
			if nn, err := parseNodeAnnotations(n.Annotations); err == nil {
				nn.PodCIDRs = k.routedCIDRs(nn.Addr.Masked())
				nn.Egress = k.egressPlan([]netip.Prefix{nn.Addr.Masked()})
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
	ip, err := netip.ParseAddr(strings.Split(ann[annotations.IPAddress], ",")[0])
	if err != nil {
		return nil, err
	}
	cidr, err := netip.ParsePrefix(strings.Split(ann[annotations.CIDR], ",")[0])
	if err != nil {
		return nil, err
	}
	gw, err := netip.ParseAddr(strings.Split(ann[annotations.Gateway], ",")[0])
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
	return &NodeNetwork{PortName: name, Addr: netip.PrefixFrom(ip, cidr.Bits()), Gateway: gw, MAC: mac}, nil
}

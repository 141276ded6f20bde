// Package pods reconciles the addresses of pods and nodes: it allocates a
// pod's address in its Subnet (IPAM), writes its logical switch port and
// its Kube-OVN annotations (server-side apply), and does the same for each
// node's join port (ovn0). It owns two queues: pods and nodes.
//
// At start-up, before any worker runs, Rebuild re-claims every recorded
// address (oldest pod first, so an older holder keeps a contested address)
// and CollectPorts deletes the ports whose pod or node is gone.
//
// It talks to the other reconcilers through small interfaces: the subnet
// reconciler (Subnets: which subnet a namespace's pods use, whether it is
// valid or being deleted, status writes when addresses change) and the IP
// objects (IPs). Pods refused an address wait on their subnet; the subnet
// reconciler wakes them (Wake) and counts the exhausted ones (Exhausted).
package pods

import (
	"context"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/controller/reconcile"
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

// Network is the IPAM and OVN work of pods and nodes (ovnnet.Network).
type Network interface {
	AddPod(ctx context.Context, r ovnnet.PodRequest) (ipam.Allocation, error)
	DeletePod(ctx context.Context, namespace, name string) error
	Restore(owner, subnet string, ips []netip.Addr, mac string) (ipam.Allocation, error)
	AddNode(ctx context.Context, r ovnnet.NodeRequest) (ipam.Allocation, error)
	DeleteNode(ctx context.Context, name string) error
	NodePort(ctx context.Context, node string) (string, error)
	GarbageCollect(ctx context.Context, keep func(p ovnnb.Port) bool) ([]string, error)
	DeleteAttachment(ctx context.Context, namespace, name, provider string) error
	DeleteVM(ctx context.Context, namespace, vm string) error
	SetVMChassis(ctx context.Context, namespace, vm string, chassis []string) error
	VMChassis(ctx context.Context, namespace, vm string) ([]string, error)
	Attachments(ctx context.Context, namespace, name string) ([]string, error)
}

// Addresses is what pods read of the IPAM (ipam.IPAM, shared with the subnets).
type Addresses interface {
	Lookup(owner string) (ipam.Allocation, bool)
}

// Ports reads the NB's logical switch ports (ovnnb.Client).
type Ports interface {
	Ports(ctx context.Context, match map[string]string) ([]ovnnb.Port, error)
	GetPort(ctx context.Context, name string) (ovnnb.Port, bool, error)
}

// Subnets is the subnet reconciler as pods see it.
type Subnets interface {
	// SubnetFor is the subnet of a namespace's pods that name none.
	SubnetFor(namespace string, nsLabels labels.Set) string
	// Admits: pods of namespace may have an address in the subnet (a
	// Subnet bound to namespaces admits only those); rule says why not.
	Admits(name, namespace string, nsLabels labels.Set) (ok bool, rule string)
	// Problem is why a subnet is not valid (nil: valid or unknown).
	Problem(name string) *kubeovnv1.Problem
	// Terminating: the subnet waits for deletion (it hands out no new address).
	Terminating(name string) bool
	// MTU is the mtu a valid subnet asks for (0: none).
	MTU(name string) int
	// Underlay is the physical network of an underlay Subnet (false: overlay).
	Underlay(name string) (ovnnet.Underlay, bool)
	// SubnetVpc is the VPC of a programmed subnet (ovn-cluster: the default one).
	SubnetVpc(name string) (string, bool)
	// AddressesChanged: an address of the subnet was taken or freed (status).
	AddressesChanged(name string)
	// Released: a pod or node let its address in the subnet go (deletion may finish).
	Released(name string)
	// SubnetsOf lists the Subnets whose spec.provider is provider (sorted).
	SubnetsOf(provider string) []string
	// ProviderOf is a Subnet's provider ("ovn" by default, "" unknown).
	ProviderOf(name string) string
}

// IPs is the IP object reconciler: it brings a pod's ("pod/<ns>/<name>")
// or node's ("node/<name>") IP object in line with the IPAM.
type IPs interface {
	Queue(key string)
}

// Config is what the reconciler needs.
type Config struct {
	Log      *slog.Logger
	Kube     kubernetes.Interface
	Recorder record.EventRecorder
	// Informers holds the shared Pod, Node and Namespace informers.
	Informers informers.SharedInformerFactory
	Net       Network
	IPAM      Addresses
	NB        Ports
	Subnets   Subnets
	IPs       IPs
	Registry  prometheus.Registerer
	Workers   int // pod workers, default 32
	// NADs reads NetworkAttachmentDefinitions; nil when their CRD is not
	// installed (no Multus: a pod's networks annotation is not read).
	NADs NADs
}

// Reconciler is the pod and node address reconciler.
type Reconciler struct {
	cfg   Config
	log   *slog.Logger
	pods  corelisters.PodLister
	nodes corelisters.NodeLister
	nss   corelisters.NamespaceLister
	podQ  reconcile.Queue // pods
	nodeQ reconcile.Queue // nodes
	m     metrics

	mu      sync.Mutex
	waiting map[string]map[string]ipam.Kind // subnet -> pod key -> why it waits
	// wakes counts Wake calls, syncStart holds its value when each pod's
	// sync began: a pod that starts waiting after a Wake ran during its
	// sync is queued again, since that wake (its subnet programmed, an
	// address freed) may have come before the pod was in waiting.
	wakes     uint64
	syncStart map[string]uint64
	// attached: pod key -> the attachment providers it holds an address
	// or port for (released with the pod once its object is gone).
	attached map[string][]string
	// vms: pod key -> the virtual machine it runs (vm.go).
	vms map[string]string
}

type metrics struct {
	allocated prometheus.Counter
	failures  *prometheus.CounterVec
	podSync   prometheus.Histogram
	rebuild   prometheus.Gauge
}

func newMetrics(r prometheus.Registerer) metrics {
	m := metrics{
		allocated: prometheus.NewCounter(prometheus.CounterOpts{Name: "ovnhost_controller_pod_addresses_assigned_total",
			Help: "Pods annotated with an address and a logical switch port."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ovnhost_controller_pod_address_failures_total",
			Help: "Pods refused an address, by reason (SubnetExhausted, IPConflict, IPOutOfRange, UnknownSubnet, ...)."}, []string{"reason"}),
		podSync: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ovnhost_controller_pod_sync_seconds",
			Help: "Time to handle one pod change.", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		rebuild: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ovnhost_controller_ipam_rebuild_seconds",
			Help: "Time the last IPAM rebuild from annotations took."}),
	}
	for _, c := range []prometheus.Collector{m.allocated, m.failures, m.podSync, m.rebuild} {
		_ = r.Register(c)
	}
	return m
}

// New registers the informers' handlers.
func New(cfg Config) (*Reconciler, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 32
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	podInf := cfg.Informers.Core().V1().Pods()
	nodeInf := cfg.Informers.Core().V1().Nodes()
	nsInf := cfg.Informers.Core().V1().Namespaces()
	r := &Reconciler{cfg: cfg, log: cfg.Log, pods: podInf.Lister(), nodes: nodeInf.Lister(), nss: nsInf.Lister(),
		podQ: reconcile.NewDefaultQueue("pods"), nodeQ: reconcile.NewDefaultQueue("nodes"),
		m: newMetrics(cfg.Registry), waiting: map[string]map[string]ipam.Kind{}, syncStart: map[string]uint64{}, attached: map[string][]string{}, vms: map[string]string{}}
	enqueuePod, enqueueNode := reconcile.Enqueue(r.podQ), reconcile.Enqueue(r.nodeQ)
	if _, err := podInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueuePod,
		UpdateFunc: func(o, n any) {
			// kubelet status updates (10k pods: many per second) change nothing we read.
			op, np := o.(*corev1.Pod), n.(*corev1.Pod)
			if op.UID != np.UID || op.Spec.NodeName != np.Spec.NodeName || op.Status.Phase != np.Status.Phase ||
				!maps.Equal(op.Annotations, np.Annotations) || (op.DeletionTimestamp == nil) != (np.DeletionTimestamp == nil) {
				enqueuePod(n)
			}
		},
		DeleteFunc: enqueuePod,
	}); err != nil {
		return nil, err
	}
	if _, err := nodeInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueNode,
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Node), n.(*corev1.Node)
			if !slices.Equal(on.Status.Addresses, nn.Status.Addresses) || !maps.Equal(on.Annotations, nn.Annotations) {
				enqueueNode(n)
			}
		},
		DeleteFunc: enqueueNode,
	}); err != nil {
		return nil, err
	}
	if _, err := nsInf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		// A namespace now pointing at another subnet, or labelled so that a
		// Subnet's namespaceSelectors pick it or no longer do: pods still
		// without an address try again, and every pod of the namespace is
		// checked against its Subnet's binding (one that no longer admits
		// the namespace loses its port and address there, with an event).
		UpdateFunc: func(o, n any) {
			on, nn := o.(*corev1.Namespace), n.(*corev1.Namespace)
			if on.Annotations[annotations.LogicalSwitch] == nn.Annotations[annotations.LogicalSwitch] && maps.Equal(on.Labels, nn.Labels) {
				return
			}
			pods, _ := r.pods.Pods(nn.Name).List(labels.Everything())
			for _, p := range pods {
				r.podQ.Add(p.Namespace + "/" + p.Name)
			}
		},
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// ShutDown stops the queues (their workers return).
func (r *Reconciler) ShutDown() {
	r.podQ.ShutDown()
	r.nodeQ.ShutDown()
}

// Start runs the workers: Workers for pods, 2 for nodes.
func (r *Reconciler) Start(ctx context.Context, wg *sync.WaitGroup) {
	reconcile.Workers(ctx, wg, r.log, r.cfg.Workers, r.podQ, r.syncPod, "pod")
	reconcile.Workers(ctx, wg, r.log, 2, r.nodeQ, r.syncNode, "node")
	reconcile.ShutDownWith(ctx, wg, r.podQ)
	reconcile.ShutDownWith(ctx, wg, r.nodeQ)
}

// Wake requeues the pods waiting on a subnet (an address was freed, the subnet appeared).
func (r *Reconciler) Wake(subnet string) {
	r.mu.Lock()
	r.wakes++
	m := r.waiting[subnet]
	delete(r.waiting, subnet)
	r.mu.Unlock()
	for k := range m {
		r.podQ.Add(k)
	}
	// Pods whose NAD named this subnet's provider before it existed.
	if p := r.cfg.Subnets.ProviderOf(subnet); annotations.IsAttachmentProvider(p) {
		r.mu.Lock()
		m = r.waiting[providerWait(p)]
		delete(r.waiting, providerWait(p))
		r.mu.Unlock()
		for k := range m {
			r.podQ.Add(k)
		}
	}
}

// WakeNAD requeues the pods whose networks annotation names a NAD (it was
// created, changed or deleted).
func (r *Reconciler) WakeNAD(namespace, name string) {
	pods, _ := r.pods.List(labels.Everything())
	for _, p := range pods {
		v := p.Annotations[annotations.NetworksAnnotation]
		if v != "" && strings.Contains(v, name) {
			r.podQ.Add(p.Namespace + "/" + p.Name)
		}
	}
}

// Recheck requeues every pod that holds or asks for an address in subnet:
// its namespace binding changed, each is checked against it again.
func (r *Reconciler) Recheck(subnet string) {
	pods, _ := r.pods.List(labels.Everything())
	for _, p := range pods {
		a, held := r.cfg.IPAM.Lookup(ovnnet.PodOwner(p.Namespace, p.Name))
		if p.Annotations[annotations.LogicalSwitch] == subnet || (held && a.Subnet == subnet) {
			r.podQ.Add(p.Namespace + "/" + p.Name)
		}
	}
	// And the pods attached to it.
	r.mu.Lock()
	var attached []string
	for key, providers := range r.attached {
		ns, name, _ := strings.Cut(key, "/")
		for _, pr := range providers {
			if a, ok := r.cfg.IPAM.Lookup(ovnnet.AttachmentOwner(ns, name, pr)); ok && a.Subnet == subnet {
				attached = append(attached, key)
			}
		}
	}
	r.mu.Unlock()
	for _, k := range attached {
		r.podQ.Add(k)
	}
}

// Exhausted counts the pods that wait because subnet has no free address.
func (r *Reconciler) Exhausted(subnet string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.waiting[subnet] {
		if k == ipam.KindExhausted {
			n++
		}
	}
	return n
}

func (r *Reconciler) wait(subnet, key string, k ipam.Kind) {
	r.mu.Lock()
	if r.waiting[subnet] == nil {
		r.waiting[subnet] = map[string]ipam.Kind{}
	}
	r.waiting[subnet][key] = k
	start, syncing := r.syncStart[key]
	missed := syncing && start != r.wakes
	r.mu.Unlock()
	if missed {
		r.podQ.Add(key)
	}
}

// beginSync records the wake count as key's sync starts (see wait); the
// returned func forgets it when the sync ends.
func (r *Reconciler) beginSync(key string) func() {
	r.mu.Lock()
	r.syncStart[key] = r.wakes
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.syncStart, key)
		r.mu.Unlock()
	}
}

func (r *Reconciler) unwait(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for s, m := range r.waiting {
		if k, ok := m[key]; ok {
			delete(m, key)
			if k == ipam.KindExhausted {
				r.cfg.Subnets.AddressesChanged(s)
			}
		}
	}
}

// keepPort says whether a port's pod, virtual machine or node still exists.
func (r *Reconciler) keepPort(p ovnnb.Port) bool {
	owner := p.ExternalIDs[ovnnb.KeyPod]
	if vm := p.ExternalIDs[ovnnb.KeyVM]; vm != "" && owner != "" {
		ns, _, _ := strings.Cut(owner, "/")
		pods, err := r.vmPods(ns, vm)
		return err != nil || len(pods) > 0
	}
	if node := p.ExternalIDs[ovnnb.KeyNode]; node != "" && owner == "" {
		_, err := r.nodes.Get(node)
		return !apierrors.IsNotFound(err)
	}
	if owner == "" {
		return true
	}
	ns, name, _ := strings.Cut(owner, "/")
	pod, err := r.pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return false
	}
	return err != nil || reconcile.WantsAddress(pod)
}

// CollectPorts deletes, at start-up, the ports whose pod or node is gone.
func (r *Reconciler) CollectPorts(ctx context.Context) ([]string, error) {
	return r.cfg.Net.GarbageCollect(ctx, r.keepPort)
}

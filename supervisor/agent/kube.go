package agent

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/internal/kubeclient"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/supervisor/extgw"
)

// kubeClients is the node's one Kubernetes client set and its informer
// factories, handed to the features that need them.
type kubeClients struct {
	rest    *rest.Config
	client  kubernetes.Interface
	dynamic dynamic.Interface
	// configMaps are the informers of the EIP/SNAT ConfigMap alone.
	configMaps informers.SharedInformerFactory
	// kubeovn are the informers of the kubeovn.io objects the node reads,
	// one watch per resource shared by the features (the kubeInformers
	// unit starts and stops them): subnets is read by the pod source (the
	// node's Subnet view, egress plan) and by egress (the active-gateway
	// report).
	kubeovn dynamicinformer.DynamicSharedInformerFactory
	subnets cache.SharedIndexInformer
	// self is this node's own Node (field selector metadata.name): its
	// labels choose the provider networks, the underlay reports on it, and
	// the pod source reads its node network annotations from it.
	selfFactory informers.SharedInformerFactory
	self        cache.SharedIndexInformer
}

// newKubeClients decides "Kubernetes or standalone", for the whole node:
// a kubeconfig, or the in-cluster configuration of a pod, gives the
// client set; neither is a standalone node (nil, no error). A kubeconfig
// that cannot be read is an error.
func newKubeClients(k nodeconfig.Kubernetes, nodeName string) (*kubeClients, error) {
	rc, err := kubeclient.Config(k.Kubeconfig)
	if err != nil || rc == nil {
		return nil, err
	}
	rc = rest.CopyConfig(rc)
	// The pod source lists and watches the node's pods through it.
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	kubeovn := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	self := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", nodeName).String()
	}))
	return &kubeClients{rest: rc, client: cs, dynamic: dyn, configMaps: extgw.NewConfigMapInformers(cs),
		kubeovn: kubeovn, subnets: kubeovn.ForResource(podsource.SubnetGVR).Informer(),
		selfFactory: self, self: self.Core().V1().Nodes().Informer()}, nil
}

// kubeInformers runs the informers the features share, started before the
// first of them and stopped after the last.
type kubeInformers struct {
	facs []informerFactory
	stop chan struct{}
}

// informerFactory is what typed and dynamic factories share.
type informerFactory interface {
	Start(stop <-chan struct{})
	Shutdown()
}

func (u *kubeInformers) Name() string { return "kube-informers" }

func (u *kubeInformers) Start(context.Context) error {
	// The features wait for the sync themselves: OVS and the pods already
	// wired must not depend on the API server answering.
	u.stop = make(chan struct{})
	for _, f := range u.facs {
		f.Start(u.stop)
	}
	return nil
}

func (u *kubeInformers) Stop(context.Context) error {
	if u.stop != nil {
		close(u.stop)
		for _, f := range u.facs {
			f.Shutdown()
		}
		u.stop = nil
	}
	return nil
}

// kubeClient is the node's client, nil (untyped) on a standalone node.
func (a *Agent) kubeClient() kubernetes.Interface {
	if a.kube == nil {
		return nil
	}
	return a.kube.client
}

package agent

import (
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
}

// newKubeClients decides "Kubernetes or standalone", for the whole node:
// a kubeconfig, or the in-cluster configuration of a pod, gives the
// client set; neither is a standalone node (nil, no error). A kubeconfig
// that cannot be read is an error.
func newKubeClients(k nodeconfig.Kubernetes) (*kubeClients, error) {
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
	return &kubeClients{rest: rc, client: cs, dynamic: dyn, configMaps: extgw.NewConfigMapInformers(cs)}, nil
}

// kubeClient is the node's client, nil (untyped) on a standalone node.
func (a *Agent) kubeClient() kubernetes.Interface {
	if a.kube == nil {
		return nil
	}
	return a.kube.client
}

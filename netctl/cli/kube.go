package cli

import (
	"fmt"
	"strings"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/version"
	"github.com/ovnhost/ovnhost/netctl/nodeclient"
)

// kube is the cluster access of one command run.
type kube struct {
	rest       *rest.Config
	kc         kubernetes.Interface
	dc         dynamic.Interface
	namespace  string // -n, else the context's namespace, else "default"
	explicitNS bool   // -n was given
	// tokens: node-bound tokens of --node-api-account, for node APIs.
	tokens nodeclient.TokenSource
}

// kube builds the clients from --kubeconfig/--context/-n and friends,
// with kubectl's precedence (flags, $KUBECONFIG, ~/.kube/config,
// in-cluster).
func (a *app) kube() (*kube, error) {
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(a.loading, a.kubeFlags)
	rc, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, &exitError{code: ExitFailure, err: fmt.Errorf("no Kubernetes configuration: pass --kubeconfig FILE, set KUBECONFIG, or run inside the cluster")}
		}
		return nil, &exitError{code: ExitFailure, err: fmt.Errorf("kubeconfig: %w", err)}
	}
	rc.UserAgent = "netctl/" + version.Version
	ns, explicit, err := cc.Namespace()
	if err != nil {
		return nil, &exitError{code: ExitFailure, err: fmt.Errorf("kubeconfig namespace: %w", err)}
	}
	if a.kubeFlags.Context.Namespace != "" {
		explicit = true
	}
	kc, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, &exitError{code: ExitFailure, err: err}
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, &exitError{code: ExitFailure, err: err}
	}
	acctNS, acct, ok := strings.Cut(a.nodeAccount, "/")
	if !ok || acctNS == "" || acct == "" || strings.Contains(acct, "/") {
		return nil, &exitError{code: ExitUsage, err: fmt.Errorf("--node-api-account %q: want NAMESPACE/NAME of a ServiceAccount, e.g. %s", a.nodeAccount, api.DefaultNetctlAccount)}
	}
	return &kube{rest: rc, kc: kc, dc: dc, namespace: ns, explicitNS: explicit,
		tokens: &nodeclient.AccountTokens{Client: kc, Namespace: acctNS, Name: acct}}, nil
}

// podRef splits "NS/POD" (or "POD" in the -n namespace).
func (k *kube) podRef(arg string) (ns, name string, err error) {
	if ns, name, ok := strings.Cut(arg, "/"); ok {
		if ns == "" || name == "" || strings.Contains(name, "/") {
			return "", "", usageErrorf("pod %q: write NAMESPACE/POD (or POD with -n NAMESPACE)", arg)
		}
		return ns, name, nil
	}
	if arg == "" {
		return "", "", usageErrorf("pod name missing: write NAMESPACE/POD")
	}
	return k.namespace, arg, nil
}

func failure(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: ExitFailure, err: err}
}

package agent

import (
	"context"
	"log/slog"

	"k8s.io/client-go/kubernetes"

	"github.com/ovnhost/ovnhost/supervisor/nodeapi"
)

// serveNodeAPI is the default Options.NodeAPI: the node API of
// supervisor/nodeapi on the NodeConfig's address, authenticating with the
// node's one client set (none on a standalone node: nothing is served).
func (a *Agent) serveNodeAPI(ctx context.Context, kube kubernetes.Interface) (func(), error) {
	d := a.nodeAPIDeps()
	d.Kube = kube
	stop, err := nodeapi.Start(ctx, d)
	if err != nil {
		a.o.Log.Error("node API", "addr", d.Addr, "err", err,
			"fix", "free the port, fix --node-api-cert/--node-api-key, or set --node-api-addr= to disable it")
	}
	return stop, err
}

func (a *Agent) nodeAPIDeps() nodeapi.Deps {
	nc := a.nc
	return nodeapi.Deps{Node: nc, Health: a.o.Health, Log: a.o.Log.With(slog.String("component", "node-api")),
		Addr: nc.NodeAPI.Addr, CertFile: nc.NodeAPI.CertFile, KeyFile: nc.NodeAPI.KeyFile, Host: nc.Host}
}

// startNodeAPI adds the OVS/OVN metrics and serves the node API.
func (a *Agent) startNodeAPI() error {
	if a.o.OVSMetrics != nil {
		a.o.OVSMetrics()
	} else {
		nodeapi.RegisterMetrics(a.nodeAPIDeps())
	}
	serve := a.o.NodeAPI
	if serve == nil {
		serve = a.serveNodeAPI
	}
	// Not the caller's context: the API serves until Stop, whatever
	// happens to the start.
	ctx, cancel := context.WithCancel(context.Background())
	stop, err := serve(ctx, a.kubeClient())
	if err != nil {
		cancel()
		return err
	}
	a.cancelAPI, a.stopAPI = cancel, stop
	return nil
}

func (a *Agent) stopNodeAPI() {
	if a.stopAPI != nil {
		a.stopAPI()
	}
	if a.cancelAPI != nil {
		a.cancelAPI()
	}
}

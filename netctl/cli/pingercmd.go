package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"

	"github.com/ovnhost/ovnhost/netctl/pinger"
)

// pingerCommand runs the pinger (the ovnhost-pinger DaemonSet's entrypoint).
func (a *app) pingerCommand() *cobra.Command {
	var o pinger.Options
	var listen, external string
	c := &cobra.Command{
		Use:   "pinger",
		Short: "Run the pinger in a pod: probes pods on other nodes, nodes, outside and DNS; serves /metrics and /matrix",
		Long: `Runs continuously in a pod on the pod network (the ovnhost-pinger DaemonSet):
every --interval it sends --count ICMP echoes (at most --rate per second) to
the pinger pod of every other node (class pod), to every node's InternalIP
(class node), to each --external address, and a DNS query for --dns-name to
the DNS Service (class dns). Serves Prometheus metrics
(ovnhost_pinger_rtt_seconds, ovnhost_pinger_probes_total,
ovnhost_pinger_lost_total) and the latest round as JSON (/matrix) on
--listen; netctl diagnose shows that matrix. Needs CAP_NET_RAW.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			k, err := a.kube()
			if err != nil {
				return err
			}
			o.Kube = k.kc
			if o.Node == "" || o.Namespace == "" {
				return usageErrorf("--node (NODE_NAME) and --namespace of the pinger pods (POD_NAMESPACE) are required")
			}
			for _, e := range strings.Split(external, ",") {
				if e = strings.TrimSpace(e); e != "" {
					if net.ParseIP(e) == nil {
						return usageErrorf("--external %q: want IP addresses, comma-separated", e)
					}
					o.External = append(o.External, e)
				}
			}
			o.Log = slog.New(slog.NewTextHandler(a.streams.Err, nil))
			o.Registry = prometheus.NewRegistry()
			o.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
			p, err := pinger.New(o)
			if err != nil {
				return usageErrorf("%v", err)
			}
			l, err := net.Listen("tcp", listen)
			if err != nil {
				return failure(fmt.Errorf("--listen %s: %w", listen, err))
			}
			srv := &http.Server{Handler: p.Handler(), ReadHeaderTimeout: 5 * time.Second}
			go func() { _ = srv.Serve(l) }()
			defer srv.Close()
			o.Log.Info("pinger running", "node", o.Node, "listen", l.Addr().String(), "interval", o.Interval)
			ctx := cmd.Context()
			if err := p.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return failure(err)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Node, "node", os.Getenv("NODE_NAME"), "this pod's node (NODE_NAME)")
	f.StringVar(&o.Namespace, "pods-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the pinger pods (POD_NAMESPACE)")
	f.StringVar(&o.Selector, "selector", "app=ovnhost-pinger", "label selector of the pinger pods")
	f.DurationVar(&o.Interval, "interval", 15*time.Second, "time between rounds")
	f.IntVar(&o.Count, "count", 3, "probes per target per round")
	f.DurationVar(&o.Timeout, "timeout", time.Second, "wait for each answer")
	f.Float64Var(&o.Rate, "rate", 20, "probes per second at most (all targets together)")
	f.StringVar(&external, "external", "", "outside IP addresses to ping, comma-separated (class external)")
	f.StringVar(&o.DNSName, "dns-name", "", "name to resolve through the DNS Service, e.g. kubernetes.default.svc.cluster.local (class dns; empty: off)")
	f.StringVar(&o.DNSServer, "dns-server", "", "DNS Service address (default: the nameserver of /etc/resolv.conf)")
	f.StringVar(&listen, "listen", ":8080", "address of /metrics and /matrix")
	return c
}

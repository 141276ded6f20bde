// Command ovnhost-controller watches Pods, Nodes, Namespaces and Subnets,
// allocates addresses, writes Kube-OVN annotations and programs the OVN
// northbound database. The work is in package controller/kube.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/ovnhost/ovnhost/controller/kube"
	"github.com/ovnhost/ovnhost/internal/kubeclient"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/version"
)

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// nbFromDBIPs turns OVN_DB_IPS ("10.0.0.1,10.0.0.2") into NB endpoints
// (ssl: when ENABLE_SSL=true, as Kube-OVN does), the same way the node
// daemon derives them.
func nbFromDBIPs(ips string) string {
	nb, _ := ovsdbconn.ClusterRemotes(strings.Split(ips, ","), os.Getenv("ENABLE_SSL") == "true")
	return nb
}

func main() {
	var o kube.Options
	var kubeconfig, logLevel, excl string
	var qps float64
	var burst int
	var leaderElect, showVersion bool
	fs := flag.CommandLine
	fs.StringVar(&kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig file (default: in-cluster configuration)")
	fs.StringVar(&o.NBEndpoints, "ovn-nb-addr", env("OVN_NB_ADDR", nbFromDBIPs(os.Getenv("OVN_DB_IPS"))), "OVN northbound endpoints, e.g. tcp:10.0.0.1:6641 (default from OVN_NB_ADDR or OVN_DB_IPS)")
	var tlsDir, svcCIDR string
	fs.StringVar(&tlsDir, "ovn-tls-dir", "/var/run/tls", "directory with key, cert and cacert (Kube-OVN's layout) for ssl: NB endpoints")
	fs.StringVar(&o.DefaultCIDR, "default-cidr", "10.16.0.0/16", "CIDR of the default subnet ovn-default")
	fs.StringVar(&o.DefaultGW, "default-gateway", "", "gateway of ovn-default (default: first address)")
	fs.StringVar(&excl, "default-exclude-ips", "", "comma-separated excludeIps of ovn-default")
	fs.StringVar(&o.JoinCIDR, "node-switch-cidr", "100.64.0.0/16", "CIDR of the join subnet (node ports)")
	fs.IntVar(&o.Workers, "workers", 32, "concurrent pod workers")
	fs.StringVar(&svcCIDR, "service-cluster-ip-range", env("SVC_CIDR", "10.96.0.0/12"), "the cluster's Service CIDRs, comma-separated (as kube-apiserver's flag of that name)")
	fs.BoolVar(&o.EnableLB, "enable-lb", true, "program Services as OVN load balancers (false: leave Services to kube-proxy)")
	fs.BoolVar(&o.EnableNP, "enable-np", true, "enforce NetworkPolicy with OVN ACLs")
	fs.IntVar(&o.ACLLogRate, "acl-log-rate", 20, "packets per second each logging NetworkPolicy ACL (ovn.kubernetes.io/enable_log) may send to ovn-controller: the rate of OVN meter acl-log-meter")
	fs.StringVar(&o.HealthAddr, "health-addr", ":10660", "address of /healthz, /readyz and /metrics (empty: off); not loopback: HTTPS with authenticated /metrics (--metrics-auth)")
	fs.DurationVar(&o.NBUnhealthyAfter, "nb-unhealthy-after", kube.DefaultNBUnhealthyAfter, "/healthz fails once the OVN northbound connection has been down this long (the liveness probe then restarts the controller)")
	fs.BoolVar(&o.Profiling, "profiling", false, "serve /debug/pprof on --health-addr")
	fs.StringVar(&o.MetricsAuth, "metrics-auth", kube.MetricsAuthAuto, "protection of /metrics and /debug/pprof on --health-addr: auto (kubernetes unless --health-addr is a loopback address), kubernetes (HTTPS; a bearer token the API server accepts, TokenReview, with get on the path, SubjectAccessReview) or none")
	fs.StringVar(&o.MetricsCert, "metrics-cert", "", "certificate of --health-addr's HTTPS (with --metrics-key; re-read when it changes); empty: self-signed")
	fs.StringVar(&o.MetricsKey, "metrics-key", "", "key of --health-addr's HTTPS (with --metrics-cert)")
	fs.BoolVar(&leaderElect, "leader-elect", true, "elect a leader among replicas through a Lease")
	fs.StringVar(&o.LeaseNamespace, "lease-namespace", env("POD_NAMESPACE", "kube-system"), "namespace of the leader Lease")
	fs.StringVar(&o.LeaseName, "lease-name", "ovnhost-controller", "name of the leader Lease")
	fs.StringVar(&o.Identity, "identity", os.Getenv("POD_NAME"), "leader election identity (default: POD_NAME, else host name)")
	fs.DurationVar(&o.LeaseDuration, "lease-duration", 15*time.Second, "how long a standby waits before taking over a lease that is not renewed")
	fs.DurationVar(&o.RenewDeadline, "renew-deadline", 10*time.Second, "how long the leader retries renewing before it gives up leadership")
	fs.DurationVar(&o.RetryPeriod, "retry-period", 2*time.Second, "interval between lease acquire/renew attempts")
	fs.Float64Var(&qps, "kube-api-qps", 1000, "client-side rate limit towards the API server")
	fs.IntVar(&burst, "kube-api-burst", 2000, "client-side burst towards the API server")
	fs.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&showVersion, "version", false, "print the version and exit")
	flag.Parse()
	// `ovnhost-controller version`, as every program of the project has.
	if showVersion || flag.Arg(0) == "version" {
		fmt.Println("ovnhost-controller", version.Version)
		return
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "ovnhost-controller: --log-level %q: use debug, info, warn or error\n", logLevel)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl}))
	slog.SetDefault(log)
	o.Logger = log
	if o.NBEndpoints == "" {
		log.Error("no OVN northbound address: pass --ovn-nb-addr tcp:IP:6641 or set OVN_DB_IPS")
		os.Exit(2)
	}
	if strings.Contains(o.NBEndpoints, "ssl:") {
		// Followed for the life of the process: rotated certificates are used on the next (re)connect.
		t, err := ovnnb.WatchTLS(context.Background(), filepath.Join(tlsDir, "key"), filepath.Join(tlsDir, "cert"), filepath.Join(tlsDir, "cacert"), log)
		if err != nil {
			log.Error("ssl: northbound endpoint needs TLS files; mount them or set --ovn-tls-dir", "error", err)
			os.Exit(2)
		}
		o.NBTLS = t
	}
	for _, c := range strings.Split(svcCIDR, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(c)
		if err != nil || pfx.Masked() != pfx {
			fmt.Fprintf(os.Stderr, "ovnhost-controller: --service-cluster-ip-range %q: %q is not a network CIDR such as 10.96.0.0/12\n", svcCIDR, c)
			os.Exit(2)
		}
		o.ServiceCIDRs = append(o.ServiceCIDRs, pfx)
	}
	if o.ACLLogRate < 1 {
		fmt.Fprintf(os.Stderr, "ovnhost-controller: --acl-log-rate %d: give the packets per second a logging ACL may send to ovn-controller, at least 1 (default 20)\n", o.ACLLogRate)
		os.Exit(2)
	}
	for _, e := range strings.Split(excl, ",") {
		if e = strings.TrimSpace(e); e != "" {
			o.DefaultExcl = append(o.DefaultExcl, e)
		}
	}
	cfg, err := kubeclient.Required(kubeconfig)
	if err != nil {
		log.Error("no Kubernetes client configuration; pass --kubeconfig or run in a pod", "error", err)
		os.Exit(2)
	}
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = "ovnhost-controller/" + version.Version
	o.Rest = cfg
	if !leaderElect {
		o.LeaseName = ""
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	log.Info("starting ovnhost-controller", "version", version.Version, "nb", o.NBEndpoints, "leader_elect", leaderElect)
	if err := kube.Run(ctx, o); err != nil {
		log.Error("ovnhost-controller stopped", "error", err)
		os.Exit(1)
	}
}

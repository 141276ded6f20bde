package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ovnhost/ovnhost/cni/cniconf"
	"github.com/ovnhost/ovnhost/cni/nodeport"
	"github.com/ovnhost/ovnhost/cni/podsource"
	"github.com/ovnhost/ovnhost/cni/podwire"
	"github.com/ovnhost/ovnhost/cni/protocol"
	"github.com/ovnhost/ovnhost/internal/kubeclient"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// Options are what the CNI server is given by the node daemon; New builds
// the server and its default parts from them.
type Options struct {
	// Node is the node's resolved configuration: name, datapath, pod MTU,
	// Service CIDRs, the NB remote (with its TLS) for standalone mode.
	Node *nodeconfig.NodeConfig
	// OVS is a libovsdb client connected to the local conf.db with the
	// models of internal/ovsdb/vswitch; the server only transacts on it.
	OVS client.Client
	Log *slog.Logger

	Socket      string // default protocol.DefaultSocket
	SocketGroup string // group allowed on the socket ("" root only)
	BinDir      string // where the plugin is installed
	ConfDir     string // where the conflist is installed
	// ConfVersion is the installed conflist's cniVersion (default
	// protocol.DefaultConfVersion; one of protocol.ConfVersions). Requests
	// are answered in the version they carry, whatever this is.
	ConfVersion string
	// MirrorOutput is the port mirrored pods' traffic is copied to.
	MirrorOutput string
	// Kubeconfig selects Kubernetes mode ("" tries in-cluster, then
	// standalone allocation from Node.NB).
	Kubeconfig string
	// Egress is told what the host must masquerade for pod egress (the
	// node daemon's host NAT); nil leaves the host alone.
	Egress func(ctx context.Context, plan podsource.EgressPlan) error
	// UnderlayMTU is the MTU of a provider network on this node (0: not
	// bridged here); nil: underlay pods get the node's pod MTU.
	UnderlayMTU func(providerNetwork string) int
	// InstallHeld says why ovn-controller installs no new flows now (""
	// when it does; nil: never held): ADDs fail at once with it.
	InstallHeld func() string
	// ControllerFieldManagers are the field managers whose pod annotations
	// the node honours (nil: podsource.DefaultControllerManagers).
	ControllerFieldManagers []string
}

// Option adjusts what New builds.
type Option func(*settings)

type settings struct {
	reg             prometheus.Registerer
	pluginSrc       string
	kube            kubernetes.Interface
	dyn             dynamic.Interface
	subnets         cache.SharedIndexInformer
	nodes           cache.SharedIndexInformer
	forceStandalone bool
	annWait         time.Duration
	installWait     time.Duration
	noInstall       bool
	noNodePort      bool
	maxConcurrent   int
}

// WithRegisterer registers the metrics on r instead of prometheus.DefaultRegisterer.
func WithRegisterer(r prometheus.Registerer) Option { return func(s *settings) { s.reg = r } }

// WithPluginSource is the ovnhost-cni binary to install (default: next to
// the running executable).
func WithPluginSource(path string) Option { return func(s *settings) { s.pluginSrc = path } }

// WithKubeClients uses the node's client set for Kubernetes mode instead
// of building clients from Options.Kubeconfig or the in-cluster
// configuration. subnets is the node's shared Subnet informer and nodes
// its shared informer of its own Node, started and stopped by their owner;
// without subnets, dyn reads the Subnets through an informer of the
// server's own (both nil: no Subnet view, no egress plan); without nodes,
// the server watches its Node itself.
func WithKubeClients(cs kubernetes.Interface, dyn dynamic.Interface, subnets, nodes cache.SharedIndexInformer) Option {
	return func(s *settings) { s.kube, s.dyn, s.subnets, s.nodes = cs, dyn, subnets, nodes }
}

// WithStandalone forces standalone mode even when in-cluster configuration exists.
func WithStandalone() Option { return func(s *settings) { s.forceStandalone = true } }

// WithTimeouts sets how long ADD waits for the controller's annotations and
// for ovn-installed.
func WithTimeouts(annotations, installed time.Duration) Option {
	return func(s *settings) { s.annWait, s.installWait = annotations, installed }
}

// WithoutInstall skips installing the plugin binary and conflist (tests
// that exec the binary from the build directory).
func WithoutInstall() Option { return func(s *settings) { s.noInstall = true } }

// WithoutNodePort skips creating ovn0.
func WithoutNodePort() Option { return func(s *settings) { s.noNodePort = true } }

// WithMaxConcurrent sets how many requests are handled at once.
func WithMaxConcurrent(n int) Option { return func(s *settings) { s.maxConcurrent = n } }

// New builds the CNI server with its default parts: the pod source
// (Kubernetes when a client, a kubeconfig or the in-cluster configuration
// is there, else standalone), the pod wiring on br-int, the installer and
// ovn0 (unless WithoutInstall, WithoutNodePort). Metrics are registered
// here.
func New(o Options, opts ...Option) (*Server, error) {
	if o.Node == nil || o.OVS == nil {
		return nil, errors.New("cni server: the node configuration and the conf.db client are required")
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.Socket == "" {
		o.Socket = protocol.DefaultSocket
	}
	if o.ConfVersion == "" {
		o.ConfVersion = protocol.DefaultConfVersion
	}
	if !protocol.ValidConfVersion(o.ConfVersion) {
		return nil, fmt.Errorf("cni server: conflist cniVersion %q is not one of %s", o.ConfVersion, strings.Join(protocol.ConfVersions, ", "))
	}
	st := settings{reg: prometheus.DefaultRegisterer, annWait: DefaultAnnotationWait, installWait: DefaultInstallWait}
	for _, f := range opts {
		f(&st)
	}
	log := o.Log.With("unit", "cni")
	mtu := o.Node.PodMTU
	if mtu <= 0 {
		mtu = nodeconfig.FallbackPodMTU
	}
	src, err := newSource(o, st, log)
	if err != nil {
		return nil, err
	}
	p := Parts{Source: src, Wiring: podwire.New(podwire.Options{OVS: o.OVS, Datapath: o.Node.Datapath,
		MirrorOutput: o.MirrorOutput, InstallWait: st.installWait, Log: log})}
	if !st.noInstall {
		p.Installer = cniconf.NewInstaller(cniconf.InstallOptions{BinDir: o.BinDir, ConfDir: o.ConfDir, Socket: o.Socket,
			Version: o.ConfVersion, PluginSource: st.pluginSrc, Log: log})
	}
	if !st.noNodePort {
		p.NodePort = nodeport.New(nodeport.Options{OVS: o.OVS, Source: src, ServiceCIDRs: o.Node.ServiceCIDRs, MTU: mtu,
			InstallWait: st.installWait, Egress: o.Egress, Log: log})
	}
	return Assemble(Config{Socket: o.Socket, SocketGroup: o.SocketGroup, PodMTU: mtu, UnderlayMTU: o.UnderlayMTU, AnnotationWait: st.annWait,
		InstallWait: st.installWait, InstallHeld: o.InstallHeld, MaxConcurrent: st.maxConcurrent, Registerer: st.reg, Log: log}, p)
}

// newSource chooses the pod source: Kubernetes (WithKubeClient, the
// kubeconfig, or the in-cluster configuration), else standalone.
func newSource(o Options, st settings, log *slog.Logger) (podsource.Source, error) {
	// The pods' ports as OVN holds them: read from the southbound database
	// ovn-controller uses (the local one in all-in-one mode).
	sb := o.Node.SB.Endpoint
	if sb == "" {
		sb = o.Node.Layout.LocalSB()
	}
	ko := podsource.KubeOptions{Node: o.Node.Name, Log: log, TrustedManagers: o.ControllerFieldManagers,
		OVN: podsource.NewSBPorts(sb, o.Node.SB.TLS, log), Subnets: st.subnets, Nodes: st.nodes,
		ServiceCIDRs: o.Node.ServiceCIDRs}
	if !st.forceStandalone {
		if st.kube != nil {
			return podsource.NewKube(st.kube, st.dyn, ko), nil
		}
		rc, err := kubeclient.Config(o.Kubeconfig)
		if err != nil {
			return nil, err
		}
		if rc != nil {
			return podsource.NewKubeFromConfig(rc, ko)
		}
	}
	return podsource.NewStandalone(o.Node.NB, o.Node.Name, o.Node.StandaloneCIDRs, o.Node.StandaloneJoinCIDRs, log), nil
}

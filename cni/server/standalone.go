package server

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"

	"github.com/ovnhost/ovnhost/controller/ipam"
	"github.com/ovnhost/ovnhost/controller/ovnnb"
)

// PodRef names the pod of a CNI request.
type PodRef struct {
	Namespace, Name string
	ContainerID     string
	// Annotations are the user's requests in standalone mode (from CNI_ARGS
	// or the conflist's "args"); ignored in Kubernetes mode.
	Annotations map[string]string
}

// Key is "namespace/name".
func (r PodRef) Key() string { return r.Namespace + "/" + r.Name }

// LSP is the logical switch port name, "<pod>.<namespace>".
func (r PodRef) LSP() string { return r.Name + "." + r.Namespace }

// PodSource tells the server a pod's network.
type PodSource interface {
	// PodNetwork returns the pod's network, waiting (event-driven) until it
	// is known or ctx ends.
	PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error)
	// Release is called at DEL and after a failed ADD; standalone frees the
	// address and deletes the logical switch port.
	Release(ctx context.Context, ref PodRef) error
	// NodeNetwork returns the node port's network (ovn0), waiting for it.
	NodeNetwork(ctx context.Context) (*NodeNetwork, error)
	Start(ctx context.Context) error
	Stop()
}

// NodeNetwork is ovn0's configuration and the pod CIDRs routed through it.
type NodeNetwork struct {
	PortName string // node-<name>
	Addr     netip.Prefix
	Gateway  netip.Addr
	MAC      net.HardwareAddr
	PodCIDRs []netip.Prefix
}

// Standalone-mode defaults: Kube-OVN's names and ranges.
const (
	DefaultRouter  = "ovn-cluster"
	DefaultSwitch  = "ovn-default"
	DefaultCIDR    = "10.16.0.0/16"
	JoinSwitch     = "join"
	JoinCIDR       = "100.64.0.0/16"
	standaloneNote = "standalone mode (no Kubernetes)"
)

// standaloneSource allocates addresses itself with the controller's IPAM
// library and creates the logical switch ports with its NB library.
type standaloneSource struct {
	nbRemote string
	node     string
	log      *slog.Logger

	mu  sync.Mutex
	nb  *ovnnb.Client
	ip  *ipam.IPAM
	def ipam.SubnetConfig
}

func newStandaloneSource(nbRemote, node string, log *slog.Logger) *standaloneSource {
	return &standaloneSource{nbRemote: nbRemote, node: node, log: log}
}

func (s *standaloneSource) Start(ctx context.Context) error {
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: s.nbRemote, Logger: s.log})
	if err != nil {
		return fmt.Errorf("%s: connect to the OVN northbound database %s: %w", standaloneNote, s.nbRemote, err)
	}
	s.nb = nb
	s.ip = ipam.New()
	def, err := ipam.ParseSubnet(DefaultSwitch, DefaultCIDR, "", nil)
	if err != nil {
		return err
	}
	join, err := ipam.ParseSubnet(JoinSwitch, JoinCIDR, "", nil)
	if err != nil {
		return err
	}
	s.def = def
	for _, sc := range []ipam.SubnetConfig{def, join} {
		if err := s.ip.AddSubnet(sc); err != nil {
			return err
		}
	}
	if err := nb.EnsureRouter(ctx, DefaultRouter); err != nil {
		return err
	}
	for _, sc := range []ipam.SubnetConfig{def, join} {
		if err := nb.EnsureSwitch(ctx, ovnnb.Switch{Name: sc.Name, Router: DefaultRouter, CIDRs: sc.CIDRs, Gateways: sc.Gateways}); err != nil {
			return err
		}
	}
	// Rebuild the allocations from the ports already in NB.
	ports, err := nb.Ports(ctx, map[string]string{ovnnb.KeyVendor: ovnnb.Vendor})
	if err != nil {
		return err
	}
	for _, p := range ports {
		owner := ""
		switch {
		case p.ExternalIDs[ovnnb.KeyPod] != "":
			owner = p.ExternalIDs[ovnnb.KeyPod]
		case p.ExternalIDs[ovnnb.KeyNode] != "":
			owner = "node:" + p.ExternalIDs[ovnnb.KeyNode]
		default:
			continue
		}
		if _, err := s.ip.Allocate(p.Switch, owner, ipam.Request{IPs: p.IPs, MAC: p.MAC}); err != nil {
			s.log.Warn("standalone: cannot restore an allocation from NB", "port", p.Name, "err", err)
		}
	}
	return nil
}

func (s *standaloneSource) Stop() {
	if s.nb != nil {
		s.nb.Close()
	}
}

func (s *standaloneSource) PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error) {
	sw := DefaultSwitch
	if v := ref.Annotations[AnnLogicalSwith]; v != "" && v != DefaultSwitch {
		return nil, &AnnotationError{AnnLogicalSwith, v, standaloneNote + " has only the subnet " + DefaultSwitch}
	}
	var req ipam.Request
	if v := ref.Annotations[AnnIPAddress]; v != "" {
		ips, err := ipam.ParseIPs(v)
		if err != nil {
			return nil, &AnnotationError{AnnIPAddress, v, err.Error()}
		}
		req.IPs = ips
	}
	req.MAC = ref.Annotations[AnnMACAddress]
	a, err := s.ip.Allocate(sw, ref.Key(), req)
	if err != nil {
		return nil, &ipamError{err}
	}
	ok := false
	defer func() {
		if !ok {
			s.ip.Release(ref.Key())
		}
	}()
	if err := s.nb.EnsurePort(ctx, ovnnb.Port{Name: ref.LSP(), Switch: sw, MAC: a.MAC, IPs: a.IPs,
		ExternalIDs: map[string]string{ovnnb.KeyPod: ref.Key(), ovnnb.KeyNode: s.node}}); err != nil {
		return nil, fmt.Errorf("create logical switch port %s: %w", ref.LSP(), err)
	}
	ann := map[string]string{
		AnnIPAddress: joinAddrs(a.IPs), AnnMACAddress: a.MAC, AnnCIDR: a.CIDR, AnnGateway: a.Gateway,
		AnnLogicalSwith: sw,
	}
	for k, v := range ref.Annotations {
		if _, set := ann[k]; !set {
			ann[k] = v
		}
	}
	n, err := ParseAnnotations(ann)
	if err != nil {
		_ = s.nb.DeletePort(context.WithoutCancel(ctx), ref.LSP())
		return nil, err
	}
	ok = true
	return n, nil
}

func (s *standaloneSource) Release(ctx context.Context, ref PodRef) error {
	if err := s.nb.DeletePort(ctx, ref.LSP()); err != nil {
		return fmt.Errorf("delete logical switch port %s: %w", ref.LSP(), err)
	}
	s.ip.Release(ref.Key())
	return nil
}

func (s *standaloneSource) NodeNetwork(ctx context.Context) (*NodeNetwork, error) {
	owner := "node:" + s.node
	a, err := s.ip.Allocate(JoinSwitch, owner, ipam.Request{})
	if err != nil {
		return nil, err
	}
	name := "node-" + s.node
	if err := s.nb.EnsurePort(ctx, ovnnb.Port{Name: name, Switch: JoinSwitch, MAC: a.MAC, IPs: a.IPs,
		ExternalIDs: map[string]string{ovnnb.KeyNode: s.node}}); err != nil {
		return nil, err
	}
	jp := netip.MustParsePrefix(JoinCIDR)
	mac, _ := net.ParseMAC(a.MAC)
	gw, _ := netip.ParseAddr(strings.Split(a.Gateway, ",")[0])
	return &NodeNetwork{PortName: name, Addr: netip.PrefixFrom(a.IPs[0], jp.Bits()), Gateway: gw, MAC: mac,
		PodCIDRs: s.def.CIDRs}, nil
}

type ipamError struct{ err error }

func (e *ipamError) Error() string { return "address allocation: " + e.err.Error() }
func (e *ipamError) Unwrap() error { return e.err }

func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

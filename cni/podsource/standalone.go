package podsource

import (
	"github.com/ovnhost/ovnhost/internal/annotations"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"

	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

const standaloneNote = "standalone mode (no Kubernetes)"

// Standalone allocates addresses itself and creates the logical
// switch ports with the controller's library (internal/ovnnet: IPAM + NB).
type Standalone struct {
	nbRemote nodeconfig.Remote
	node     string
	log      *slog.Logger
	// cidrs and joinCIDRs are ovn-default's and join's cidrBlocks ("": the defaults).
	cidrs, joinCIDRs string

	nb  *ovnnb.Client
	net *ovnnet.Network
}

// NewStandalone allocates pods' addresses on node from the NB database at
// nbRemote, in ovn-default's cidrs and join's joinCIDRs (nil: the defaults,
// 10.16.0.0/16 and 100.64.0.0/16).
func NewStandalone(nbRemote nodeconfig.Remote, node string, cidrs, joinCIDRs []netip.Prefix, log *slog.Logger) *Standalone {
	return &Standalone{nbRemote: nbRemote, node: node, cidrs: joinPrefixes(cidrs), joinCIDRs: joinPrefixes(joinCIDRs), log: log}
}

// joinPrefixes writes prefixes as a cidrBlock ("" for none).
func joinPrefixes(ps []netip.Prefix) string {
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	return strings.Join(out, ",")
}

// Kubernetes is false: the CNI arguments are the pods' annotations.
func (s *Standalone) Kubernetes() bool { return false }

// Start connects to NB, ensures the default topology and restores the
// allocations.
func (s *Standalone) Start(ctx context.Context) error {
	nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: s.nbRemote.Endpoint, TLS: s.nbRemote.TLS, Logger: s.log})
	if err != nil {
		return fmt.Errorf("%s: connect to the OVN northbound database %s: %w", standaloneNote, s.nbRemote, err)
	}
	s.nb = nb
	s.net = ovnnet.New(nb, ovnnet.Config{})
	if err := s.net.EnsureDefaultTopology(ctx, s.cidrs, s.joinCIDRs); err != nil {
		return fmt.Errorf("%s: default topology: %w", standaloneNote, err)
	}
	// Rebuild the allocations from the ports already in NB, so that no
	// address is handed out twice after a restart.
	ports, err := nb.Ports(ctx, map[string]string{ovnnb.KeyVendor: ovnnb.Vendor})
	if err != nil {
		return err
	}
	for _, p := range ports {
		owner := ""
		switch {
		case p.ExternalIDs[ovnnb.KeyPod] != "":
			owner = p.ExternalIDs[ovnnb.KeyPod]
		case p.ExternalIDs[ovnnb.KeyNode] != "" && p.Name == ovnnet.NodePortName(p.ExternalIDs[ovnnb.KeyNode]):
			owner = ovnnet.NodeOwner(p.ExternalIDs[ovnnb.KeyNode])
		default:
			continue
		}
		if _, err := s.net.Restore(owner, p.Switch, p.IPs, p.MAC); err != nil {
			s.log.Warn("standalone: cannot restore an allocation from NB", "port", p.Name, "err", err)
		}
	}
	return nil
}

// Stop closes the NB connection.
func (s *Standalone) Stop() {
	if s.nb != nil {
		s.nb.Close()
		s.nb = nil
	}
}

// PodNetwork allocates the pod's address and creates its logical switch
// port; the request's annotations (CNI_ARGS) choose address, MAC, subnet.
func (s *Standalone) PodNetwork(ctx context.Context, ref PodRef) (*PodNetwork, error) {
	if ref.Provider != "" {
		return nil, &AnnotationError{Key: "provider", Value: ref.Provider, Problem: "attachment networks need Kubernetes mode (Multus and the controller); " + standaloneNote + " wires the default network only"}
	}
	req := ovnnet.PodRequest{Namespace: ref.Namespace, Name: ref.Name, Subnet: ref.Annotations[annotations.LogicalSwitch],
		MAC: ref.Annotations[annotations.MACAddress], ExternalIDs: map[string]string{ovnnb.KeyNode: s.node}, Node: s.node}
	if v := ref.Annotations[annotations.IPAddress]; v != "" {
		ips, err := ipam.ParseIPs(v)
		if err != nil {
			return nil, &AnnotationError{annotations.IPAddress, v, err.Error()}
		}
		req.IPs = ips
	}
	a, err := s.net.AddPod(ctx, req)
	if err != nil {
		if ipam.KindOf(err) != "" {
			return nil, &IPAMError{err}
		}
		return nil, fmt.Errorf("%s: logical switch port %s: %w", standaloneNote, ref.LSP(), err)
	}
	ann := map[string]string{
		annotations.IPAddress: joinAddrs(a.IPs), annotations.MACAddress: a.MAC, annotations.CIDR: a.CIDR, annotations.Gateway: a.Gateway,
		annotations.LogicalSwitch: a.Subnet,
	}
	for k, v := range ref.Annotations {
		if _, set := ann[k]; !set {
			ann[k] = v
		}
	}
	n, err := ParseAnnotations(ann)
	if err != nil {
		_ = s.net.DeletePod(context.WithoutCancel(ctx), ref.Namespace, ref.Name)
		return nil, err
	}
	return n, nil
}

// Release frees the address and deletes the logical switch port.
func (s *Standalone) Release(ctx context.Context, ref PodRef) error {
	if ref.Provider != "" {
		return nil // never allocated here (PodNetwork)
	}
	if err := s.net.DeletePod(ctx, ref.Namespace, ref.Name); err != nil {
		return fmt.Errorf("delete logical switch port %s: %w", ref.LSP(), err)
	}
	return nil
}

// NodeNetwork allocates the node's join address; its egress plan is
// Kube-OVN's defaults (ovn-default has natOutgoing).
func (s *Standalone) NodeNetwork(ctx context.Context) (*NodeNetwork, error) {
	a, err := s.net.AddNode(ctx, ovnnet.NodeRequest{Name: s.node})
	if err != nil {
		return nil, err
	}
	ips := make([]string, len(a.IPs))
	for i, ip := range a.IPs {
		ips[i] = ip.String()
	}
	addrs, gws, err := nodeNetwork(strings.Join(ips, ","), a.CIDR, a.Gateway)
	if err != nil {
		return nil, fmt.Errorf("%s: the node's join allocation: %w", standaloneNote, err)
	}
	mac, _ := net.ParseMAC(a.MAC)
	nn := &NodeNetwork{PortName: ovnnet.NodePortName(s.node), Addrs: addrs, Gateways: gws, MAC: mac}
	// ovn0 routes the subnets this node's own IPAM serves (join aside:
	// ovn0 is on it).
	var natOut []netip.Prefix
	if d, ok := s.net.IPAM.Subnet(s.net.Config().DefaultSubnet); ok {
		natOut = d.CIDRs
	}
	// Standalone offers Kube-OVN's defaults: ovn-default has natOutgoing.
	plan := &EgressPlan{NATOutgoing: natOut, Cluster: []netip.Prefix{netip.MustParsePrefix(ovnnet.DefaultServiceCIDR)}}
	for _, name := range s.net.IPAM.SubnetNames() {
		if sc, ok := s.net.IPAM.Subnet(name); ok {
			plan.Cluster = append(plan.Cluster, sc.CIDRs...)
			if name != s.net.Config().JoinSubnet {
				nn.PodCIDRs = append(nn.PodCIDRs, sc.CIDRs...)
			}
		}
	}
	sortPrefixes(nn.PodCIDRs)
	nn.Egress = plan
	return nn, nil
}

// IPAMError is a failed address allocation (standalone mode).
type IPAMError struct{ err error }

func (e *IPAMError) Error() string { return "address allocation: " + e.err.Error() }
func (e *IPAMError) Unwrap() error { return e.err }

func joinAddrs(a []netip.Addr) string {
	s := make([]string, len(a))
	for i, x := range a {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

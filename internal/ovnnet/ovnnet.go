// Package ovnnet is the controller's core as a library: it pairs the IPAM
// (package ipam) with the OVN northbound programming (package ovnnb) and
// names things the Kube-OVN way. It has no Kubernetes dependency: the
// controller drives it from informers, and the node daemon drives it directly
// in standalone mode (no Kubernetes):
//
//	nb, _ := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: "unix:/var/run/ovn/ovnnb_db.sock"})
//	n := ovnnet.New(nb, ovnnet.Config{})          // router ovn-cluster
//	_ = n.EnsureDefaultTopology(ctx, "", "")       // ovn-default 10.16.0.0/16, join 100.64.0.0/16
//	a, err := n.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "web"})
//	// a.IPString(), a.MAC, a.CIDR, a.Gateway -> configure the pod's interface;
//	// the OVS interface's external_ids:iface-id is ovnnet.PortName("default", "web") = "web.default"
//	_ = n.DeletePod(ctx, "default", "web")
//
// A standalone host restarts with Restore (one call per recorded pod) before
// serving requests, so no address is handed out twice. Errors from AddPod are
// *ipam.Error for allocation problems (use ipam.KindOf for the reason) or NB
// errors.
package ovnnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"github.com/ovnhost/ovnhost/internal/ipam"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// Kube-OVN's defaults (BRIEF section 3).
const (
	DefaultRouter     = "ovn-cluster"
	DefaultSubnet     = "ovn-default"
	DefaultSubnetCIDR = "10.16.0.0/16"
	JoinSubnet        = "join"
	JoinSubnetCIDR    = "100.64.0.0/16"
)

// PortName is a pod's logical switch port name: "<pod>.<namespace>".
func PortName(namespace, name string) string { return name + "." + namespace }

// AttachmentPortName is the logical switch port of a pod's attachment
// network (provider "<nad>.<namespace>.ovn"): "<pod>.<namespace>.<provider>",
// Kube-OVN's name and the OVS interface's iface-id.
func AttachmentPortName(namespace, name, provider string) string {
	return name + "." + namespace + "." + provider
}

// AttachmentOwner is the IPAM owner key of a pod's address on an attachment
// network: "<namespace>/<name>/<provider>" (no pod or namespace name has a "/").
func AttachmentOwner(namespace, name, provider string) string {
	return namespace + "/" + name + "/" + provider
}

// NodePortName is a node's port on the join switch: "node-<node>".
//
// A pod's port name "<pod>.<namespace>" can equal it (pod "node-w1.example"
// in namespace "com" and node "w1.example.com"). Ports record their owner
// (ovnnb.OwnerOf) and only the owner changes or deletes one; a node whose
// name is taken gets AltNodePortName, which no pod port can equal, and
// publishes it in its port_name annotation (the node side reads it there).
func NodePortName(node string) string { return "node-" + node }

// AltNodePortName is a node's port name when NodePortName(node) is held by a
// pod's port: "node_<node>". Pod and namespace names cannot contain "_"
// (DNS names), so no pod port takes it.
func AltNodePortName(node string) string { return "node_" + node }

// PodOwner is the IPAM owner key of a pod.
func PodOwner(namespace, name string) string { return namespace + "/" + name }

// VMOwner is the IPAM owner key of a virtual machine's address: the VM
// keeps it across the pods that run it (a live migration's source and
// target), and no pod of the same name can hold it.
func VMOwner(namespace, vm string) string { return "vm:" + namespace + "/" + vm }

// PortOwnerKey is the IPAM owner of a workload port from its external_ids
// (pod, VM, attachment or node; "" for none).
func PortOwnerKey(ids map[string]string) string {
	owner := ids[ovnnb.KeyPod]
	switch {
	case owner == "":
		if node := ids[ovnnb.KeyNode]; node != "" {
			return NodeOwner(node)
		}
		return ""
	case ids[ovnnb.KeyVM] != "":
		ns, _, _ := strings.Cut(owner, "/")
		return VMOwner(ns, ids[ovnnb.KeyVM])
	case ids[ovnnb.KeyProvider] != "":
		return owner + "/" + ids[ovnnb.KeyProvider] // AttachmentOwner
	}
	return owner
}

// NodeOwner is the IPAM owner key of a node's join address.
func NodeOwner(node string) string { return "node:" + node }

// Config names the topology; zero values mean Kube-OVN's defaults.
type Config struct {
	Router        string // default "ovn-cluster"
	DefaultSubnet string // default "ovn-default"
	JoinSubnet    string // default "join"
	// ServiceCIDRs never leave the cluster (default 10.96.0.0/12).
	ServiceCIDRs []netip.Prefix
}

// Network is IPAM + NB for one cluster (or one standalone host).
type Network struct {
	IPAM *ipam.IPAM
	NB   *ovnnb.Client
	cfg  Config

	mu      sync.Mutex
	nodeIPs map[string][]netip.Addr // node -> its internal addresses (kept in the cluster set)
	// physicalGW: the underlay subnets whose gateway is a physical router
	// -> whether they are interconnected (u2o). Their pods leave on the
	// physical network, never through their node, so they are in no
	// node's egress set; those not interconnected have no router port and
	// are outside the cluster set.
	physicalGW map[string]bool
	// vpcOf: the subnets of custom VPCs -> their VPC (router). They are in
	// no cluster set and no node's egress set: a custom VPC is its own
	// address space and does not leave through the nodes.
	vpcOf        map[string]string
	clusterSetMu sync.Mutex
}

// Underlay is how an underlay (VLAN) subnet reaches its physical network:
// a Kube-OVN Subnet with spec.vlan, resolved through its Vlan.
type Underlay struct {
	Provider string // the ProviderNetwork (the localnet port's network_name)
	VlanID   int    // 0: untagged
	// LogicalGateway: the subnet's gateway address is the cluster router's
	// port (spec.logicalGateway), not a router on the physical network.
	LogicalGateway bool
	// U2O (spec.u2oInterconnection, with a physical gateway): the cluster
	// router gets a port on the subnet at an address of its own (U2OIPs
	// when given: spec.u2oInterconnectionIP or the one already recorded),
	// through which its pods reach the overlay and Services.
	U2O    bool
	U2OIPs []netip.Addr
}

// U2OOwner is the IPAM owner of an underlay subnet's interconnection
// address (Kube-OVN's IP object name for it).
func U2OOwner(subnet string) string { return "u2o-interconnection." + DefaultRouter + "." + subnet }

// New returns a Network with an empty IPAM.
func New(nb *ovnnb.Client, cfg Config) *Network {
	if cfg.Router == "" {
		cfg.Router = DefaultRouter
	}
	if cfg.DefaultSubnet == "" {
		cfg.DefaultSubnet = DefaultSubnet
	}
	if cfg.JoinSubnet == "" {
		cfg.JoinSubnet = JoinSubnet
	}
	return &Network{IPAM: ipam.New(), NB: nb, cfg: cfg, nodeIPs: map[string][]netip.Addr{}, physicalGW: map[string]bool{}, vpcOf: map[string]string{}}
}

// Config returns the effective names.
func (n *Network) Config() Config { return n.cfg }

// EnsureRouter creates the cluster router.
func (n *Network) EnsureRouter(ctx context.Context) error {
	// Logical flows do not drop on ct.inv (Kube-OVN sets the same): a
	// connection between an underlay pod and an overlay pod is routed on
	// each side's own chassis, so the reply runs the underlay switch's
	// egress stage on a chassis that never saw the request, where
	// conntrack marks it invalid. ACLs still judge such a packet as new.
	if err := n.NB.SetGlobalOption(ctx, "use_ct_inv_match", "false"); err != nil {
		return err
	}
	return n.NB.EnsureRouter(ctx, n.cfg.Router)
}

// EnsureDefaultTopology creates the router, the join subnet and the default
// subnet ("" CIDRs = 100.64.0.0/16 and 10.16.0.0/16, gateway first address).
func (n *Network) EnsureDefaultTopology(ctx context.Context, defaultCIDR, joinCIDR string) error {
	if defaultCIDR == "" {
		defaultCIDR = DefaultSubnetCIDR
	}
	if joinCIDR == "" {
		joinCIDR = JoinSubnetCIDR
	}
	if err := n.EnsureRouter(ctx); err != nil {
		return err
	}
	for _, s := range []struct{ name, cidr string }{{n.cfg.JoinSubnet, joinCIDR}, {n.cfg.DefaultSubnet, defaultCIDR}} {
		cfg, err := ipam.ParseSubnet(s.name, s.cidr, "", nil)
		if err != nil {
			return err
		}
		if err := n.AddSubnet(ctx, cfg, nil); err != nil {
			return err
		}
	}
	return nil
}

// RouterOf is the router a subnet is attached to: its custom VPC's
// (named as the VPC), else the cluster router.
func (n *Network) RouterOf(subnet string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if v := n.vpcOf[subnet]; v != "" {
		return v
	}
	return n.cfg.Router
}

// inCustomVPC: subnet is attached to a custom VPC's router.
func (n *Network) inCustomVPC(subnet string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.vpcOf[subnet] != ""
}

// AddSubnet adds (or updates) a subnet in the IPAM and its logical switch,
// attached to the cluster router, or to its VPC's router (cfg.VPC, which
// must exist: EnsureVPCRouter); ul (nil for an overlay subnet) joins it
// to its physical network instead, attached only with a logical gateway.
// A custom VPC's subnet gets nothing of the default VPC's: no Services'
// load balancers, no place in the cluster or egress sets, no u2o.
func (n *Network) AddSubnet(ctx context.Context, cfg ipam.SubnetConfig, ul *Underlay) error {
	vpc := cfg.VPC
	if vpc == ipam.DefaultVPC {
		vpc = ""
	}
	if vpc != "" && ul != nil {
		return &ipam.Error{Kind: ipam.KindInvalid, Subnet: cfg.Name, Input: vpc,
			Msg: fmt.Sprintf("subnet %q: an underlay subnet cannot be in custom VPC %q; remove spec.vlan or spec.vpc", cfg.Name, vpc)}
	}
	if err := n.IPAM.AddSubnet(cfg); err != nil {
		return err
	}
	if old := n.RouterOf(cfg.Name); old != ifEmpty(vpc, n.cfg.Router) {
		// Moved to another VPC: its port on the old router goes.
		if err := n.NB.DetachSwitch(ctx, cfg.Name, old); err != nil {
			return err
		}
	}
	n.mu.Lock()
	if vpc != "" {
		n.vpcOf[cfg.Name] = vpc
	} else {
		delete(n.vpcOf, cfg.Name)
	}
	n.mu.Unlock()
	sw := ovnnb.Switch{Name: cfg.Name, Router: ifEmpty(vpc, n.cfg.Router), CIDRs: cfg.CIDRs, Gateways: cfg.Gateways, VPC: vpc}
	u2o := ul != nil && !ul.LogicalGateway && ul.U2O
	physical := ul != nil && !ul.LogicalGateway && !u2o
	if ul != nil {
		sw.Localnet = &ovnnb.Localnet{Network: ul.Provider, Tag: ul.VlanID}
		sw.Detached = physical
	}
	if u2o {
		a, err := n.IPAM.Allocate(cfg.Name, U2OOwner(cfg.Name), ipam.Request{IPs: ul.U2OIPs})
		if err != nil {
			return err
		}
		// The router's port is on the subnet at its own address: the
		// subnet's gateway stays the physical router's.
		sw.Gateways = a.IPs
	} else {
		n.IPAM.Release(U2OOwner(cfg.Name))
	}
	if err := n.NB.EnsureSwitch(ctx, sw); err != nil {
		return err
	}
	if err := n.syncUnderlayGuard(ctx, cfg.Name, ul != nil); err != nil {
		return err
	}
	n.mu.Lock()
	if physical || u2o {
		n.physicalGW[cfg.Name] = u2o
	} else {
		delete(n.physicalGW, cfg.Name)
	}
	n.mu.Unlock()
	if physical || u2o {
		// No router port is the subnet's gateway.
		if mac, had, _ := n.NB.RouterPortMACOf(ctx, ovnnb.RouterPortName(n.RouterOf(cfg.Name), cfg.Name)); had {
			n.IPAM.UnreserveMAC(mac, n.gatewayMACHolder(cfg.Name))
		}
	} else if err := n.reserveGatewayMAC(ctx, cfg.Name); err != nil {
		return err
	}
	if err := n.syncClusterSet(ctx); err != nil {
		return err
	}
	// After the set of nodes' addresses its policy names exists.
	return n.syncU2OPolicies(ctx, cfg, u2o)
}

// ifEmpty is s, or def when s is "".
func ifEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// gatewayMACHolder names the router port that is subnet's gateway, as the
// holder of its MAC in the IPAM (a pod asking for that MAC is told).
func (n *Network) gatewayMACHolder(subnet string) string {
	return fmt.Sprintf("router port %s (the gateway of subnet %s)", ovnnb.RouterPortName(n.RouterOf(subnet), subnet), subnet)
}

// reserveGatewayMAC keeps the MAC of subnet's router port (its gateway) out
// of the pods' reach: a pod with that MAC would answer for its gateway.
func (n *Network) reserveGatewayMAC(ctx context.Context, subnet string) error {
	mac, ok, err := n.NB.RouterPortMACOf(ctx, ovnnb.RouterPortName(n.RouterOf(subnet), subnet))
	if err != nil || !ok || mac == "" {
		return err
	}
	if err := n.IPAM.ReserveMAC(mac, n.gatewayMACHolder(subnet)); err != nil {
		// A pod took it before it was reserved: it keeps it until released.
		slog.Warn("the MAC of a subnet's gateway is held by a pod; reserved once the pod lets it go", "subnet", subnet, "error", err)
	}
	return nil
}

// RemoveSubnet deletes the switch and forgets the subnet's allocations.
func (n *Network) RemoveSubnet(ctx context.Context, name string) error {
	router := n.RouterOf(name)
	mac, hadPort, _ := n.NB.RouterPortMACOf(ctx, ovnnb.RouterPortName(router, name))
	if err := n.NB.DeleteSwitch(ctx, name, router); err != nil {
		return err
	}
	if hadPort {
		n.IPAM.UnreserveMAC(mac, n.gatewayMACHolder(name))
	}
	if err := n.NB.DeletePolicies(ctx, n.cfg.Router, u2oIDs(name)); err != nil {
		return err
	}
	if err := n.NB.DeleteRoutes(ctx, n.cfg.Router, u2oIDs(name)); err != nil {
		return err
	}
	n.IPAM.RemoveSubnet(name)
	n.mu.Lock()
	delete(n.physicalGW, name)
	delete(n.vpcOf, name)
	n.mu.Unlock()
	return n.syncClusterSet(ctx)
}

// PodRequest asks for a pod's address and port.
type PodRequest struct {
	Namespace, Name string
	Subnet          string       // "" = the default subnet
	IPs             []netip.Addr // static addresses (optional)
	MAC             string       // static MAC (optional)
	ExternalIDs     map[string]string
	// Node is where the pod runs ("" not yet scheduled): its traffic to
	// outside the cluster leaves through that node.
	Node string
	// Pool is Kube-OVN's ip_pool (when IPs is empty): the pod takes one of
	// these address sets. PoolIndex >= 0 (a StatefulSet pod's ordinal)
	// takes exactly Pool[PoolIndex]; -1 takes the first one nobody holds.
	Pool      [][]netip.Addr
	PoolIndex int
	// Provider "" asks for the pod's default network; an attachment
	// network's provider ("<nad>.<namespace>.ovn") asks for its port
	// AttachmentPortName and address AttachmentOwner in Subnet.
	Provider string
	// VM, when set, is the virtual machine (KubeVirt) the pod runs: the
	// address is the VM's (VMOwner) and so is the port, PortName(Namespace,
	// VM), Kube-OVN's name; whichever pod runs the VM gets them.
	VM string
}

func (r PodRequest) owner() string {
	if r.VM != "" {
		return VMOwner(r.Namespace, r.VM)
	}
	if r.Provider != "" {
		return AttachmentOwner(r.Namespace, r.Name, r.Provider)
	}
	return PodOwner(r.Namespace, r.Name)
}

func (r PodRequest) portName() string {
	if r.VM != "" {
		return PortName(r.Namespace, r.VM)
	}
	if r.Provider != "" {
		return AttachmentPortName(r.Namespace, r.Name, r.Provider)
	}
	return PortName(r.Namespace, r.Name)
}

// poolAllocate allocates owner from r.Pool (Kube-OVN ip_pool semantics).
func (n *Network) poolAllocate(owner string, r PodRequest) (ipam.Allocation, error) {
	if a, ok := n.IPAM.Lookup(owner); ok && a.Subnet == r.Subnet {
		// Keep a pool address the pod already holds.
		for i, want := range r.Pool {
			if (r.PoolIndex < 0 || i == r.PoolIndex) && slices.Equal(a.IPs[:min(len(want), len(a.IPs))], want) {
				return n.IPAM.Allocate(r.Subnet, owner, ipam.Request{IPs: a.IPs, MAC: r.MAC})
			}
		}
	}
	if r.PoolIndex >= 0 {
		if r.PoolIndex >= len(r.Pool) {
			return ipam.Allocation{}, &ipam.Error{Kind: ipam.KindExhausted, Subnet: r.Subnet, Input: fmt.Sprint(r.PoolIndex),
				Msg: fmt.Sprintf("ip_pool has %d address(es) but this StatefulSet pod has ordinal %d; add addresses to the pool or scale down", len(r.Pool), r.PoolIndex)}
		}
		return n.IPAM.Allocate(r.Subnet, owner, ipam.Request{IPs: r.Pool[r.PoolIndex], MAC: r.MAC})
	}
	var last error
	for _, ips := range r.Pool {
		a, err := n.IPAM.Allocate(r.Subnet, owner, ipam.Request{IPs: ips, MAC: r.MAC})
		if err == nil {
			return a, nil
		}
		if k := ipam.KindOf(err); k != ipam.KindConflict {
			return ipam.Allocation{}, err
		}
		last = err
	}
	if last == nil {
		last = errors.New("empty ip_pool")
	}
	return ipam.Allocation{}, &ipam.Error{Kind: ipam.KindExhausted, Subnet: r.Subnet, Input: r.Subnet,
		Msg: fmt.Sprintf("every address of the pod's ip_pool (%d) is held by another pod (%v); add addresses to the pool or delete pods", len(r.Pool), last)}
}

// AddPod allocates (or returns the existing allocation of) the pod and
// creates or updates its logical switch port in one NB transaction. A new
// allocation is released again if the port cannot be written.
func (n *Network) AddPod(ctx context.Context, r PodRequest) (ipam.Allocation, error) {
	if r.Namespace == "" || r.Name == "" {
		return ipam.Allocation{}, fmt.Errorf("ovnnet: pod namespace and name are required (got %q/%q)", r.Namespace, r.Name)
	}
	if r.Subnet == "" {
		r.Subnet = n.cfg.DefaultSubnet
	}
	owner := r.owner()
	_, had := n.IPAM.Lookup(owner)
	var a ipam.Allocation
	var err error
	if len(r.IPs) == 0 && len(r.Pool) > 0 {
		a, err = n.poolAllocate(owner, r)
	} else {
		a, err = n.IPAM.Allocate(r.Subnet, owner, ipam.Request{IPs: r.IPs, MAC: r.MAC})
	}
	if err != nil {
		return ipam.Allocation{}, err
	}
	// The port's owner is the pod (for an attachment too): only the pod's
	// reconciler changes it, and it goes when the pod goes.
	ids := map[string]string{ovnnb.KeyPod: PodOwner(r.Namespace, r.Name)}
	if r.VM != "" {
		// Kube-OVN's pod value for a VM's port, and the VM as its owner.
		ids = map[string]string{ovnnb.KeyPod: PodOwner(r.Namespace, r.VM), ovnnb.KeyVM: r.VM}
	}
	if r.Provider != "" {
		ids[ovnnb.KeyProvider] = r.Provider
	}
	for k, v := range r.ExternalIDs {
		ids[k] = v
	}
	node := r.Node
	n.mu.Lock()
	if _, own := n.physicalGW[a.Subnet]; own {
		node = "" // leaves on its physical network, not through the node
	}
	if n.vpcOf[a.Subnet] != "" {
		node = "" // a custom VPC's pod does not leave through its node
	}
	n.mu.Unlock()
	sets, err := n.nodeSets(ctx, node, a.IPs)
	if err != nil {
		if !had {
			n.IPAM.Release(owner)
		}
		return ipam.Allocation{}, fmt.Errorf("ovnnet: egress of pod %s/%s through node %s: %w", r.Namespace, r.Name, r.Node, err)
	}
	if r.VM != "" && had {
		// A VM moves between nodes: its addresses leave the set of the
		// node it ran on (a pod's stay on its node for its life).
		if err := n.forgetPodEgressExcept(ctx, a.IPs, sets); err != nil {
			return ipam.Allocation{}, fmt.Errorf("ovnnet: egress of virtual machine %s/%s: %w", r.Namespace, r.VM, err)
		}
	}
	// The port and its place in its node's egress set: one transaction.
	if err := n.NB.EnsurePort(ctx, ovnnb.Port{Name: r.portName(), Switch: a.Subnet, MAC: a.MAC, IPs: a.IPs, ExternalIDs: ids, AddressSets: sets}); err != nil {
		if !had {
			n.IPAM.Release(owner)
		}
		return ipam.Allocation{}, err
	}
	return a, nil
}

// Restore re-claims a recorded allocation (after a restart) without touching
// the NB. Conflicts come back as *ipam.Error.
func (n *Network) Restore(owner, subnet string, ips []netip.Addr, mac string) (ipam.Allocation, error) {
	return n.IPAM.Allocate(subnet, owner, ipam.Request{IPs: ips, MAC: mac})
}

// DeletePod removes the pod's port and releases its address.
func (n *Network) DeletePod(ctx context.Context, namespace, name string) error {
	if a, ok := n.IPAM.Lookup(PodOwner(namespace, name)); ok {
		if err := n.forgetPodEgress(ctx, a.IPs); err != nil {
			return err
		}
	}
	// A port of this name that belongs to a node (or another tool) is not ours: left alone.
	if err := n.NB.DeletePort(ctx, PortName(namespace, name), ovnnb.PodPortOwner(namespace, name)); err != nil && !errors.Is(err, ovnnb.ErrNotOwner) {
		return err
	}
	n.IPAM.Release(PodOwner(namespace, name))
	return nil
}

// DeleteVM removes a virtual machine's port and releases its address.
func (n *Network) DeleteVM(ctx context.Context, namespace, vm string) error {
	if a, ok := n.IPAM.Lookup(VMOwner(namespace, vm)); ok {
		if err := n.forgetPodEgress(ctx, a.IPs); err != nil {
			return err
		}
	}
	if err := n.NB.DeletePort(ctx, PortName(namespace, vm), ovnnb.VMPortOwner(namespace, vm)); err != nil && !errors.Is(err, ovnnb.ErrNotOwner) {
		return err
	}
	n.IPAM.Release(VMOwner(namespace, vm))
	return nil
}

// SetVMChassis binds a virtual machine's port to chassis: two during a
// live migration (source then target, activation-strategy=rarp: OVN opens
// the target once the VM sends a RARP or GARP from there), one otherwise
// (the strategy removed). No chassis clears both options.
func (n *Network) SetVMChassis(ctx context.Context, namespace, vm string, chassis []string) error {
	set, del := map[string]string{}, []string{}
	switch len(chassis) {
	case 0:
		del = append(del, ovnnb.OptRequestedChassis, ovnnb.OptActivationStrategy)
	case 1:
		set[ovnnb.OptRequestedChassis] = chassis[0]
		del = append(del, ovnnb.OptActivationStrategy)
	default:
		set[ovnnb.OptRequestedChassis] = strings.Join(chassis, ",")
		set[ovnnb.OptActivationStrategy] = "rarp"
	}
	return n.NB.SetPortOptions(ctx, PortName(namespace, vm), ovnnb.VMPortOwner(namespace, vm), set, del)
}

// VMChassis is the requested-chassis of a virtual machine's port, split
// (nil: none set).
func (n *Network) VMChassis(ctx context.Context, namespace, vm string) ([]string, error) {
	opts, err := n.NB.PortOptions(ctx, PortName(namespace, vm))
	if err != nil || opts[ovnnb.OptRequestedChassis] == "" {
		return nil, err
	}
	return strings.Split(opts[ovnnb.OptRequestedChassis], ","), nil
}

// DeleteAttachment removes a pod's attachment-network port and releases
// its address there.
func (n *Network) DeleteAttachment(ctx context.Context, namespace, name, provider string) error {
	owner := AttachmentOwner(namespace, name, provider)
	if a, ok := n.IPAM.Lookup(owner); ok {
		if err := n.forgetPodEgress(ctx, a.IPs); err != nil {
			return err
		}
	}
	if err := n.NB.DeletePort(ctx, AttachmentPortName(namespace, name, provider), ovnnb.PodPortOwner(namespace, name)); err != nil && !errors.Is(err, ovnnb.ErrNotOwner) {
		return err
	}
	n.IPAM.Release(owner)
	return nil
}

// Attachments lists the providers of the attachment ports the NB holds
// for a pod.
func (n *Network) Attachments(ctx context.Context, namespace, name string) ([]string, error) {
	ports, err := n.NB.Ports(ctx, map[string]string{ovnnb.KeyPod: PodOwner(namespace, name)})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, p := range ports {
		if pr := p.ExternalIDs[ovnnb.KeyProvider]; pr != "" {
			out = append(out, pr)
		}
	}
	return out, nil
}

// NodePort is the name of the port node owns, if any, else the name it
// should take: NodePortName, or AltNodePortName when a pod holds that one.
// After AddNode it is the node's port (for its port_name annotation).
func (n *Network) NodePort(ctx context.Context, node string) (string, error) {
	owner := ovnnb.NodePortOwner(node)
	ports, err := n.NB.Ports(ctx, map[string]string{ovnnb.KeyNode: node})
	if err != nil {
		return "", err
	}
	for _, p := range ports {
		if ovnnb.OwnerOf(p.ExternalIDs) == owner && (p.Name == NodePortName(node) || p.Name == AltNodePortName(node)) {
			return p.Name, nil
		}
	}
	name := NodePortName(node)
	p, ok, err := n.NB.GetPort(ctx, name)
	if err != nil {
		return "", err
	}
	if ok && ovnnb.OwnerOf(p.ExternalIDs) != owner && !adoptableNodePort(p, n.cfg.JoinSubnet) {
		return AltNodePortName(node), nil
	}
	return name, nil
}

// adoptableNodePort: Kube-OVN's own port node-<node> on join (it records no
// owner): the node keeps it across a migration.
func adoptableNodePort(p ovnnb.Port, join string) bool {
	return ovnnb.OwnerOf(p.ExternalIDs) == "" && p.ExternalIDs[ovnnb.KeyVendor] == ovnnb.KubeOVNVendor &&
		(p.ExternalIDs[ovnnb.KeySwitch] == "" || p.ExternalIDs[ovnnb.KeySwitch] == join)
}

// NodeRequest asks for a node's join port.
type NodeRequest struct {
	Name string
	// InternalIPs are the node's own addresses; a /32 (/128) route to each
	// via the node's join address is put on the router so pods reach the host.
	InternalIPs []netip.Addr
	IPs         []netip.Addr // recorded join address (optional)
	MAC         string       // recorded MAC (optional)
}

// AddNode allocates the node's join address, creates port node-<name> on
// join, and routes the node's internal addresses to it.
func (n *Network) AddNode(ctx context.Context, r NodeRequest) (ipam.Allocation, error) {
	if r.Name == "" {
		return ipam.Allocation{}, errors.New("ovnnet: node name is required")
	}
	owner := NodeOwner(r.Name)
	_, had := n.IPAM.Lookup(owner)
	a, err := n.IPAM.Allocate(n.cfg.JoinSubnet, owner, ipam.Request{IPs: r.IPs, MAC: r.MAC})
	if err != nil && len(r.IPs) > 0 && !had {
		// The recorded address is gone (subnet changed, taken): take a new one.
		a, err = n.IPAM.Allocate(n.cfg.JoinSubnet, owner, ipam.Request{MAC: r.MAC})
	}
	if err != nil {
		return ipam.Allocation{}, err
	}
	port, err := n.NodePort(ctx, r.Name)
	if err == nil {
		err = n.NB.EnsurePort(ctx, ovnnb.Port{Name: port, Switch: n.cfg.JoinSubnet, MAC: a.MAC, IPs: a.IPs,
			ExternalIDs: map[string]string{ovnnb.KeyNode: r.Name}, NoPortSecurity: true, Adopt: port == NodePortName(r.Name)})
	}
	if err != nil {
		if !had {
			n.IPAM.Release(owner)
		}
		return ipam.Allocation{}, err
	}
	var routes []ovnnb.Route
	for _, ip := range r.InternalIPs {
		for _, j := range a.IPs {
			if j.Is4() == ip.Is4() {
				routes = append(routes, ovnnb.Route{Router: n.cfg.Router, Prefix: netip.PrefixFrom(ip, ip.BitLen()), Nexthop: j,
					ExternalIDs: map[string]string{ovnnb.KeyNode: r.Name}})
			}
		}
	}
	have, err := n.NB.Routes(ctx, n.cfg.Router, map[string]string{ovnnb.KeyNode: r.Name})
	if err != nil {
		return a, err
	}
	for _, h := range have {
		if !slices.ContainsFunc(routes, func(w ovnnb.Route) bool { return w.Prefix == h.Prefix }) {
			// A stale address of this node: drop its routes, re-add the wanted ones below.
			if err := n.NB.DeleteRoutes(ctx, n.cfg.Router, map[string]string{ovnnb.KeyNode: r.Name}); err != nil {
				return a, err
			}
			break
		}
	}
	for _, rt := range routes {
		if err := n.NB.EnsureRoute(ctx, rt); err != nil {
			return a, err
		}
	}
	var gws []netip.Addr
	if s, ok := n.IPAM.Subnet(n.cfg.JoinSubnet); ok {
		gws = s.Gateways
	}
	if err := n.ensureNodeEgress(ctx, r.Name, a.IPs, gws, r.InternalIPs); err != nil {
		return a, fmt.Errorf("ovnnet: egress through node %s: %w", r.Name, err)
	}
	return a, nil
}

// DeleteNode removes the node's port, routes and join address.
func (n *Network) DeleteNode(ctx context.Context, name string) error {
	if err := n.NB.DeleteRoutes(ctx, n.cfg.Router, map[string]string{ovnnb.KeyNode: name}); err != nil {
		return err
	}
	if err := n.removeNodeEgress(ctx, name); err != nil {
		return err
	}
	for _, port := range []string{NodePortName(name), AltNodePortName(name)} {
		// Only the node's own port: a pod's port of the same name stays.
		if err := n.NB.DeletePort(ctx, port, ovnnb.NodePortOwner(name)); err != nil && !errors.Is(err, ovnnb.ErrNotOwner) {
			return err
		}
	}
	n.IPAM.Release(NodeOwner(name))
	return nil
}

// GarbageCollect deletes ovnhost workload ports for which keep returns false
// (e.g. pods that no longer exist), releasing their owners' addresses if the
// port's pod/node owner is no longer kept. It returns the deleted port names.
func (n *Network) GarbageCollect(ctx context.Context, keep func(p ovnnb.Port) bool) ([]string, error) {
	ports, err := n.NB.Ports(ctx, nil)
	if err != nil {
		return nil, err
	}
	var deleted []string
	for _, p := range ports {
		if keep(p) {
			continue
		}
		// A pod's port may carry its node too (standalone): only a port
		// without a pod is the node's own.
		if node := p.ExternalIDs[ovnnb.KeyNode]; node != "" && p.ExternalIDs[ovnnb.KeyPod] == "" {
			if err := n.DeleteNode(ctx, node); err != nil {
				return deleted, err
			}
		} else {
			if err := n.forgetPodEgress(ctx, p.IPs); err != nil {
				return deleted, err
			}
			if err := n.NB.DeletePort(ctx, p.Name, ovnnb.OwnerOf(p.ExternalIDs)); err != nil && !errors.Is(err, ovnnb.ErrNotOwner) {
				return deleted, err
			}
			if owner := PortOwnerKey(p.ExternalIDs); owner != "" {
				n.IPAM.Release(owner)
			}
		}
		deleted = append(deleted, p.Name)
	}
	return deleted, nil
}

// RestoreFromNB re-claims the addresses of every ovnhost pod and node port
// in the NB (standalone restart: the NB is the record). Add the subnets
// first. It returns how many ports were restored; ports that conflict or lie
// outside every subnet are reported in the error but do not stop the others.
func (n *Network) RestoreFromNB(ctx context.Context) (int, error) {
	ports, err := n.NB.Ports(ctx, nil)
	if err != nil {
		return 0, err
	}
	restored := 0
	var errs []error
	for _, p := range ports {
		owner := PortOwnerKey(p.ExternalIDs)
		if owner == "" || p.Switch == "" {
			continue
		}
		if _, err := n.IPAM.Allocate(p.Switch, owner, ipam.Request{IPs: p.IPs, MAC: p.MAC}); err != nil {
			errs = append(errs, fmt.Errorf("port %s: %w", p.Name, err))
			continue
		}
		restored++
	}
	return restored, errors.Join(errs...)
}

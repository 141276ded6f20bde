package v1

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ovnhost/ovnhost/internal/annotations"
)

// What ovnhost does with each field of Kube-OVN's Subnet spec. Every field
// Kube-OVN 1.10 to 1.15 defines (or stored) is in one of three groups:
//
//   - applied: ovnhost programs it (and Kube-OVN's stored defaults for the
//     others are plainly accepted);
//   - accepted but not applied: a valid Subnet that asks for it is
//     Validated=True with reason AcceptedNotApplied and one sentence per
//     field saying what it does not get (notApplied below);
//   - refused: honouring the subnet without the field would put its pods
//     somewhere else than asked (another network, another VPC), so it is
//     Validated=False with reason UnsupportedField (Unsupported below).
//
// An underlay subnet (spec.vlan, applied: a localnet port with the Vlan's
// tag on its ProviderNetwork, docs/underlay.md) has its gateway on the
// physical network unless logicalGateway (applied) puts it on the cluster
// router. Fields that only mean something for underlay subnets have no
// effect on an overlay subnet, in Kube-OVN as here: logicalGateway,
// u2oInterconnection, u2oInterconnectionIP, u2oFeatures, u2oRouting,
// underlayGateway, nodeNetwork. disableGatewayCheck and
// disableInterConnection ask for nothing ovnhost does: it never pings the
// gateway before a pod starts (it waits for OVN to install the pod's port)
// and has no OVN interconnection.
//
// provider is applied: "ovn" (or none) is the default network; Kube-OVN's
// "<nad>.<namespace>.ovn" makes the Subnet an attachment network, an
// overlay switch on its VPC's router whose addresses go only to the pods'
// interfaces that NetworkAttachmentDefinitions with that provider ask for
// through Multus (controller/attachments). Such a Subnet is no namespace's
// subnet (namespaces and namespaceSelectors only say which namespaces'
// pods may attach to it). Other providers (another plugin's IPAM) are refused.

// KnownFields are the JSON names of every spec field, in Kube-OVN's order.
var KnownFields = []string{
	"default", "vpc", "protocol", "namespaces", "cidrBlock", "gateway", "excludeIps", "provider",
	"gatewayType", "gatewayNode", "gatewayNodeSelectors", "natOutgoing",
	"externalEgressGateway", "policyRoutingPriority", "policyRoutingTableID", "mtu",
	"private", "allowSubnets", "vlan", "vips",
	"logicalGateway", "disableGatewayCheck", "disableInterConnection",
	"enableDHCP", "dhcpV4Options", "dhcpV6Options", "enableIPv6RA", "ipv6RAConfigs",
	"acls", "allowEWTraffic", "natOutgoingPolicyRules",
	"u2oInterconnectionIP", "u2oInterconnection", "u2oFeatures",
	"enableLb", "enableEcmp", "enableMulticastSnoop", "enableExternalLBAddress",
	"routeTable", "namespaceSelectors", "nodeNetwork",
	"htbqos", "u2oRouting", "underlayGateway",
}

// DefaultVpc is Kube-OVN's default VPC, ovnhost's cluster router.
const DefaultVpc = "ovn-cluster"

// Unsupported lists the fields of spec that make ovnhost refuse the subnet,
// each with why.
func Unsupported(s SubnetSpec) []string {
	var out []string
	if IsCustomVpc(s.Vpc) && s.Vlan != "" {
		out = append(out, fmt.Sprintf("spec.vlan %q in custom VPC %q (an underlay subnet's pods are on the physical network, which no VPC isolates)", s.Vlan, s.Vpc))
	}
	switch {
	case s.Provider == "" || s.Provider == annotations.DefaultProvider:
	case !annotations.IsAttachmentProvider(s.Provider):
		out = append(out, fmt.Sprintf("spec.provider %q (ovn for the default network, or an OVN attachment network's <nad>.<namespace>.ovn; a provider of another plugin's IPAM, such as macvlan's <nad>.<namespace>, is not wired)", s.Provider))
	case s.Default:
		out = append(out, fmt.Sprintf("spec.default with spec.provider %q (an attachment network is no namespace's default network: drop default or set provider ovn)", s.Provider))
	case s.Vlan != "":
		out = append(out, fmt.Sprintf("spec.vlan with spec.provider %q (an attachment network on a physical network is not wired: drop vlan for an overlay attachment network)", s.Provider))
	}
	for i, a := range s.Acls {
		if !slices.Contains([]string{"from-lport", "to-lport"}, a.Direction) {
			out = append(out, fmt.Sprintf("spec.acls[%d].direction %q (use from-lport or to-lport)", i, a.Direction))
		}
		if !slices.Contains([]string{"allow", "allow-related", "allow-stateless", "drop", "reject", "pass"}, a.Action) {
			out = append(out, fmt.Sprintf("spec.acls[%d].action %q (use allow, allow-related, allow-stateless, drop, reject or pass)", i, a.Action))
		}
		if strings.TrimSpace(a.Match) == "" || a.Priority < 0 || a.Priority > 32767 {
			out = append(out, fmt.Sprintf("spec.acls[%d] (needs a match and a priority from 0 to 32767)", i))
		}
	}
	return out
}

// Settings are the controller settings some fields are judged against.
type Settings struct {
	// EnableLB: Services are OVN load balancers on every switch (--enable-lb).
	EnableLB bool
}

// notApplied: what each accepted-but-not-applied field means for the
// subnet's traffic, in spec order. asks says whether the spec asks for it.
var notApplied = []struct {
	field       string
	asks        func(SubnetSpec, Settings) bool
	consequence string
}{
	{"gatewayType", func(s SubnetSpec, _ Settings) bool { return s.Vlan != "" && s.GatewayType == "centralized" },
		"gatewayType: centralized is not applied to an underlay subnet: its pods leave through the router of their physical network, not through gateway nodes."},
	// gatewayType centralized with gatewayNode is applied (ovnnet/gateway.go);
	// gatewayNode means nothing to a distributed subnet, as in Kube-OVN.
	{"gatewayNode", func(s SubnetSpec, _ Settings) bool {
		return s.GatewayType != "centralized" && strings.TrimSpace(s.GatewayNode) != ""
	}, "gatewayNode is not applied to a distributed subnet: the node(s) it names do not act as this subnet's gateway; set gatewayType: centralized to use them."},
	// A custom VPC's router has no way out of the cluster (the default
	// VPC's egress through the nodes is not its own).
	{"natOutgoing (custom VPC)", func(s SubnetSpec, _ Settings) bool { return IsCustomVpc(s.Vpc) && s.NatOutgoing },
		"natOutgoing is not applied in a custom VPC: its pods do not leave the VPC (no egress through the nodes, no masquerade)."},
	{"gatewayType (custom VPC)", func(s SubnetSpec, _ Settings) bool { return IsCustomVpc(s.Vpc) && s.GatewayType == "centralized" },
		"gatewayType: centralized is not applied in a custom VPC: its pods do not leave the VPC through gateway nodes."},
	{"enableLb (custom VPC)", func(s SubnetSpec, st Settings) bool {
		return IsCustomVpc(s.Vpc) && (s.EnableLb == nil || *s.EnableLb) && st.EnableLB
	},
		"enableLb is not applied in a custom VPC: the cluster's Service load balancers are the default VPC's, a custom VPC's pods reach no cluster Service (nor DNS through one)."},
	{"gatewayNodeSelectors", func(s SubnetSpec, _ Settings) bool { return len(s.GatewayNodeSelectors) > 0 },
		"gatewayNodeSelectors is not applied: gateway nodes are not chosen by label; a centralized subnet leaves through the nodes gatewayNode names."},
	{"natOutgoing", func(s SubnetSpec, _ Settings) bool { return s.Vlan != "" && !s.LogicalGateway && s.NatOutgoing },
		"natOutgoing is not applied to an underlay subnet whose gateway is on the physical network: its pods' traffic leaves on that network with their own addresses."},
	{"externalEgressGateway", func(s SubnetSpec, _ Settings) bool { return s.ExternalEgressGateway != "" },
		"externalEgressGateway is not applied: traffic to outside the cluster is not policy-routed to those gateways; it leaves as natOutgoing and gatewayType say."},
	{"policyRoutingPriority", func(s SubnetSpec, _ Settings) bool { return s.PolicyRoutingPriority != 0 },
		"policyRoutingPriority is not applied: no policy route of that priority is created for the subnet."},
	{"policyRoutingTableID", func(s SubnetSpec, _ Settings) bool { return s.PolicyRoutingTableID != 0 },
		"policyRoutingTableID is not applied: no route table of that ID is used for the subnet on the nodes."},
	{"vips", func(s SubnetSpec, _ Settings) bool { return len(s.Vips) > 0 },
		"vips is not applied: the addresses are not set up as virtual IPs and may be handed to pods; keep them out with excludeIps."},
	{"enableDHCP", func(s SubnetSpec, _ Settings) bool { return s.EnableDHCP },
		"enableDHCP is not applied: OVN answers no DHCP requests on this switch (pods get their address from the CNI plugin; VMs asking DHCP get none)."},
	{"dhcpV4Options", func(s SubnetSpec, _ Settings) bool { return s.DHCPv4Options != "" },
		"dhcpV4Options is not applied: no DHCPv4 options are attached to the subnet's ports."},
	{"dhcpV6Options", func(s SubnetSpec, _ Settings) bool { return s.DHCPv6Options != "" },
		"dhcpV6Options is not applied: no DHCPv6 options are attached to the subnet's ports."},
	{"enableIPv6RA", func(s SubnetSpec, _ Settings) bool { return s.EnableIPv6RA },
		"enableIPv6RA is not applied: the router sends no IPv6 router advertisements on this subnet."},
	{"ipv6RAConfigs", func(s SubnetSpec, _ Settings) bool { return s.IPv6RAConfigs != "" },
		"ipv6RAConfigs is not applied: no router advertisement settings are programmed."},
	{"allowEWTraffic", func(s SubnetSpec, _ Settings) bool { return s.AllowEWTraffic },
		"allowEWTraffic is not applied: traffic between this subnet's pods is filtered by its acls like any other."},
	{"natOutgoingPolicyRules", func(s SubnetSpec, _ Settings) bool { return len(s.NatOutgoingPolicyRules) > 0 },
		"natOutgoingPolicyRules is not applied: natOutgoing masquerades all of the subnet's traffic leaving the cluster, without exceptions."},
	{"u2oFeatures", func(s SubnetSpec, _ Settings) bool {
		return s.Vlan != "" && s.U2OInterconnection && s.U2OFeatures != nil && s.U2OFeatures.OverlayOnlyRouting
	}, "u2oFeatures.overlayOnlyRouting is not applied: the subnet's pods send all their traffic through the cluster router, which passes what is not for the cluster on to the physical gateway."},
	{"enableLb", func(s SubnetSpec, st Settings) bool {
		return !IsCustomVpc(s.Vpc) && s.EnableLb != nil && !*s.EnableLb && st.EnableLB
	},
		"enableLb: false is not applied: the cluster's Service load balancers stay on this subnet's switch, so its pods still reach Services through OVN."},
	{"enableEcmp", func(s SubnetSpec, _ Settings) bool { return s.EnableEcmp },
		"enableEcmp is not applied: a centralized subnet's traffic leaves through one active gateway node at a time (failover), not spread over all of them."},
	{"enableMulticastSnoop", func(s SubnetSpec, _ Settings) bool { return s.EnableMulticastSnoop },
		"enableMulticastSnoop is not applied: there is no IGMP/MLD snooping, multicast reaches every port of the switch."},
	{"enableExternalLBAddress", func(s SubnetSpec, _ Settings) bool { return s.EnableExternalLBAddress },
		"enableExternalLBAddress is not applied: no external load balancer addresses are allocated from this subnet."},
	{"routeTable", func(s SubnetSpec, _ Settings) bool { return s.RouteTable != "" },
		"routeTable is not applied: the subnet's traffic uses the cluster router's main route table."},
	{"htbqos", func(s SubnetSpec, _ Settings) bool { return s.HtbQos != "" },
		"htbqos is not applied: pods get no HTB priority class; rate limits come from the ingress_rate and egress_rate annotations."},
	{"u2oRouting", func(s SubnetSpec, _ Settings) bool { return s.Vlan != "" && s.U2OInterconnection && s.U2ORouting },
		"u2oRouting is not applied: the interconnection's traffic to outside the cluster still goes to the physical gateway through the cluster router."},
}

// NotAppliedFields lists, in spec order, the fields of spec that ask for
// something ovnhost accepts but does not apply. Empty when there is none:
// A Subnet of a custom VPC (IsCustomVpc) is attached to that VPC's router;
// what only the default VPC has (egress, centralized gateways, the
// cluster's Services) is reported as "<field> (custom VPC)".
//
// Kube-OVN's stored defaults (vpc ovn-cluster, provider ovn, enableLb,
// gatewayType distributed, routeTable "", enableDHCP false, enableEcmp
// false, ...) ask for nothing.
func NotAppliedFields(spec SubnetSpec, st Settings) []string {
	var out []string
	for _, n := range notApplied {
		if n.asks(spec, st) {
			out = append(out, n.field)
		}
	}
	return out
}

// NotAppliedMessage is the Validated condition (and event) message for the
// fields NotAppliedFields returned: one sentence per field naming it and its
// consequence, in spec order whatever the order given; "" for none. The
// message depends only on the set of fields, so comparing messages compares sets.
func NotAppliedMessage(fields []string) string {
	var parts []string
	for _, n := range notApplied {
		if slices.Contains(fields, n.field) {
			parts = append(parts, n.consequence)
		}
	}
	return strings.Join(parts, " ")
}

// IsAttachment: the Subnet is an OVN attachment network (spec.provider
// "<nad>.<namespace>.ovn"), not a default-network subnet.
func IsAttachment(s SubnetSpec) bool { return annotations.IsAttachmentProvider(s.Provider) }

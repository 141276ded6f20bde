// Package annotations names the Kube-OVN compatible annotations
// (ovn.kubernetes.io/<key>) that the controller writes and users set. It has
// no dependencies, so the CNI plugin and the node daemon can import it.
package annotations

import (
	"encoding/json"
	"strings"
)

const prefix = "ovn.kubernetes.io/"

// Pod annotations written by the controller (ip_address, mac_address and
// logical_switch may also be set by users: static address, chosen subnet).
const (
	Allocated       = prefix + "allocated"        // "true" once the pod has an address and a port
	IPAddress       = prefix + "ip_address"       // "10.16.0.5" or "10.16.0.5,fd00::5"
	MACAddress      = prefix + "mac_address"      // "0a:..."
	CIDR            = prefix + "cidr"             // the subnet's CIDR(s)
	Gateway         = prefix + "gateway"          // the subnet's gateway(s)
	LogicalSwitch   = prefix + "logical_switch"   // subnet name (pod or namespace annotation)
	LogicalRouter   = prefix + "logical_router"   // the pod's VPC router (written by the controller)
	Routed          = prefix + "routed"           // "true" once routes are programmed
	MTU             = prefix + "mtu"              // the Subnet's mtu when it sets one (not a Kube-OVN annotation)
	VlanID          = prefix + "vlan_id"          // an underlay pod's VLAN tag (its Subnet's Vlan)
	ProviderNetwork = prefix + "provider_network" // an underlay pod's ProviderNetwork
	PortName        = prefix + "port_name"        // node annotation: "node-<name>"
	Chassis         = prefix + "chassis"          // node annotation: OVS system-id (written by the node daemon)
	IngressRate     = prefix + "ingress_rate"     // Mbit/s, set by users
	EgressRate      = prefix + "egress_rate"      // Mbit/s, set by users
	Mirror          = prefix + "mirror"
	Routes          = prefix + "routes"
	IPPool          = prefix + "ip_pool"       // fixed addresses for a workload: "ip,ip,..." (or "v4,v6;v4,v6" dual stack)
	PortSecurity    = prefix + "port_security" // "true": the port only sends from its own MAC and addresses (ovnhost's default)
)

// ControllerFieldManager is the field manager the ovnhost controller writes
// pod and node annotations as. The node daemon honours a pod's
// controller-written annotations only when the managedFields of the pod
// show them written by a trusted field manager (cni/README.md, Trust).
const ControllerFieldManager = "ovnhost-controller"

// KubeOVNFieldManager is upstream kube-ovn-controller's field manager (the
// client-go default: its user agent's program name), trusted by default so
// that the node side works under the upstream controller (migration step 1).
const KubeOVNFieldManager = "kube-ovn-controller"

// FieldOwner is one managedFields entry of an object, reduced to what the
// trust check reads: its manager, operation, time (RFC 3339, "" when the
// API server recorded none) and the ovn.kubernetes.io annotations it owns.
type FieldOwner struct {
	Manager, Operation, Time string
	Keys                     map[string]bool
}

// OwnedAnnotations returns the annotation keys with the given prefix that
// a managedFields entry's fieldsV1 (raw JSON) owns.
func OwnedAnnotations(fieldsV1 []byte, keyPrefix string) map[string]bool {
	var f struct {
		Metadata struct {
			Annotations map[string]json.RawMessage `json:"f:annotations"`
		} `json:"f:metadata"`
	}
	if json.Unmarshal(fieldsV1, &f) != nil {
		return nil
	}
	var out map[string]bool
	for k := range f.Metadata.Annotations {
		if key, ok := strings.CutPrefix(k, "f:"); ok && strings.HasPrefix(key, keyPrefix) {
			if out == nil {
				out = map[string]bool{}
			}
			out[key] = true
		}
	}
	return out
}

// Prefix is what every key of this package starts with.
const Prefix = prefix

// NodeFeatures is written by the node daemon on its own Node, with its
// chassis: the comma-separated features of the node side that the controller
// must not rely on before every node involved has them (an older node
// ignores what it does not know, so the controller keeps the old behaviour
// for it during a rolling upgrade).
const NodeFeatures = "ovnhost.io/node-features"

// FeatureGatewayIPv6: the node takes a centralized subnet's IPv6 traffic
// through the transit network of ovnhost.io/gateway-transit-ip6.
const FeatureGatewayIPv6 = "gateway-ipv6"

// HasFeature: a NodeFeatures value lists feature.
func HasFeature(value, feature string) bool {
	for _, f := range strings.Split(value, ",") {
		if strings.TrimSpace(f) == feature {
			return true
		}
	}
	return false
}

// NotImplemented is written by the controller on a pod: the sorted,
// comma-separated Kube-OVN annotations of the pod that ovnhost does not
// implement and already named in a Warning event (so the event is sent once
// per pod and change, not on every sync or restart).
const NotImplemented = "ovnhost.io/not-implemented"

// Unimplemented are the pod annotations Kube-OVN users set that ovnhost
// does not implement: a pod carrying one gets a Warning event naming it.
var Unimplemented = []string{
	prefix + "vip", prefix + "aaps", prefix + "default_route", prefix + "enable_log",
	prefix + "vpc", prefix + "latency", prefix + "loss", prefix + "limit",
	prefix + "priority", prefix + "security_groups",
	prefix + "north_gateway", prefix + "vlan_id", prefix + "layer2_forward", prefix + "port_vips",
	prefix + "allow_live_migration", prefix + "bgp",
}

// VirtualMachine names the KubeVirt virtual machine a pod runs (a
// virt-launcher pod): its address, MAC and logical switch port
// ("<vm>.<namespace>") are the VM's and move with it. Users (or KubeVirt's
// templates) may set it; the controller writes it on every pod of a VM it
// recognises (controller/README.md, "KubeVirt live migration").
const VirtualMachine = prefix + "virtualmachine"

// KubeVirt's names on virt-launcher pods (kubevirt.io/api core/v1), read
// as Kube-OVN reads them.
const (
	// KubeVirtDomain (annotation) is the VirtualMachineInstance's name.
	KubeVirtDomain = "kubevirt.io/domain"
	// KubeVirtMigrationJobUID (label) marks a live migration's target pod.
	KubeVirtMigrationJobUID = "kubevirt.io/migrationJobUID"
	// KubeVirtMigrationJobName (annotation) names that migration.
	KubeVirtMigrationJobName = "kubevirt.io/migrationJobName"
)

// Package annotations names the Kube-OVN compatible annotations
// (ovn.kubernetes.io/<key>) that the controller writes and users set. It has
// no dependencies, so the CNI plugin and the node daemon can import it.
package annotations

const prefix = "ovn.kubernetes.io/"

// Pod annotations written by the controller (ip_address, mac_address and
// logical_switch may also be set by users: static address, chosen subnet).
const (
	Allocated     = prefix + "allocated"      // "true" once the pod has an address and a port
	IPAddress     = prefix + "ip_address"     // "10.16.0.5" or "10.16.0.5,fd00::5"
	MACAddress    = prefix + "mac_address"    // "0a:..."
	CIDR          = prefix + "cidr"           // the subnet's CIDR(s)
	Gateway       = prefix + "gateway"        // the subnet's gateway(s)
	LogicalSwitch = prefix + "logical_switch" // subnet name (pod or namespace annotation)
	Routed        = prefix + "routed"         // "true" once routes are programmed
	MTU           = prefix + "mtu"            // the Subnet's mtu when it sets one (not a Kube-OVN annotation)
	PortName      = prefix + "port_name"      // node annotation: "node-<name>"
	Chassis       = prefix + "chassis"        // node annotation: OVS system-id (written by the node daemon)
	IngressRate   = prefix + "ingress_rate"   // Mbit/s, set by users
	EgressRate    = prefix + "egress_rate"    // Mbit/s, set by users
	Mirror        = prefix + "mirror"
	Routes        = prefix + "routes"
)

package annotations

// EIP and SNAT on the default VPC (Kube-OVN's ovn-external-gw-config):
// set by users on pods, a label the controller puts on the gateway nodes it
// accepted, and what a gateway node reports once its external NIC is bridged.
const (
	EIP  = prefix + "eip"  // pod: "172.56.0.233": reached at and leaving from that address
	SNAT = prefix + "snat" // pod: "172.56.0.200": leaving from that address (may be shared)
	// ExternalGatewayLabel is "true" on the nodes of external-gw-nodes once
	// the controller validated the ConfigMap (Kube-OVN's label).
	ExternalGatewayLabel = prefix + "external-gw"
	// ExternalGatewayNIC (node annotation, written by the node daemon) names
	// the NIC this node has bridged into br-external; the controller puts a
	// gateway node's chassis into the external port's HA group only when it
	// equals the ConfigMap's external-gw-nic.
	ExternalGatewayNIC = prefix + "external-gw-nic"
)

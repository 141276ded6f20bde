package ovnnet

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
)

// The guard of underlay pods. An overlay pod reaches node addresses
// through ovn0, where the node's host firewall guard (supervisor/hostnat)
// drops connection attempts to the OVN databases, the node API and the
// tunnel ports. An underlay pod's packets leave through the localnet port
// onto the physical network and reach the nodes' addresses there without
// crossing ovn0, so the same ports are guarded on its switch instead: a
// to-lport ACL on the localnet port drops what leaves the switch for the
// physical network (from its pods, or from overlay pods through the
// cluster router with u2oInterconnection) to those ports, whatever the
// destination, as the host guard's forward hook does for overlay pods.
// (OVN refuses `inport != ...`: a nominal field is tested for equality
// only, so the match names where packets go, not where they come from.)
// TCP: connection attempts only (SYN without ACK), so replies to
// connections opened towards a pod pass. The priority is above every
// NetworkPolicy and Subnet ACL: a tenant's allow cannot open it.
const (
	underlayGuardPriority = 32000
	keyUnderlayGuard      = "underlay-guard"
)

// The ports guarded, those of supervisor/hostnat's DefaultGuard: OVN NB,
// SB and their Raft ports, the node API's default, STT; Geneve, VXLAN,
// STT over UDP.
var (
	guardedTCPPorts = []int{6641, 6642, 6643, 6644, 10666, 7471}
	guardedUDPPorts = []int{6081, 4789, 7471}
)

// UnderlayGuardACLs are the ACLs of underlay switch sw.
func UnderlayGuardACLs(sw string) []ovnnb.ACL {
	set := func(ports []int) string {
		s := make([]string, len(ports))
		for i, p := range ports {
			s[i] = strconv.Itoa(p)
		}
		return "{" + strings.Join(s, ", ") + "}"
	}
	match := fmt.Sprintf("outport == %q && ((tcp && tcp.dst == %s && tcp.flags == 0x2/0x12) || (udp && udp.dst == %s))",
		ovnnb.SubnetLocalnetPortName(sw), set(guardedTCPPorts), set(guardedUDPPorts))
	return []ovnnb.ACL{{Direction: "to-lport", Priority: underlayGuardPriority, Match: match, Action: "drop"}}
}

// syncUnderlayGuard programs (underlay) or removes the guard ACLs of
// subnet's switch.
func (n *Network) syncUnderlayGuard(ctx context.Context, subnet string, underlay bool) error {
	var acls []ovnnb.ACL
	if underlay {
		acls = UnderlayGuardACLs(subnet)
	}
	return n.NB.EnsureSwitchACLs(ctx, subnet, map[string]string{keyUnderlayGuard: subnet}, acls)
}

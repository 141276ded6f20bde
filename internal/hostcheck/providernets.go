package hostcheck

import (
	"fmt"
	"sort"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// checkProviderNetworks checks each underlay network's NIC (--provider-networks)
// against the host's interfaces, matching names exactly. A missing NIC only
// warns: the node runs without that network, touching nothing, and bridges
// the NIC when it appears. The tunnel interface may be a provider NIC (its
// address moves to br-<name> and stays the encap IP), but not with
// --userspace-tunnel, which wants the same NIC in br-phy.
func checkProviderNetworks(s nodeconfig.HostSettings, links []Link, tunnelIface string) []Check {
	var names []string
	for _, l := range links {
		if !l.Loopback {
			names = append(names, l.Name)
		}
	}
	sort.Strings(names)
	var checks []Check
	for _, pn := range s.ProviderNetworks {
		br := providernet.BridgeName(pn.Name)
		name := "provider-network " + pn.Name
		c := Check{Name: name, Status: Pass, Found: fmt.Sprintf("%s, bridged into %s", pn.NIC, br)}
		found := false
		for _, l := range links {
			found = found || l.Name == pn.NIC
		}
		if !found {
			c.Status, c.Found = Warn, providernet.MissingNIC(pn.NIC, names)+"; the node runs without this network until it appears"
			c.Fix = "correct --provider-networks (" + pn.Name + ":NIC) or plug the NIC in"
		}
		checks = append(checks, c)
		if s.UserspaceTunnel && tunnelIface != "" && (tunnelIface == pn.NIC || tunnelIface == br) {
			checks = append(checks, Check{Name: name, Status: Fail,
				Found: fmt.Sprintf("the tunnel interface %s is the network's %s, and --userspace-tunnel moves the tunnel interface into %s", tunnelIface, map[bool]string{true: "NIC", false: "bridge"}[tunnelIface == pn.NIC], nodeconfig.PhysBridge),
				Fix:   "set IFACE to another NIC for the overlay tunnel, or give " + pn.Name + " another NIC"})
		}
	}
	return checks
}

// providerBridgeOf names the bridge that holds iface's addresses while the
// node runs ("" when iface is no provider network's NIC).
func providerBridgeOf(s nodeconfig.HostSettings, iface string) string {
	for _, pn := range s.ProviderNetworks {
		if pn.NIC == iface {
			return providernet.BridgeName(pn.Name)
		}
	}
	return ""
}

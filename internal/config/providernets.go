package config

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/providernet"
)

// parseProviderNetworks reads --provider-networks: name:nic entries,
// separated by commas (a YAML list becomes the same). Each entry is
// checked alone here; checkProviderNetworks checks them together and
// against the other settings.
func parseProviderNetworks(v string) ([]nodeconfig.ProviderNetwork, error) {
	var out []nodeconfig.ProviderNetwork
	for _, e := range splitList(v) {
		name, nic, ok := strings.Cut(e, ":")
		if !ok {
			return nil, bad(fmt.Sprintf("%q is not name:nic", e), "list the underlay networks as name:nic separated by commas, e.g. physnet1:eth1")
		}
		if p := providernet.NameProblem(name); p != "" {
			return nil, bad(fmt.Sprintf("the network name %q in %q %s", name, e, p), "name the network with at most 12 lower-case letters, digits and '-', e.g. physnet1:"+nic)
		}
		if p := providernet.IfnameProblem(nic); p != "" {
			return nil, bad(fmt.Sprintf("the NIC %q in %q %s", nic, e, p), "name the NIC as `ip link` shows it, e.g. "+name+":eth1")
		}
		out = append(out, nodeconfig.ProviderNetwork{Name: name, NIC: nic})
	}
	return out, nil
}

// ovnhostLinks are the devices ovnhost itself creates: never a provider
// network's NIC.
var ovnhostLinks = map[string]string{
	"br-int": "OVN's integration bridge", nodeconfig.PhysBridge: "the userspace tunnel's bridge", "br-external": "EIP/SNAT's bridge",
	"br-egw": "the centralized gateway's bridge", "ovn0": "the node's port on the pod network", "ovs-netdev": "the userspace datapath's device",
	"ovs-system": "the kernel datapath's device", "lo": "the loopback",
}

// checkProviderNetworks refuses, before the host is touched, provider
// networks that would fight each other or the node's other features over
// a NIC, a bridge or a mapping.
func (c *Config) checkProviderNetworks() Errors {
	var errs Errors
	key := "provider-networks"
	fail := func(reason, fix string) {
		errs = append(errs, &Error{Key: key, Reason: reason, Fix: fix})
	}
	names, nics, bridges := map[string]string{}, map[string]string{}, map[string]string{}
	for _, pn := range c.ProviderNetworks {
		bridges[providernet.BridgeName(pn.Name)] = pn.Name
	}
	for _, pn := range c.ProviderNetworks {
		entry := pn.Name + ":" + pn.NIC
		if nic, dup := names[pn.Name]; dup {
			fail(fmt.Sprintf("the network %s is listed twice (with %s and %s)", pn.Name, nic, pn.NIC), "a network has one NIC on a node: keep one entry")
		}
		names[pn.Name] = pn.NIC
		if other, dup := nics[pn.NIC]; dup {
			fail(fmt.Sprintf("the NIC %s is given to %s and %s", pn.NIC, other, pn.Name), "a NIC can be the port of one bridge only: give each network its own NIC (VLANs of one NIC are Vlan objects on one network)")
		}
		nics[pn.NIC] = pn.Name
		if why, ok := ovnhostLinks[pn.NIC]; ok {
			fail(fmt.Sprintf("%s names %s, %s", entry, pn.NIC, why), "name the host NIC that carries the underlay network")
		}
		if owner, ok := bridges[pn.NIC]; ok {
			fail(fmt.Sprintf("%s names %s, the bridge of the network %s", entry, pn.NIC, owner), "name the host NIC, not a provider network's bridge")
		}
		if c.UserspaceTunnel && slices.Contains(c.Iface, pn.NIC) {
			fail(fmt.Sprintf("%s names the tunnel interface (IFACE=%s), which --userspace-tunnel moves into br-phy", entry, strings.Join(c.Iface, ",")),
				"a NIC can be the port of one bridge only: set IFACE to another NIC for the overlay tunnel, or give the network another NIC")
		}
	}
	return errs
}

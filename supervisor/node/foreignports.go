package node

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/nldump"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// refuseStrandingTheHost stops ovs-vswitchd from starting when the kernel
// datapath has internal ports carrying the host's addresses that this
// conf.db does not know: another Open vSwitch made them (Kube-OVN's keeps
// its conf.db in /etc/origin/openvswitch and moves a provider NIC's
// addresses to br-<network>). ovs-vswitchd deletes the datapath ports its
// conf.db lacks, so it would take those addresses, often the node's only
// network, away; nothing has touched the host yet when this refuses.
func (n *Node) refuseStrandingTheHost(ctx context.Context) error {
	if n.nc.Datapath.IsUserspace() {
		return nil
	}
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		return fmt.Errorf("listing the host's interfaces: %w", err)
	}
	var foreign []string
	for _, l := range links {
		name := l.Attrs().Name
		if l.Type() != "openvswitch" || name == "ovs-system" {
			continue
		}
		var held []string
		addrs, _ := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) })
		for _, a := range addrs {
			if a.Scope == int(netlink.SCOPE_UNIVERSE) && !a.IP.IsLinkLocalUnicast() {
				held = append(held, a.IPNet.String())
			}
		}
		if len(held) == 0 {
			continue
		}
		switch err := n.OVS().Get(ctx, &vswitch.Interface{Name: name}); {
		case err == nil:
			continue // ours: ovs-vswitchd keeps it
		case !errors.Is(err, client.ErrNotFound):
			return fmt.Errorf("looking up %s in conf.db: %w", name, err)
		}
		foreign = append(foreign, fmt.Sprintf("%s (%s)", name, strings.Join(held, ", ")))
	}
	if len(foreign) == 0 {
		return nil
	}
	return fmt.Errorf("the kernel datapath has internal ports holding the host's addresses that conf.db (%s) does not know: %s. Another Open vSwitch made them (Kube-OVN keeps its conf.db in /etc/origin/openvswitch), and ovs-vswitchd would delete them at its start, taking those addresses away; nothing was changed. Fix: run ovnhost on that Open vSwitch's database (OPENVSWITCH_DIR=<its directory>), which keeps the ports and lets the underlay adopt its bridge, or give the addresses back to the NIC and remove that bridge with the Open vSwitch that made it first",
		n.nc.Layout.ConfDB, strings.Join(foreign, "; "))
}

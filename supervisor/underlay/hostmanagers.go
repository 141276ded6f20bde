package underlay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/hostnetmgr"
	"github.com/ovnhost/ovnhost/internal/nldump"
)

// The host's own network managers around a bridged NIC
// (internal/hostnetmgr): NetworkManager is told to leave the NIC and the
// bridge alone for as long as the NIC is bridged, and given the NIC back
// after; the others are only reported.

// nmTimeout bounds one exchange with NetworkManager.
const nmTimeout = 10 * time.Second

// leaveToUs makes NetworkManager, when it runs and manages nic, stop
// managing it (which keeps its configuration as it is) before the NIC
// moves: otherwise it would put the addresses back on the NIC or take
// the NIC down. The mark beside the NIC's journal records that the NIC
// goes back to NetworkManager when it is given back, across a crash; one
// already there (an upgrade, a restart) means NetworkManager had it first.
func (u *Unit) leaveToUs(ctx context.Context, nic string) error {
	return withNetworkManager(ctx, func(ctx context.Context, nm *hostnetmgr.NetworkManager) error {
		return u.leaveNIC(ctx, nm, nic)
	})
}

func (u *Unit) leaveNIC(ctx context.Context, nm *hostnetmgr.NetworkManager, nic string) error {
	managed, known, err := nm.Managed(ctx, nic)
	if err != nil || !known || !managed {
		return err
	}
	if u.o.JournalDir != "" {
		if err := os.MkdirAll(u.o.JournalDir, 0o700); err != nil {
			return err
		}
		mark := filepath.Join(u.o.JournalDir, nic+hostnetmgr.NMMarkSuffix)
		if err := os.WriteFile(mark, []byte("NetworkManager managed "+nic+" before ovnhost bridged it; it gets "+nic+" back with its configuration\n"), 0o600); err != nil {
			return fmt.Errorf("recording that NetworkManager manages %s: %w", nic, err)
		}
	}
	if _, err := nm.SetManaged(ctx, nic, false); err != nil {
		return fmt.Errorf("%w (ovnhost asks NetworkManager to leave the NIC alone while it is bridged; is NetworkManager's D-Bus API reachable as root?)", err)
	}
	u.o.Log.Info("underlay: NetworkManager no longer manages the NIC while it is bridged", "nic", nic)
	return nil
}

// leaveBridgeToUs keeps NetworkManager off the bridge's internal port,
// which takes the NIC's configuration (a device it would otherwise assume
// or reconfigure). It goes with the bridge: nothing to give back.
func (u *Unit) leaveBridgeToUs(ctx context.Context, br string) error {
	return withNetworkManager(ctx, func(ctx context.Context, nm *hostnetmgr.NetworkManager) error {
		return nm.LeaveOnceKnown(ctx, br)
	})
}

// withNetworkManager runs fn with NetworkManager when it runs (nothing
// to do otherwise), bounded by nmTimeout.
func withNetworkManager(ctx context.Context, fn func(context.Context, *hostnetmgr.NetworkManager) error) error {
	ctx, cancel := context.WithTimeout(ctx, nmTimeout)
	defer cancel()
	nm, err := hostnetmgr.ConnectNetworkManager(ctx, hostnetmgr.SystemBus())
	if err != nil || nm == nil {
		return err
	}
	defer nm.Close()
	return fn(ctx, nm)
}

// giveBackToNetworkManager hands nic back to NetworkManager when the mark
// says it had it, once the NIC has its configuration again.
func giveBackToNetworkManager(ctx context.Context, journalDir, nic string, log *slog.Logger) error {
	if journalDir == "" {
		return nil
	}
	mark := filepath.Join(journalDir, nic+hostnetmgr.NMMarkSuffix)
	if _, err := os.Stat(mark); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, nmTimeout)
	defer cancel()
	nm, err := hostnetmgr.ConnectNetworkManager(ctx, hostnetmgr.SystemBus())
	if err != nil {
		return fmt.Errorf("giving %s back to NetworkManager: %w", nic, err)
	}
	defer nm.Close()
	switch {
	case nm == nil:
		log.Warn("underlay: NetworkManager managed the NIC before it was bridged and is not running now; it will leave the NIC unmanaged until told", "nic", nic,
			"fix", "nmcli device set "+nic+" managed yes (once NetworkManager runs)")
	default:
		if _, err := nm.SetManaged(ctx, nic, true); err != nil {
			return fmt.Errorf("giving %s back to NetworkManager: %w", nic, err)
		}
		log.Info("underlay: NIC given back to NetworkManager", "nic", nic)
	}
	if err := os.Remove(mark); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// reportHostManagers logs what on the host will take nic back from br or
// stop working now that its configuration lives there (netctl doctor's
// underlay-host check says the same).
func (u *Unit) reportHostManagers(network string, nic netlink.Link, br string) {
	for _, f := range (hostnetmgr.Host{Root: "/"}).Inspect(nic.Attrs().Name, nic.Attrs().Index, br, hostnetmgr.LeasesOf(nic)) {
		u.o.Log.Warn("underlay: "+f.Manager+" may take the NIC back or stop working", "network", network, "nic", nic.Attrs().Name, "problem", f.Problem, "fix", f.Fix)
	}
}

// reportVlanInterfaces names the VLAN interfaces on nic (eth0.10). They
// keep working while nic is bridged, with their own configuration: the
// kernel hands a tagged frame to the VLAN interface of its tag before
// OVS sees the NIC's frames (checked on the kernel datapath in
// tests/kernel). The flip side: OVS never receives that VLAN, so an
// underlay Vlan with the same id on this network gets nothing inbound on
// this node.
func (u *Unit) reportVlanInterfaces(network string, nic netlink.Link) {
	links, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		return
	}
	for _, l := range links {
		v, ok := l.(*netlink.Vlan)
		if !ok || v.Attrs().ParentIndex != nic.Attrs().Index {
			continue
		}
		u.o.Log.Info("underlay: a VLAN interface on the NIC stays as it is and keeps its frames; a Vlan with its id on this network receives nothing on this node",
			"network", network, "nic", nic.Attrs().Name, "vlan_interface", v.Attrs().Name, "vlan", v.VlanId,
			"fix", "give the underlay Vlan another id, or remove "+v.Attrs().Name+" if that VLAN is the pods'")
	}
}

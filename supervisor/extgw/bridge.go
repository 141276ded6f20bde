package extgw

import (
	"context"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/ovsbridge"
)

// The external gateway bridge of an EIP/SNAT gateway node (Kube-OVN's
// br-external): the NIC named by external-gw-nic is its port, and
// ovn-bridge-mappings maps the external network to it, so the localnet port
// of ovn-external reaches the outside through that NIC. supervisor/ovsbridge
// writes both, as it does the node's other bridges.

// ExternalBridge is the bridge's name (and its internal port's).
const ExternalBridge = ovnnet.ExternalBridge

// keyExternalNIC marks the Port row of the NIC ovnhost put into br-external
// (the key earlier releases wrote, so their NIC is still recognised).
const keyExternalNIC = "ovnhost-external-nic"

// EnsureExternalBridge creates br-external in conf.db (ovs; the node's
// datapath type) with nic as its port (replacing a NIC an earlier
// configuration put there; a NIC of another bridge is refused) and maps
// network to it, keeping the other mappings.
func EnsureExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn, datapath nodeconfig.Datapath, network, nic string) error {
	s := ovsbridge.Spec{Name: ExternalBridge, Datapath: datapath, Uplink: nic, UplinkMark: keyExternalNIC}
	if err := ovsbridge.Ensure(ctx, ovs, s); err != nil {
		return err
	}
	return ovsbridge.SetMapping(ctx, ovs, network, ExternalBridge)
}

// WaitExternalNIC waits until ovs-vswitchd has opened nic (an OpenFlow
// port number) and returns the interface's error when it could not.
func WaitExternalNIC(ctx context.Context, ovs *ovsdbconn.Conn, nic string) error {
	return ovsbridge.WaitUplink(ctx, ovs, ExternalBridge, nic)
}

// RemoveExternalBridge deletes br-external (its ports with it) and
// network's mapping from conf.db (ovs); absent is fine.
func RemoveExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn, network string) error {
	if ovs == nil {
		return nil
	}
	if err := ovsbridge.SetMapping(ctx, ovs, network, ""); err != nil {
		return err
	}
	return ovsbridge.Remove(ctx, ovs, ExternalBridge)
}

// HasExternalBridge reports whether conf.db (ovs) has br-external.
func HasExternalBridge(ctx context.Context, ovs *ovsdbconn.Conn) bool {
	return ovsbridge.Exists(ctx, ovs, ExternalBridge)
}

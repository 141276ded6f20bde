package egress

import (
	"context"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/supervisor/ovsbridge"
)

// GatewayBridge is the OVS bridge of a centralized-gateway node: OVN's
// gateway switches reach it through their localnet port (ovn-bridge-mappings
// maps the network to it), and its own internal port, named like the
// bridge, is the host end of the transit networks.
const GatewayBridge = "br-egw"

// EnsureGatewayBridge creates br-egw in conf.db (ovs; datapath type of the
// node, fail mode standalone: a plain learning switch, the host port MAC
// mac) and maps network to it in ovn-bridge-mappings, keeping other
// mappings (supervisor/ovsbridge writes both).
func EnsureGatewayBridge(ctx context.Context, ovs *ovsdbconn.Conn, datapath nodeconfig.Datapath, network, mac string) error {
	if err := ovsbridge.Ensure(ctx, ovs, ovsbridge.Spec{Name: GatewayBridge, Datapath: datapath, HWAddr: mac}); err != nil {
		return err
	}
	return ovsbridge.SetMapping(ctx, ovs, network, GatewayBridge)
}

// RemoveGatewayBridge deletes network's bridge mapping and br-egw from
// conf.db (ovs); absent is fine.
func RemoveGatewayBridge(ctx context.Context, ovs *ovsdbconn.Conn, network string) error {
	if ovs == nil {
		return nil
	}
	if err := ovsbridge.SetMapping(ctx, ovs, network, ""); err != nil {
		return err
	}
	return ovsbridge.Remove(ctx, ovs, GatewayBridge)
}

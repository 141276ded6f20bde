// Package hostnetmgr deals with the host's own network managers around a
// NIC that an underlay network moves into its OVS bridge: NetworkManager,
// which would take the NIC back (Kube-OVN PR 2944), is asked over D-Bus to
// leave it alone; systemd-networkd, netplan, keepalived and DHCP leases,
// which would put addresses back on the NIC or stop working once they live
// on the bridge (Kube-OVN issues 2962, 4914), are found and reported with
// the fix (Inspect). The node daemon's underlay unit and netctl doctor both
// use it.
package hostnetmgr

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

// NetworkManager's D-Bus names (its documented API, stable since 1.0).
const (
	nmService   = "org.freedesktop.NetworkManager"
	nmPath      = "/org/freedesktop/NetworkManager"
	nmDevice    = nmService + ".Device"
	nmUnknownIf = nmService + ".UnknownDevice"
	// deviceStateUnmanaged is NM_DEVICE_STATE_UNMANAGED.
	deviceStateUnmanaged = 10
)

// NetworkManager is a connection to NetworkManager on the system bus.
type NetworkManager struct {
	conn *dbus.Conn
	obj  dbus.BusObject
}

// ConnectNetworkManager connects to NetworkManager on the bus at busAddr.
// It returns nil and no error when there is no bus or NetworkManager is not
// on it: nothing to keep away from the NIC.
func ConnectNetworkManager(ctx context.Context, busAddr string) (*NetworkManager, error) {
	conn, err := dbus.Connect(busAddr, dbus.WithContext(ctx))
	if err != nil {
		return nil, nil // no system bus: no NetworkManager either
	}
	var running bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, nmService).Store(&running); err != nil {
		conn.Close()
		return nil, fmt.Errorf("asking the system bus (%s) whether NetworkManager runs: %w", busAddr, err)
	}
	if !running {
		conn.Close()
		return nil, nil
	}
	return &NetworkManager{conn: conn, obj: conn.Object(nmService, nmPath)}, nil
}

// Close ends the connection (nil-safe).
func (n *NetworkManager) Close() {
	if n != nil {
		n.conn.Close()
	}
}

// device is iface's object path; ok is false when NetworkManager does not
// know iface.
func (n *NetworkManager) device(ctx context.Context, iface string) (dbus.ObjectPath, bool, error) {
	var p dbus.ObjectPath
	err := n.obj.CallWithContext(ctx, nmService+".GetDeviceByIpIface", 0, iface).Store(&p)
	if dbusErrorName(err) == nmUnknownIf {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("asking NetworkManager for device %s: %w", iface, err)
	}
	return p, true, nil
}

// Managed reports whether NetworkManager manages iface (known is false
// when it does not know iface at all).
func (n *NetworkManager) Managed(ctx context.Context, iface string) (managed, known bool, err error) {
	p, known, err := n.device(ctx, iface)
	if err != nil || !known {
		return false, known, err
	}
	v, err := n.conn.Object(nmService, p).GetProperty(nmDevice + ".Managed")
	if err != nil {
		return false, true, fmt.Errorf("reading NetworkManager's Managed property of %s: %w", iface, err)
	}
	m, ok := v.Value().(bool)
	if !ok {
		return false, true, fmt.Errorf("NetworkManager's Managed property of %s is %s, not a boolean", iface, v.Signature())
	}
	return m, true, nil
}

// SetManaged sets whether NetworkManager manages iface (its Device.Managed
// property: unmanaging keeps the device's addresses and routes as they
// are, and NetworkManager keeps the choice in /run across its restarts).
// A device NetworkManager does not know is left alone (known false).
func (n *NetworkManager) SetManaged(ctx context.Context, iface string, managed bool) (known bool, err error) {
	p, known, err := n.device(ctx, iface)
	if err != nil || !known {
		return known, err
	}
	dev := n.conn.Object(nmService, p)
	if err := dev.SetProperty(nmDevice+".Managed", dbus.MakeVariant(managed)); err != nil {
		return true, fmt.Errorf("setting NetworkManager's Managed property of %s to %t: %w", iface, managed, err)
	}
	if managed {
		return true, nil // NetworkManager activates its profile in its own time
	}
	v, err := dev.GetProperty(nmDevice + ".State")
	if err != nil {
		return true, fmt.Errorf("reading NetworkManager's State of %s: %w", iface, err)
	}
	if s, _ := v.Value().(uint32); s != deviceStateUnmanaged {
		return true, fmt.Errorf("NetworkManager still manages %s (device state %d after Managed=false)", iface, s)
	}
	return true, nil
}

// dbusErrorName is the D-Bus error name err carries ("" when none).
func dbusErrorName(err error) string {
	var v dbus.Error
	if errors.As(err, &v) {
		return v.Name
	}
	var p *dbus.Error
	if errors.As(err, &p) {
		return p.Name
	}
	return ""
}

// SystemBus is the system bus's address (DBUS_SYSTEM_BUS_ADDRESS, else
// the standard socket).
func SystemBus() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return "unix:path=/run/dbus/system_bus_socket"
}

// LeaveOnceKnown is SetManaged(iface, false) for a device that has just
// appeared: NetworkManager learns of it a moment later (its DeviceAdded
// signal), so it waits for that until ctx ends.
func (n *NetworkManager) LeaveOnceKnown(ctx context.Context, iface string) error {
	added := make(chan *dbus.Signal, 16)
	n.conn.Signal(added)
	defer n.conn.RemoveSignal(added)
	match := []dbus.MatchOption{dbus.WithMatchObjectPath(nmPath), dbus.WithMatchInterface(nmService), dbus.WithMatchMember("DeviceAdded")}
	if err := n.conn.AddMatchSignalContext(ctx, match...); err != nil {
		return fmt.Errorf("following NetworkManager's new devices: %w", err)
	}
	defer func() { _ = n.conn.RemoveMatchSignal(match...) }()
	for {
		known, err := n.SetManaged(ctx, iface, false)
		if err != nil || known {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("NetworkManager has not seen %s: %w", iface, ctx.Err())
		case <-added:
		}
	}
}

package hostcheck

import (
	"context"
	"fmt"
	"os"

	"github.com/godbus/dbus/v5"
)

// FirewalldBusName is the name firewalld owns on the system bus.
const FirewalldBusName = "org.fedoraproject.FirewallD1"

// SystemBusAddress is the system bus socket address.
func SystemBusAddress() string {
	if a := os.Getenv("DBUS_SYSTEM_BUS_ADDRESS"); a != "" {
		return a
	}
	return "unix:path=/run/dbus/system_bus_socket"
}

// nameHasOwner asks the bus at addr whether name has an owner
// (org.freedesktop.DBus.NameHasOwner). ctx bounds the whole exchange: the
// connection is closed when it ends.
func nameHasOwner(ctx context.Context, addr, name string) (bool, error) {
	conn, err := dbus.Connect(addr, dbus.WithContext(ctx))
	if err != nil {
		return false, fmt.Errorf("connecting to the D-Bus bus at %s: %w", addr, err)
	}
	defer conn.Close()
	var owned bool
	if err := conn.BusObject().CallWithContext(ctx, "org.freedesktop.DBus.NameHasOwner", 0, name).Store(&owned); err != nil {
		return false, fmt.Errorf("asking the D-Bus bus at %s whether %s has an owner: %w", addr, name, err)
	}
	return owned, nil
}

package hostcheck

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/hostnetmgr"
)

// UnderlayNIC is a NIC an underlay network has bridged, with what the
// host's network managers do about it now.
type UnderlayNIC struct {
	hostnetmgr.Bridged
	// NMManaged: NetworkManager manages the NIC (NMErr: it could not be
	// asked).
	NMManaged bool
	NMErr     error
	// Findings are what else would take the NIC back or stop working
	// (hostnetmgr.Host.Inspect).
	Findings []hostnetmgr.Finding
}

// CheckUnderlayHost is one check per bridged NIC (underlay-host:<nic>):
// fail when NetworkManager manages it again (it may activate its profile
// on the NIC and take the host's addresses back from the bridge), warn
// for each finding, pass otherwise. No bridged NIC: no check.
func CheckUnderlayHost(nics []UnderlayNIC, err error) []Check {
	if err != nil {
		return []Check{{Name: "underlay-host", Status: Warn, Found: "cannot read the underlay journals: " + err.Error(), Fix: "run netctl doctor as root on the node"}}
	}
	var out []Check
	for _, n := range nics {
		c := Check{Name: "underlay-host:" + n.NIC, Status: Pass,
			Found: fmt.Sprintf("%s is bridged into %s; no network manager on this host claims it", n.NIC, n.Bridge)}
		var problems, fixes []string
		switch {
		case n.NMErr != nil:
			problems = append(problems, "cannot ask NetworkManager about "+n.NIC+": "+n.NMErr.Error())
			fixes = append(fixes, "check NetworkManager's D-Bus API (nmcli device status)")
		case n.NMManaged:
			c.Status = Fail
			problems = append(problems, fmt.Sprintf("NetworkManager manages %s again, a port of %s: it may activate its profile on %s and take the host's addresses from the bridge", n.NIC, n.Bridge, n.NIC))
			fixes = append(fixes, "nmcli device set "+n.NIC+" managed no (ovnhost does this when it bridges the NIC; something set it back)")
		}
		for _, f := range n.Findings {
			problems = append(problems, f.Manager+": "+f.Problem)
			fixes = append(fixes, f.Fix)
		}
		if len(problems) > 0 {
			if c.Status == Pass {
				c.Status = Warn
			}
			c.Found, c.Fix = strings.Join(problems, "; "), strings.Join(fixes, "; ")
		}
		out = append(out, c)
	}
	return out
}

// UnderlayNICs reads the NICs bridged on this host (the journals in
// journalDir) and asks NetworkManager, systemd-networkd, netplan and
// keepalived about each.
func (*DoctorHost) UnderlayNICs(journalDir string) ([]UnderlayNIC, error) {
	bridged, err := hostnetmgr.BridgedNICs(journalDir)
	if err != nil || len(bridged) == 0 {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	nm, nmErr := hostnetmgr.ConnectNetworkManager(ctx, hostnetmgr.SystemBus())
	defer nm.Close()
	var out []UnderlayNIC
	for _, b := range bridged {
		u := UnderlayNIC{Bridged: b, NMErr: nmErr}
		if nm != nil {
			u.NMManaged, _, u.NMErr = nm.Managed(ctx, b.NIC)
		}
		idx := 0
		if l, err := netlink.LinkByName(b.NIC); err == nil {
			idx = l.Attrs().Index
		}
		var leases []hostnetmgr.Lease
		if l, err := netlink.LinkByName(b.Bridge); err == nil {
			leases = hostnetmgr.LeasesOf(l)
		}
		u.Findings = hostnetmgr.Host{Root: "/"}.Inspect(b.NIC, idx, b.Bridge, leases)
		out = append(out, u)
	}
	return out, nil
}

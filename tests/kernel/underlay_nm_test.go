package kernel

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/netmanager"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelUnderlayBondManagedByNetworkManager: the provider NIC is a
// bond (active-backup over eth0) that Debian's NetworkManager creates and
// configures from its profiles, as on many servers. ovnhost bridges bond0
// on the kernel datapath with NetworkManager told to leave it alone; a
// restart of NetworkManager meanwhile does not take bond0 back; the stop
// gives bond0 back and NetworkManager activates it again. The node pings
// its neighbour every 10 ms throughout. Measured: 1-4 lost across the move
// and the restart (more than 25 fails: underlay_test.go says why); about 50 (0.5 s) across the
// give-back, NetworkManager's doing: re-activating its profile on a bond
// that has a port, it fails once setting the bond's mode ("the bond device
// has slaves"), releases eth0 and starts again (more than 100 fails).
func TestKernelUnderlayBondManagedByNetworkManager(t *testing.T) {
	b := programs(t)
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, Modules: append(slices.Clone(qemuvm.DatapathModules), "bonding"), NICs: []qemuvm.NIC{link.End(0, "")}},
		qemuvm.Config{Name: "peer", Memory: 512, Modules: []string{}, NICs: []qemuvm.NIC{link.End(1, "192.168.102.2/24")}})
	a := vms[0]
	// Loading the bonding module made a bond0 of its own; NetworkManager
	// creates the one its profile describes, as on a server booting.
	a.Run(t, "ip", "link", "del", "bond0")
	nm := netmanager.StartInVM(t, a, map[string]string{
		"bond0.nmconnection": "[connection]\nid=bond0\ntype=bond\ninterface-name=bond0\nautoconnect=true\n[bond]\nmode=active-backup\nmiimon=100\n" +
			"[ipv4]\nmethod=manual\naddress1=192.168.102.1/24\n[ipv6]\nmethod=disabled\n",
		"bond0-port.nmconnection": "[connection]\nid=bond0-port\ntype=ethernet\ninterface-name=eth0\nautoconnect=true\nmaster=bond0\nslave-type=bond\n",
	})
	if err := nm.WaitLog("device (bond0): Activation: successful", time.Minute); err != nil {
		t.Fatalf("NetworkManager did not bring bond0 up: %v", err)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", "192.168.102.2"}, Timeout: time.Minute})
	if s, _ := nm.DeviceState(t, "bond0"); s != netmanager.StateActivated {
		t.Fatalf("NetworkManager's bond0 is in state %d, want %d", s, netmanager.StateActivated)
	}

	pinger := startPinger(t, a, "/tmp/ping.log", "192.168.102.2")
	n := startNode(t, a, b, []string{"IFACE=bond0", "DBUS_SYSTEM_BUS_ADDRESS=" + nm.Bus}, "--provider-networks=physnet1:bond0")
	if err := n.proc.WaitLog("underlay: NIC bridged, its configuration moved to the bridge", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := n.proc.WaitLog("underlay: NetworkManager no longer manages the NIC while it is bridged", time.Second); err != nil {
		t.Error(err)
	}
	if dp := a.Run(t, "ovs-dpctl", "show"); !strings.Contains(dp, ": bond0") {
		t.Fatalf("bond0 is not a port of the kernel datapath:\n%s", dp)
	}
	if s, _ := nm.DeviceState(t, "bond0"); s != netmanager.StateUnmanaged {
		t.Fatalf("NetworkManager's bond0 while bridged: state %d, want %d (unmanaged)", s, netmanager.StateUnmanaged)
	}

	// NetworkManager restarts while bond0 is bridged: it stays off bond0.
	nm.Stop(t)
	nm.Start(t)
	if err := nm.WaitLog("manager: (bond0): new Bond device", time.Minute); err != nil {
		t.Fatal(err)
	}
	if s, _ := nm.DeviceState(t, "bond0"); s != netmanager.StateUnmanaged {
		t.Fatalf("NetworkManager's bond0 after its restart: state %d, want %d (unmanaged)", s, netmanager.StateUnmanaged)
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "bond0"); strings.Contains(addrs, "inet ") {
		t.Fatalf("bond0 has an address again after NetworkManager's restart:\n%s", addrs)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.102.2"}, Timeout: time.Minute})
	sent, lost := pingLoss(t, a, pinger)
	t.Logf("kernel datapath, bond0 under NetworkManager: ping every 10 ms across the move and a NetworkManager restart: %d sent, %d lost", sent, lost)
	if lost > moveLimit {
		t.Errorf("the host lost %d of %d pings across the move", lost, sent)
	}

	pinger = startPinger(t, a, "/tmp/ping-back.log", "192.168.102.2")
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	if err := nm.WaitLog("device (bond0): Activation: successful", time.Minute); err != nil {
		t.Fatalf("NetworkManager did not take bond0 back: %v", err)
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "bond0"); !strings.Contains(addrs, "192.168.102.1/24") {
		t.Fatalf("bond0 lacks its address after the give-back:\n%s", addrs)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.102.2"}, Timeout: time.Minute})
	sent, lost = pingLoss(t, a, pinger)
	t.Logf("kernel datapath, bond0 under NetworkManager: ping every 10 ms across the give-back: %d sent, %d lost (NetworkManager's re-activation of its bond profile)", sent, lost)
	if lost > 100 {
		t.Errorf("the host lost %d of %d pings across the give-back", lost, sent)
	}
}

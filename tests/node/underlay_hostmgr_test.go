package node_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/tests/harness/netmanager"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The provider NIC is NetworkManager's (Debian's NetworkManager on a
// private bus, configuring eth1 from a keyfile profile): ovnhost makes it
// leave eth1 alone before the move, so a restart of NetworkManager while
// eth1 is bridged does not put the address back on eth1 (Kube-OVN PR
// 2944's fight); the stop gives eth1 back to NetworkManager, which
// activates its profile again. A ping at 10 ms through it all loses
// nothing.
func TestUnderlayNICManagedByNetworkManager(t *testing.T) {
	n := newNode(t)
	t.Cleanup(func() { killProcessesUnder(n.Dir) })
	run(t, "ip", "netns", "exec", n.NS, "sysctl", "-qw", "net.ipv6.conf.default.addr_gen_mode=1")
	gw := newNetns(t, "ohg")
	run(t, "ip", "link", "add", "eth1", "netns", n.NS, "type", "veth", "peer", "name", "gw0", "netns", gw)
	run(t, "ip", "-n", gw, "addr", "add", "192.168.213.1/24", "dev", "gw0")
	run(t, "ip", "-n", gw, "link", "set", "gw0", "up")
	nm := netmanager.Start(t, n.NS, map[string]string{"eth1.nmconnection": `[connection]
id=uplink
type=ethernet
interface-name=eth1
autoconnect=true
[ipv4]
method=manual
address1=192.168.213.2/24,192.168.213.1
[ipv6]
method=disabled
`})
	if err := nm.WaitState("eth1", netmanager.StateActivated, 30*time.Second); err != nil {
		t.Fatalf("NetworkManager did not activate eth1: %v\n%s", err, nm.Log())
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "-4", "addr", "show", "dev", "eth1"); !strings.Contains(addrs, "192.168.213.2/24") {
		t.Fatalf("NetworkManager did not configure eth1:\n%s", addrs)
	}

	pings := startPinger(t, n.NS, "192.168.213.1")
	n.Env = append(n.Env, "DBUS_SYSTEM_BUS_ADDRESS="+nm.Bus)
	n.Start("--provider-networks=physnet1:eth1")
	if err := n.WaitLog("underlay: NIC bridged, its configuration moved to the bridge", 5*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, n.LogTail())
	}
	if err := n.WaitLog("underlay: NetworkManager no longer manages the NIC while it is bridged", time.Second); err != nil {
		t.Errorf("%v\n%s", err, n.LogTail())
	}
	if s, managed, known, err := nm.DeviceState("eth1"); err != nil || !known || managed || s != netmanager.StateUnmanaged {
		t.Fatalf("NetworkManager's eth1 while bridged: state %d managed %t known %t %v", s, managed, known, err)
	}
	if _, managed, _, err := nm.DeviceState("br-physnet1"); err != nil || managed {
		t.Errorf("NetworkManager manages br-physnet1: %t %v", managed, err)
	}
	mark := n.Path("ovs-db", "ovnhost-underlay", "eth1.networkmanager")
	if _, err := os.Stat(mark); err != nil {
		t.Errorf("no record that eth1 goes back to NetworkManager: %v", err)
	}

	// NetworkManager restarts while eth1 is bridged: it keeps off eth1
	// (without ovnhost's word it activates its profile on eth1 again,
	// and the state below never comes).
	nm.Stop()
	nm.Start()
	if err := nm.WaitState("eth1", netmanager.StateUnmanaged, 20*time.Second); err != nil {
		t.Fatalf("after NetworkManager's restart: %v\n%s", err, nm.Log())
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "-4", "addr", "show", "dev", "eth1"); strings.Contains(addrs, "inet ") {
		t.Fatalf("NetworkManager put an address back on eth1 after its restart:\n%s", addrs)
	}
	if err := ping(n.NS, "192.168.213.1", 3); err != nil {
		t.Fatalf("after NetworkManager's restart: %v", err)
	}
	// netctl doctor on the node sees eth1 bridged and left alone.
	cmd := exec.Command("ip", append([]string{"netns", "exec", n.NS, testenv.Binary(t, "netctl"), "doctor", "--output=json"}, n.Args...)...)
	cmd.Env = append(os.Environ(), "DBUS_SYSTEM_BUS_ADDRESS="+nm.Bus)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, runErr := cmd.Output()
	var rep struct{ Checks []hostcheck.Check }
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("netctl doctor: %v (exit: %v)\n%s\n%s", err, runErr, out, stderr.String())
	}
	found := false
	for _, c := range rep.Checks {
		if c.Name == "underlay-host:eth1" {
			found = true
			if c.Status != hostcheck.Pass || !strings.Contains(c.Found, "eth1 is bridged into br-physnet1") {
				t.Errorf("doctor's underlay-host:eth1: %+v", c)
			}
		}
	}
	if !found {
		t.Errorf("doctor has no underlay-host:eth1 check:\n%s", out)
	}

	if code := n.Stop(); code != 0 {
		t.Fatalf("exit %d\n%s", code, n.LogTail())
	}
	if err := n.WaitLog("underlay: NIC given back to NetworkManager", time.Second); err != nil {
		t.Errorf("%v\n%s", err, n.LogTail())
	}
	if err := nm.WaitState("eth1", netmanager.StateActivated, 30*time.Second); err != nil {
		t.Fatalf("NetworkManager did not take eth1 back: %v\n%s", err, nm.Log())
	}
	if addrs := run(t, "ip", "-n", n.NS, "-o", "-4", "addr", "show", "dev", "eth1"); !strings.Contains(addrs, "192.168.213.2/24") {
		t.Fatalf("eth1 lacks its address after the give-back:\n%s", addrs)
	}
	if _, err := os.Stat(mark); err == nil {
		t.Errorf("%s left after the give-back", filepath.Base(mark))
	}
	sent, lost := pings.stop(t)
	t.Logf("ping 192.168.213.1 every 10 ms across the move, a NetworkManager restart and the give-back: %d sent, lost: %s", sent, orNone(lost))
	if lost != "" {
		t.Errorf("ping: %s", lost)
	}
}

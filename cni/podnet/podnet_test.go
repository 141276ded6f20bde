package podnet_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/tests/testenv"
	"github.com/vishvananda/netlink"
)

// Every test runs the "host" side inside a node netns of its own, so the real
// host's interfaces are never touched.

func podConfig(podNS string) podnet.Config {
	return podnet.Config{
		NetNS:         podNS,
		IfName:        "eth0",
		HostIfName:    podnet.HostIfName("c1", "eth0"),
		MAC:           net.HardwareAddr{0x0a, 0x58, 0x0a, 0x63, 0x00, 0x02},
		MTU:           1400,
		Addrs:         []netip.Prefix{netip.MustParsePrefix("10.99.0.2/24"), netip.MustParsePrefix("fd00:99::2/64")},
		Routes:        []podnet.Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.99.0.1")}, {Dst: netip.MustParsePrefix("192.168.250.0/24"), GW: netip.MustParseAddr("10.99.0.1")}},
		TxChecksumOff: true,
	}
}

func nsName(path string) string { return filepath.Base(path) }

func TestSetupPingCheckTeardown(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireCommands(t, "ping", "ip")
	node := podnettest.NewNetNS(t, "pn-node")
	pod := podnettest.NewNetNS(t, "pn-pod")
	cfg := podConfig(pod)
	err := podnet.InNetNSPath(node, func() error {
		res, err := podnet.Setup(cfg)
		if err != nil {
			return err
		}
		if res.HostIfName != cfg.HostIfName || res.PodIfIndex == 0 {
			t.Errorf("unexpected result %+v", res)
		}
		l, err := netlink.LinkByName(cfg.HostIfName)
		if err != nil {
			return err
		}
		return netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 99, 0, 1), Mask: net.CIDRMask(24, 32)}})
	})
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if out, err := exec.Command("ip", "netns", "exec", nsName(pod), "ping", "-c1", "-W2", "10.99.0.1").CombinedOutput(); err != nil {
		t.Fatalf("ping from pod to host end: %v\n%s", err, out)
	}
	err = podnet.InNetNSPath(pod, func() error {
		on, err := podnet.TxChecksum("eth0")
		if err != nil {
			return err
		}
		if on {
			t.Errorf("tx checksum offload still on in the pod")
		}
		for _, k := range []string{"accept_dad", "accept_ra"} {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/eth0/" + k)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "0" {
				t.Errorf("%s = %s, want 0", k, b)
			}
		}
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		if l.Attrs().MTU != 1400 || l.Attrs().HardwareAddr.String() != cfg.MAC.String() {
			t.Errorf("pod end MTU %d MAC %s", l.Attrs().MTU, l.Attrs().HardwareAddr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// CHECK passes, then detects a removed address.
	if err := podnet.InNetNSPath(node, func() error { return podnet.Check(cfg) }); err != nil {
		t.Fatalf("check of a good interface: %v", err)
	}
	if out, err := exec.Command("ip", "-n", nsName(pod), "addr", "del", "10.99.0.2/24", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("remove address: %v %s", err, out)
	}
	err = podnet.InNetNSPath(node, func() error { return podnet.Check(cfg) })
	if err == nil || !strings.Contains(err.Error(), "address 10.99.0.2/24 missing") {
		t.Fatalf("check after removing the address: %v", err)
	}
	for i := 0; i < 2; i++ {
		if err := podnet.InNetNSPath(node, func() error { return podnet.Teardown(cfg.HostIfName, pod, "eth0") }); err != nil {
			t.Fatalf("teardown #%d: %v", i+1, err)
		}
	}
	_ = podnet.InNetNSPath(node, func() error {
		if _, err := netlink.LinkByName(cfg.HostIfName); err == nil {
			t.Errorf("host end still exists after teardown")
		}
		return nil
	})
	_ = podnet.InNetNSPath(pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Errorf("pod end still exists after teardown")
		}
		return nil
	})
}

func TestSetupFailureRollsBack(t *testing.T) {
	testenv.RequireRoot(t)
	node := podnettest.NewNetNS(t, "pn-node")
	pod := podnettest.NewNetNS(t, "pn-pod")
	cfg := podConfig(pod)
	// A route whose gateway is unreachable makes the last step fail.
	cfg.Routes = append(cfg.Routes, podnet.Route{Dst: netip.MustParsePrefix("172.31.0.0/16"), GW: netip.MustParseAddr("192.0.2.1")})
	err := podnet.InNetNSPath(node, func() error { _, err := podnet.Setup(cfg); return err })
	if err == nil || !strings.Contains(err.Error(), "add route 172.31.0.0/16 via 192.0.2.1 on eth0") {
		t.Fatalf("want a route error naming the route, got %v", err)
	}
	_ = podnet.InNetNSPath(node, func() error {
		if _, err := netlink.LinkByName(cfg.HostIfName); err == nil {
			t.Errorf("host end left behind after a failed setup")
		}
		return nil
	})
	_ = podnet.InNetNSPath(pod, func() error {
		if _, err := netlink.LinkByName("eth0"); err == nil {
			t.Errorf("pod end left behind after a failed setup")
		}
		return nil
	})
	// Name already taken in the pod: precise error, nothing created.
	if err := podnet.InNetNSPath(pod, func() error {
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", TxQLen: -1}, PeerName: "other0", PeerTxQLen: -1})
	}); err != nil {
		t.Fatalf("occupy eth0: %v", err)
	}
	cfg = podConfig(pod)
	err = podnet.InNetNSPath(node, func() error { _, err := podnet.Setup(cfg); return err })
	if err == nil || !strings.Contains(err.Error(), `interface "eth0" already exists`) {
		t.Fatalf("want an exists error, got %v", err)
	}
}

func TestTeardownAfterNetnsGone(t *testing.T) {
	testenv.RequireRoot(t)
	node := podnettest.NewNetNS(t, "pn-node")
	name := "pn-gone-" + filepath.Base(node)
	pod, err := podnettest.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := podConfig(pod)
	if err := podnet.InNetNSPath(node, func() error { _, err := podnet.Setup(cfg); return err }); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	err = podnet.InNetNSPath(node, func() error {
		if err := podnet.Teardown(cfg.HostIfName, pod, "eth0"); err != nil {
			return err
		}
		if _, err := netlink.LinkByName(cfg.HostIfName); err == nil {
			t.Errorf("host end still exists")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("teardown after the netns is gone: %v", err)
	}
}

func TestValidate(t *testing.T) {
	cfg := podConfig("/run/netns/x")
	cfg.IfName = "this-name-is-too-long"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "not a valid Linux interface name") {
		t.Fatalf("got %v", err)
	}
	cfg = podConfig("")
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "CNI_NETNS") {
		t.Fatalf("got %v", err)
	}
	if a, b := podnet.HostIfName("abc", "eth0"), podnet.HostIfName("abc", "eth1"); a == b || len(a) > 15 {
		t.Fatalf("host names %q %q", a, b)
	}
}

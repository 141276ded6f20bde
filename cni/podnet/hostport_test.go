package podnet_test

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// A host port (ovn0) takes no router advertisements and does no DAD: its
// IPv6 address is usable at once and no RA gives the host a route into
// the cluster.
func TestConfigureHostPortIPv6(t *testing.T) {
	testenv.RequireRoot(t)
	node := podnettest.NewNetNS(t, "pn-hp")
	err := podnet.InNetNSPath(node, func() error {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "hp0"}, PeerName: "hp1"}); err != nil {
			return err
		}
		for _, k := range []string{"accept_ra", "accept_dad"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/hp0/"+k, []byte("1"), 0o644); err != nil {
				return err
			}
		}
		addrs := []netip.Prefix{netip.MustParsePrefix("100.64.0.2/16"), netip.MustParsePrefix("fd00:100:64::2/112")}
		if err := podnet.ConfigureHostPort(podnet.HostPort{Name: "hp0", Addrs: addrs}); err != nil {
			return err
		}
		for _, k := range []string{"accept_ra", "accept_dad"} {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/hp0/" + k)
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "0" {
				t.Errorf("net.ipv6.conf.hp0.%s = %s, want 0", k, strings.TrimSpace(string(b)))
			}
		}
		l, err := netlink.LinkByName("hp0")
		if err != nil {
			return err
		}
		got, err := netlink.AddrList(l, netlink.FAMILY_V6)
		if err != nil {
			return err
		}
		for _, a := range got {
			if a.IP.String() == "fd00:100:64::2" {
				if a.Flags&unix.IFA_F_TENTATIVE != 0 {
					t.Errorf("fd00:100:64::2 is tentative (DAD runs): flags %#x", a.Flags)
				}
				return nil
			}
		}
		t.Errorf("hp0 lacks fd00:100:64::2: %v", got)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

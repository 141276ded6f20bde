package preflight_test

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// The node's IPv6 against the cluster's, on real interfaces and sysctls
// of a throwaway network namespace (issue 25's bad input): an IPv6-only
// cluster (SVC_CIDR) whose tunnel interface has only an IPv4 address
// fails preflight naming the interface; with an IPv6 address it passes;
// a dual-stack cluster fails once IPv6 is switched off by sysctl.
func TestIPv6ClusterAgainstTheNodesIPv6(t *testing.T) {
	testenv.RequireRoot(t)
	ns := newNS(t)
	ipv6Check := func(env ...string) hostcheck.Check {
		var c hostcheck.Check
		inNS(t, ns, func() {
			cfg := loadConfig(t, append([]string{"IFACE=v6a"}, env...)...)
			r := hostcheck.PreflightWith(context.Background(), cfg.HostSettings(), hostcheck.NewHost(), hostcheck.Options{NoModuleLoad: true})
			c = findCheck(t, r.Checks, "ipv6")
		})
		return c
	}
	inNS(t, ns, func() {
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "v6a"}, PeerName: "v6b"}); err != nil {
			t.Fatal(err)
		}
		l, err := netlink.LinkByName("v6a")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("192.0.2.5"), Mask: net.CIDRMask(24, 32)}}); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	})
	c := ipv6Check("SVC_CIDR=fd00:10:96::/112")
	if c.Status != hostcheck.Fail || !strings.Contains(c.Found, "IPv6-only") || !strings.Contains(c.Found, "v6a has no global IPv6 address") {
		t.Fatalf("IPv6-only cluster, v6a with IPv4 only: %+v", c)
	}
	inNS(t, ns, func() {
		l, _ := netlink.LinkByName("v6a")
		if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("2001:db8::5"), Mask: net.CIDRMask(64, 128)}, Flags: unix.IFA_F_NODAD}); err != nil {
			t.Fatal(err)
		}
	})
	if c := ipv6Check("SVC_CIDR=fd00:10:96::/112"); c.Status != hostcheck.Pass || !strings.Contains(c.Found, "v6a has 2001:db8::5") {
		t.Fatalf("IPv6-only cluster, v6a with 2001:db8::5: %+v", c)
	}
	inNS(t, ns, func() {
		if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644); err != nil {
			t.Fatal(err)
		}
	})
	if c := ipv6Check("SVC_CIDR=10.96.0.0/12,fd00:10:96::/112"); c.Status != hostcheck.Fail || !strings.Contains(c.Found, "net.ipv6.conf.all.disable_ipv6=1 and the cluster is dual-stack") ||
		!strings.Contains(c.Fix, "sysctl -w net.ipv6.conf.all.disable_ipv6=0") {
		t.Fatalf("dual-stack cluster, IPv6 off by sysctl: %+v", c)
	}
	if c := ipv6Check(); c.Status != hostcheck.Pass {
		t.Fatalf("IPv4 cluster (the default SVC_CIDR), IPv6 off by sysctl: %+v", c)
	}
}

package cni_test

import (
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/cni/server"
	"github.com/ovnhost/ovnhost/controller/kube"
)

// A dual-stack join subnet and default subnet (issue 25), as the
// controller runs them with --node-switch-cidr and --default-cidr of two
// families: ovn0 gets an address of each family (usable at once, no DAD,
// no router advertisements taken), routes each family's pod CIDR through
// that family's join gateway, the node reaches a pod over both families
// and the pod reaches the node's IPv6 address on ovn0; the pod's default
// route in each family is its gateway of that family, which answers.
func TestKubeDualStackNodePort(t *testing.T) {
	k := startKubeNodeWith(t, 60*time.Second, func(c *kube.Config) {
		c.JoinCIDR = "100.64.0.0/16,fd00:100:64::/112"
		c.DefaultCIDR = "10.16.0.0/16,fd00:10:16::/64"
	})
	p := k.addPod(t, "ds", nil)
	var r addResult
	if err := json.Unmarshal(p.raw, &r); err != nil || len(r.IPs) != 2 {
		t.Fatalf("dual-stack pod's result %s: %v", p.raw, err)
	}
	v6 := strings.Split(r.IPs[1].Address, "/")[0]
	if !strings.HasPrefix(v6, "fd00:10:16::") || !strings.HasPrefix(p.ip, "10.16.") {
		t.Fatalf("pod addresses %s and %s, want one of 10.16.0.0/16 and one of fd00:10:16::/64", p.ip, v6)
	}
	// The pod's default route in each family goes to that family's gateway.
	for fam, gw := range map[string]string{"-4": "10.16.0.1", "-6": "fd00:10:16::1"} {
		out, err := exec.Command("ip", "-n", filepath.Base(p.netns), fam, "route", "show", "default").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "via "+gw+" ") {
			t.Errorf("the pod's %s default route is not via %s: %s %v", fam, gw, out, err)
		}
	}
	if err := ping(t, p.netns, "fd00:10:16::1"); err != nil {
		t.Errorf("the pod to its IPv6 gateway (the cluster router): %v", err)
	}
	waitOVN0Route(t, "10.16.0.0/16")
	waitOVN0Route(t, "fd00:10:16::/64")
	l, err := netlink.LinkByName("ovn0")
	if err != nil {
		t.Fatal(err)
	}
	addrs, _ := netlink.AddrList(l, netlink.FAMILY_ALL)
	var ovn0v4, ovn0v6 string
	for _, a := range addrs {
		switch {
		case a.IP.To4() != nil && strings.HasPrefix(a.IP.String(), "100.64."):
			ovn0v4 = a.IP.String()
		case strings.HasPrefix(a.IP.String(), "fd00:100:64::"):
			ovn0v6 = a.IP.String()
			if a.Flags&(unix.IFA_F_TENTATIVE|unix.IFA_F_DADFAILED) != 0 {
				t.Errorf("ovn0's %s has flags %#x: DAD ran", a.IPNet, a.Flags)
			}
		}
	}
	if ovn0v4 == "" || ovn0v6 == "" {
		t.Fatalf("ovn0 lacks an address of each join family: %v", addrs)
	}
	rs, _ := netlink.RouteList(l, netlink.FAMILY_V6)
	for _, rt := range rs {
		if rt.Dst != nil && rt.Dst.String() == "fd00:10:16::/64" && (rt.Gw == nil || rt.Gw.String() != "fd00:100:64::1") {
			t.Errorf("ovn0's route to fd00:10:16::/64 is via %v, want the IPv6 join gateway fd00:100:64::1", rt.Gw)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv6/conf/ovn0/accept_ra"); err != nil || strings.TrimSpace(string(b)) != "0" {
		t.Errorf("ovn0 accept_ra = %q (%v), want 0", b, err)
	}
	for _, ip := range []string{p.ip, v6} {
		if out, err := exec.Command("ping", "-c", "3", "-i", "0.2", "-W", "2", ip).CombinedOutput(); err != nil {
			t.Errorf("the node to its pod's %s: %v\n%s", ip, err, out)
		}
	}
	if err := ping(t, p.netns, ovn0v6); err != nil {
		t.Errorf("the pod to the node's ovn0 %s: %v", ovn0v6, err)
	}
	addr := net.JoinHostPort(v6, "8091")
	ln := listen(t, p.netns, addr)
	transfer(t, "", ln, addr, 256<<10)
	if out := k.del(t, p); out.Code != 0 {
		t.Fatal(out.Err.Msg)
	}
}

// A standalone node (no Kubernetes: podman, nerdctl) with dual-stack
// ranges (--default-cidr 10.16.0.0/16,fd00:10:16::/64, --node-switch-cidr
// with an IPv6 join range): each pod gets an address of each family, pods
// reach each other over IPv6, and the node reaches a pod's IPv6 address
// through ovn0. Without the settings every pod is IPv4 only (the other
// standalone tests).
func TestStandaloneDualStackPods(t *testing.T) {
	n := startNode(t, nodeOpts{beforeServer: func(cfg *server.Options) {
		cfg.Node.StandaloneCIDRs = []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16"), netip.MustParsePrefix("fd00:10:16::/64")}
		cfg.Node.StandaloneJoinCIDRs = []netip.Prefix{netip.MustParsePrefix("100.64.0.0/16"), netip.MustParsePrefix("fd00:100:64::/112")}
	}})
	var v6 []string
	var pods []*pod
	for _, name := range []string{"a6", "b6"} {
		p := n.add(t, name, "")
		var r addResult
		if err := json.Unmarshal(p.raw, &r); err != nil || len(r.IPs) != 2 {
			t.Fatalf("pod %s's result %s: want two addresses (%v)", name, p.raw, err)
		}
		a := strings.Split(r.IPs[1].Address, "/")[0]
		if !strings.HasPrefix(a, "fd00:10:16::") || !strings.HasPrefix(p.ip, "10.16.") {
			t.Fatalf("pod %s's addresses %s and %s: want one of 10.16.0.0/16 and one of fd00:10:16::/64", name, p.ip, a)
		}
		v6, pods = append(v6, a), append(pods, p)
	}
	if err := ping(t, pods[0].netns, v6[1]); err != nil {
		t.Errorf("pod a6 to pod b6 over IPv6: %v", err)
	}
	waitOVN0Route(t, "fd00:10:16::/64")
	ln := listen(t, pods[1].netns, net.JoinHostPort(v6[1], "80"))
	transfer(t, "", ln, net.JoinHostPort(v6[1], "80"), 64<<10)
	for _, p := range pods {
		if out := n.del(t, p); out.Code != 0 {
			t.Fatal(out.Err.Msg)
		}
	}
}

package podnet_test

import (
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// A real host has its own eth0 (a NIC, or any device). CHECK of a pod
// whose interface is also eth0 must compare the veth ends across the two
// namespaces, not ask ethtool about the host's eth0 (issue 12: "veth peer
// is ifindex 0").
func TestCheckVethPeerWithHostEth0(t *testing.T) {
	testenv.RequireRoot(t)
	node := podnettest.NewNetNS(t, "pn-node")
	pod := podnettest.NewNetNS(t, "pn-pod")
	cfg := podConfig(pod)
	cfg.TxChecksumOff = false
	err := podnet.InNetNSPath(node, func() error {
		// (a veth here: the dummy module may be missing)
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0"}, PeerName: "eth0-peer"}); err != nil {
			return err
		}
		if _, err := podnet.Setup(cfg); err != nil {
			return err
		}
		// Another veth pair on the host: not the pod's peer.
		return netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "ovhother"}, PeerName: "ovhother-p"})
	})
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if err := podnet.InNetNSPath(node, func() error { return podnet.Check(cfg) }); err != nil {
		t.Fatalf("check of a good interface on a host with its own eth0: %v", err)
	}
	other := cfg
	other.HostIfName = "ovhother"
	_ = podnet.InNetNSPath(node, func() error {
		if l, err := netlink.LinkByName("ovhother"); err == nil {
			_ = netlink.LinkSetUp(l)
		}
		return nil
	})
	err = podnet.InNetNSPath(node, func() error { return podnet.Check(other) })
	if err == nil || !strings.Contains(err.Error(), "veth peer") {
		t.Fatalf("check against a host end that is not the pod's peer: %v, want a veth peer problem", err)
	}
	if err := podnet.InNetNSPath(node, func() error { return podnet.Teardown(cfg.HostIfName, pod, "eth0") }); err != nil {
		t.Fatalf("teardown: %v", err)
	}
}

package podnet

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// SetEgressLimit shapes what the pod sends on ifName (in the netns at
// netnsPath) to mbps Mbit/s with a token bucket as the interface's root
// qdisc; mbps 0 removes it. The userspace datapath reads the host end of the
// veth through AF_PACKET, which sees packets before the kernel's ingress
// policer, so OVS ingress policing alone does not limit a pod there: the
// pod end is shaped instead.
func SetEgressLimit(netnsPath, ifName string, mbps int) error {
	target, err := netns.GetFromPath(netnsPath)
	if err != nil {
		return stepErr("open netns "+netnsPath, err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target, unix.NETLINK_ROUTE) // route only: the xfrm and netfilter families may be absent
	if err != nil {
		return stepErr("netlink in "+netnsPath, err)
	}
	defer h.Close()
	link, err := h.LinkByName(ifName)
	if err != nil {
		return stepErr("look up "+ifName, err)
	}
	attrs := netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(0x4f56, 0), Parent: netlink.HANDLE_ROOT}
	if mbps <= 0 {
		err := h.QdiscDel(&netlink.Tbf{QdiscAttrs: attrs})
		if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return stepErr("remove the egress limit of "+ifName, err)
		}
		return nil
	}
	rate := uint64(mbps) * 1_000_000 / 8  // bytes per second
	burst := max(uint32(rate/50), 32<<10) // 20 ms, at least 32 KiB
	q := &netlink.Tbf{QdiscAttrs: attrs, Rate: rate, Buffer: netlink.Xmittime(rate, burst), Limit: max(uint32(rate/10), 64<<10)}
	if err := h.QdiscReplace(q); err != nil {
		return stepErr(fmt.Sprintf("limit the egress of %s to %d Mbit/s", ifName, mbps), err)
	}
	return nil
}

package hostcheck

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

const ethPArp = 0x0806

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// ARPProbeIn sends an RFC 5227 ARP probe (sender IP 0.0.0.0) for ip on
// iface and returns the MAC addresses of every other host that answers
// within wait. It runs in network namespace ns (netns.None() for the
// current one). Nothing is configured: one broadcast request is sent.
func ARPProbeIn(ns netns.NsHandle, iface string, ip netip.Addr, wait time.Duration) ([]string, error) {
	if !ip.Is4() {
		return nil, fmt.Errorf("%s is not IPv4", ip)
	}
	fd, ifi, err := arpSocket(ns, iface)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)

	req := make([]byte, 28)
	binary.BigEndian.PutUint16(req[0:], 1)      // Ethernet
	binary.BigEndian.PutUint16(req[2:], 0x0800) // IPv4
	req[4], req[5] = 6, 4
	binary.BigEndian.PutUint16(req[6:], 1) // request
	copy(req[8:14], ifi.mac)
	// sender IP 0.0.0.0 (probe), target MAC 0
	t := ip.As4()
	copy(req[24:28], t[:])
	to := &unix.SockaddrLinklayer{Ifindex: ifi.index, Protocol: htons(ethPArp), Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if err := unix.Sendto(fd, req, 0, to); err != nil {
		return nil, fmt.Errorf("sending the ARP probe on %s: %w", iface, err)
	}

	seen := map[string]bool{}
	var macs []string
	deadline := time.Now().Add(wait)
	buf := make([]byte, 128)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return macs, nil
		}
		tv := unix.NsecToTimeval(left.Nanoseconds())
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
			return macs, err
		}
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EAGAIN || err == unix.EWOULDBLOCK || err == unix.EINTR {
			continue
		}
		if err != nil {
			return macs, err
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 28 || binary.BigEndian.Uint16(buf[6:]) != 2 {
			continue
		}
		if netip.AddrFrom4([4]byte(buf[14:18])) != ip {
			continue
		}
		mac := net.HardwareAddr(append([]byte(nil), buf[8:14]...)).String()
		if !seen[mac] {
			seen[mac] = true
			macs = append(macs, mac)
		}
	}
}

type ifInfo struct {
	index int
	mac   net.HardwareAddr
}

// arpSocket opens a packet socket for ARP bound to iface, created inside ns.
func arpSocket(ns netns.NsHandle, iface string) (int, ifInfo, error) {
	if ns.IsOpen() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		orig, err := netns.Get()
		if err != nil {
			return -1, ifInfo{}, err
		}
		defer orig.Close()
		if err := netns.Set(ns); err != nil {
			return -1, ifInfo{}, err
		}
		defer func() {
			if err := netns.Set(orig); err != nil {
				// Stuck in ns: keep the thread locked so it is discarded.
				runtime.LockOSThread()
			}
		}()
	}
	nif, err := net.InterfaceByName(iface)
	if err != nil {
		return -1, ifInfo{}, err
	}
	if len(nif.HardwareAddr) != 6 {
		return -1, ifInfo{}, fmt.Errorf("%s has no Ethernet address", iface)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(ethPArp)))
	if err != nil {
		return -1, ifInfo{}, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(ethPArp), Ifindex: nif.Index}); err != nil {
		unix.Close(fd)
		return -1, ifInfo{}, err
	}
	return fd, ifInfo{index: nif.Index, mac: nif.HardwareAddr}, nil
}

// CheckDuplicateAddress reports other hosts that answer ARP for this node's
// encap IP: a cloned VM (same MAC and IP) or an address conflict.
func CheckDuplicateAddress(iface, ip, ownMAC string, macs []string, err error) Check {
	const name = "duplicate-address"
	switch {
	case err != nil:
		return Check{Name: name, Status: Warn, Found: fmt.Sprintf("could not probe %s on %s: %v", ip, iface, err), Fix: "run netctl doctor as root in the host network namespace"}
	case len(macs) == 0:
		return Check{Name: name, Status: Pass, Found: fmt.Sprintf("no other host answers ARP for %s on %s", ip, iface)}
	}
	var same, other []string
	for _, m := range macs {
		if strings.EqualFold(m, ownMAC) {
			same = append(same, m)
		} else {
			other = append(other, m)
		}
	}
	found := fmt.Sprintf("another host answers ARP for this node's address %s on %s", ip, iface)
	if len(same) > 0 {
		found += " with this node's own MAC " + ownMAC + ": a cloned VM shares MAC and address (cross-node traffic breaks, `duplicate chassis`)"
	}
	if len(other) > 0 {
		found += " from " + strings.Join(other, ", ") + ": an address conflict"
	}
	return Check{Name: name, Status: Fail, Found: found,
		Fix: "give every node a unique MAC and IP (regenerate them on the clone), and remove the clone's system-id file before its ovnhost starts"}
}

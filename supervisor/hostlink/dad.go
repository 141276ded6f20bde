package hostlink

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// waitDAD waits until none of the IPv6 addresses among addrs is tentative
// on link: the kernel refuses a route whose src is a tentative address, and
// nothing can be sent from one. An address that fails duplicate address
// detection is an error (another host has it). A link that is down or has
// no carrier runs no detection yet, so there is nothing to wait for.
//
// Address events, not polling: the subscription is made before the list is
// read, so no change falls between the two.
func waitDAD(link netlink.Link, name string, addrs []netlink.Addr, timeout time.Duration) error {
	want := map[string]bool{}
	for _, a := range addrs {
		if a.IP.To4() == nil {
			want[a.IP.String()] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	l, err := netlink.LinkByIndex(link.Attrs().Index)
	if err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	if f := l.Attrs().RawFlags; f&unix.IFF_UP == 0 || f&unix.IFF_RUNNING == 0 {
		return nil
	}
	updates := make(chan netlink.AddrUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.AddrSubscribeWithOptions(updates, done, netlink.AddrSubscribeOptions{}); err != nil {
		return fmt.Errorf("subscribing to address events: %w", err)
	}
	cur, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		return fmt.Errorf("listing the addresses of %s: %w", name, err)
	}
	pending := map[string]bool{}
	for _, a := range cur {
		ip := a.IP.String()
		if !want[ip] {
			continue
		}
		if a.Flags&unix.IFA_F_DADFAILED != 0 {
			return dadFailed(ip, name)
		}
		if a.Flags&unix.IFA_F_TENTATIVE != 0 {
			pending[ip] = true
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for len(pending) > 0 {
		select {
		case u, ok := <-updates:
			if !ok {
				return fmt.Errorf("address events of %s ended while waiting for duplicate address detection", name)
			}
			ip := u.LinkAddress.IP.String()
			if u.LinkIndex != l.Attrs().Index || !pending[ip] {
				continue
			}
			switch {
			case !u.NewAddr:
				return fmt.Errorf("address %s left %s during duplicate address detection (something else manages %s? stop it, then move again)", ip, name, name)
			case u.Flags&unix.IFA_F_DADFAILED != 0:
				return dadFailed(ip, name)
			case u.Flags&unix.IFA_F_TENTATIVE == 0:
				delete(pending, ip)
			}
		case <-timer.C:
			return fmt.Errorf("the IPv6 addresses %v of %s are still tentative after %s: duplicate address detection did not finish (is %s's carrier flapping? ip -6 address show dev %s)",
				keys(pending), name, timeout, name, name)
		}
	}
	return nil
}

func dadFailed(ip, name string) error {
	return fmt.Errorf("address %s failed duplicate address detection on %s: another host on that network uses it; find it (ip -6 neigh show %s) and give one of them another address", ip, name, ip)
}

func keys(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

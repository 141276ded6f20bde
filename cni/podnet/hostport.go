package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// WaitLink waits, event-driven through an RTNLGRP_LINK subscription, until
// the interface name exists in the calling process's netns (an OVS internal
// port appears once ovs-vswitchd has applied the transaction), or ctx ends.
func WaitLink(ctx context.Context, name string) (netlink.Link, error) {
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{}); err != nil {
		return nil, fmt.Errorf("subscribe to link events: %w", err)
	}
	if l, err := netlink.LinkByName(name); err == nil {
		return l, nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("interface %s did not appear: %w", name, ctx.Err())
		case u, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("link event subscription closed while waiting for %s", name)
			}
			if u.Attrs().Name == name {
				if l, err := netlink.LinkByName(name); err == nil {
					return l, nil
				}
			}
		}
	}
}

// HostPort configures an interface of the host netns (the OVS internal port
// ovn0): MAC, MTU, addresses, up, and routes through it.
type HostPort struct {
	Name   string
	MAC    net.HardwareAddr
	MTU    int
	Addrs  []netip.Prefix
	Routes []Route
	// PruneRoutes removes the gatewayed routes through the port that
	// Routes does not list (a Subnet that went, a stale default): the
	// port is ours alone.
	PruneRoutes bool
}

// ConfigureHostPort applies p to the existing interface p.Name: its global
// addresses become exactly p.Addrs; routes it does not list are left alone
// unless PruneRoutes.
// It is safe to call again (with more routes, or a new address).
func ConfigureHostPort(p HostPort) error {
	l, err := netlink.LinkByName(p.Name)
	if err != nil {
		return stepErr("look up "+p.Name, err)
	}
	if p.MAC != nil && l.Attrs().HardwareAddr.String() != p.MAC.String() {
		if err := netlink.LinkSetHardwareAddr(l, p.MAC); err != nil {
			return stepErr("set MAC of "+p.Name, err)
		}
	}
	if p.MTU != 0 && l.Attrs().MTU != p.MTU {
		if err := netlink.LinkSetMTU(l, p.MTU); err != nil {
			return stepErr("set MTU of "+p.Name, err)
		}
	}
	// No router advertisements (one from the cluster router would give the
	// host a default route into the cluster, as Kube-OVN's ovn0 got, its
	// issue 1379) and no DAD (the addresses are IPAM's, and DAD would hold
	// them back a second or more). Absent with the kernel's IPv6 off.
	for _, k := range []string{"accept_ra", "accept_dad"} {
		if err := writeSysctl(filepath.Join("/proc/sys/net/ipv6/conf", p.Name, k), "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return stepErr("set net.ipv6.conf."+p.Name+"."+k+"=0", err)
		}
	}
	// The port is ours alone: global addresses it should no longer have go
	// first (removing a primary address also removes the secondaries of its
	// subnet, so the wanted ones are added after).
	if have, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(l, netlink.FAMILY_ALL) }); err == nil {
		for _, h := range have {
			ip, ok := netip.AddrFromSlice(h.IP)
			if !ok || ip.IsLinkLocalUnicast() {
				continue
			}
			ones, _ := h.Mask.Size()
			if !slices.Contains(p.Addrs, netip.PrefixFrom(ip.Unmap(), ones)) {
				_ = netlink.AddrDel(l, &h)
			}
		}
	}
	for _, a := range p.Addrs {
		na := &netlink.Addr{IPNet: prefixToIPNet(a)}
		if a.Addr().Is6() {
			na.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrReplace(l, na); err != nil {
			return stepErr("add address "+a.String()+" to "+p.Name, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return stepErr("set "+p.Name+" up", err)
	}
	for _, r := range p.Routes {
		nr := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixToIPNet(r.Dst)}
		if r.GW.IsValid() {
			nr.Gw = net.IP(r.GW.AsSlice())
		} else {
			nr.Scope = netlink.SCOPE_LINK
		}
		if err := netlink.RouteReplace(nr); err != nil {
			return stepErr("add route "+routeString(r)+" via "+p.Name, err)
		}
	}
	if p.PruneRoutes {
		have, err := nldump.Retry(func() ([]netlink.Route, error) { return netlink.RouteList(l, netlink.FAMILY_ALL) })
		if err != nil {
			return stepErr("list routes via "+p.Name, err)
		}
		for _, h := range have {
			if h.Gw == nil || h.Dst == nil {
				continue
			}
			dst, ok := ipNetToPrefix(h.Dst)
			gw, gok := netip.AddrFromSlice(h.Gw)
			if !ok || !gok {
				continue
			}
			if !slices.Contains(p.Routes, Route{Dst: dst.Masked(), GW: gw.Unmap()}) {
				if err := netlink.RouteDel(&h); err != nil && !errors.Is(err, errNoSuchProcess) {
					return stepErr("remove stale route "+dst.String()+" via "+p.Name, err)
				}
			}
		}
	}
	return nil
}

func ipNetToPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}

// RemoveRoutes deletes the given routes through name; missing ones are fine.
func RemoveRoutes(name string, routes []Route) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		if isNotFound(err) {
			return nil
		}
		return err
	}
	var errs []error
	for _, r := range routes {
		nr := &netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixToIPNet(r.Dst)}
		if r.GW.IsValid() {
			nr.Gw = net.IP(r.GW.AsSlice())
		}
		if err := netlink.RouteDel(nr); err != nil && !errors.Is(err, errNoSuchProcess) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// KeepUp brings interface name up once it exists, and again whenever it
// goes down, until ctx ends. ovs-vswitchd may set a tap it has just
// created (an internal port on the userspace datapath) down again while
// it finishes configuring it, after the first up.
func KeepUp(ctx context.Context, name string) error {
	ch := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeWithOptions(ch, done, netlink.LinkSubscribeOptions{}); err != nil {
		return fmt.Errorf("subscribe to link events: %w", err)
	}
	up := func() error {
		l, err := netlink.LinkByName(name)
		if err != nil || l.Attrs().Flags&net.FlagUp != 0 {
			return nil // not there yet (its event comes), or up
		}
		return netlink.LinkSetUp(l)
	}
	if err := up(); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case u, ok := <-ch:
			if !ok {
				return fmt.Errorf("link event subscription closed while keeping %s up", name)
			}
			if u.Attrs() != nil && u.Attrs().Name == name {
				if err := up(); err != nil {
					return err
				}
			}
		}
	}
}

// Package podnet is the host plumbing of a pod's network interface: the veth
// pair between the host and the pod's network namespace, the pod end's name,
// MAC, MTU, addresses and routes, IPv6 DAD off and, for the userspace (netdev)
// datapath, transmit checksum offload off. Everything goes through netlink,
// setns and ioctl; no `ip` or `ethtool` program is executed.
//
// Setup creates the pair with the pod end directly inside the target netns
// under its final name; on any failure it deletes what it created, so a failed
// Setup leaves the host as it was. Teardown is idempotent. Check compares the
// live state against the Config and says what differs.
package podnet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"unsafe"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// Route is one route in the pod: Dst via GW (GW invalid: on-link).
type Route struct {
	Dst netip.Prefix
	GW  netip.Addr
}

// Config describes the pod interface to create or check.
type Config struct {
	NetNS      string           // path of the pod's network namespace
	IfName     string           // interface name inside the pod (eth0)
	HostIfName string           // host end name (see HostIfName)
	MAC        net.HardwareAddr // MAC of the pod end
	MTU        int
	Addrs      []netip.Prefix // addresses with prefix length of their subnet
	Routes     []Route        // default routes included (Dst 0.0.0.0/0)
	// TxChecksumOff turns off transmit checksum offload on the pod end: with
	// the userspace datapath, OVS reads the host end through AF_PACKET and a
	// CHECKSUM_PARTIAL packet would leave it with a bad L4 checksum.
	TxChecksumOff bool
}

// Result is what Setup created.
type Result struct {
	HostIfName  string
	HostMAC     net.HardwareAddr
	HostIfIndex int
	PodIfIndex  int
	PodMAC      net.HardwareAddr
}

// HostIfName derives the host end's name from the container ID and the pod
// interface name: "ovh" and 11 hex digits of their hash (14 characters, under
// IFNAMSIZ), stable so that DEL finds it again without any stored state.
func HostIfName(containerID, ifName string) string {
	h := sha256.Sum256([]byte(containerID + "/" + ifName))
	return "ovh" + hex.EncodeToString(h[:])[:11]
}

// Error is a plumbing failure with the step that failed.
type Error struct {
	Step string
	Err  error
}

func (e *Error) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func stepErr(step string, err error) error { return &Error{Step: step, Err: err} }

// Validate checks a Config before anything is touched.
func (c *Config) Validate() error {
	if c.NetNS == "" {
		return errors.New("no network namespace path given (CNI_NETNS is empty)")
	}
	if c.IfName == "" || len(c.IfName) > 15 || strings.ContainsAny(c.IfName, "/ \t\n:") || c.IfName == "." || c.IfName == ".." {
		return fmt.Errorf("interface name %q is not a valid Linux interface name (1 to 15 characters, no '/', ':' or spaces)", c.IfName)
	}
	if c.HostIfName == "" || len(c.HostIfName) > 15 {
		return fmt.Errorf("host interface name %q is invalid", c.HostIfName)
	}
	if len(c.MAC) != 6 || c.MAC[0]&1 == 1 {
		return fmt.Errorf("MAC %q is not a unicast Ethernet address", c.MAC)
	}
	if c.MTU != 0 && (c.MTU < 576 || c.MTU > 65535) {
		return fmt.Errorf("MTU %d is out of range (576..65535)", c.MTU)
	}
	if len(c.Addrs) == 0 {
		return errors.New("no IP address to configure")
	}
	return nil
}

// Setup creates and configures the pod interface. On error nothing it
// created is left behind.
func Setup(cfg Config) (res *Result, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	target, err := netns.GetFromPath(cfg.NetNS)
	if err != nil {
		return nil, stepErr("open netns "+cfg.NetNS, err)
	}
	defer target.Close()

	if l, err := netlink.LinkByName(cfg.HostIfName); err == nil {
		// A leftover of an earlier attempt for the same container: replace it.
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			return nil, stepErr("delete stale host interface "+cfg.HostIfName, err)
		}
	}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: cfg.HostIfName, MTU: cfg.MTU, TxQLen: -1},
		PeerName:         cfg.IfName,
		PeerHardwareAddr: cfg.MAC,
		PeerMTU:          uint32(cfg.MTU),
		PeerNamespace:    netlink.NsFd(int(target)),
		PeerTxQLen:       -1,
	}
	if err := netlink.LinkAdd(veth); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, stepErr("create veth", fmt.Errorf("interface %q already exists in %s or %q exists on the host: %w", cfg.IfName, cfg.NetNS, cfg.HostIfName, err))
		}
		return nil, stepErr("create veth "+cfg.HostIfName+"/"+cfg.IfName, err)
	}
	ok := false
	defer func() {
		if !ok {
			// Deleting the host end deletes the pod end with it.
			if l, e := netlink.LinkByName(cfg.HostIfName); e == nil {
				_ = netlink.LinkDel(l)
			}
		}
	}()
	host, err := netlink.LinkByName(cfg.HostIfName)
	if err != nil {
		return nil, stepErr("look up host end "+cfg.HostIfName, err)
	}
	res = &Result{HostIfName: cfg.HostIfName, HostMAC: host.Attrs().HardwareAddr, HostIfIndex: host.Attrs().Index, PodMAC: cfg.MAC}
	if err := netlink.LinkSetUp(host); err != nil {
		return nil, stepErr("set host end up", err)
	}
	err = InNetNS(target, func() error {
		idx, err := configurePodEnd(cfg)
		res.PodIfIndex = idx
		return err
	})
	if err != nil {
		return nil, err
	}
	ok = true
	return res, nil
}

func configurePodEnd(cfg Config) (int, error) {
	link, err := netlink.LinkByName(cfg.IfName)
	if err != nil {
		return 0, stepErr("look up pod end "+cfg.IfName, err)
	}
	// DAD off before any address or link-up: a pod's address is allocated
	// by IPAM, and DAD would delay it by a second or more. Router
	// advertisements off too (Kube-OVN's CNI sets accept_ra=0 in every
	// pod): the addresses and routes are IPAM's, and on an underlay
	// subnet the physical router's advertisements would add a default
	// route past the interconnection gateway and SLAAC addresses IPAM
	// does not know.
	for _, k := range []string{"accept_dad", "dad_transmits", "accept_ra"} {
		if err := writeSysctl(filepath.Join("/proc/sys/net/ipv6/conf", cfg.IfName, k), "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, stepErr("turn off IPv6 DAD and router advertisements on "+cfg.IfName, err)
		}
	}
	if cfg.TxChecksumOff {
		if err := SetTxChecksum(cfg.IfName, false); err != nil {
			return 0, stepErr("turn off tx checksum offload on "+cfg.IfName, err)
		}
	}
	for _, p := range cfg.Addrs {
		a := &netlink.Addr{IPNet: prefixToIPNet(p)}
		if p.Addr().Is6() {
			a.Flags = unix.IFA_F_NODAD
		}
		if err := netlink.AddrReplace(link, a); err != nil {
			return 0, stepErr("add address "+p.String()+" to "+cfg.IfName, err)
		}
	}
	if err := netlink.LinkSetUp(link); err != nil {
		return 0, stepErr("set "+cfg.IfName+" up", err)
	}
	if lo, err := netlink.LinkByName("lo"); err == nil && lo.Attrs().Flags&net.FlagUp == 0 {
		_ = netlink.LinkSetUp(lo)
	}
	for _, r := range cfg.Routes {
		nr := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: prefixToIPNet(r.Dst)}
		if r.GW.IsValid() {
			nr.Gw = net.IP(r.GW.AsSlice())
		} else {
			nr.Scope = netlink.SCOPE_LINK
		}
		if err := netlink.RouteReplace(nr); err != nil {
			return 0, stepErr("add route "+routeString(r)+" on "+cfg.IfName, err)
		}
	}
	return link.Attrs().Index, nil
}

// Teardown deletes the pod interface. It succeeds when the netns, the pod
// end or the host end is already gone.
func Teardown(hostIfName, netnsPath, ifName string) error {
	var errs []error
	if l, err := netlink.LinkByName(hostIfName); err == nil {
		if err := netlink.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, stepErr("delete host end "+hostIfName, err))
		}
	} else if !isNotFound(err) {
		errs = append(errs, stepErr("look up host end "+hostIfName, err))
	}
	// The pod end left behind by a host end deleted elsewhere: veth pairs
	// die together, so only a pod end that is not a veth (or whose peer is
	// elsewhere) could remain; delete a veth of that name whose peer is gone.
	if netnsPath != "" && ifName != "" {
		target, err := netns.GetFromPath(netnsPath)
		if err == nil {
			defer target.Close()
			h, err := netlink.NewHandleAt(target, unix.NETLINK_ROUTE) // route only: the xfrm and netfilter families may be absent
			if err == nil {
				defer h.Close()
				if l, err := h.LinkByName(ifName); err == nil {
					if _, isVeth := l.(*netlink.Veth); isVeth {
						// IFLA_LINK of a veth is its peer's ifindex in the
						// peer's namespace (here: the host's).
						if peer := l.Attrs().ParentIndex; peer <= 0 || !hostIndexExists(peer) {
							_ = h.LinkDel(l)
						}
					}
				}
			}
		}
	}
	return errors.Join(errs...)
}

func hostIndexExists(idx int) bool {
	_, err := netlink.LinkByIndex(idx)
	return err == nil
}

// vethPeerProblem says why host (seen from the host's namespace) and pod
// (seen from the pod's) are not the two ends of one veth pair, or "".
//
// Each end's IFLA_LINK (LinkAttrs.ParentIndex) is its peer's ifindex in the
// peer's own namespace, as the bridge plugin's CHECK compares it. ethtool's
// peer_ifindex (netlink.VethPeerIndex) cannot be used: that ioctl looks the
// interface up by name in the calling thread's namespace, so for a pod's
// eth0 it asks about the host's eth0 (ifindex 0 from a NIC without veth
// statistics) or fails.
func vethPeerProblem(host, pod netlink.Link) string {
	h, p := host.Attrs(), pod.Attrs()
	if p.ParentIndex != h.Index || h.ParentIndex != p.Index {
		return fmt.Sprintf("veth peer is ifindex %d (seen from the pod), not the host end %s (%d, whose peer is ifindex %d, the pod end is %d)",
			p.ParentIndex, h.Name, h.Index, h.ParentIndex, p.Index)
	}
	return ""
}

// Check verifies the pod interface against cfg and names every difference.
func Check(cfg Config) error {
	host, err := netlink.LinkByName(cfg.HostIfName)
	if err != nil {
		return fmt.Errorf("host end %s: %w", cfg.HostIfName, err)
	}
	if host.Attrs().Flags&net.FlagUp == 0 {
		return fmt.Errorf("host end %s is down", cfg.HostIfName)
	}
	target, err := netns.GetFromPath(cfg.NetNS)
	if err != nil {
		return fmt.Errorf("network namespace %s: %w", cfg.NetNS, err)
	}
	defer target.Close()
	h, err := netlink.NewHandleAt(target, unix.NETLINK_ROUTE) // route only: the xfrm and netfilter families may be absent
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", cfg.NetNS, err)
	}
	defer h.Close()
	link, err := h.LinkByName(cfg.IfName)
	if err != nil {
		return fmt.Errorf("interface %s in %s: %w", cfg.IfName, cfg.NetNS, err)
	}
	var problems []string
	a := link.Attrs()
	if cfg.MAC != nil && a.HardwareAddr.String() != cfg.MAC.String() {
		problems = append(problems, fmt.Sprintf("MAC is %s, want %s", a.HardwareAddr, cfg.MAC))
	}
	if cfg.MTU != 0 && a.MTU != cfg.MTU {
		problems = append(problems, fmt.Sprintf("MTU is %d, want %d", a.MTU, cfg.MTU))
	}
	if a.Flags&net.FlagUp == 0 {
		problems = append(problems, "interface is down")
	}
	if _, ok := link.(*netlink.Veth); ok {
		if p := vethPeerProblem(host, link); p != "" {
			problems = append(problems, p)
		}
	} else {
		problems = append(problems, "not a veth")
	}
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return h.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("list addresses of %s: %w", cfg.IfName, err)
	}
	for _, p := range cfg.Addrs {
		found := false
		for _, x := range addrs {
			if ip, ok := netip.AddrFromSlice(x.IP); ok && ip.Unmap() == p.Addr() {
				ones, _ := x.Mask.Size()
				found = ones == p.Bits()
			}
		}
		if !found {
			problems = append(problems, fmt.Sprintf("address %s missing", p))
		}
	}
	routes, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(link, netlink.FAMILY_ALL) })
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return fmt.Errorf("list routes of %s: %w", cfg.IfName, err)
	}
	for _, r := range cfg.Routes {
		found := false
		for _, x := range routes {
			if routeMatches(x, r) {
				found = true
				break
			}
		}
		if !found {
			problems = append(problems, "route "+routeString(r)+" missing")
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("interface %s in %s: %s", cfg.IfName, cfg.NetNS, strings.Join(problems, "; "))
	}
	return nil
}

func routeMatches(x netlink.Route, r Route) bool {
	var dst netip.Prefix
	if x.Dst == nil {
		if r.Dst.Addr().Is4() {
			dst = netip.MustParsePrefix("0.0.0.0/0")
		} else {
			dst = netip.MustParsePrefix("::/0")
		}
	} else {
		ip, _ := netip.AddrFromSlice(x.Dst.IP)
		ones, _ := x.Dst.Mask.Size()
		dst = netip.PrefixFrom(ip.Unmap(), ones)
	}
	if dst != r.Dst.Masked() {
		return false
	}
	if !r.GW.IsValid() {
		return x.Gw == nil
	}
	gw, _ := netip.AddrFromSlice(x.Gw)
	return gw.Unmap() == r.GW
}

// InNetNS runs fn on a locked OS thread switched into ns. If the thread cannot
// be switched back it stays locked, so the runtime discards it.
func InNetNS(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return stepErr("get current netns", err)
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return stepErr("enter netns", err)
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		// Thread stays locked and dies with the goroutine.
		return errors.Join(ferr, stepErr("return to host netns", err))
	}
	runtime.UnlockOSThread()
	return ferr
}

// InNetNSPath is InNetNS for a namespace path.
func InNetNSPath(path string, fn func() error) error {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return stepErr("open netns "+path, err)
	}
	defer ns.Close()
	return InNetNS(ns, fn)
}

func writeSysctl(path, v string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(v)
	return errors.Join(err, f.Close())
}

// ethtool legacy commands (linux/ethtool.h).
const (
	ethtoolGTxCsum = 0x16
	ethtoolSTxCsum = 0x17
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data unsafe.Pointer
	_    [16]byte
}

func ethtoolIoctl(ifName string, v *ethtoolValue) error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], ifName)
	ifr.data = unsafe.Pointer(v)
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(v)
	if errno != 0 {
		return syscall.Errno(errno)
	}
	return nil
}

// SetTxChecksum turns transmit checksum offload of ifName (in the calling
// thread's netns) on or off, like `ethtool -K IF tx on|off`.
func SetTxChecksum(ifName string, on bool) error {
	v := ethtoolValue{cmd: ethtoolSTxCsum}
	if on {
		v.data = 1
	}
	return ethtoolIoctl(ifName, &v)
}

// TxChecksum reports whether transmit checksum offload of ifName is on.
func TxChecksum(ifName string) (bool, error) {
	v := ethtoolValue{cmd: ethtoolGTxCsum}
	if err := ethtoolIoctl(ifName, &v); err != nil {
		return false, err
	}
	return v.data != 0, nil
}

func prefixToIPNet(p netip.Prefix) *net.IPNet {
	bits := 32
	if p.Addr().Is6() {
		bits = 128
	}
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), bits)}
}

func routeString(r Route) string {
	if r.GW.IsValid() {
		return r.Dst.String() + " via " + r.GW.String()
	}
	return r.Dst.String() + " on-link"
}

func isNotFound(err error) bool {
	var lnf netlink.LinkNotFoundError
	return errors.As(err, &lnf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// IsNotFound reports whether err says a link does not exist.
func IsNotFound(err error) bool { return isNotFound(err) }

var errNoSuchProcess = unix.ESRCH

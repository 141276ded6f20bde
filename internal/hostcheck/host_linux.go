package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/moby/sys/capability"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// Host reads the real machine. Its zero value is ready to use.
type Host struct{}

// NewHost returns the real collector.
func NewHost() Host { return Host{} }

var _ Facts = Host{}

// GenlFamily asks the kernel's generic netlink controller for a family.
func (Host) GenlFamily(name string) (bool, error) {
	_, err := netlink.GenlFamilyGet(name)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, err
}

// LoadModule runs modprobe (only called when module management is on).
func (Host) LoadModule(name string) error {
	// Run it by its own name: modprobe is usually a link to kmod, which
	// picks its behaviour from argv[0] (LookPath resolves links).
	mp := ""
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		if st, err := os.Stat(filepath.Join(d, "modprobe")); err == nil && st.Mode()&0o111 != 0 {
			mp = filepath.Join(d, "modprobe")
			break
		}
	}
	if mp == "" {
		return errors.New("modprobe not found in /usr/sbin, /sbin, /usr/bin or /bin")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, mp, name).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v: %s", mp, name, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// LinkKind creates a flow-based tunnel device of this kind in a throwaway
// network namespace, which is destroyed with the last reference to it, so
// nothing is left on the host.
func (Host) LinkKind(kind string) (bool, error) {
	ns, err := newThrowawayNetns()
	if err != nil {
		return false, err
	}
	defer ns.Close()
	// Only the route family: without a family list the handle also opens
	// NETLINK_XFRM and NETLINK_NETFILTER sockets, which fail with
	// EPROTONOSUPPORT where xfrm_user or nfnetlink is not loaded and cannot
	// be (no module tree: Talos, a container), and the probe then reported
	// that error instead of the geneve answer.
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return false, err
	}
	defer h.Close()
	attrs := netlink.LinkAttrs{Name: "ovnhostprobe0"}
	var l netlink.Link
	switch kind {
	case "geneve":
		l = &netlink.Geneve{LinkAttrs: attrs, FlowBased: true}
	case "vxlan":
		l = &netlink.Vxlan{LinkAttrs: attrs, FlowBased: true, Port: 4789}
	default:
		return false, fmt.Errorf("unknown tunnel kind %q", kind)
	}
	err = h.LinkAdd(l)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.EOPNOTSUPP), errors.Is(err, unix.ENOENT):
		return false, nil
	}
	return false, err
}

// newThrowawayNetns creates an unnamed network namespace without moving
// the calling goroutine into it for longer than the unshare.
func newThrowawayNetns() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return netns.None(), err
	}
	defer orig.Close()
	ns, err := netns.New()
	if err != nil {
		return netns.None(), err
	}
	if err := netns.Set(orig); err != nil {
		ns.Close()
		// The thread is stuck in the new namespace: do not unlock it, so
		// the runtime discards the thread when the goroutine ends.
		runtime.LockOSThread()
		return netns.None(), fmt.Errorf("returning to the original network namespace: %w", err)
	}
	return ns, nil
}

// ProcessCaps reads this process's capability sets.
func (Host) ProcessCaps() (ProcCaps, error) {
	c, err := capability.NewPid2(0)
	if err != nil {
		return ProcCaps{}, err
	}
	if err := c.Load(); err != nil {
		return ProcCaps{}, err
	}
	last, err := capability.LastCap()
	if err != nil {
		return ProcCaps{}, err
	}
	var pc ProcCaps
	for n := capability.Cap(0); n <= last && n < 64; n++ {
		bit := uint64(1) << uint(n)
		if c.Get(capability.EFFECTIVE, n) {
			pc.Effective |= bit
		}
		if c.Get(capability.PERMITTED, n) {
			pc.Permitted |= bit
		}
		if c.Get(capability.INHERITABLE, n) {
			pc.Inheritable |= bit
		}
		if c.Get(capability.BOUNDING, n) {
			pc.Bounding |= bit
		}
		if c.Get(capability.AMBIENT, n) {
			pc.Ambient |= bit
		}
	}
	return pc, nil
}

// LookPath finds an executable regular file named name in dirs (PATH when
// dirs is empty) and returns it with symlinks resolved.
func (Host) LookPath(name string, dirs []string) (string, error) {
	if len(dirs) == 0 {
		p, err := exec.LookPath(name)
		if err != nil {
			return "", err
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real, nil
		}
		return p, nil
	}
	for _, d := range dirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			// Name the file itself (iptables -> xtables-nft-multi): its
			// capabilities are what exec sees, and setcap refuses symlinks.
			if real, err := filepath.EvalSymlinks(p); err == nil {
				return real, nil
			}
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(dirs, ":"))
}

// FileCaps reads the security.capability attribute (following symlinks,
// as exec does).
func (Host) FileCaps(path string) (*FileCaps, error) {
	buf := make([]byte, 64)
	n, err := unix.Getxattr(path, XattrCaps, buf)
	switch {
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.EOPNOTSUPP):
		return nil, nil
	case err != nil:
		return nil, err
	}
	return ParseFileCaps(buf[:n])
}

// Path stats a directory and its mount.
func (Host) Path(path string) PathInfo {
	var pi PathInfo
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return pi
	case err != nil:
		pi.Err = err
		return pi
	}
	pi.Exists, pi.IsDir = true, st.IsDir()
	var sfs unix.Statfs_t
	if err := unix.Statfs(path, &sfs); err == nil && sfs.Flags&unix.ST_RDONLY != 0 {
		pi.ReadOnly = true
	}
	pi.Writable = unix.Access(path, unix.W_OK)
	if errors.Is(pi.Writable, unix.EROFS) {
		pi.ReadOnly = true
	}
	return pi
}

// Links lists the interfaces of the current network namespace.
func (Host) Links() ([]Link, error) {
	return linksOf(nil)
}

func linksOf(h *netlink.Handle) ([]Link, error) {
	if h == nil {
		h = &netlink.Handle{}
	}
	ls, err := nldump.Retry(h.LinkList)
	if err != nil {
		return nil, err
	}
	out := make([]Link, 0, len(ls))
	for _, l := range ls {
		a := l.Attrs()
		lk := Link{Name: a.Name, Index: a.Index, MTU: a.MTU, Up: a.Flags&net.FlagUp != 0,
			Loopback: a.Flags&net.FlagLoopback != 0}
		if len(a.HardwareAddr) > 0 {
			lk.MAC = a.HardwareAddr.String()
		}
		addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return h.AddrList(l, netlink.FAMILY_ALL) })
		if err != nil {
			return nil, err
		}
		for _, ad := range addrs {
			if ad.IPNet == nil {
				continue
			}
			ip, ok := netip.AddrFromSlice(ad.IP)
			if !ok {
				continue
			}
			ones, _ := ad.Mask.Size()
			lk.Addrs = append(lk.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, lk)
	}
	return out, nil
}

// DefaultRouteIfaces names the interfaces of the default routes, IPv4
// routes first.
func (Host) DefaultRouteIfaces() ([]string, error) {
	return defaultRouteIfaces(nil)
}

func defaultRouteIfaces(h *netlink.Handle) ([]string, error) {
	if h == nil {
		h = &netlink.Handle{}
	}
	var names []string
	seen := map[string]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := nldump.Retry(func() ([]netlink.Route, error) { return h.RouteList(nil, fam) })
		if err != nil {
			return names, err
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			idx := r.LinkIndex
			if idx == 0 && len(r.MultiPath) > 0 {
				idx = r.MultiPath[0].LinkIndex
			}
			if idx == 0 {
				continue
			}
			l, err := h.LinkByIndex(idx)
			if err != nil {
				continue
			}
			if n := l.Attrs().Name; !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	return names, nil
}

// ReadFile reads a file.
func (Host) ReadFile(path string) ([]byte, error) { return os.ReadFile(path) }

// NetnsHost is Host with the interface and route facts read from another
// network namespace (tests, or a node whose underlay lives in a namespace).
type NetnsHost struct {
	Host
	NS netns.NsHandle
}

// Links lists the interfaces of the namespace.
func (n NetnsHost) Links() ([]Link, error) {
	h, err := netlink.NewHandleAt(n.NS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return linksOf(h)
}

// DefaultRouteIfaces names the default-route interfaces of the namespace.
func (n NetnsHost) DefaultRouteIfaces() ([]string, error) {
	h, err := netlink.NewHandleAt(n.NS, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return defaultRouteIfaces(h)
}

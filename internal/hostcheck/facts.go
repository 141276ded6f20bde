package hostcheck

import "net/netip"

// Facts is everything the checks read from the host. Each check takes only
// the narrow interface it needs; Host implements all of them for real and
// tests implement them with fixed data.
type Facts interface {
	DatapathFacts
	CapFacts
	BinaryFacts
	PathFacts
	LinkFacts
	FileFacts
}

// DatapathFacts answers whether the kernel can run the OVS datapath.
type DatapathFacts interface {
	// GenlFamily reports whether a generic netlink family is registered.
	GenlFamily(name string) (bool, error)
	// LoadModule loads a kernel module (modprobe).
	LoadModule(name string) error
	// LinkKind reports whether the kernel can create an rtnetlink link of
	// this kind (geneve, vxlan), probed in a throwaway network namespace.
	LinkKind(kind string) (bool, error)
}

// CapFacts reads the capability sets of this process.
type CapFacts interface {
	ProcessCaps() (ProcCaps, error)
}

// BinaryFacts finds programs and reads their file capabilities.
type BinaryFacts interface {
	// LookPath finds name in dirs, in order; "" and an error when absent.
	LookPath(name string, dirs []string) (string, error)
	// FileCaps reads the security.capability attribute of path: nil, nil
	// when the file has none.
	FileCaps(path string) (*FileCaps, error)
}

// PathFacts describes a directory.
type PathFacts interface {
	Path(path string) PathInfo
}

// LinkFacts lists the network interfaces.
type LinkFacts interface {
	Links() ([]Link, error)
	// DefaultRouteIfaces names the interfaces of the default routes, IPv4
	// first.
	DefaultRouteIfaces() ([]string, error)
}

// FileFacts reads small state files.
type FileFacts interface {
	ReadFile(path string) ([]byte, error)
}

// PathInfo is what a directory check needs to know.
type PathInfo struct {
	Exists   bool
	IsDir    bool
	ReadOnly bool  // on a read-only mount (statvfs ST_RDONLY)
	Writable error // nil when access(W_OK) succeeds
	Err      error // stat failed for another reason than ENOENT
}

// Link is one network interface.
type Link struct {
	Name     string
	Index    int
	MTU      int
	Up       bool
	Loopback bool
	MAC      string
	Addrs    []netip.Prefix
}

// ProcCaps are a process's capability sets as bitmasks (bit n = cap n).
type ProcCaps struct {
	Effective, Permitted, Inheritable, Bounding, Ambient uint64
}

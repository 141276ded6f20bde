package hostcheck

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"strings"

	"github.com/moby/sys/capability"
)

// XattrCaps is the extended attribute that holds file capabilities.
const XattrCaps = "security.capability"

// vfs_cap_data layout (linux/capability.h): a little-endian magic_etc word
// (revision in the top byte, VFS_CAP_FLAGS_EFFECTIVE in bit 0), then one
// {permitted, inheritable} pair of 32-bit words per 32 capabilities, then in
// revision 3 the root uid of the user namespace the caps belong to.
const (
	vfsCapRevisionMask = 0xFF000000
	vfsCapRevision1    = 0x01000000
	vfsCapRevision2    = 0x02000000
	vfsCapRevision3    = 0x03000000
	vfsCapFlagsEff     = 0x000001
)

// FileCaps are the file capabilities of one binary.
type FileCaps struct {
	Revision    int // 1, 2 or 3
	Permitted   uint64
	Inheritable uint64
	Effective   bool
	RootID      uint32 // revision 3 only
}

// ParseFileCaps decodes a security.capability attribute value.
func ParseFileCaps(b []byte) (*FileCaps, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("security.capability: %d bytes, too short", len(b))
	}
	magic := binary.LittleEndian.Uint32(b)
	fc := &FileCaps{Effective: magic&vfsCapFlagsEff != 0}
	words := 0
	switch magic & vfsCapRevisionMask {
	case vfsCapRevision1:
		fc.Revision, words = 1, 1
	case vfsCapRevision2:
		fc.Revision, words = 2, 2
	case vfsCapRevision3:
		fc.Revision, words = 3, 2
	default:
		return nil, fmt.Errorf("security.capability: unknown revision %#x", magic&vfsCapRevisionMask)
	}
	want := 4 + 8*words
	if fc.Revision == 3 {
		want += 4
	}
	if len(b) < want {
		return nil, fmt.Errorf("security.capability: revision %d needs %d bytes, got %d", fc.Revision, want, len(b))
	}
	for i := 0; i < words; i++ {
		p := binary.LittleEndian.Uint32(b[4+8*i:])
		in := binary.LittleEndian.Uint32(b[8+8*i:])
		fc.Permitted |= uint64(p) << (32 * i)
		fc.Inheritable |= uint64(in) << (32 * i)
	}
	if fc.Revision == 3 {
		fc.RootID = binary.LittleEndian.Uint32(b[4+8*words:])
	}
	return fc, nil
}

// EncodeFileCaps builds a revision 2 security.capability value (what
// `setcap caps+ep` writes outside user namespaces).
func EncodeFileCaps(permitted, inheritable uint64, effective bool) []byte {
	b := make([]byte, 20)
	magic := uint32(vfsCapRevision2)
	if effective {
		magic |= vfsCapFlagsEff
	}
	binary.LittleEndian.PutUint32(b, magic)
	binary.LittleEndian.PutUint32(b[4:], uint32(permitted))
	binary.LittleEndian.PutUint32(b[8:], uint32(inheritable))
	binary.LittleEndian.PutUint32(b[12:], uint32(permitted>>32))
	binary.LittleEndian.PutUint32(b[16:], uint32(inheritable>>32))
	return b
}

// ExecBlocked returns the file-permitted capabilities that exec cannot grant
// to a process with these sets. The kernel computes the new permitted set
// as (bounding & fP) | (pI & fI) and refuses the exec with EPERM when a
// capability of fP is missing from it (security/commoncap.c).
func ExecBlocked(fc *FileCaps, pc ProcCaps) uint64 {
	if fc == nil {
		return 0
	}
	granted := (pc.Bounding & fc.Permitted) | (pc.Inheritable & fc.Inheritable)
	return fc.Permitted &^ granted
}

// CapNames lists the capabilities of a mask as CAP_* names.
func CapNames(mask uint64) []string {
	var out []string
	for mask != 0 {
		n := bits.TrailingZeros64(mask)
		mask &^= 1 << n
		out = append(out, "CAP_"+strings.ToUpper(capability.Cap(n).String()))
	}
	return out
}

// setcapList renders a mask in setcap's syntax (cap_a,cap_b).
func setcapList(mask uint64) string {
	var out []string
	for _, n := range CapNames(mask) {
		out = append(out, strings.ToLower(n))
	}
	return strings.Join(out, ",")
}

// CapMask builds a mask from capabilities.
func CapMask(caps ...capability.Cap) uint64 {
	var m uint64
	for _, c := range caps {
		m |= 1 << uint(c)
	}
	return m
}

// String renders the caps as setcap would print them.
func (fc *FileCaps) String() string {
	if fc == nil {
		return "none"
	}
	flags := "p"
	if fc.Effective {
		flags = "ep"
	}
	s := setcapList(fc.Permitted) + "+" + flags
	if fc.Inheritable != 0 {
		s += " " + setcapList(fc.Inheritable) + "+i"
	}
	return s
}

package node

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// minDBFree is the least free space an ovsdb-server's directory must keep
// besides twice its database: a compaction writes a full copy next to it,
// and a transaction that cannot be appended fails every write (a pod ADD
// among them).
const minDBFree = 1 << 20

// dbSpace reports, as what the node waits for, a database directory too
// full for ovsdb-server to go on writing db.
func dbSpace(db string) error {
	dir := filepath.Dir(db)
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return nil // unreadable: nothing to tell
	}
	free := st.Bavail * uint64(st.Bsize)
	var size uint64
	if fi, err := os.Stat(db); err == nil {
		size = uint64(fi.Size())
	}
	if need := 2*size + minDBFree; free < need {
		return fmt.Errorf("free space under %s for %s (%d KiB free, %d KiB needed: twice the database and 1 MiB; free space on that filesystem)",
			dir, filepath.Base(db), free>>10, need>>10)
	}
	return nil
}

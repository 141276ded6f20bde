package daemon

import (
	"context"
	"os"
	"time"

	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// RotateLogs keeps each child's log file under maxSize bytes until ctx
// ends: past it, the file becomes <file>.1 (replacing the previous one)
// and the child reopens its log through unixctl (what logrotate's
// postrotate does for ovs-ctl installations). Talos and containers have no
// logrotate, and an unbounded /var/log/openvswitch fills a node's disk.
// Sizes are checked every interval; maxSize 0 never rotates.
func (s *Set) RotateLogs(ctx context.Context, maxSize int64, interval time.Duration) {
	if maxSize <= 0 {
		return
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, d := range s.daemons {
			c := d.Child()
			if c == nil || d.LogFile == "" || d.Ctl == nil {
				continue
			}
			st, err := os.Stat(d.LogFile)
			if err != nil || st.Size() <= maxSize {
				continue
			}
			if err := os.Rename(d.LogFile, d.LogFile+".1"); err != nil {
				s.Log.Warn("log rotation", "file", d.LogFile, "err", err)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = unixctl.Call(rctx, d.Ctl(c), "vlog/reopen")
			cancel()
			if err != nil {
				s.Log.Warn("log rotated but the child did not reopen it", "child", d.name, "file", d.LogFile, "err", err)
				continue
			}
			s.Log.Info("log rotated", "child", d.name, "file", d.LogFile, "size", st.Size())
		}
	}
}

package node

import (
	"context"
	"os"
	"time"

	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// rotateLogs keeps each child's log file under cfg.LogFileMaxSize: past
// it, the file becomes <file>.1 (replacing the previous one) and the child
// reopens its log through unixctl (what logrotate's postrotate does for
// ovs-ctl installations). Talos and containers have no logrotate, and an
// unbounded /var/log/openvswitch fills a node's disk.
func (n *Node) rotateLogs(ctx context.Context) {
	if n.cfg.LogFileMaxSize <= 0 {
		return
	}
	t := time.NewTicker(n.cfg.LogRotateInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, d := range n.daemons {
			c := d.Child()
			if c == nil || d.logFile == "" || d.ctl == nil {
				continue
			}
			st, err := os.Stat(d.logFile)
			if err != nil || st.Size() <= n.cfg.LogFileMaxSize {
				continue
			}
			if err := os.Rename(d.logFile, d.logFile+".1"); err != nil {
				n.log.Warn("log rotation", "file", d.logFile, "err", err)
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = unixctl.Call(rctx, d.ctl(c), "vlog/reopen")
			cancel()
			if err != nil {
				n.log.Warn("log rotated but the child did not reopen it", "child", d.name, "file", d.logFile, "err", err)
				continue
			}
			n.log.Info("log rotated", "child", d.name, "file", d.logFile, "size", st.Size())
		}
	}
}

package central

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/daemon"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// northdChild runs ovn-northd against the whole cluster (every member's
// NB and SB, as Kube-OVN does): its IDL looks for the leader itself, and
// of the members' northds the one holding the SB lock is active, the
// others stand by.
func (c *Central) northdChild() *daemon.Daemon {
	ch := c.daemons.New("ovn-northd")
	l := c.lay
	nb, sb := ovsdbconn.ClusterRemotes(c.members, c.ssl())
	ch.Prepare = func(context.Context, bool) error {
		return daemon.ClearStale("ovn-northd", l.NorthdPid, l.NorthdCtl)
	}
	ch.Spec = func() (process.Spec, error) {
		args := []string{"--ovnnb-db=" + nb, "--ovnsb-db=" + sb, "--pidfile=" + l.NorthdPid, "--unixctl=" + l.NorthdCtl}
		args = append(args, c.sslArgs()...)
		args = append(args, "--no-chdir", "-vconsole:info", "-vsyslog:off", "-vfile:info", "--log-file="+l.NorthdLog)
		return process.Spec{Name: "ovn-northd", Path: c.bins["ovn-northd"], Args: args, Env: c.childEnv()}, nil
	}
	ch.Gate = func(ctx context.Context, p *process.Child) error {
		c.health.Waiting("ovn-northd", "its connection to the cluster (status active or standby)")
		if err := waitSocket(ctx, l.NorthdCtl, p); err != nil {
			return err
		}
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			st, err := c.readNorthd(ctx)
			if err == nil && (st == "active" || st == "standby") {
				c.log.Info("ovn-northd connected", "status", st)
				return nil
			}
			select {
			case <-tick.C:
			case <-p.Exited():
				return errors.New("exited before it connected to the cluster")
			case <-ctx.Done():
				return fmt.Errorf("ovn-northd did not report active or standby (last: %q, %v): %w", st, err, ctx.Err())
			}
		}
	}
	ch.Graceful = func(ctx context.Context, _ *process.Child, _ bool) error {
		_, err := unixctl.Call(ctx, l.NorthdCtl, "exit")
		return err
	}
	return ch
}

// readNorthd asks ovn-northd whether it is active ("Status: active").
func (c *Central) readNorthd(ctx context.Context) (string, error) {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	out, err := unixctl.Call(qctx, c.lay.NorthdCtl, "status")
	if err != nil {
		return "", err
	}
	st := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(out), "Status:"))
	c.mu.Lock()
	c.northdStatus = st
	c.mu.Unlock()
	return st, nil
}

// childEnv points every OVS/OVN program at our directories.
func (c *Central) childEnv() []string {
	p := c.cfg.Paths
	return []string{
		"OVS_RUNDIR=" + p.OVNRunDir, "OVS_LOGDIR=" + p.OVNLogDir, "OVS_DBDIR=" + p.OVNDBDir, "OVS_SYSCONFDIR=" + p.OVNDBDir,
		"OVN_RUNDIR=" + p.OVNRunDir, "OVN_LOGDIR=" + p.OVNLogDir, "OVN_DBDIR=" + p.OVNDBDir, "OVN_SYSCONFDIR=" + p.OVNDBDir,
	}
}

func (c *Central) tlsConfig() *tls.Config {
	if c.tls == nil {
		return nil
	}
	return c.tls.Config()
}

package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/health"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// daemon is one supervised OVS/OVN program: how to run it, what to do
// before each start, how to tell it is ready, how to stop it gracefully, and
// which other daemons must be restarted after it restarts. It is a
// lifecycle.Unit; after Start it restarts the program whenever it dies.
type daemon struct {
	name string
	// spec builds the command line (it may depend on state, e.g. a pid).
	spec func() (process.Spec, error)
	// prepare runs before every start (stale files, next_cfg bump...).
	prepare func(ctx context.Context, restart bool) error
	// gate blocks until the running child is ready, or fails.
	gate func(ctx context.Context, c *process.Child) error
	// graceful asks the child to exit (nil: SIGTERM); final is false when
	// it is stopped only to be started again.
	graceful func(ctx context.Context, c *process.Child, final bool) error
	// logFile is the child's --log-file; ctl its control socket (for
	// vlog/reopen after rotation).
	logFile string
	ctl     func(c *process.Child) string
	// probe checks that a ready child still answers on its own channel
	// (nil: unixctl "version" on its control socket).
	probe func(ctx context.Context, c *process.Child) error
	// needs checks, after a probe the child answered, what it needs that a
	// restart would not bring back (ovn-controller: its SB connection;
	// ovsdb-server: free space for its database). A failure turns readiness
	// false with the reason but never kills or restarts the child: the
	// datapath keeps its flows, and the child resumes by itself.
	needs func(ctx context.Context, c *process.Child) error
	// pidfile is where the program writes its pid: with adopt-children, a
	// live process there is taken over at the first start.
	pidfile string
	// adoptWith: adopt this daemon's process only if adoptWith's was
	// adopted too (else it is stopped and started fresh).
	adoptWith *daemon
	// dependants are restarted, in order, after this daemon restarts.
	dependants []*daemon
	// beforeStop and afterStop run around the final stop (not restarts).
	beforeStop func()
	afterStop  func(ctx context.Context) error

	n       *Node
	log     *slog.Logger
	backoff *process.Backoff
	// restarts is shared by a daemon and its dependants.
	restarts *sync.Mutex

	mu       sync.Mutex
	child    *process.Child
	stopping bool
	// hung is why the supervisor killed the current child (missed probes).
	hung string
}

func (d *daemon) Name() string { return d.name }

// Start runs the program and waits for its gate.
func (d *daemon) Start(ctx context.Context) error {
	d.n.health.Register(d.name)
	return d.startAndGate(ctx, false)
}

func (d *daemon) startAndGate(ctx context.Context, restart bool) error {
	spec, err := d.spec()
	if err != nil {
		return err
	}
	if d.n.cfg.AdoptChildren && d.pidfile != "" {
		spec.OutputFIFO = outputFIFO(d.pidfile)
	}
	var c *process.Child
	if !restart {
		if c, err = d.adopt(spec); err != nil {
			return err
		}
	}
	if c == nil {
		if d.prepare != nil {
			if err := d.prepare(ctx, restart); err != nil {
				return err
			}
		}
		if c, err = process.Start(spec, d.n.log); err != nil {
			return d.n.explainExec(spec.Path, err)
		}
	}
	d.mu.Lock()
	d.child = c
	d.mu.Unlock()
	d.n.health.Started(d.name, c.Pid(), restart)
	go d.watch(c)

	gctx, cancel := context.WithTimeout(ctx, d.n.cfg.StartTimeout)
	defer cancel()
	t0 := time.Now()
	if err := d.gate(gctx, c); err != nil {
		select {
		case <-c.Exited():
			return fmt.Errorf("%s (pid %d) %s before it was ready: %w", d.name, c.Pid(), c.ExitReason(), err)
		default:
		}
		return fmt.Errorf("%s (pid %d): %w", d.name, c.Pid(), err)
	}
	d.n.health.Ready(d.name, time.Since(t0), time.Since(c.Started()))
	d.log.Info("ready", "child", d.name, "pid", c.Pid(), "gate", time.Since(t0).Round(time.Millisecond), "since_start", time.Since(c.Started()).Round(time.Millisecond))
	go d.probeLoop(c)
	return nil
}

// adopt takes over the daemon's running process, left by an ovnhost that
// crashed, when adopt-children is on and the pidfile names a live instance
// of the program; nil when there is none to adopt. Its preparation (stale
// files, configuration bumps, flow-restore-wait) is skipped: the process
// already runs with it, and its gate then passes at once.
func (d *daemon) adopt(spec process.Spec) (*process.Child, error) {
	if spec.OutputFIFO == "" {
		return nil, nil
	}
	pid, ok := livePid(d.pidfile, filepath.Base(spec.Path))
	if !ok {
		return nil, nil
	}
	c, err := process.Adopt(spec, pid, d.n.log)
	if err != nil {
		return nil, fmt.Errorf("%s from an earlier ovnhost is still running as pid %d (pidfile %s) but cannot be adopted: %w; stop it (kill %d) and start ovnhost again", d.name, pid, d.pidfile, err, pid)
	}
	if w := d.adoptWith; w != nil {
		if wc := w.Child(); wc == nil || !wc.Adopted() {
			d.log.Info("stopping the running child of an earlier ovnhost: "+w.name+" was started afresh", "child", d.name, "pid", pid)
			d.stopChild(d.n.ctx, c)
			return nil, nil
		}
	}
	d.log.Info("adopted the running child of an earlier ovnhost", "child", d.name, "pid", pid, "running_since", c.Started().Format(time.RFC3339))
	return c, nil
}

// outputFIFO is the named pipe beside a daemon's pidfile that carries its
// output when it may outlive ovnhost.
func outputFIFO(pidfile string) string {
	return strings.TrimSuffix(pidfile, ".pid") + ".output"
}

// probeLoop probes a ready child every ChildProbeInterval until it exits.
// A miss turns its readiness false with the reason; ChildProbeMisses in a
// row and the child is killed (SIGKILL: a hung or stopped process does
// not act on SIGTERM), which watch turns into a restart.
func (d *daemon) probeLoop(c *process.Child) {
	interval, limit := d.n.cfg.ChildProbeInterval, d.n.cfg.ChildProbeMisses
	if interval <= 0 || limit <= 0 {
		return
	}
	probe := d.probe
	if probe == nil {
		if d.ctl == nil {
			return
		}
		probe = func(ctx context.Context, c *process.Child) error {
			_, err := unixctl.Call(ctx, d.ctl(c), "version")
			return err
		}
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	lacking := false // needs reported a failure
	for {
		select {
		case <-c.Exited():
			return
		case <-d.n.ctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		current := d.child == c && !d.stopping
		d.mu.Unlock()
		if !current {
			return
		}
		pctx, cancel := context.WithTimeout(d.n.ctx, interval)
		err := probe(pctx, c)
		cancel()
		select {
		case <-c.Exited():
			return
		default:
		}
		if err == nil {
			if missed > 0 {
				d.log.Info("child answers its probe again", "child", d.name, "pid", c.Pid(), "missed", missed)
				d.n.health.Responsive(d.name)
			}
			missed = 0
			if d.needs != nil {
				lacking = d.checkNeeds(c, interval, lacking)
			}
			continue
		}
		missed++
		reason := fmt.Sprintf("an answer to its probe (%d of %d missed, every %s): %v", missed, limit, interval, err)
		d.n.health.Unresponsive(d.name, reason)
		if missed < limit {
			d.log.Warn("child missed a probe", "child", d.name, "pid", c.Pid(), "missed", missed, "limit", limit, "err", err)
			continue
		}
		d.mu.Lock()
		if d.child != c || d.stopping {
			d.mu.Unlock()
			return
		}
		d.hung = fmt.Sprintf("hung: killed after %d missed probes (every %s; last: %v)", missed, interval, err)
		d.mu.Unlock()
		d.log.Error("child is hung; killing it", "child", d.name, "pid", c.Pid(), "missed", missed, "err", err)
		_ = c.Signal(syscall.SIGKILL)
		return
	}
}

// checkNeeds runs d.needs and reports a change of its verdict; it returns
// whether something is lacking now.
func (d *daemon) checkNeeds(c *process.Child, interval time.Duration, lacking bool) bool {
	nctx, cancel := context.WithTimeout(d.n.ctx, interval)
	err := d.needs(nctx, c)
	cancel()
	switch {
	case err != nil && !lacking:
		d.log.Warn("child lacks what it needs; not ready until it is back (the child is left running)", "child", d.name, "pid", c.Pid(), "err", err)
		d.n.health.Lacking(d.name, err.Error())
		return true
	case err == nil && lacking:
		d.log.Info("child has what it needs again", "child", d.name, "pid", c.Pid())
		d.n.health.Responsive(d.name)
		return false
	}
	return lacking
}

// watch waits for one process instance to die and, unless that was asked
// for, restarts it.
func (d *daemon) watch(c *process.Child) {
	<-c.Exited()
	d.mu.Lock()
	mine := d.child == c && !d.stopping
	d.mu.Unlock()
	if !mine {
		return
	}
	d.restarts.Lock()
	defer d.restarts.Unlock()
	// Re-check under the restart lock: an upstream restart may have
	// replaced this child meanwhile.
	d.mu.Lock()
	mine = d.child == c && !d.stopping
	d.mu.Unlock()
	if !mine {
		return
	}
	d.recover(c)
}

// recover restarts a dead daemon with back-off until it is ready again,
// then restarts its dependants. Called with d.restarts held.
func (d *daemon) recover(dead *process.Child) {
	reason := dead.ExitReason()
	d.mu.Lock()
	if d.hung != "" {
		reason, d.hung = d.hung, ""
	}
	d.mu.Unlock()
	for {
		delay, loop := d.backoff.Died(time.Now())
		d.n.health.Exited(d.name, reason, loop)
		lvl := slog.LevelWarn
		if loop {
			lvl = slog.LevelError
		}
		d.log.Log(context.Background(), lvl, "child died, restarting", "child", d.name, "pid", dead.Pid(), "reason", reason, "delay", delay, "crash_loop", loop)
		select {
		case <-d.n.ctx.Done():
			return
		case <-time.After(delay):
		}
		// Dependants go down first: they need a fresh start against the
		// new process (ovn-controller's OpenFlow connection would
		// otherwise back off for seconds).
		for _, dep := range d.dependants {
			dep.stopForRestart(d.n.ctx)
		}
		err := d.startAndGate(d.n.ctx, true)
		if err == nil {
			break
		}
		if d.n.ctx.Err() != nil {
			return
		}
		reason = err.Error()
		d.mu.Lock()
		cur := d.child
		d.mu.Unlock()
		if cur != nil {
			// Not ready in time: put it down before trying again.
			d.stopChild(d.n.ctx, cur)
		}
	}
	for _, dep := range d.dependants {
		for {
			err := dep.startAndGate(d.n.ctx, true)
			if err == nil || d.n.ctx.Err() != nil {
				break
			}
			delay, loop := dep.backoff.Died(time.Now())
			dep.n.health.Exited(dep.name, err.Error(), loop)
			dep.log.Warn("dependant not ready after restart", "child", dep.name, "err", err, "delay", delay)
			select {
			case <-d.n.ctx.Done():
				return
			case <-time.After(delay):
			}
			dep.stopForRestart(d.n.ctx)
		}
	}
}

// stopForRestart stops the current process without it counting as a crash.
func (d *daemon) stopForRestart(ctx context.Context) {
	d.mu.Lock()
	c := d.child
	d.child = nil
	d.mu.Unlock()
	if c != nil {
		d.stopChild(ctx, c)
		d.n.health.Exited(d.name, "restarted with "+d.name+"'s dependency", false)
	}
}

func (d *daemon) stopChild(ctx context.Context, c *process.Child) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.n.cfg.StopTimeout)
	defer cancel()
	var g func() error
	if d.graceful != nil {
		g = func() error { return d.graceful(sctx, c, false) }
	}
	if err := c.Stop(sctx, g); err != nil {
		d.log.Warn("stop", "child", d.name, "err", err)
	}
}

// Stop ends the daemon for good.
func (d *daemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	d.stopping = true
	c := d.child
	d.mu.Unlock()
	if d.n.handover.Load() {
		if c != nil {
			d.log.Info("left running for the next ovnhost to adopt", "child", d.name, "pid", c.Pid())
		}
		return nil
	}
	if d.beforeStop != nil {
		d.beforeStop()
	}
	var errs []error
	if c != nil {
		var g func() error
		if d.graceful != nil {
			g = func() error { return d.graceful(ctx, c, true) }
		}
		if err := c.Stop(ctx, g); err != nil {
			errs = append(errs, err)
		}
		d.log.Info("stopped", "child", d.name, "pid", c.Pid())
	}
	if d.pidfile != "" {
		if err := os.Remove(outputFIFO(d.pidfile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d.afterStop != nil {
		errs = append(errs, d.afterStop(ctx))
	}
	return errors.Join(errs...)
}

// Child returns the running process, if any.
func (d *daemon) Child() *process.Child {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.child
}

var _ = health.Child{}

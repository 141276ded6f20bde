// Package daemon supervises OVS/OVN programs, for the node (ovsdb-server,
// ovs-vswitchd, ovn-controller, the all-in-one databases and ovn-northd)
// and for the central (its Raft databases and ovn-northd) alike: each is
// prepared and started in the foreground, gated on real readiness,
// probed once ready, restarted with back-off when it dies (its dependants
// after it), taken over from an earlier ovnhost with adopt-children, and
// stopped gracefully.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/ovnhost/ovnhost/internal/unixctl"
	"github.com/ovnhost/ovnhost/supervisor/process"
)

// Health is what the daemons report their transitions to
// (supervisor/health's Reporter).
type Health interface {
	Register(name string)
	Started(name string, pid int, restart bool)
	Waiting(name, what string)
	Ready(name string, waited, took time.Duration)
	Exited(name, reason string, crashLoop bool)
	Unresponsive(name, reason string)
	Lacking(name, reason string)
	Responsive(name string)
}

// Settings are how the daemons of a set are run.
type Settings struct {
	// StartTimeout bounds each readiness gate (but an Untimed daemon's);
	// StopTimeout each stop before the child is killed.
	StartTimeout, StopTimeout time.Duration
	// ProbeInterval and ProbeMisses: a ready child is probed every
	// interval and killed after that many missed probes in a row (0: no
	// probes).
	ProbeInterval time.Duration
	ProbeMisses   int
	// AdoptChildren: a daemon with a pidfile takes over the live process
	// an earlier ovnhost left there, and carries its output through a FIFO
	// so that it can outlive this one.
	AdoptChildren bool
}

// Set is the daemons of one supervisor: what they share, and the context
// their restarts and probes run under, from Start to Stop.
type Set struct {
	Settings
	Log    *slog.Logger
	Health Health
	// ExplainExec turns a failed exec into its cause (file capabilities
	// beyond the bounding set); nil leaves it as is.
	ExplainExec func(binary string, err error) error

	ctx    context.Context
	cancel context.CancelFunc
	// handover: Stop leaves the children running for the next ovnhost.
	handover atomic.Bool
	daemons  []*Daemon
}

// New declares a daemon; health knows it from now on, so READY=1 waits
// for every daemon of the set before any starts.
func (s *Set) New(name string) *Daemon {
	d := &Daemon{name: name, set: s, log: s.Log, Backoff: process.DefaultBackoff(), chain: &chain{}}
	s.daemons = append(s.daemons, d)
	s.Health.Register(name)
	return d
}

// Start begins the set's life: restarts, probes and the owner's own loops
// run under the returned context until Stop.
func (s *Set) Start(ctx context.Context) context.Context {
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	return s.ctx
}

// Context is the set's context (Background before Start).
func (s *Set) Context() context.Context {
	if s.ctx == nil {
		return context.Background()
	}
	return s.ctx
}

// Stop ends the set's context, so that recoveries in progress give up and
// no new one begins, then runs stop (the owner's lifecycle group, which
// stops the daemons in reverse order).
func (s *Set) Stop(ctx context.Context, stop func(context.Context) error) error {
	if s.cancel != nil {
		s.cancel()
	}
	return stop(ctx)
}

// HandOver makes the next Stop leave the children running, for the next
// ovnhost to adopt.
func (s *Set) HandOver() { s.handover.Store(true) }

// Get returns the named daemon (nil if none).
func (s *Set) Get(name string) *Daemon {
	for _, d := range s.daemons {
		if d.name == name {
			return d
		}
	}
	return nil
}

func (s *Set) explain(binary string, err error) error {
	if s.ExplainExec == nil {
		return err
	}
	return s.ExplainExec(binary, err)
}

// chain is shared by a daemon and its dependants: one recovery at a time
// within it, so a dependant restarted by its upstream's recovery is not
// also recovered as a crash of its own.
type chain struct {
	// mu is held by the recovery in progress.
	mu sync.Mutex

	cmu sync.Mutex
	// cancel ends the recovery in progress (nil when none).
	cancel context.CancelFunc
}

func (c *chain) setCancel(f context.CancelFunc) {
	c.cmu.Lock()
	c.cancel = f
	c.cmu.Unlock()
}

func (c *chain) cancelRecovery() {
	c.cmu.Lock()
	defer c.cmu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
}

// Daemon is one supervised program: how to run it, what to do before each
// start, how to tell it is ready, how to stop it gracefully, and which
// other daemons must be restarted after it restarts. It is a
// lifecycle.Unit; after Start it restarts the program whenever it dies.
type Daemon struct {
	name string
	// Spec builds the command line (it may depend on state, e.g. a pid).
	Spec func() (process.Spec, error)
	// Prepare runs before every start (stale files, next_cfg bump...).
	Prepare func(ctx context.Context, restart bool) error
	// Gate blocks until the running child is ready, or fails.
	Gate func(ctx context.Context, c *process.Child) error
	// Untimed gates wait for as long as the program runs: a central's
	// database waiting for the other members (a quorum) is not failing
	// to start.
	Untimed bool
	// Graceful asks the child to exit (nil: SIGTERM); final is false when
	// it is stopped only to be started again.
	Graceful func(ctx context.Context, c *process.Child, final bool) error
	// LogFile is the child's --log-file; Ctl its control socket (for
	// vlog/reopen after rotation, and the default probe).
	LogFile string
	Ctl     func(c *process.Child) string
	// Probe checks that a ready child still answers on its own channel
	// (nil: unixctl "version" on its control socket).
	Probe func(ctx context.Context, c *process.Child) error
	// Needs checks, after a probe the child answered, what it needs that a
	// restart would not bring back (ovn-controller: its SB connection;
	// ovsdb-server: free space for its database). A failure turns readiness
	// false with the reason but never kills or restarts the child: the
	// datapath keeps its flows, and the child resumes by itself.
	Needs func(ctx context.Context, c *process.Child) error
	// Pidfile is where the program writes its pid: with adopt-children, a
	// live process there is taken over at the first start.
	Pidfile string
	// AdoptWith: adopt this daemon's process only if AdoptWith's was
	// adopted too (else it is stopped and started fresh).
	AdoptWith *Daemon
	// BeforeStop and AfterStop run around the final stop (not restarts).
	BeforeStop func()
	AfterStop  func(ctx context.Context) error
	// Backoff paces the restarts.
	Backoff *process.Backoff

	set *Set
	log *slog.Logger
	// dependants are restarted, in order, after this daemon restarts.
	dependants []*Daemon
	chain      *chain

	mu       sync.Mutex
	child    *process.Child
	ready    bool // child passed its gate
	stopping bool
	// hung is why the supervisor killed the current child (missed probes).
	hung string
}

// SetDependants makes deps restart, in order, after d restarts; they
// share d's recoveries.
func (d *Daemon) SetDependants(deps ...*Daemon) {
	d.dependants = deps
	for _, dep := range deps {
		dep.chain = d.chain
	}
}

func (d *Daemon) Name() string { return d.name }

// Start runs the program and waits for its gate.
func (d *Daemon) Start(ctx context.Context) error {
	d.set.Health.Register(d.name)
	return d.startAndGate(ctx, false)
}

func (d *Daemon) startAndGate(ctx context.Context, restart bool) error {
	spec, err := d.Spec()
	if err != nil {
		return err
	}
	if d.set.AdoptChildren && d.Pidfile != "" {
		spec.OutputFIFO = OutputFIFO(d.Pidfile)
	}
	var c *process.Child
	if !restart {
		if c, err = d.adopt(spec); err != nil {
			return err
		}
	}
	if c == nil {
		if d.Prepare != nil {
			if err := d.Prepare(ctx, restart); err != nil {
				return err
			}
		}
		if c, err = process.Start(spec, d.log); err != nil {
			return d.set.explain(spec.Path, err)
		}
	}
	d.mu.Lock()
	d.child, d.ready = c, false
	d.mu.Unlock()
	d.set.Health.Started(d.name, c.Pid(), restart)
	go d.watch(c)

	gctx, cancel := context.WithCancel(ctx)
	if !d.Untimed {
		gctx, cancel = context.WithTimeout(ctx, d.set.StartTimeout)
	}
	defer cancel()
	t0 := time.Now()
	if err := d.Gate(gctx, c); err != nil {
		select {
		case <-c.Exited():
			return fmt.Errorf("%s (pid %d) %s before it was ready: %w", d.name, c.Pid(), c.ExitReason(), err)
		default:
		}
		return fmt.Errorf("%s (pid %d): %w", d.name, c.Pid(), err)
	}
	d.mu.Lock()
	d.ready = d.child == c
	d.mu.Unlock()
	d.set.Health.Ready(d.name, time.Since(t0), time.Since(c.Started()))
	d.log.Info("ready", "child", d.name, "pid", c.Pid(), "gate", time.Since(t0).Round(time.Millisecond), "since_start", time.Since(c.Started()).Round(time.Millisecond))
	go d.probeLoop(c)
	return nil
}

// adopt takes over the daemon's running process, left by an ovnhost that
// crashed, when adopt-children is on and the pidfile names a live instance
// of the program; nil when there is none to adopt. Its preparation (stale
// files, configuration bumps, flow-restore-wait) is skipped: the process
// already runs with it, and its gate then passes at once.
func (d *Daemon) adopt(spec process.Spec) (*process.Child, error) {
	if spec.OutputFIFO == "" {
		return nil, nil
	}
	pid, ok := LivePid(d.Pidfile, filepath.Base(spec.Path))
	if !ok {
		return nil, nil
	}
	c, err := process.Adopt(spec, pid, d.log)
	if err != nil {
		return nil, fmt.Errorf("%s from an earlier ovnhost is still running as pid %d (pidfile %s) but cannot be adopted: %w; stop it (kill %d) and start ovnhost again", d.name, pid, d.Pidfile, err, pid)
	}
	if w := d.AdoptWith; w != nil {
		if wc := w.Child(); wc == nil || !wc.Adopted() {
			d.log.Info("stopping the running child of an earlier ovnhost: "+w.name+" was started afresh", "child", d.name, "pid", pid)
			d.stopChild(d.set.Context(), c)
			return nil, nil
		}
	}
	d.log.Info("adopted the running child of an earlier ovnhost", "child", d.name, "pid", pid, "running_since", c.Started().Format(time.RFC3339))
	return c, nil
}

// OutputFIFO is the named pipe beside a daemon's pidfile that carries its
// output when it may outlive ovnhost.
func OutputFIFO(pidfile string) string {
	return strings.TrimSuffix(pidfile, ".pid") + ".output"
}

// probeLoop probes a ready child every ProbeInterval until it exits.
// A miss turns its readiness false with the reason; ProbeMisses in a
// row and the child is killed (SIGKILL: a hung or stopped process does
// not act on SIGTERM), which watch turns into a restart.
func (d *Daemon) probeLoop(c *process.Child) {
	interval, limit := d.set.ProbeInterval, d.set.ProbeMisses
	if interval <= 0 || limit <= 0 {
		return
	}
	probe := d.Probe
	if probe == nil {
		if d.Ctl == nil {
			return
		}
		probe = func(ctx context.Context, c *process.Child) error {
			_, err := unixctl.Call(ctx, d.Ctl(c), "version")
			return err
		}
	}
	sctx := d.set.Context()
	t := time.NewTicker(interval)
	defer t.Stop()
	missed := 0
	lacking := false // Needs reported a failure
	for {
		select {
		case <-c.Exited():
			return
		case <-sctx.Done():
			return
		case <-t.C:
		}
		d.mu.Lock()
		current := d.child == c && !d.stopping
		d.mu.Unlock()
		if !current {
			return
		}
		pctx, cancel := context.WithTimeout(sctx, interval)
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
				d.set.Health.Responsive(d.name)
			}
			missed = 0
			if d.Needs != nil {
				lacking = d.checkNeeds(c, interval, lacking)
			}
			continue
		}
		missed++
		reason := fmt.Sprintf("an answer to its probe (%d of %d missed, every %s): %v", missed, limit, interval, err)
		d.set.Health.Unresponsive(d.name, reason)
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

// checkNeeds runs d.Needs and reports a change of its verdict; it returns
// whether something is lacking now.
func (d *Daemon) checkNeeds(c *process.Child, interval time.Duration, lacking bool) bool {
	nctx, cancel := context.WithTimeout(d.set.Context(), interval)
	err := d.Needs(nctx, c)
	cancel()
	switch {
	case err != nil && !lacking:
		d.log.Warn("child lacks what it needs; not ready until it is back (the child is left running)", "child", d.name, "pid", c.Pid(), "err", err)
		d.set.Health.Lacking(d.name, err.Error())
		return true
	case err == nil && lacking:
		d.log.Info("child has what it needs again", "child", d.name, "pid", c.Pid())
		d.set.Health.Responsive(d.name)
		return false
	}
	return lacking
}

// watch waits for one process instance to die and, unless that was asked
// for or the set is stopping, restarts it.
func (d *Daemon) watch(c *process.Child) {
	<-c.Exited()
	d.mu.Lock()
	mine := d.child == c && !d.stopping
	if d.child == c {
		d.ready = false
	}
	d.mu.Unlock()
	if !mine {
		return
	}
	d.chain.mu.Lock()
	defer d.chain.mu.Unlock()
	// Re-check under the chain's lock: an upstream restart may have
	// replaced this child meanwhile, or the supervisor begun to stop.
	d.mu.Lock()
	mine = d.child == c && !d.stopping
	d.mu.Unlock()
	sctx := d.set.Context()
	if !mine || sctx.Err() != nil {
		return
	}
	rctx, cancel := context.WithCancel(sctx)
	d.chain.setCancel(cancel)
	defer func() { d.chain.setCancel(nil); cancel() }()
	d.recover(rctx, c)
}

// recover restarts a dead daemon with back-off until it is ready again,
// then restarts its dependants, until ctx ends. Called with the chain's
// lock held.
func (d *Daemon) recover(ctx context.Context, dead *process.Child) {
	reason := dead.ExitReason()
	d.mu.Lock()
	if d.hung != "" {
		reason, d.hung = d.hung, ""
	}
	d.mu.Unlock()
	for {
		delay, loop := d.Backoff.Died(time.Now())
		d.set.Health.Exited(d.name, reason, loop)
		lvl := slog.LevelWarn
		if loop {
			lvl = slog.LevelError
		}
		d.log.Log(context.Background(), lvl, "child died, restarting", "child", d.name, "pid", dead.Pid(), "reason", reason, "delay", delay, "crash_loop", loop)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		// Dependants go down first: they need a fresh start against the
		// new process (ovn-controller's OpenFlow connection would
		// otherwise back off for seconds).
		for _, dep := range d.dependants {
			dep.stopForRestart(ctx)
		}
		err := d.startAndGate(ctx, true)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return
		}
		reason = err.Error()
		d.mu.Lock()
		cur := d.child
		d.mu.Unlock()
		if cur != nil {
			// Not ready in time: put it down before trying again.
			d.stopChild(ctx, cur)
		}
	}
	for _, dep := range d.dependants {
		for {
			err := dep.startAndGate(ctx, true)
			if err == nil || ctx.Err() != nil {
				break
			}
			delay, loop := dep.Backoff.Died(time.Now())
			d.set.Health.Exited(dep.name, err.Error(), loop)
			dep.log.Warn("dependant not ready after restart", "child", dep.name, "err", err, "delay", delay)
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			dep.stopForRestart(ctx)
		}
	}
}

// stopForRestart stops the current process without it counting as a crash.
func (d *Daemon) stopForRestart(ctx context.Context) {
	d.mu.Lock()
	c := d.child
	d.child, d.ready = nil, false
	d.mu.Unlock()
	if c != nil {
		d.stopChild(ctx, c)
		d.set.Health.Exited(d.name, "restarted with "+d.name+"'s dependency", false)
	}
}

func (d *Daemon) stopChild(ctx context.Context, c *process.Child) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.set.StopTimeout)
	defer cancel()
	var g func() error
	if d.Graceful != nil {
		g = func() error { return d.Graceful(sctx, c, false) }
	}
	if err := c.Stop(sctx, g); err != nil {
		d.log.Warn("stop", "child", d.name, "err", err)
	}
}

// Stop ends the daemon for good. A recovery in progress in its chain is
// cancelled and finishes first, so that Stop never misses a process it
// started.
func (d *Daemon) Stop(ctx context.Context) error {
	d.mu.Lock()
	d.stopping, d.ready = true, false
	d.mu.Unlock()
	d.chain.cancelRecovery()
	d.chain.mu.Lock()
	defer d.chain.mu.Unlock()
	d.mu.Lock()
	c := d.child
	d.mu.Unlock()
	if d.set.handover.Load() {
		if c != nil {
			d.log.Info("left running for the next ovnhost to adopt", "child", d.name, "pid", c.Pid())
		}
		return nil
	}
	if d.BeforeStop != nil {
		d.BeforeStop()
	}
	var errs []error
	if c != nil {
		var g func() error
		if d.Graceful != nil {
			g = func() error { return d.Graceful(ctx, c, true) }
		}
		if err := c.Stop(ctx, g); err != nil {
			errs = append(errs, err)
		}
		d.log.Info("stopped", "child", d.name, "pid", c.Pid())
	}
	if d.Pidfile != "" {
		if err := os.Remove(OutputFIFO(d.Pidfile)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if d.AfterStop != nil {
		errs = append(errs, d.AfterStop(ctx))
	}
	return errors.Join(errs...)
}

// Child returns the running process, if any.
func (d *Daemon) Child() *process.Child {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.child
}

// Ready returns the running process once it passed its gate (nil while
// it starts or restarts).
func (d *Daemon) Ready() *process.Child {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.ready {
		return nil
	}
	return d.child
}

package central

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ovnhost/ovnhost/supervisor/process"
)

// child is one supervised program of the central, a lifecycle unit: it is
// prepared, started in the foreground and gated like the node's daemons,
// and restarted with back-off when it dies. The central has no chain of
// dependants (ovn-northd reconnects to the databases by itself), so this
// is the node's daemon without its dependant restarts.
type child struct {
	name string
	c    *Central
	// prepare runs before every start (stale files, database file).
	prepare func(ctx context.Context, restart bool) error
	spec    func() process.Spec
	// gate blocks until the running program is ready.
	gate func(ctx context.Context, p *process.Child) error
	// graceful asks the program to exit (nil: SIGTERM).
	graceful func(ctx context.Context, p *process.Child) error
	// untimed gates wait for as long as the program runs: a database
	// waiting for the other members (a quorum) is not failing to start.
	untimed bool
	backoff *process.Backoff

	// restart is held while a dead program is being started again, so
	// that Stop never misses a process started under it.
	restart sync.Mutex
	// cancelRestart ends the restart in progress (its gate) when Stop comes.
	cancelRestart context.CancelFunc

	mu       sync.Mutex
	proc     *process.Child
	ready    bool
	stopping bool
}

func (c *Central) newChild(name string) *child {
	ch := &child{name: name, c: c, backoff: process.DefaultBackoff()}
	c.health.Register(name)
	return ch
}

func (ch *child) Name() string { return ch.name }

func (ch *child) Start(ctx context.Context) error { return ch.startAndGate(ctx, false) }

func (ch *child) startAndGate(ctx context.Context, restart bool) error {
	if ch.prepare != nil {
		if err := ch.prepare(ctx, restart); err != nil {
			return err
		}
	}
	spec := ch.spec()
	p, err := process.Start(spec, ch.c.log)
	if err != nil {
		return ch.c.explainExec(spec.Path, err)
	}
	ch.mu.Lock()
	ch.proc, ch.ready = p, false
	ch.mu.Unlock()
	ch.c.health.Started(ch.name, p.Pid(), restart)
	go ch.watch(p)
	gctx, cancel := context.WithCancel(ctx)
	if !ch.untimed {
		gctx, cancel = context.WithTimeout(ctx, ch.c.cfg.StartTimeout)
	}
	defer cancel()
	t0 := time.Now()
	if err := ch.gate(gctx, p); err != nil {
		select {
		case <-p.Exited():
			return fmt.Errorf("%s (pid %d) %s before it was ready: %w", ch.name, p.Pid(), p.ExitReason(), err)
		default:
		}
		return fmt.Errorf("%s (pid %d): %w", ch.name, p.Pid(), err)
	}
	ch.mu.Lock()
	ch.ready = true
	ch.mu.Unlock()
	ch.c.health.Ready(ch.name, time.Since(t0), time.Since(p.Started()))
	ch.c.log.Info("ready", "child", ch.name, "pid", p.Pid(), "gate", time.Since(t0).Round(time.Millisecond))
	return nil
}

// running returns the process once it passed its gate (nil before).
func (ch *child) running() *process.Child {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	if !ch.ready {
		return nil
	}
	return ch.proc
}

func (ch *child) watch(p *process.Child) {
	<-p.Exited()
	ch.mu.Lock()
	mine := ch.proc == p && !ch.stopping
	if mine {
		ch.ready = false
	}
	ch.mu.Unlock()
	if !mine {
		return
	}
	reason := p.ExitReason()
	for {
		delay, loop := ch.backoff.Died(time.Now())
		ch.c.health.Exited(ch.name, reason, loop)
		lvl := slog.LevelWarn
		if loop {
			lvl = slog.LevelError
		}
		ch.c.log.Log(context.Background(), lvl, "child died, restarting", "child", ch.name, "pid", p.Pid(), "reason", reason, "delay", delay, "crash_loop", loop)
		select {
		case <-ch.c.ctx.Done():
			return
		case <-time.After(delay):
		}
		ch.restart.Lock()
		ch.mu.Lock()
		stopping := ch.stopping
		ch.mu.Unlock()
		if stopping {
			ch.restart.Unlock()
			return
		}
		rctx, cancel := context.WithCancel(ch.c.ctx)
		ch.mu.Lock()
		ch.cancelRestart = cancel
		ch.mu.Unlock()
		err := ch.startAndGate(rctx, true)
		cancel()
		ch.restart.Unlock()
		if err == nil || ch.c.ctx.Err() != nil {
			return
		}
		reason = err.Error()
		ch.mu.Lock()
		cur := ch.proc
		ch.mu.Unlock()
		if cur != nil {
			// Not ready in time: down before the next try (its own
			// watch sees it is no longer the one to restart).
			ch.mu.Lock()
			ch.proc = nil
			ch.mu.Unlock()
			ch.stopProc(ch.c.ctx, cur)
		}
	}
}

func (ch *child) stopProc(ctx context.Context, p *process.Child) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ch.c.cfg.StopTimeout)
	defer cancel()
	var g func() error
	if ch.graceful != nil {
		g = func() error { return ch.graceful(sctx, p) }
	}
	return p.Stop(sctx, g)
}

// Stop ends the program for good.
func (ch *child) Stop(ctx context.Context) error {
	ch.mu.Lock()
	ch.stopping = true
	ch.ready = false
	if ch.cancelRestart != nil {
		ch.cancelRestart()
	}
	ch.mu.Unlock()
	// A restart in progress finishes first: its gate was just cancelled.
	ch.restart.Lock()
	defer ch.restart.Unlock()
	ch.mu.Lock()
	p := ch.proc
	ch.mu.Unlock()
	if p == nil {
		return nil
	}
	var errs []error
	if err := ch.stopProc(ctx, p); err != nil {
		errs = append(errs, err)
	}
	ch.c.log.Info("stopped", "child", ch.name, "pid", p.Pid())
	return errors.Join(errs...)
}

// Package lifecycle runs the daemon's subsystems as units: started one after
// another in dependency order, each gated on its own readiness, and stopped in
// reverse order when the daemon stops or a start fails.
package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
)

// Unit is one subsystem of the node daemon. Start returns once the unit is
// ready (or ctx ends); Stop undoes what Start did and must be safe to call
// after a failed or partial Start.
type Unit interface {
	Name() string
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
}

// Observer is told about unit transitions (health reporting hooks in here).
type Observer interface {
	Starting(name string)
	Started(name string, took time.Duration)
}

// Group is an ordered list of units.
type Group struct {
	Units    []Unit
	Log      *slog.Logger
	Observer Observer
	started  []Unit
}

// Start starts the units in order. On failure it stops the ones already
// started, in reverse, and returns the error naming the unit.
func (g *Group) Start(ctx context.Context, stopTimeout time.Duration) error {
	for _, u := range g.Units {
		if g.Observer != nil {
			g.Observer.Starting(u.Name())
		}
		t0 := time.Now()
		g.started = append(g.started, u)
		if err := u.Start(ctx); err != nil {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), stopTimeout)
			defer cancel()
			return errors.Join(fmt.Errorf("start %s: %w", u.Name(), err), g.Stop(sctx))
		}
		if g.Observer != nil {
			g.Observer.Started(u.Name(), time.Since(t0))
		}
		if g.Log != nil {
			g.Log.Info("unit ready", "unit", u.Name(), "took", time.Since(t0).Round(time.Millisecond))
		}
	}
	return nil
}

// Stop stops every started unit in reverse order, collecting errors.
func (g *Group) Stop(ctx context.Context) error {
	var errs []error
	for i := len(g.started) - 1; i >= 0; i-- {
		u := g.started[i]
		if err := u.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", u.Name(), err))
		}
	}
	g.started = nil
	return errors.Join(errs...)
}

// Parallel is a unit made of independent chains: each chain starts in
// order on its own goroutine, all chains at once; it is ready when every
// chain is. A failing chain cancels the others; Stop stops every chain in
// reverse order, the chains concurrently.
type Parallel struct {
	Label  string
	Chains [][]Unit
	Log    *slog.Logger
	groups []*Group
}

func (p *Parallel) Name() string { return p.Label }

func (p *Parallel) Start(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p.groups = make([]*Group, len(p.Chains))
	errs := make(chan error, len(p.Chains))
	for i, chain := range p.Chains {
		g := &Group{Units: chain, Log: p.Log}
		p.groups[i] = g
		go func() {
			err := g.startNoRollback(ctx)
			if err != nil {
				cancel()
			}
			errs <- err
		}()
	}
	var all []error
	for range p.Chains {
		if err := <-errs; err != nil && !errors.Is(err, context.Canceled) {
			all = append(all, err)
		}
	}
	if len(all) == 0 {
		// Every chain ended cleanly or was cancelled from outside.
		return ctx.Err()
	}
	return errors.Join(all...)
}

func (p *Parallel) Stop(ctx context.Context) error {
	errs := make(chan error, len(p.groups))
	for _, g := range p.groups {
		go func() { errs <- g.Stop(ctx) }()
	}
	var all []error
	for range p.groups {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// startNoRollback starts units in order and leaves the started ones for
// the caller's Stop.
func (g *Group) startNoRollback(ctx context.Context) error {
	for _, u := range g.Units {
		if err := ctx.Err(); err != nil {
			return err
		}
		if g.Observer != nil {
			g.Observer.Starting(u.Name())
		}
		t0 := time.Now()
		g.started = append(g.started, u)
		if err := u.Start(ctx); err != nil {
			return fmt.Errorf("start %s: %w", u.Name(), err)
		}
		if g.Log != nil {
			g.Log.Info("unit ready", "unit", u.Name(), "took", time.Since(t0).Round(time.Millisecond))
		}
	}
	return nil
}

// Describe names units in start order, a Parallel unit as its label and
// its chains: "a ovn-central+ovs(b c | d e) f".
func Describe(units []Unit) string {
	names := make([]string, len(units))
	for i, u := range units {
		names[i] = u.Name()
		if p, ok := u.(*Parallel); ok {
			chains := make([]string, len(p.Chains))
			for j, c := range p.Chains {
				chains[j] = Describe(c)
			}
			names[i] += "(" + strings.Join(chains, " | ") + ")"
		}
	}
	return strings.Join(names, " ")
}

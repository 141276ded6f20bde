// Package hostnat is the host side of natOutgoing (issue 10): the node
// daemon masquerades packets from pod subnets with natOutgoing that leave
// the cluster, with rules in its own nft tables (`ip ovnhost`, `ip6
// ovnhost`) or its own iptables-legacy chain (nat OVNHOST-POSTROUTING,
// jumped to from POSTROUTING), whichever the host uses. A Manager converges
// the kernel to the desired Rules (Apply), puts them back within a second
// when a firewall reload or another agent flushes them (Run), and deletes
// them at stop (Remove); Cleanup removes the leftovers of both backends for
// `ovnhost cleanup`.
//
// The same Manager keeps the host firewall guard (guard.go, issue 23):
// packets from pods (arriving on ovn0 or br-egw) to the OVN central's,
// the node API's and the tunnel ports are dropped, in table inet
// ovnhost-guard or the iptables-legacy chain filter OVNHOST-GUARD
// (ApplyGuard, RemoveGuard), restored by Run like the masquerade rules.
//
// The rule and set computation (compute.go) is pure; the backends talk to
// the kernel through github.com/google/nftables (netlink) and
// github.com/coreos/go-iptables (the legacy iptables programs).
package hostnat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// Rules is the desired state: masquerade packets whose source is in
// NATOutgoing and whose destination is in none of Exclude. Both lists may
// mix IPv4 and IPv6 prefixes; a family without NATOutgoing prefixes gets no
// table or chain.
type Rules struct {
	// NATOutgoing are the pod subnets with natOutgoing.
	NATOutgoing []netip.Prefix
	// Exclude are the destinations never masqueraded: the cluster's pod
	// subnets, the join subnet, the service CIDR, the node addresses.
	Exclude []netip.Prefix
	// SNAT are sources translated to a given address instead of the
	// outgoing interface's (a centralized subnet's gatewayNode
	// "node:IP"); checked before the masquerade, Exclude applies too.
	SNAT []SNAT
}

// SNAT translates packets from From to the source address To.
type SNAT struct {
	From netip.Prefix
	To   netip.Addr
}

// Backend names, as the setting spells them.
const (
	BackendAuto   = "auto"
	BackendNFT    = "nft"
	BackendLegacy = "iptables-legacy"
)

// LegacyCheckInterval is how often the iptables-legacy backend re-reads its
// chain (there are no change notifications for legacy tables).
// NFTCheckInterval is the safety re-read of the nft backend, which reacts to
// netlink monitor events in between.
var (
	LegacyCheckInterval = 500 * time.Millisecond
	NFTCheckInterval    = 5 * time.Second
)

// backend is one way of programming the kernel.
type backend interface {
	name() string
	// sync reports whether the kernel holds exactly n; the reason says
	// what differs.
	sync(n normalized) (ok bool, reason string, err error)
	// apply converges the kernel to n.
	apply(n normalized) error
	// remove deletes everything the backend creates; absent is fine.
	remove() error
	// changes returns a channel that receives when the backend's kernel
	// state may have changed (nil: none, the ticker alone), and a stop.
	changes(ctx context.Context) (<-chan struct{}, func())
	interval() time.Duration

	// The guard (guard.go): guardSync reports whether the kernel holds
	// exactly g (nil: no guard at all); guardApply converges to g;
	// guardRemove deletes the guard (absent is fine); guardDrops is the
	// number of packets its drop rules counted.
	guardSync(g *guardRules) (ok bool, reason string, err error)
	guardApply(g guardRules) error
	guardRemove() error
	guardDrops() (uint64, error)
}

// Manager owns the host NAT rules of one backend.
type Manager struct {
	log *slog.Logger
	be  backend
	ns  *nsHandle // the network namespace New was called in

	mu      sync.Mutex
	desired *normalized // nil until the first Apply
	guard   *guardRules // nil until ApplyGuard, and after RemoveGuard
	// guardReport is told when the guard cannot be restored (err) and
	// when it is back (nil).
	guardReport func(error)
}

// New returns a Manager for backend "auto" (Detect), "nft" or
// "iptables-legacy" ("" means auto). The Manager programs the network
// namespace of the calling thread.
func New(backendName string, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ns, err := currentNS()
	if err != nil {
		return nil, err
	}
	name := backendName
	if name == "" || name == BackendAuto {
		d, err := detectIn(ns)
		if err != nil {
			ns.close()
			return nil, err
		}
		name = d.Backend
		log.Info("host NAT backend detected", "backend", name, "reason", d.Reason)
	}
	var be backend
	switch name {
	case BackendNFT:
		be, err = newNFT(ns, log)
	case BackendLegacy:
		be, err = newLegacy(ns, log)
	default:
		err = fmt.Errorf("hostnat: unknown backend %q: use auto, nft or iptables-legacy", backendName)
	}
	if err != nil {
		ns.close()
		return nil, err
	}
	return &Manager{log: log.With("backend", name), be: be, ns: ns}, nil
}

// Backend is the name of the Manager's backend (nft or iptables-legacy).
func (m *Manager) Backend() string { return m.be.name() }

// Close releases the namespace handle; it does not touch the rules.
func (m *Manager) Close() error {
	m.ns.close()
	return nil
}

// Apply converges the kernel to r and makes r what Run keeps in place. It
// is idempotent: when the kernel already holds r nothing is written.
func (m *Manager) Apply(ctx context.Context, r Rules) error {
	n, err := normalize(r)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.desired = &n
	return m.converge(n, "apply")
}

// converge writes n when the kernel differs; m.mu is held.
func (m *Manager) converge(n normalized, why string) error {
	ok, reason, err := m.be.sync(n)
	if err != nil {
		m.log.Debug("host NAT state unreadable, re-applying", "err", err)
	} else if ok {
		return nil
	}
	if why != "apply" {
		m.log.Warn("host NAT rules changed by someone else, restoring them", "differs", reason)
	} else {
		m.log.Debug("host NAT rules written", "differs", reason)
	}
	if err := m.be.apply(n); err != nil {
		return err
	}
	// Connections that started while the rules were missing are tracked
	// untranslated and would stay so: let them start again (conntrack.go).
	if c, err := m.flushUnNATed(n); err != nil {
		m.log.Warn("host NAT: could not remove untranslated pod connections; they recover when conntrack forgets them", "err", err)
	} else if c > 0 {
		m.log.Info("host NAT: removed pod connections tracked before the masquerade rules existed", "flows", c)
	}
	return nil
}

// check re-reads the kernel and restores the desired rules.
func (m *Manager) check() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.desired == nil {
		return nil
	}
	return m.converge(*m.desired, "reconcile")
}

// ApplyGuard installs the guard g (guard.go) and makes it what Run keeps
// in place, independently of the masquerade rules. Idempotent.
func (m *Manager) ApplyGuard(ctx context.Context, g Guard) error {
	r, err := normalizeGuard(g)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.guard = &r
	return m.convergeGuard(r, "apply")
}

// convergeGuard writes g when the kernel differs; m.mu is held.
func (m *Manager) convergeGuard(g guardRules, why string) error {
	ok, reason, err := m.be.guardSync(&g)
	if err != nil {
		return err
	} else if ok {
		return nil
	}
	if why != "apply" {
		m.log.Warn("host firewall guard changed by someone else, restoring it", "differs", reason)
	} else {
		m.log.Debug("host firewall guard written", "differs", reason)
	}
	return m.be.guardApply(g)
}

// checkGuard re-reads the kernel and restores the guard.
func (m *Manager) checkGuard() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.guard == nil {
		return nil
	}
	return m.convergeGuard(*m.guard, "reconcile")
}

// RemoveGuard deletes the guard and forgets it, so a running Run stops
// restoring it.
func (m *Manager) RemoveGuard(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.guard = nil
	return m.be.guardRemove()
}

// GuardDrops is the number of packets the guard's drop rules counted.
func (m *Manager) GuardDrops() (uint64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.be.guardDrops()
}

// OnGuard sets what Run tells when the guard cannot be restored (the
// error) and when it is back (nil); set it before Run.
func (m *Manager) OnGuard(fn func(error)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.guardReport = fn
}

// Run keeps the rules of the last Apply in the kernel until ctx ends: the
// nft backend reacts to nftables netlink events (with a slow safety
// re-read), the legacy backend re-reads its chain every
// LegacyCheckInterval. Either restores flushed or changed rules within a
// second. Errors are logged and retried; Run returns nil when ctx ends.
func (m *Manager) Run(ctx context.Context) error {
	events, stop := m.be.changes(ctx)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	t := time.NewTicker(m.be.interval())
	defer t.Stop()
	failing, guardFailing := false, false
	// One check right after subscribing: changes made before the
	// subscription produced no event.
	kick := make(chan struct{}, 1)
	kick <- struct{}{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-kick:
		case <-t.C:
		case _, ok := <-events:
			if !ok {
				// The monitor ended (netlink overrun): subscribe again, the
				// ticker covers the gap.
				stop()
				events, stop = m.be.changes(ctx)
				kick <- struct{}{}
				continue
			}
			// Coalesce a burst (one nft transaction sends many events).
			for drained := false; !drained; {
				select {
				case <-events:
				default:
					drained = true
				}
			}
		}
		if err := m.checkGuard(); err != nil {
			if !guardFailing {
				m.log.Error("host firewall guard cannot be restored: pods can reach the node's OVN, node API and tunnel ports", "err", err)
				m.reportGuard(err)
			}
			guardFailing = true
		} else if guardFailing {
			m.log.Info("host firewall guard restored")
			m.reportGuard(nil)
			guardFailing = false
		}
		if err := m.check(); err != nil {
			if !failing {
				m.log.Error("host NAT rules cannot be restored", "err", err)
			}
			failing = true
			continue
		}
		if failing {
			m.log.Info("host NAT rules restored")
			failing = false
		}
	}
}

func (m *Manager) reportGuard(err error) {
	m.mu.Lock()
	fn := m.guardReport
	m.mu.Unlock()
	if fn != nil {
		fn(err)
	}
}

// Remove deletes the masquerade rules the Manager's backend creates
// (tables, chain, jump rule) and forgets them, so a running Run stops
// restoring them. The guard stays (RemoveGuard).
func (m *Manager) Remove(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.desired = nil
	return m.be.remove()
}

// Cleanup removes what either backend may have left on the host (the nft
// tables ip/ip6/inet ovnhost and inet ovnhost-guard, the iptables-legacy
// chains OVNHOST-POSTROUTING and OVNHOST-GUARD and their jumps) with
// no Manager state, for `ovnhost cleanup`. A backend whose kernel support or
// programs are missing has nothing to remove and is skipped.
func Cleanup(log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ns, err := currentNS()
	if err != nil {
		return err
	}
	defer ns.close()
	var errs []error
	if n, err := newNFT(ns, log); err == nil {
		if err := n.removeAll(); err != nil && !isUnsupported(err) {
			errs = append(errs, err)
		}
		if err := n.guardRemove(); err != nil && !isUnsupported(err) {
			errs = append(errs, err)
		}
	}
	if l, err := newLegacy(ns, log); err == nil {
		if err := l.remove(); err != nil {
			errs = append(errs, err)
		}
		if err := l.guardRemove(); err != nil {
			errs = append(errs, err)
		}
	} else {
		log.Debug("no iptables-legacy to clean", "err", err)
	}
	return errors.Join(errs...)
}

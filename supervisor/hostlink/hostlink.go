// Package hostlink moves the IP configuration of one host link to another
// and back, all or nothing: the tunnel endpoint from the NIC to br-phy
// (--userspace-tunnel), a NIC's configuration to the internal port of its
// OVS bridge (underlay networks). What moves:
//
//   - the global addresses, IPv4 and IPv6, with their flags, lifetimes (a
//     DHCP lease stays a lease), labels (renamed for the new link) and
//     broadcast; IPv6 link-local addresses stay;
//   - the routes through the link in every table, multipath routes whose
//     nexthops use it included, except those the kernel makes for an address
//     (they follow it) and those with a lifetime (router advertisements);
//   - the policy rules naming the link (iif, oif), rewritten;
//   - its permanent neighbours;
//   - its MTU and, on request, its MAC address; the target is set up.
//
// Share gives the target a copy of the addresses first (a bridge about to
// take the link as its port then answers for them at once); Move then moves
// routes, rules and neighbours before the source's addresses go, so the
// host is never without a route.
//
// Kube-OVN's equivalent copies main-table routes only and turns leases into
// permanent addresses: hosts lost their policy routing, or kept an address
// after its lease. What the netlink library cannot carry (nexthop objects,
// lightweight tunnels, source-specific IPv6 routes, a route preference) is
// refused before any change, naming the route.
//
// Pure netlink: no OVS, no Kubernetes. The caller owns both links.
package hostlink

import (
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
)

// Options tune Move.
type Options struct {
	// CopyMAC gives the target the MAC address of the source: an OVS
	// bridge that takes over a NIC's configuration must keep the NIC's MAC
	// so the network (switch port security, DHCP reservations, neighbours'
	// caches) still sees the same host.
	CopyMAC bool
	// JournalDir, when set, holds one file per moved link (<link>.json):
	// what the link had, written before the first change, so that Restore
	// can put it back after a crash mid-move. A move back removes it.
	JournalDir string
	// DADTimeout bounds the wait for IPv6 duplicate address detection of
	// the moved addresses (default 10s; the kernel's default takes up to
	// 2s: a random delay of up to a second and one probe a second).
	DADTimeout time.Duration
}

const defaultDADTimeout = 10 * time.Second

// Result counts what a move moved (or found already moved on the target).
type Result struct {
	Addrs, Routes, Rules, Neighs int
}

// Empty reports whether nothing was moved.
func (r Result) Empty() bool { return r == Result{} }

// Move moves the IP configuration of the link from to the link to (see
// the package comment). Idempotent: nothing left on from is no error, and
// Move(to, from) gives from back what it had.
//
// All or nothing, in the manner of the containernetworking plugins: each
// completed step is recorded with its inverse, and when a later step fails
// the recorded inverses run in reverse order, so that from ends with
// exactly what it had (the routes the kernel dropped with an address
// re-added explicitly) and to is as it was. The error names the failed
// step and says whether the host was restored or which ip(8) commands are
// left to run by hand.
//
// The target keeps the MTU, MAC and up state it was given when the
// configuration moves back (an OVS internal port goes away with its
// bridge); Restore, which knows them from the journal, puts them back.
func Move(from, to string, opts Options) (res Result, err error) {
	if from == to {
		return Result{}, fmt.Errorf("moving the configuration of %s to itself: name two links", from)
	}
	if opts.DADTimeout <= 0 {
		opts.DADTimeout = defaultDADTimeout
	}
	jr, err := openJournal(opts.JournalDir, from, to)
	if err != nil {
		return Result{}, err
	}
	if err := jr.recoverInterrupted(opts.DADTimeout); err != nil {
		return Result{}, err
	}
	src, err := linkByName(from)
	if err != nil {
		return Result{}, err
	}
	dst, err := linkByName(to)
	if err != nil {
		return Result{}, err
	}
	p, err := planMove(src, dst, opts)
	if err != nil {
		return Result{}, err
	}

	t := &tx{dadTimeout: opts.DADTimeout}
	ok := false
	defer func() {
		if !ok {
			res = Result{}
			err = t.rollback(err, from, to)
		}
	}()
	// The journal is written before the first change (and put back as it
	// was by a complete rollback).
	t.beforeChange = func() error { return jr.begin(t, p) }

	if err := t.prepareTarget(p); err != nil {
		return Result{}, err
	}
	if p.empty() {
		if err := jr.finish(t, p); err != nil {
			return Result{}, err
		}
		ok = true
		return Result{}, nil
	}
	if err := t.change(); err != nil {
		return Result{}, err
	}

	// Before the first change to from: the undo that puts from back as it
	// was, run last. Removing an address also makes the kernel drop what
	// needs it (the secondaries of a primary; with the last IPv4 address,
	// every IPv4 route through from and its permanent IPv4 neighbours):
	// every original address, route and neighbour comes back, in their
	// original order, whichever of them is missing.
	if p.shared() {
		// Run after from has its addresses back: to's copies go and come
		// again, so that from's are listed (and preferred) first again,
		// as they were.
		t.reshare(p)
	}
	t.restoreSource(p.src, from, p.addrs, p.routes, p.neighs)

	if p.shared() {
		// to answers for every address already (Share): the routes,
		// rules and neighbours move first and from's addresses go last,
		// so the host is never without a route (removing from's last
		// IPv4 address would otherwise drop its routes until they are
		// re-added on to).
		if err := t.waitDAD(p.dst, to, p.addrs); err != nil {
			return Result{}, err
		}
		if res.Routes, res.Rules, res.Neighs, err = t.moveRoutesRulesNeighs(p); err != nil {
			return Result{}, err
		}
		if res.Addrs, err = t.moveAddrs(p); err != nil {
			return Result{}, err
		}
		if err := t.dropLeftovers(p); err != nil {
			return Result{}, err
		}
	} else {
		if res.Addrs, err = t.moveAddrs(p); err != nil {
			return Result{}, err
		}
		if err := t.dropLeftovers(p); err != nil {
			return Result{}, err
		}
		if err := t.waitDAD(p.dst, to, p.addrs); err != nil {
			return Result{}, err
		}
		if res.Routes, res.Rules, res.Neighs, err = t.moveRoutesRulesNeighs(p); err != nil {
			return Result{}, err
		}
	}
	if err := jr.finish(t, p); err != nil {
		return Result{}, err
	}
	ok = true
	return res, nil
}

// Share readies to to take over from's configuration without a moment
// in which the host does not answer for its addresses: to gets from's MTU
// (and MAC, on request: Options.CopyMAC), is set up, and gets a copy of
// from's global addresses (flags, lifetimes, labels), which from keeps;
// IPv6 duplicate address detection is awaited. For a NIC about to become
// the port of an OVS bridge: once it is, what arrives through the bridge
// reaches an internal port that already has the addresses, and the Move
// that follows finds them there, moves routes, rules and neighbours first
// and takes from's addresses last.
//
// What Move would refuse (a route it cannot carry) is refused here, before
// any change. All or nothing: on failure to is as it was. Nothing is
// journaled, as from is not changed: removing to (an OVS internal port
// goes with its bridge) takes the copies with it. Idempotent.
func Share(from, to string, opts Options) (added int, err error) {
	if from == to {
		return 0, fmt.Errorf("sharing the addresses of %s with itself: name two links", from)
	}
	if opts.DADTimeout <= 0 {
		opts.DADTimeout = defaultDADTimeout
	}
	src, err := linkByName(from)
	if err != nil {
		return 0, err
	}
	dst, err := linkByName(to)
	if err != nil {
		return 0, err
	}
	p, err := planMove(src, dst, opts)
	if err != nil {
		return 0, err
	}
	t := &tx{dadTimeout: opts.DADTimeout}
	ok := false
	defer func() {
		if !ok {
			added = 0
			err = t.rollback(err, from, to)
		}
	}()
	if err := t.prepareTarget(p); err != nil {
		return 0, err
	}
	if added, err = t.copyAddrs(p); err != nil {
		return 0, err
	}
	if err := t.waitDAD(p.dst, to, p.addrs); err != nil {
		return 0, err
	}
	ok = true
	return added, nil
}

// linkByName names the link in its error.
func linkByName(name string) (netlink.Link, error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil, fmt.Errorf("link %s: not found (ip link show lists the host's links)", name)
		}
		return nil, fmt.Errorf("link %s: %w", name, err)
	}
	return l, nil
}

package hostlink

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// The journal: what a link had before its configuration moved, on disk,
// so that a crash half-way through (the process killed between two steps,
// the node rebooted) does not leave the host without it. Options.JournalDir
// holds one file per moved link, <link>.json, written (temp file, fsync,
// rename) before the first change. Restore puts the link back from it; a
// Move that finds it in a phase other than "moved" does so first.

// Journal phases.
const (
	phaseMoving    = "moving"    // a move has begun: the host may be anywhere between the two
	phaseMoved     = "moved"     // the move completed: to has it all
	phaseReturning = "returning" // a move back has begun
)

type journal struct {
	From, To string
	Phase    string
	Written  time.Time
	// Source is what From had that the moves took away (several moves
	// add to it); Target what To had before the first one.
	Source savedLink
	Target savedTarget
}

type savedLink struct {
	Index  int // at the time: the routes name it
	MTU    int
	MAC    string
	Up     bool
	Addrs  []savedAddr
	Routes []savedRoute
	Rules  []netlink.Rule
	Neighs []netlink.Neigh
}

type savedTarget struct {
	MTU int
	MAC string
	Up  bool
}

// savedAddr keeps the lifetimes as deadlines: the kernel counts them down,
// and a journal read after a crash must not renew a lease.
type savedAddr struct {
	netlink.Addr
	ValidUntil     *time.Time `json:",omitempty"` // nil: forever
	PreferredUntil *time.Time `json:",omitempty"`
}

// savedRoute: netlink.Route's Via is an interface, which JSON cannot read
// back (Encap and NewDst are refused before a move, so always null).
type savedRoute struct {
	netlink.Route
	Via *netlink.Via `json:",omitempty"`
}

func (s savedRoute) route() netlink.Route {
	r := s.Route
	r.Via = nil
	if s.Via != nil {
		r.Via = s.Via
	}
	return r
}

func saveRoute(r netlink.Route) savedRoute {
	s := savedRoute{Route: r}
	if v, ok := r.Via.(*netlink.Via); ok {
		s.Via = v
	}
	s.Route.Via = nil
	return s
}

func saveAddr(a netlink.Addr, now time.Time) savedAddr {
	s := savedAddr{Addr: a}
	if a.ValidLft != foreverLft {
		t := now.Add(time.Duration(a.ValidLft) * time.Second)
		s.ValidUntil = &t
	}
	if a.PreferedLft != foreverLft {
		t := now.Add(time.Duration(a.PreferedLft) * time.Second)
		s.PreferredUntil = &t
	}
	return s
}

// addr is the address with what is left of its lifetimes at now; false
// when its lease ran out (the DHCP client asks for a new one).
func (s savedAddr) addr(now time.Time) (netlink.Addr, bool) {
	a := s.Addr
	if s.ValidUntil != nil {
		left := int(s.ValidUntil.Sub(now) / time.Second)
		if left <= 0 {
			return a, false
		}
		a.ValidLft = left
	}
	if s.PreferredUntil != nil {
		a.PreferedLft = max(0, min(int(s.PreferredUntil.Sub(now)/time.Second), a.ValidLft))
	}
	return a, true
}

func journalPath(dir, link string) string { return filepath.Join(dir, link+".json") }

// readJournal reads the journal of link; nil when there is none.
func readJournal(dir, link string) (*journal, []byte, error) {
	path := journalPath(dir, link)
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the journal of %s: %w", link, err)
	}
	var j journal
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, nil, fmt.Errorf("journal %s: %w; it is not a journal this version wrote: put %s back by hand from it, then remove it", path, err, link)
	}
	if j.From != link || j.To == "" {
		return nil, nil, fmt.Errorf("journal %s names the links %q and %q, not %s: remove the file that does not belong in %s", path, j.From, j.To, link, dir)
	}
	return &j, raw, nil
}

// writeFileAtomic replaces path with data: a crash leaves the old file or
// the new one, never a part.
func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after a successful rename: gone already
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func removeJournal(path string) error {
	err := os.Remove(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// journalRef is the journal one Move works with.
type journalRef struct {
	dir    string
	path   string   // the file: <dir>/<from>.json, or <dir>/<to>.json for a move back
	old    *journal // as found (nil: none)
	oldRaw []byte
	back   bool // a move back: old names this move's source as its target
}

// openJournal finds the journal a move from from to to works with. No
// directory, no journal.
func openJournal(dir, from, to string) (*journalRef, error) {
	if dir == "" {
		return &journalRef{}, nil
	}
	j, raw, err := readJournal(dir, to)
	if err != nil {
		return nil, err
	}
	if j != nil && j.To == from {
		return &journalRef{dir: dir, path: journalPath(dir, to), old: j, oldRaw: raw, back: true}, nil
	}
	j, raw, err = readJournal(dir, from)
	if err != nil {
		return nil, err
	}
	if j != nil && j.To != to {
		return nil, fmt.Errorf("journal %s says %s was moved to %s, not %s: move it back from %s first (or run ovnhost cleanup)",
			journalPath(dir, from), from, j.To, to, j.To)
	}
	return &journalRef{dir: dir, path: journalPath(dir, from), old: j, oldRaw: raw}, nil
}

// recoverInterrupted puts the source link of an interrupted move (or move
// back) back from the journal before anything else: the host may be
// anywhere between the two states, and only the journal knows the first.
func (r *journalRef) recoverInterrupted(dadTimeout time.Duration) error {
	if r.old == nil || r.old.Phase == phaseMoved {
		return nil
	}
	if err := restoreFrom(r.path, r.old, dadTimeout); err != nil {
		return fmt.Errorf("a move of %s to %s was interrupted (journal %s, phase %s); putting %s back from it: %w",
			r.old.From, r.old.To, r.path, r.old.Phase, r.old.From, err)
	}
	r.old, r.oldRaw = nil, nil
	return nil
}

// begin writes the journal before the first change of a move: a new one
// (or the old one with what this move adds) in phase moving, or the old
// one in phase returning for a move back. Its undo puts the file back as
// it was, only if the rest of the rollback succeeded.
func (r *journalRef) begin(t *tx, p *plan) error {
	if r.dir == "" || (r.back && r.old == nil) {
		return nil
	}
	var j *journal
	if r.back {
		c := *r.old
		c.Phase, c.Written = phaseReturning, time.Now()
		j = &c
	} else {
		j = extendJournal(r.old, p, time.Now())
	}
	if err := r.write(j); err != nil {
		return err
	}
	undo := func() error { return removeJournal(r.path) }
	manual := "rm " + r.path
	if r.oldRaw != nil {
		raw := r.oldRaw
		undo = func() error { return writeFileAtomic(r.path, raw) }
		manual = ""
	}
	t.undo = append(t.undo, undoStep{kind: stepJournal, what: "journal " + r.path + " kept for Restore", manual: manual, do: undo, ifClean: true})
	return nil
}

func (r *journalRef) write(j *journal) error {
	data, err := json.MarshalIndent(j, "", "  ")
	if err != nil {
		return err
	}
	err = injectFault(stepJournal)
	if err == nil {
		err = writeFileAtomic(r.path, data)
	}
	if err != nil {
		return fmt.Errorf("writing the journal %s failed: %w (is %s writable?)", r.path, err, r.dir)
	}
	return nil
}

// finish records a completed move: phase moved, or no journal after a
// move back.
func (r *journalRef) finish(t *tx, p *plan) error {
	switch {
	case r.dir == "":
		return nil
	case r.back:
		err := injectFault(stepJournal)
		if err == nil {
			err = removeJournal(r.path)
		}
		if err != nil {
			return fmt.Errorf("removing the journal %s failed: %w", r.path, err)
		}
		return nil
	case !t.changed:
		return nil
	}
	j, err := r.current()
	if err != nil {
		return err
	}
	j.Phase, j.Written = phaseMoved, time.Now()
	return r.write(j)
}

// current reads back what begin wrote.
func (r *journalRef) current() (*journal, error) {
	raw, err := os.ReadFile(r.path)
	if err != nil {
		return nil, fmt.Errorf("reading back the journal %s: %w", r.path, err)
	}
	var j journal
	if err := json.Unmarshal(raw, &j); err != nil {
		return nil, fmt.Errorf("reading back the journal %s: %w", r.path, err)
	}
	return &j, nil
}

// extendJournal is old (or a new journal) with what p moves added: several
// moves of one link (a restart that finds an address a DHCP client gave
// from meanwhile) add up, and a restore gives back all of it.
func extendJournal(old *journal, p *plan, now time.Time) *journal {
	j := &journal{From: p.from, To: p.to}
	if old != nil {
		j.Source, j.Target = old.Source, old.Target
	} else {
		s, d := p.src.Attrs(), p.dst.Attrs()
		j.Source = savedLink{Index: s.Index, MTU: s.MTU, MAC: s.HardwareAddr.String(), Up: s.RawFlags&unix.IFF_UP != 0}
		j.Target = savedTarget{MTU: d.MTU, MAC: d.HardwareAddr.String(), Up: d.RawFlags&unix.IFF_UP != 0}
	}
	j.Phase, j.Written = phaseMoving, now
	for _, a := range p.addrs {
		if !containsFunc(j.Source.Addrs, func(s savedAddr) bool { return s.IPNet.String() == a.IPNet.String() }) {
			j.Source.Addrs = append(j.Source.Addrs, saveAddr(a, now))
		}
	}
	for _, r := range p.routes {
		if !containsFunc(j.Source.Routes, func(s savedRoute) bool { return routeKey(s.route()) == routeKey(r) }) {
			j.Source.Routes = append(j.Source.Routes, saveRoute(r))
		}
	}
	for _, r := range p.rules {
		if !containsFunc(j.Source.Rules, func(s netlink.Rule) bool { return ruleCmd("", s) == ruleCmd("", r) }) {
			j.Source.Rules = append(j.Source.Rules, r)
		}
	}
	for _, n := range p.neighs {
		if !containsFunc(j.Source.Neighs, func(s netlink.Neigh) bool { return s.IP.Equal(n.IP) }) {
			j.Source.Neighs = append(j.Source.Neighs, neighReq(n, n.LinkIndex))
		}
	}
	return j
}

func containsFunc[T any](s []T, f func(T) bool) bool {
	for _, v := range s {
		if f(v) {
			return true
		}
	}
	return false
}

// Restore puts the link name back as its journal in journalDir says it
// was, after a move that did not finish or was never moved back (the
// process crashed, the node rebooted): what was moved is taken from the
// target link (when it still exists), which gets its MTU, MAC and state
// back, and given to name again. Addresses whose lease ran out meanwhile
// are left out. No journal: nothing to do. Every step is tried; the
// journal is removed only when all succeeded, and the error lists the ip(8)
// commands left to run by hand.
func Restore(journalDir, name string) error {
	j, _, err := readJournal(journalDir, name)
	if err != nil || j == nil {
		return err
	}
	return restoreFrom(journalPath(journalDir, name), j, defaultDADTimeout)
}

func restoreFrom(path string, j *journal, dadTimeout time.Duration) error {
	src, err := linkByName(j.From)
	if err != nil {
		return fmt.Errorf("restoring from the journal %s: %w", path, err)
	}
	si := src.Attrs().Index
	names := linkNames{si: j.From}
	var failed, manual []string
	try := func(what, cmd string, do func() error) {
		if err := do(); err != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", what, err))
			if cmd != "" {
				manual = append(manual, cmd)
			}
		}
	}
	now := time.Now()
	var addrs []netlink.Addr
	for _, s := range j.Source.Addrs {
		if a, live := s.addr(now); live {
			addrs = append(addrs, a)
		}
	}

	// Take back from the target what was moved there.
	if dst, err := netlink.LinkByName(j.To); err == nil {
		di := dst.Attrs().Index
		names[di] = j.To
		for _, r := range j.Source.Rules {
			nr := renameRule(r, j.From, j.To)
			try(fmt.Sprintf("remove rule %q", ruleSpec(nr)), ruleCmd("del", nr), func() error { return ruleDel(nr) })
		}
		for _, n := range j.Source.Neighs {
			nn := neighReq(n, di)
			try(fmt.Sprintf("remove neighbour %s from %s", n.IP, j.To), neighCmd("del", nn, j.To), func() error { return neighDel(nn) })
		}
		for _, s := range j.Source.Routes {
			nr := routeReq(s.route(), j.Source.Index, di)
			try(fmt.Sprintf("remove route %s", routeSpec(nr, names)), routeCmd("del", nr, names), func() error { return routeDel(nr) })
		}
		for _, s := range j.Source.Addrs {
			a := addrReq(s.Addr, relabel(s.Label, j.From, j.To))
			try(fmt.Sprintf("remove address %s from %s", a.IPNet, j.To), addrCmd("del", a, j.To), func() error { return addrDel(dst, a) })
			if a.IP.To4() == nil && s.ValidUntil != nil {
				// The kernel leaves the prefix route of an IPv6 address
				// with a lifetime behind.
				pr := netlink.Route{LinkIndex: di, Family: netlink.FAMILY_V6, Dst: prefixOf(a), Protocol: unix.RTPROT_KERNEL, Priority: kernelMetric(a.IP), Table: unix.RT_TABLE_MAIN}
				try(fmt.Sprintf("remove the prefix route %s from %s", pr.Dst, j.To), routeCmd("del", pr, names), func() error { return routeDel(pr) })
			}
		}
		restoreLinkAttrs(dst, j.To, j.Target.MTU, j.Target.MAC, j.Target.Up, try)
	} else if !errors.As(err, new(netlink.LinkNotFoundError)) {
		failed = append(failed, fmt.Sprintf("link %s: %v", j.To, err))
	}

	// Give the source its configuration back.
	restoreLinkAttrs(src, j.From, j.Source.MTU, j.Source.MAC, j.Source.Up, try)
	try(fmt.Sprintf("give %s its addresses back", j.From), restoreAddrsCmd(addrs, j.From), func() error { return restoreAddrs(src, j.From, addrs) })
	try(fmt.Sprintf("wait for duplicate address detection on %s", j.From), "", func() error { return waitDAD(src, j.From, addrs, dadTimeout) })
	for _, s := range directFirst(routesOf(j.Source.Routes)) {
		r := routeReq(s, j.Source.Index, si)
		try(fmt.Sprintf("re-add route %s", routeSpec(r, names)), routeCmd("replace", r, names), func() error { return routeReplace(r) })
	}
	for _, r := range j.Source.Rules {
		try(fmt.Sprintf("re-add rule %q", ruleSpec(r)), ruleCmd("add", r), func() error { return ruleAdd(r) })
	}
	for _, n := range j.Source.Neighs {
		on := neighReq(n, si)
		try(fmt.Sprintf("re-add neighbour %s to %s", n.IP, j.From), neighCmd("replace", on, j.From), func() error { return netlink.NeighSet(&on) })
	}

	if len(failed) > 0 {
		return fmt.Errorf("restoring %s from the journal %s: %s; to finish by hand, run: %s; then remove the journal",
			j.From, path, strings.Join(failed, "; "), strings.Join(manual, "; "))
	}
	if err := removeJournal(path); err != nil {
		return fmt.Errorf("%s is restored, but removing its journal failed: %w; remove %s by hand", j.From, err, path)
	}
	return nil
}

func routesOf(saved []savedRoute) []netlink.Route {
	out := make([]netlink.Route, len(saved))
	for i, s := range saved {
		out[i] = s.route()
	}
	return out
}

// restoreLinkAttrs gives link its MTU, MAC and up/down state back.
func restoreLinkAttrs(link netlink.Link, name string, mtu int, mac string, up bool, try func(what, cmd string, do func() error)) {
	a := link.Attrs()
	if mtu > 0 && a.MTU != mtu {
		try(fmt.Sprintf("set the MTU of %s back to %d", name, mtu), fmt.Sprintf("ip link set dev %s mtu %d", name, mtu),
			func() error { return netlink.LinkSetMTU(link, mtu) })
	}
	if hw, err := net.ParseMAC(mac); err == nil && !bytes.Equal(hw, a.HardwareAddr) {
		try(fmt.Sprintf("set the MAC address of %s back to %s", name, mac), fmt.Sprintf("ip link set dev %s address %s", name, mac),
			func() error { return netlink.LinkSetHardwareAddr(link, hw) })
	}
	if isUp := a.RawFlags&unix.IFF_UP != 0; isUp != up {
		state, set := "down", netlink.LinkSetDown
		if up {
			state, set = "up", netlink.LinkSetUp
		}
		try(fmt.Sprintf("set %s %s", name, state), fmt.Sprintf("ip link set dev %s %s", name, state),
			func() error { return set(link) })
	}
}

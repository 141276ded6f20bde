// Package underlay is the node side of underlay networks (Kube-OVN's
// ProviderNetwork): for each provider network, the host NIC goes into the
// OVS bridge br-<name>, whose internal port takes over the NIC's whole IP
// configuration (supervisor/hostlink), and ovn-bridge-mappings maps the
// network to the bridge (supervisor/ovsbridge), so OVN's localnet ports
// reach the physical network. The host keeps its connectivity throughout,
// and gets everything back on stop.
//
// Kube-OVN's version moved main-table routes only, left a moment without
// an uplink and gave nothing back (its issues 2962, 4622, 4914). Here the
// order is:
//
//  1. the bridge and its internal port, with the NIC's MAC;
//  2. a copy of the NIC's addresses on the internal port (hostlink.Share):
//     what will arrive through the bridge reaches a port that answers;
//  3. the NIC as the bridge's port, once ovs-vswitchd has opened it;
//  4. hostlink.Move: routes of every table, rules and permanent neighbours
//     first, the NIC's addresses last (journaled, for a crash);
//  5. the mapping.
//
// A failure at any step gives back what was done. Stop gives back in the
// reverse order (unless the datapath is kept for an upgrade: the next
// ovnhost finds everything in place and changes nothing). A NIC that is
// not there leaves the host untouched and that network not ready; it is
// bridged when it appears (a netlink link event). The unit is given plain
// {Name, NIC} pairs: from --provider-networks (fixed), or from the
// ProviderNetwork objects that select the node (kube.go), a set that
// changes while the node runs (Set): a network no longer wanted, or whose
// NIC changed, is given back like on stop, and a new one bridged.
package underlay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/hostnetmgr"
	"github.com/ovnhost/ovnhost/internal/nldump"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/providernet"
	"github.com/ovnhost/ovnhost/supervisor/hostlink"
	"github.com/ovnhost/ovnhost/supervisor/ovsbridge"
)

// uplinkMark marks the Port row of the NIC the unit put into a bridge.
const uplinkMark = "ovnhost-underlay-nic"

// stepTimeout bounds each wait on ovs-vswitchd (a port opened).
const stepTimeout = 30 * time.Second

// Node is what the unit needs of the node's supervisor.
type Node interface {
	// OVS is the long-lived conf.db connection.
	OVS() *ovsdbconn.Conn
	// KeepingDatapath reports whether a stop leaves the datapath in
	// place (--keep-datapath, or an upgrade).
	KeepingDatapath() bool
}

// Options are the unit's configuration and collaborators.
type Options struct {
	// Networks are bridged at the start; Set replaces them later.
	Networks []nodeconfig.ProviderNetwork
	// Watch, when set, runs from the start to the stop and calls set
	// with the wanted networks whenever they change (the ProviderNetwork
	// objects: Objects.Watch).
	Watch func(ctx context.Context, set func([]nodeconfig.ProviderNetwork))
	// Report, when set, is told after the start and after every change
	// how each wanted network is (the Node labels: NodeReporter).
	Report   func([]Status)
	Datapath nodeconfig.Datapath
	// JournalDir holds hostlink's journals (NodeConfig.Layout.UnderlayJournals).
	JournalDir string
	Node       Node
	Log        *slog.Logger
	// State is told, after the start, whenever the set of networks not
	// bridged changes: nil when all are.
	State func(problem error)
	// WantLater: the wanted networks come from Watch (the ProviderNetwork
	// objects), not Networks; bridges an earlier run left are looked at
	// only once Watch has said what is wanted, never at the start, when
	// nothing is known yet.
	WantLater bool
}

// Status is how one wanted network is on this node.
type Status struct {
	nodeconfig.ProviderNetwork
	// Ready: the NIC is the bridge's port and the mapping is set.
	Ready bool
	// MTU is the NIC's (0: not known).
	MTU int
	// Problem is why it is not ready.
	Problem string
}

// Unit bridges the provider networks' NICs.
type Unit struct {
	o Options

	cancel context.CancelFunc
	done   chan struct{}
	// changed is signalled by Set; the follower converges.
	changed chan struct{}

	mu      sync.Mutex
	want    []nodeconfig.ProviderNetwork
	wantSet bool // Set was called: the want is known (WantLater)
	// swept: the bridges an earlier run left were looked at (Start and
	// the follower only).
	swept   bool
	pending map[string]string // network -> why it is not bridged
	// bridged: network -> its NIC, once attached and until it is given
	// back: what underlay pods may be wired onto (MTU).
	bridged map[string]string
	// applied are the networks acted on, in order (bridged or pending):
	// what a change or the stop gives back. Touched by Start, the
	// follower and Stop only, one after the other.
	applied []nodeconfig.ProviderNetwork
}

// New plans the unit; nothing is touched.
func New(o Options) *Unit {
	return &Unit{o: o, pending: map[string]string{}, bridged: map[string]string{}, want: slices.Clone(o.Networks), changed: make(chan struct{}, 1)}
}

// Set replaces the wanted networks; the running unit converges to them
// (before the start, they are what it starts with).
func (u *Unit) Set(networks []nodeconfig.ProviderNetwork) {
	u.mu.Lock()
	u.want = slices.Clone(networks)
	u.wantSet = true
	u.mu.Unlock()
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

func (u *Unit) wanted() []nodeconfig.ProviderNetwork {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.want)
}

// MTU is the MTU of provider network name on this node, its NIC's (the
// bridge carries it): what an underlay pod's interface gets, as no tunnel
// header is added. 0 when the network is not bridged here (not wanted,
// its NIC missing, not attached yet, or being given back).
func (u *Unit) MTU(name string) int {
	u.mu.Lock()
	nic, ok := u.bridged[name]
	u.mu.Unlock()
	if !ok {
		return 0
	}
	l, err := netlink.LinkByName(nic)
	if err != nil {
		return 0
	}
	return l.Attrs().MTU
}

func (u *Unit) setBridged(name, nic string) {
	u.mu.Lock()
	if nic == "" {
		delete(u.bridged, name)
	} else {
		u.bridged[name] = nic
	}
	u.mu.Unlock()
}

func (u *Unit) Name() string { return "underlay" }

// Awaits is what /readyz says the start waits for.
func (u *Unit) Awaits() string {
	var s []string
	for _, pn := range u.wanted() {
		s = append(s, pn.NIC+" into "+providernet.BridgeName(pn.Name))
	}
	if len(s) == 0 {
		return "the underlay networks (none wanted yet)"
	}
	return "the underlay NICs moved into their bridges (" + strings.Join(s, ", ") + ")"
}

// Lacks says which networks are not bridged and why (nil: all are).
func (u *Unit) Lacks() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.pending) == 0 {
		return nil
	}
	var s []string
	for name, why := range u.pending {
		s = append(s, fmt.Sprintf("provider network %s: %s", name, why))
	}
	sort.Strings(s)
	return errors.New(strings.Join(s, "; "))
}

func (u *Unit) setPending(name, why string) {
	u.mu.Lock()
	if why == "" {
		delete(u.pending, name)
	} else {
		u.pending[name] = why
	}
	u.mu.Unlock()
}

// errMissing: the NIC is not on the host; nothing was touched.
type errMissing struct{ msg string }

func (e *errMissing) Error() string { return e.msg }

// Start bridges every network whose NIC is there and follows link events
// for the others. A network that cannot be bridged (a NIC that is missing
// or already another bridge's port, a route hostlink cannot carry) is
// reported, given back and left; the start fails only when conf.db cannot
// be read.
func (u *Unit) Start(ctx context.Context) error {
	if u.o.Node.OVS() == nil {
		return errors.New("underlay: conf.db is not connected")
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	// Subscribed before the first look, so a NIC that appears in between
	// is not missed.
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, rctx.Done(), netlink.LinkSubscribeOptions{ErrorCallback: func(error) {}}); err != nil {
		u.o.Log.Warn("underlay: cannot follow link changes; a missing NIC is looked for again only at the next start", "err", err)
		links = nil
	}
	if !u.o.WantLater {
		u.sweepLeftovers(ctx)
	}
	u.converge(ctx, "")
	u.report()
	u.cancel, u.done = cancel, make(chan struct{})
	var wg sync.WaitGroup
	if u.o.Watch != nil {
		wg.Add(1)
		go func() { defer wg.Done(); u.o.Watch(rctx, u.Set) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); u.follow(rctx, links) }()
	go func() { wg.Wait(); close(u.done) }()
	return nil
}

// sweepLeftovers finds the networks an earlier run bridged and kept (an
// upgrade, a crash, a network removed while ovnhost was down: their NIC
// is still a port of br-<name>, marked) that are not wanted now, and
// counts them as applied, so the converge that follows gives them back
// (the NIC its configuration, the bridge removed). Wanted ones are left
// to the converge's attach, which finds them in place.
func (u *Unit) sweepLeftovers(ctx context.Context) {
	u.swept = true
	found, err := ovsbridge.MarkedUplinks(ctx, u.o.Node.OVS(), uplinkMark)
	if err != nil {
		u.o.Log.Warn("underlay: cannot look for bridges an earlier run left", "err", err)
		return
	}
	want := u.wanted()
	for br, nic := range found {
		name, ok := strings.CutPrefix(br, providernet.BridgePrefix)
		if !ok {
			continue
		}
		pn := nodeconfig.ProviderNetwork{Name: name, NIC: nic}
		if slices.Contains(want, pn) || slices.Contains(u.applied, pn) {
			continue
		}
		u.o.Log.Info("underlay: found a network an earlier run bridged that is no longer wanted; giving it back", "network", name, "nic", nic, "bridge", br)
		u.applied = append(u.applied, pn)
	}
}

// converge gives back the applied networks no longer wanted (or wanted
// with another NIC), newest first, then bridges the wanted ones not yet
// bridged: all of them, or with appeared set, the one whose NIC it is.
// It reports whether a network failed for another reason than a missing
// NIC (worth trying again).
func (u *Unit) converge(ctx context.Context, appeared string) (failed bool) {
	want := u.wanted()
	for i := len(u.applied) - 1; i >= 0; i-- {
		pn := u.applied[i]
		if slices.Contains(want, pn) {
			continue
		}
		u.setPending(pn.Name, "")
		if err := u.detach(ctx, pn); err != nil {
			// Kept as applied: the follower tries again, backing off.
			u.o.Log.Error("underlay: giving a network back failed; what it has stays on its bridge, tried again", "network", pn.Name, "nic", pn.NIC, "err", err)
			failed = true
			continue
		}
		u.o.Log.Info("underlay: network no longer wanted on this node, given back", "network", pn.Name, "nic", pn.NIC)
		u.applied = slices.Delete(u.applied, i, i+1)
	}
	for _, pn := range want {
		known := slices.Contains(u.applied, pn)
		why, waiting := u.pendingWhy(pn.Name)
		if known && !waiting || known && appeared != "" && appeared != pn.NIC {
			continue
		}
		if !known {
			u.applied = append(u.applied, pn)
		}
		if u.bridge(ctx, pn) {
			if waiting && why != "" {
				u.o.Log.Info("underlay: NIC appeared and was bridged", "network", pn.Name, "nic", pn.NIC)
			}
		} else if w, _ := u.pendingWhy(pn.Name); !isMissing(w) {
			failed = true
		}
	}
	return failed
}

// report tells Options.Report how each wanted network is.
func (u *Unit) report() {
	if u.o.Report == nil {
		return
	}
	var out []Status
	for _, pn := range u.wanted() {
		st := Status{ProviderNetwork: pn}
		why, waiting := u.pendingWhy(pn.Name)
		st.Ready, st.Problem = !waiting && slices.Contains(u.applied, pn), why
		if !st.Ready && st.Problem == "" {
			st.Problem = "not bridged yet"
		}
		if l, err := netlink.LinkByName(pn.NIC); err == nil {
			st.MTU = l.Attrs().MTU
		}
		out = append(out, st)
	}
	u.o.Report(out)
}

// bridge bridges pn, or records why not (given back on failure).
func (u *Unit) bridge(ctx context.Context, pn nodeconfig.ProviderNetwork) bool {
	br := providernet.BridgeName(pn.Name)
	err := u.attach(ctx, pn)
	var missing *errMissing
	switch {
	case err == nil:
		u.setPending(pn.Name, "")
		u.setBridged(pn.Name, pn.NIC)
		return true
	case errors.As(err, &missing):
		u.o.Log.Warn("underlay: NIC not found; the network is not bridged until it appears, nothing was changed", "network", pn.Name, "problem", missing.msg,
			"fix", "plug the NIC in, or correct the network's NIC (--provider-networks "+pn.Name+":NIC, or the ProviderNetwork's spec.defaultInterface or spec.customInterfaces)")
		u.setPending(pn.Name, missing.msg)
	default:
		u.o.Log.Error("underlay: bridging failed; the network is not bridged", "network", pn.Name, "nic", pn.NIC, "bridge", br, "err", err)
		u.setPending(pn.Name, err.Error())
	}
	return false
}

// follow bridges pending networks when their NIC appears, and converges
// to a new set (Set), until ctx ends.
func (u *Unit) follow(ctx context.Context, links <-chan netlink.LinkUpdate) {
	last := u.Lacks()
	health := func() {
		now := u.Lacks()
		if (now == nil) != (last == nil) || (now != nil && last != nil && now.Error() != last.Error()) {
			if u.o.State != nil {
				u.o.State(now)
			}
		}
		last = now
	}
	var retry <-chan time.Time
	delay := time.Second
	for {
		appeared := ""
		select {
		case <-ctx.Done():
			return
		case <-u.changed:
		case lu, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			if lu.Header.Type != unix.RTM_NEWLINK || lu.Attrs() == nil {
				continue
			}
			appeared = lu.Attrs().Name
			if !u.waitingFor(appeared) {
				continue
			}
		case <-retry:
			retry = nil
		}
		u.mu.Lock()
		known := u.wantSet
		u.mu.Unlock()
		if known && !u.swept {
			u.sweepLeftovers(ctx)
		}
		failed := u.converge(ctx, appeared)
		health()
		u.report()
		if failed && retry == nil {
			// Not a missing NIC: conf.db or the kernel refused; try again
			// later, backing off.
			retry, delay = time.After(delay), min(2*delay, 30*time.Second)
		} else if !failed {
			delay = time.Second
		}
	}
}

// waitingFor reports whether a network not bridged has nic as its NIC.
func (u *Unit) waitingFor(nic string) bool {
	for _, pn := range u.wanted() {
		if _, waiting := u.pendingWhy(pn.Name); waiting && pn.NIC == nic {
			return true
		}
	}
	return false
}

func (u *Unit) pendingWhy(name string) (why string, waiting bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	why, waiting = u.pending[name]
	return why, waiting
}

func isMissing(why string) bool { return strings.Contains(why, " not found;") }

// Stop gives every network back, unless the datapath is kept.
func (u *Unit) Stop(ctx context.Context) error {
	if u.cancel != nil {
		u.cancel()
		<-u.done
		u.cancel = nil
	}
	defer func() { u.applied = nil }()
	if u.o.Node.KeepingDatapath() {
		return nil // an upgrade: the next ovnhost finds the bridges in place
	}
	var errs []error
	for i := len(u.applied) - 1; i >= 0; i-- {
		pn := u.applied[i]
		if err := u.detach(ctx, pn); err != nil {
			errs = append(errs, fmt.Errorf("giving %s back from %s: %w", pn.NIC, providernet.BridgeName(pn.Name), err))
		}
	}
	return errors.Join(errs...)
}

// attach bridges pn (idempotent: a bridge and configuration already in
// place are left as they are); on failure it gives back what it did.
func (u *Unit) attach(ctx context.Context, pn nodeconfig.ProviderNetwork) (err error) {
	br := providernet.BridgeName(pn.Name)
	nic, err := netlink.LinkByName(pn.NIC)
	if err != nil {
		if errors.As(err, new(netlink.LinkNotFoundError)) {
			return &errMissing{providernet.MissingNIC(pn.NIC, hostLinks())}
		}
		return fmt.Errorf("looking up %s: %w", pn.NIC, err)
	}
	ovs := u.o.Node.OVS()
	defer func() {
		if err != nil {
			if derr := u.detach(ctx, pn); derr != nil {
				err = fmt.Errorf("%w; giving back failed too: %w", err, derr)
			} else {
				err = fmt.Errorf("%w; given back: %s has its configuration and %s is removed", err, pn.NIC, br)
			}
		}
	}()
	// 0. NetworkManager leaves the NIC alone from here on; what else on
	// the host would take it back is reported.
	u.reportHostManagers(pn.Name, nic, br)
	u.reportVlanInterfaces(pn.Name, nic)
	if err := u.leaveToUs(ctx, pn.NIC); err != nil {
		return err
	}
	// 1. The bridge with its internal port (the NIC is not its port yet:
	// an uplink left from an earlier run stays).
	mac := nic.Attrs().HardwareAddr.String()
	if err := ovsbridge.Ensure(ctx, ovs, ovsbridge.Spec{Name: br, Datapath: u.o.Datapath, HWAddr: mac}); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	if err := ovsbridge.WaitUplink(wctx, ovs, br, br); err != nil {
		return fmt.Errorf("waiting for the internal port of %s: %w", br, err)
	}
	if err := u.leaveBridgeToUs(ctx, br); err != nil {
		u.o.Log.Warn("underlay: NetworkManager may manage the bridge's internal port", "bridge", br, "err", err, "fix", "nmcli device set "+br+" managed no")
	}
	// 2. The internal port answers for the NIC's addresses too.
	shared, err := hostlink.Share(pn.NIC, br, hostlink.Options{CopyMAC: true})
	if err != nil {
		return err
	}
	// 3. The NIC, up, as the bridge's port.
	if nic.Attrs().RawFlags&unix.IFF_UP == 0 {
		if err := netlink.LinkSetUp(nic); err != nil {
			return fmt.Errorf("setting %s up: %w", pn.NIC, err)
		}
	}
	if err := ovsbridge.Ensure(ctx, ovs, ovsbridge.Spec{Name: br, Datapath: u.o.Datapath, HWAddr: mac, Uplink: pn.NIC, UplinkMark: uplinkMark}); err != nil {
		return err
	}
	if err := ovsbridge.WaitUplink(wctx, ovs, br, pn.NIC); err != nil {
		return err
	}
	// 4. Routes, rules, neighbours, then the NIC's addresses.
	moved, err := hostlink.Move(pn.NIC, br, hostlink.Options{CopyMAC: true, JournalDir: u.o.JournalDir})
	if err != nil {
		return err
	}
	// 5. The mapping, and this chassis's MAC on the network (kept when
	// set: routed traffic keeps its source MAC across restarts).
	if err := ovsbridge.SetMapping(ctx, ovs, pn.Name, br); err != nil {
		return err
	}
	if err := ensureChassisMAC(ctx, ovs, pn.Name); err != nil {
		return err
	}
	if shared > 0 || !moved.Empty() {
		u.o.Log.Info("underlay: NIC bridged, its configuration moved to the bridge", "network", pn.Name, "nic", pn.NIC, "bridge", br,
			"addresses", moved.Addrs, "routes", moved.Routes, "rules", moved.Rules, "neighbours", moved.Neighs)
	} else {
		u.o.Log.Info("underlay: NIC already bridged, nothing to move", "network", pn.Name, "nic", pn.NIC, "bridge", br)
	}
	return nil
}

// detach gives pn back: the configuration to the NIC (a copy of the
// addresses first, so the NIC answers before the bridge stops), the
// mapping, the bridge with the NIC's port. What a crashed move left is put
// back from its journal. Nothing there: nothing to do.
func (u *Unit) detach(ctx context.Context, pn nodeconfig.ProviderNetwork) error {
	// No new pod is wired onto it from here on.
	u.setBridged(pn.Name, "")
	br := providernet.BridgeName(pn.Name)
	ovs := u.o.Node.OVS()
	brLink, brErr := netlink.LinkByName(br)
	_, nicErr := netlink.LinkByName(pn.NIC)
	var errs []error
	switch {
	case brErr == nil && nicErr != nil && hasGlobalAddrs(brLink):
		return fmt.Errorf("%s is gone, so the configuration it had stays on %s, which is kept: plug %s back in and stop ovnhost again, or move the addresses by hand (ip address show dev %s)", pn.NIC, br, pn.NIC, br)
	case brErr == nil && nicErr == nil && hasGlobalAddrs(brLink):
		if _, err := hostlink.Share(br, pn.NIC, hostlink.Options{}); err != nil {
			errs = append(errs, err)
		} else if moved, err := hostlink.Move(br, pn.NIC, hostlink.Options{JournalDir: u.o.JournalDir}); err != nil {
			errs = append(errs, err)
		} else if !moved.Empty() {
			u.o.Log.Info("underlay: configuration given back to the NIC", "network", pn.Name, "nic", pn.NIC, "bridge", br,
				"addresses", moved.Addrs, "routes", moved.Routes, "rules", moved.Rules, "neighbours", moved.Neighs)
		}
	case nicErr == nil:
		if err := hostlink.Restore(u.o.JournalDir, pn.NIC); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		// The NIC does not have its configuration back: keep the bridge
		// that has it.
		return errors.Join(errs...)
	}
	if err := ovsbridge.SetChassisMAC(ctx, ovs, pn.Name, nil); err != nil {
		return err
	}
	if err := ovsbridge.SetMapping(ctx, ovs, pn.Name, ""); err != nil {
		return err
	}
	if ovsbridge.Exists(ctx, ovs, br) {
		if err := ovsbridge.Remove(ctx, ovs, br); err != nil {
			return err
		}
		// The NIC is the host's again once ovs-vswitchd has let it go.
		wctx, cancel := context.WithTimeout(ctx, stepTimeout)
		defer cancel()
		if err := ovsbridge.WaitApplied(wctx, ovs); err != nil {
			u.o.Log.Warn("underlay: ovs-vswitchd has not applied the bridge's removal yet; it may hold the NIC a while longer", "network", pn.Name, "nic", pn.NIC, "err", err)
		}
		u.o.Log.Info("underlay: bridge removed", "network", pn.Name, "bridge", br)
	}
	return giveBackToNetworkManager(ctx, u.o.JournalDir, pn.NIC, u.o.Log)
}

// hasGlobalAddrs reports whether link has an address the host is known by
// (a bridge that took none has nothing to give back).
func hasGlobalAddrs(link netlink.Link) bool {
	addrs, err := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return true // unknown: give back what there may be
	}
	for _, a := range addrs {
		if a.Scope == int(netlink.SCOPE_UNIVERSE) && !a.IP.IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}

// hostLinks names the host's interfaces but the loopback and ovnhost's own
// devices, sorted: what a missing NIC's message lists.
func hostLinks() []string {
	all, err := nldump.Retry(netlink.LinkList)
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range all {
		n := l.Attrs().Name
		if l.Attrs().Flags&net.FlagLoopback != 0 || n == "lo" || n == "br-int" || n == "ovs-netdev" || n == "ovs-system" || n == "ovn0" || strings.HasPrefix(n, "ovh") {
			continue
		}
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Cleanup is `ovnhost cleanup`'s part, with every daemon stopped: each NIC
// whose move a journal in journalDir records (a crash, or a stop that kept
// the datapath) gets its configuration back from the journal, before the
// bridges' devices are removed. It returns what it restored.
func Cleanup(journalDir string) ([]string, error) {
	entries, err := os.ReadDir(journalDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the underlay journals: %w", err)
	}
	var done []string
	var errs []error
	for _, e := range entries {
		nic, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || e.IsDir() || strings.HasPrefix(nic, ".") {
			continue
		}
		if err := hostlink.Restore(journalDir, nic); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, "configuration of "+nic+" restored from its journal")
	}
	// With its configuration back, a NIC NetworkManager managed is its again.
	for _, e := range entries {
		nic, ok := strings.CutSuffix(e.Name(), hostnetmgr.NMMarkSuffix)
		if !ok || e.IsDir() {
			continue
		}
		if err := giveBackToNetworkManager(context.Background(), journalDir, nic, slog.Default()); err != nil {
			errs = append(errs, err)
			continue
		}
		done = append(done, nic+" given back to NetworkManager")
	}
	if len(errs) == 0 {
		_ = os.Remove(journalDir) // only when empty
	}
	return done, errors.Join(errs...)
}

// ensureChassisMAC gives this chassis a MAC of its own on network unless
// it has one: a random locally administered unicast address, kept in
// conf.db (ovn-chassis-mac-mappings) for as long as the network is bridged.
func ensureChassisMAC(ctx context.Context, ovs *ovsdbconn.Conn, network string) error {
	if cur, err := ovsbridge.ChassisMAC(ctx, ovs, network); err != nil || cur != "" {
		return err
	}
	mac := make(net.HardwareAddr, 6)
	if _, err := rand.Read(mac); err != nil {
		return err
	}
	mac[0] = (mac[0] &^ 1) | 2
	return ovsbridge.SetChassisMAC(ctx, ovs, network, mac)
}

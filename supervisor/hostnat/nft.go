package hostnat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// nftBackend keeps two tables, `ip ovnhost` and `ip6 ovnhost` (separate
// families rather than inet: NAT chains in inet tables need Linux 5.2),
// each with the interval sets natoutgoing and exclude and one nat
// postrouting chain holding, after one rule per SNAT source,
//
//	ip saddr <from> ip daddr != @exclude counter snat to <to>
//
// the masquerade rule:
//
//	ip saddr @natoutgoing ip daddr != @exclude counter masquerade
//
// Changed prefixes only swap set elements (flush set + add elements in one
// netlink batch); a missing or altered table is rebuilt atomically (add,
// delete, add table and its content in one batch).
type nftBackend struct {
	ns  *nsHandle
	log *slog.Logger
}

func newNFT(ns *nsHandle, log *slog.Logger) (*nftBackend, error) {
	return &nftBackend{ns: ns, log: log}, nil
}

func (b *nftBackend) name() string            { return BackendNFT }
func (b *nftBackend) interval() time.Duration { return NFTCheckInterval }

func (b *nftBackend) conn() (*nftables.Conn, error) {
	// mdlayher/socket v0.5.1 loses the error of a socket opened in another
	// namespace (WithNetNSFd) and hands back a nil connection that panics
	// on first use. Open one ourselves first: with no nf_tables support
	// (nfnetlink neither loaded nor loadable) this is the clear error.
	if err := b.ns.do(probeNetfilterSocket); err != nil {
		return nil, nftErr("open an nftables netlink connection", err)
	}
	var opts []nftables.ConnOption
	if fd := b.ns.fd(); fd != 0 {
		opts = append(opts, nftables.WithNetNSFd(fd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, nftErr("open an nftables netlink connection", err)
	}
	return c, nil
}

func probeNetfilterSocket() error {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return fmt.Errorf("netlink NETLINK_NETFILTER socket: %w", err)
	}
	return unix.Close(fd)
}

func nftTable(f family) *nftables.Table {
	if f == v6 {
		return &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv6}
	}
	return &nftables.Table{Name: TableName, Family: nftables.TableFamilyIPv4}
}

func nftSet(t *nftables.Table, f family, name string) *nftables.Set {
	kt := nftables.TypeIPAddr
	if f == v6 {
		kt = nftables.TypeIP6Addr
	}
	return &nftables.Set{Table: t, Name: name, KeyType: kt, Interval: true}
}

func nftPostrouting(t *nftables.Table) *nftables.Chain {
	return &nftables.Chain{Name: nftChain, Table: t, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource}
}

// nftRuleExprs is the masquerade rule; sets carry their batch IDs.
func nftRuleExprs(f family, nat, excl *nftables.Set) []expr.Any {
	srcOff, dstOff, l := uint32(12), uint32(16), uint32(4)
	if f == v6 {
		srcOff, dstOff, l = 8, 24, 16
	}
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: srcOff, Len: l},
		&expr.Lookup{SourceRegister: 1, SetName: nat.Name, SetID: nat.ID},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: dstOff, Len: l},
		&expr.Lookup{SourceRegister: 1, SetName: excl.Name, SetID: excl.ID, Invert: true},
		&expr.Counter{},
		&expr.Masq{},
	}
}

// nftSNATExprs is the rule of one SNAT source; excl carries its batch ID.
func nftSNATExprs(f family, sn SNAT, excl *nftables.Set) []expr.Any {
	srcOff, dstOff, l := uint32(12), uint32(16), uint32(4)
	nfproto := uint32(unix.NFPROTO_IPV4)
	if f == v6 {
		srcOff, dstOff, l = 8, 24, 16
		nfproto = unix.NFPROTO_IPV6
	}
	mask := net.CIDRMask(sn.From.Bits(), sn.From.Addr().BitLen())
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: srcOff, Len: l},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: l, Mask: mask, Xor: make([]byte, l)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: sn.From.Addr().AsSlice()},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: dstOff, Len: l},
		&expr.Lookup{SourceRegister: 1, SetName: excl.Name, SetID: excl.ID, Invert: true},
		&expr.Counter{},
		&expr.Immediate{Register: 1, Data: sn.To.AsSlice()},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: nfproto, RegAddrMin: 1, RegAddrMax: 1},
	}
}

// nftChainRules are the signatures of the chain's rules in order.
func nftChainRules(f family, fr familyRules, nat, excl *nftables.Set) [][]expr.Any {
	var out [][]expr.Any
	for _, sn := range fr.snat {
		out = append(out, nftSNATExprs(f, sn, excl))
	}
	return append(out, nftRuleExprs(f, nat, excl))
}

// exprSignature describes a rule by what matters (counters and set IDs
// left out), to compare the kernel's rule with the one we write.
func exprSignature(es []expr.Any) string {
	var parts []string
	for _, e := range es {
		switch e := e.(type) {
		case *expr.Payload:
			parts = append(parts, fmt.Sprintf("payload(%d,%d,%d)>%d", e.Base, e.Offset, e.Len, e.DestRegister))
		case *expr.Lookup:
			parts = append(parts, fmt.Sprintf("lookup(%s,inv=%v)<%d", e.SetName, e.Invert, e.SourceRegister))
		case *expr.Counter:
		case *expr.Bitwise:
			parts = append(parts, fmt.Sprintf("bitwise(%x,%x)<%d>%d", e.Mask, e.Xor, e.SourceRegister, e.DestRegister))
		case *expr.Cmp:
			parts = append(parts, fmt.Sprintf("cmp(%d,%x)<%d", e.Op, e.Data, e.Register))
		case *expr.Immediate:
			parts = append(parts, fmt.Sprintf("imm(%x)>%d", e.Data, e.Register))
		case *expr.NAT:
			parts = append(parts, fmt.Sprintf("nat(%d,%d,%d,%d)", e.Type, e.Family, e.RegAddrMin, e.RegAddrMax))
		case *expr.Masq:
			parts = append(parts, fmt.Sprintf("masq(%v,%v,%v,%v)", e.Random, e.FullyRandom, e.Persistent, e.ToPorts))
		default:
			parts = append(parts, fmt.Sprintf("%T", e))
		}
	}
	return strings.Join(parts, " ")
}

func toSetElements(es []setElement) []nftables.SetElement {
	out := make([]nftables.SetElement, len(es))
	for i, e := range es {
		out[i] = nftables.SetElement{Key: e.key, IntervalEnd: e.end}
	}
	return out
}

func fromSetElements(es []nftables.SetElement) []setElement {
	out := make([]setElement, len(es))
	for i, e := range es {
		out[i] = setElement{key: e.Key, end: e.IntervalEnd}
	}
	return out
}

// familyState is what the kernel holds for one family.
type familyState struct {
	table     bool
	structure string // "" when chain, rule and sets are as we write them
	elems     map[string][]setElement
}

func (b *nftBackend) read(c *nftables.Conn, f family, fr familyRules) (familyState, error) {
	st := familyState{elems: map[string][]setElement{}}
	t := nftTable(f)
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return st, nftErr("list nftables tables", err)
	}
	for _, x := range tables {
		if x.Name == TableName {
			st.table = true
		}
	}
	if !st.table {
		return st, nil
	}
	ch, err := c.ListChain(t, nftChain)
	if err != nil || ch == nil {
		st.structure = "chain " + nftChain + " missing"
		return st, nil
	}
	if ch.Type != nftables.ChainTypeNAT || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookPostrouting ||
		ch.Priority == nil || *ch.Priority != *nftables.ChainPriorityNATSource {
		st.structure = "chain " + nftChain + " is not a nat postrouting chain of priority srcnat"
		return st, nil
	}
	for _, name := range []string{nftSetNAT, nftSetExclude} {
		s, err := c.GetSetByName(t, name)
		if err != nil || s == nil {
			st.structure = "set " + name + " missing"
			return st, nil
		}
		want := nftSet(t, f, name)
		if !s.Interval || s.KeyType.Name != want.KeyType.Name {
			st.structure = "set " + name + " has the wrong type or flags"
			return st, nil
		}
		es, err := c.GetSetElements(s)
		if err != nil {
			return st, nftErr("read the elements of set "+name, err)
		}
		st.elems[name] = fromSetElements(es)
	}
	rules, err := c.GetRules(t, ch)
	if err != nil {
		return st, nftErr("read the rules of chain "+nftChain, err)
	}
	n, e := nftSet(t, f, nftSetNAT), nftSet(t, f, nftSetExclude)
	want := nftChainRules(f, fr, n, e)
	if len(rules) != len(want) {
		st.structure = fmt.Sprintf("chain %s holds %d rule(s), want %d (SNAT rules and the masquerade rule)", nftChain, len(rules), len(want))
		return st, nil
	}
	for i := range want {
		if exprSignature(rules[i].Exprs) != exprSignature(want[i]) {
			st.structure = fmt.Sprintf("chain %s rule %d differs from what ovnhost writes", nftChain, i+1)
			return st, nil
		}
	}
	return st, nil
}

func (b *nftBackend) sync(n normalized) (bool, string, error) {
	c, err := b.conn()
	if err != nil {
		return false, "", err
	}
	for _, f := range families {
		fr := n[f]
		st, err := b.read(c, f, fr)
		if err != nil {
			return false, "", err
		}
		if !fr.needed() {
			if st.table {
				return false, "table " + f.String() + " " + TableName + " present but not needed", nil
			}
			continue
		}
		if !st.table {
			return false, "table " + f.String() + " " + TableName + " missing", nil
		}
		if st.structure != "" {
			return false, st.structure, nil
		}
		if !sameElements(st.elems[nftSetNAT], setElements(fr.natOutgoing)) {
			return false, "set " + f.String() + " " + nftSetNAT + " elements differ", nil
		}
		if !sameElements(st.elems[nftSetExclude], setElements(fr.exclude)) {
			return false, "set " + f.String() + " " + nftSetExclude + " elements differ", nil
		}
	}
	return true, "", nil
}

func (b *nftBackend) apply(n normalized) error {
	c, err := b.conn()
	if err != nil {
		return err
	}
	for _, f := range families {
		fr := n[f]
		st, err := b.read(c, f, fr)
		if err != nil {
			return err
		}
		t := nftTable(f)
		switch {
		case !fr.needed():
			if !st.table {
				continue
			}
			c.DelTable(t)
			if err := c.Flush(); err != nil {
				return nftErr("delete table "+f.String()+" "+TableName, err)
			}
		case st.table && st.structure == "":
			// Only elements can differ: swap them in one batch.
			for _, s := range []struct {
				name string
				want []setElement
			}{{nftSetNAT, setElements(fr.natOutgoing)}, {nftSetExclude, setElements(fr.exclude)}} {
				if sameElements(st.elems[s.name], s.want) {
					continue
				}
				set := nftSet(t, f, s.name)
				c.FlushSet(set)
				if len(s.want) > 0 {
					if err := c.SetAddElements(set, toSetElements(s.want)); err != nil {
						return nftErr("prepare the elements of set "+s.name, err)
					}
				}
			}
			if err := c.Flush(); err != nil {
				return nftErr("update the sets of table "+f.String()+" "+TableName, err)
			}
		default:
			// Rebuild the table atomically: add (so the delete cannot
			// fail), delete, then create it with its content.
			c.AddTable(t)
			c.DelTable(t)
			t = c.AddTable(t)
			nat, excl := nftSet(t, f, nftSetNAT), nftSet(t, f, nftSetExclude)
			if err := c.AddSet(nat, toSetElements(setElements(fr.natOutgoing))); err != nil {
				return nftErr("prepare set "+nftSetNAT, err)
			}
			if err := c.AddSet(excl, toSetElements(setElements(fr.exclude))); err != nil {
				return nftErr("prepare set "+nftSetExclude, err)
			}
			ch := c.AddChain(nftPostrouting(t))
			for _, exprs := range nftChainRules(f, fr, nat, excl) {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
			}
			if err := c.Flush(); err != nil {
				return nftErr("create table "+f.String()+" "+TableName+" (sets, nat postrouting chain, SNAT and masquerade rules)", err)
			}
		}
	}
	return nil
}

func (b *nftBackend) remove() error {
	c, err := b.conn()
	if err != nil {
		return err
	}
	for _, f := range families {
		st, err := b.read(c, f, familyRules{})
		if err != nil {
			return err
		}
		if !st.table {
			continue
		}
		c.DelTable(nftTable(f))
		if err := c.Flush(); err != nil {
			return nftErr("delete table "+f.String()+" "+TableName, err)
		}
	}
	return nil
}

// removeAll is remove plus an inet table of the same name (a layout other
// versions may have used), for Cleanup.
func (b *nftBackend) removeAll() error {
	if err := b.remove(); err != nil {
		return err
	}
	c, err := b.conn()
	if err != nil {
		return err
	}
	tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
	if err != nil {
		return nftErr("list nftables tables", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			c.DelTable(t)
			if err := c.Flush(); err != nil {
				return nftErr("delete table inet "+TableName, err)
			}
		}
	}
	return nil
}

// changes subscribes to nftables netlink events (tables, chains, rules,
// sets, elements). Our own writes are reported too; the check that follows
// finds the kernel in sync and writes nothing.
func (b *nftBackend) changes(ctx context.Context) (<-chan struct{}, func()) {
	c, err := b.conn()
	if err != nil {
		b.log.Warn("no nftables monitor, re-reading on a ticker", "err", err)
		return nil, func() {}
	}
	mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(64))
	evs, err := c.AddGenerationalMonitor(mon)
	if err != nil {
		b.log.Warn("no nftables monitor, re-reading on a ticker", "err", nftErr("subscribe to nftables events", err))
		return nil, func() {}
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(out)
		for ev := range evs {
			if ev.GeneratedBy != nil && ev.GeneratedBy.Error != nil {
				b.log.Debug("nftables monitor ended", "err", ev.GeneratedBy.Error)
			}
			select {
			case out <- struct{}{}:
			default:
			}
			select {
			case <-done:
				// Keep draining until the library closes evs.
			default:
			}
		}
	}()
	var once bool
	stop := func() {
		if once {
			return
		}
		once = true
		close(done)
		_ = mon.Close()
	}
	return out, stop
}

// nftErr names the failed step and the fix for the usual causes.
func nftErr(what string, err error) error {
	switch {
	case errors.Is(err, syscall.EPERM), errors.Is(err, syscall.EACCES):
		return fmt.Errorf("hostnat nft: %s: %w: the node daemon needs CAP_NET_ADMIN (run as root or grant the capability)", what, err)
	case isUnsupported(err):
		return fmt.Errorf("hostnat nft: %s: %w: the kernel lacks nf_tables or its NAT support: load the modules (modprobe nf_tables nft_chain_nat nft_masq; older kernels: nft_chain_nat_ipv4 nft_masq_ipv4 and the ipv6 ones), or set the host NAT backend to iptables-legacy", what, err)
	}
	return fmt.Errorf("hostnat nft: %s: %w", what, err)
}

func isUnsupported(err error) bool {
	return errors.Is(err, syscall.EPROTONOSUPPORT) || errors.Is(err, syscall.EAFNOSUPPORT) ||
		errors.Is(err, syscall.EOPNOTSUPP)
}

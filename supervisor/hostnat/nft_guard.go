package hostnat

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"syscall"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The guard's nft table (guard.go describes it).

func nftGuardTable() *nftables.Table {
	return &nftables.Table{Name: GuardTable, Family: nftables.TableFamilyINet}
}

func nftGuardSet(t *nftables.Table, name string) *nftables.Set {
	kt := nftables.TypeInetService
	if name == guardSetIfaces {
		kt = nftables.TypeIFName
	}
	return &nftables.Set{Table: t, Name: name, KeyType: kt}
}

func nftGuardChain(t *nftables.Table, name string) *nftables.Chain {
	hook := nftables.ChainHookInput
	if name == guardChainForward {
		hook = nftables.ChainHookForward
	}
	accept := nftables.ChainPolicyAccept
	return &nftables.Chain{Name: name, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: hook, Priority: nftables.ChainPriorityFilter, Policy: &accept}
}

// nftGuardRules are the two rules of each guard chain: TCP connection
// attempts (SYN without ACK) and UDP datagrams to the guarded ports.
func nftGuardRules(ifaces, tcp, udp *nftables.Set) [][]expr.Any {
	match := func(proto byte, ports *nftables.Set) []expr.Any {
		return []expr.Any{
			&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
			&expr.Lookup{SourceRegister: 1, SetName: ifaces.Name, SetID: ifaces.ID},
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Lookup{SourceRegister: 1, SetName: ports.Name, SetID: ports.ID},
		}
	}
	drop := []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}
	synOnly := []expr.Any{
		// tcp flags & (syn|ack) == syn: the TCP header's byte 13
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{tcpSYN | tcpACK}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{tcpSYN}},
	}
	return [][]expr.Any{
		append(append(match(unix.IPPROTO_TCP, tcp), synOnly...), drop...),
		append(match(unix.IPPROTO_UDP, udp), drop...),
	}
}

// TCP header flag bits.
const (
	tcpSYN = 0x02
	tcpACK = 0x10
)

// guardSignature describes a rule for comparison (exprSignature plus the
// expressions only the guard uses).
func guardSignature(es []expr.Any) string {
	var b bytes.Buffer
	for _, e := range es {
		switch e := e.(type) {
		case *expr.Ct:
			fmt.Fprintf(&b, "ct(%d)>%d ", e.Key, e.Register)
		case *expr.Bitwise:
			fmt.Fprintf(&b, "bitwise(%x,%x)<%d>%d ", e.Mask, e.Xor, e.SourceRegister, e.DestRegister)
		case *expr.Cmp:
			fmt.Fprintf(&b, "cmp(%d,%x)<%d ", e.Op, e.Data, e.Register)
		case *expr.Meta:
			fmt.Fprintf(&b, "meta(%d)>%d ", e.Key, e.Register)
		case *expr.Verdict:
			fmt.Fprintf(&b, "verdict(%d) ", e.Kind)
		default:
			b.WriteString(exprSignature([]expr.Any{e}) + " ")
		}
	}
	return b.String()
}

func guardSetElements(g guardRules) map[string][][]byte {
	m := map[string][][]byte{}
	for _, i := range g.ifaces {
		m[guardSetIfaces] = append(m[guardSetIfaces], ifnameKey(i))
	}
	for _, p := range g.tcp {
		m[guardSetTCP] = append(m[guardSetTCP], portKey(p))
	}
	for _, p := range g.udp {
		m[guardSetUDP] = append(m[guardSetUDP], portKey(p))
	}
	return m
}

func sameKeys(a, b [][]byte) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.SortFunc(a, bytes.Compare)
	slices.SortFunc(b, bytes.Compare)
	return slices.EqualFunc(a, b, bytes.Equal)
}

var guardSets = []string{guardSetIfaces, guardSetTCP, guardSetUDP}
var guardChains = []string{guardChainInput, guardChainForward}

// readGuard reports whether the table exists and what differs from g
// ("" when the kernel holds exactly g).
func (b *nftBackend) readGuard(c *nftables.Conn, g *guardRules) (present bool, differs string, err error) {
	t := nftGuardTable()
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		return false, "", nftErr("list nftables tables", err)
	}
	if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == GuardTable }) {
		return false, "table inet " + GuardTable + " missing", nil
	}
	if g == nil {
		return true, "table inet " + GuardTable + " present but not wanted", nil
	}
	want := guardSetElements(*g)
	for _, name := range guardSets {
		s, err := c.GetSetByName(t, name)
		if err != nil || s == nil {
			return true, "set " + name + " missing", nil
		}
		if s.KeyType.Name != nftGuardSet(t, name).KeyType.Name || s.Interval {
			return true, "set " + name + " has the wrong type", nil
		}
		es, err := c.GetSetElements(s)
		if err != nil {
			return true, "", nftErr("read the elements of set "+name, err)
		}
		var got [][]byte
		for _, e := range es {
			got = append(got, e.Key)
		}
		if !sameKeys(got, want[name]) {
			return true, "set " + name + " elements differ", nil
		}
	}
	sets := []*nftables.Set{nftGuardSet(t, guardSetIfaces), nftGuardSet(t, guardSetTCP), nftGuardSet(t, guardSetUDP)}
	var wantRules []string
	for _, r := range nftGuardRules(sets[0], sets[1], sets[2]) {
		wantRules = append(wantRules, guardSignature(r))
	}
	for _, name := range guardChains {
		ch, err := c.ListChain(t, name)
		if err != nil || ch == nil {
			return true, "chain " + name + " missing", nil
		}
		w := nftGuardChain(t, name)
		if ch.Type != w.Type || ch.Hooknum == nil || *ch.Hooknum != *w.Hooknum || ch.Priority == nil || *ch.Priority != *w.Priority ||
			(ch.Policy != nil && *ch.Policy != *w.Policy) {
			return true, "chain " + name + " is not a filter chain on its hook", nil
		}
		rules, err := c.GetRules(t, ch)
		if err != nil {
			return true, "", nftErr("read the rules of chain "+name, err)
		}
		var got []string
		for _, r := range rules {
			got = append(got, guardSignature(r.Exprs))
		}
		if !slices.Equal(got, wantRules) {
			return true, fmt.Sprintf("chain %s holds %d rule(s) that differ from the guard's %d", name, len(got), len(wantRules)), nil
		}
	}
	return true, "", nil
}

func (b *nftBackend) guardSync(g *guardRules) (bool, string, error) {
	c, err := b.conn()
	if err != nil {
		return false, "", err
	}
	present, differs, err := b.readGuard(c, g)
	if err != nil {
		return false, "", err
	}
	if g == nil {
		return !present, differs, nil
	}
	return differs == "", differs, nil
}

// guardApply rebuilds the table atomically (one netlink batch: add,
// delete, create with its content): there is never a moment without the
// guard once it exists.
func (b *nftBackend) guardApply(g guardRules) error {
	c, err := b.conn()
	if err != nil {
		return err
	}
	t := nftGuardTable()
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)
	want := guardSetElements(g)
	sets := map[string]*nftables.Set{}
	for _, name := range guardSets {
		s := nftGuardSet(t, name)
		var es []nftables.SetElement
		for _, k := range want[name] {
			es = append(es, nftables.SetElement{Key: k})
		}
		if err := c.AddSet(s, es); err != nil {
			return nftErr("prepare set "+name+" of table inet "+GuardTable, err)
		}
		sets[name] = s
	}
	for _, name := range guardChains {
		ch := c.AddChain(nftGuardChain(t, name))
		for _, r := range nftGuardRules(sets[guardSetIfaces], sets[guardSetTCP], sets[guardSetUDP]) {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: r})
		}
	}
	if err := c.Flush(); err != nil {
		if isUnsupported(err) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("hostnat nft: create table inet %s (sets, input and forward filter chains, drop rules): %w: the kernel lacks nf_tables' inet family: load it (modprobe nf_tables), or set the host NAT backend to iptables-legacy", GuardTable, err)
		}
		return nftErr("create table inet "+GuardTable+" (sets, input and forward filter chains, drop rules)", err)
	}
	return nil
}

func (b *nftBackend) guardRemove() error {
	c, err := b.conn()
	if err != nil {
		return err
	}
	present, _, err := b.readGuard(c, nil)
	if err != nil || !present {
		return err
	}
	c.DelTable(nftGuardTable())
	if err := c.Flush(); err != nil {
		return nftErr("delete table inet "+GuardTable, err)
	}
	return nil
}

// guardDrops sums the packets counted by the drop rules of both chains.
func (b *nftBackend) guardDrops() (uint64, error) {
	c, err := b.conn()
	if err != nil {
		return 0, err
	}
	t := nftGuardTable()
	var n uint64
	for _, name := range guardChains {
		rules, err := c.GetRules(t, &nftables.Chain{Name: name, Table: t})
		if err != nil {
			return 0, nftErr("read the rules of chain "+name+" of table inet "+GuardTable, err)
		}
		for _, r := range rules {
			for _, e := range r.Exprs {
				if ct, ok := e.(*expr.Counter); ok {
					n += ct.Packets
				}
			}
		}
	}
	return n, nil
}

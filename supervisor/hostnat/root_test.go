package hostnat

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/go-iptables/iptables"
	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"

	harnessnetns "github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Root tests: each runs in a throwaway network namespace, for each backend.

// inFreshNetNS runs fn in a new, unnamed network namespace with lo up
// (tests/harness/netns.InFresh).
func inFreshNetNS(t *testing.T, fn func(ns netns.NsHandle)) {
	t.Helper()
	harnessnetns.InFresh(t, fn)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// requireBackend skips when this host cannot run the backend at all.
func requireBackend(t *testing.T, backend string) {
	t.Helper()
	if backend == BackendLegacy {
		if _, err := legacyProgram(v4); err != nil {
			if testenv.Strict() {
				t.Fatalf("iptables-legacy: %v", err)
			}
			t.Skipf("iptables-legacy: %v", err)
		}
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %s", what, d, last)
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond) // poll interval of the condition, not synchronisation
	}
}

// kernelView reads back what the kernel holds, independently of the
// backend code: nft through the library, legacy through go-iptables.
type kernelView struct {
	t  *testing.T
	ns netns.NsHandle
}

func (k kernelView) nftConn() *nftables.Conn {
	c, err := nftables.New(nftables.WithNetNSFd(int(k.ns)))
	if err != nil {
		k.t.Fatal(err)
	}
	return c
}

// nft returns per family the elements of both sets ("" entries when the
// table is absent) and the rule's expression signature.
func (k kernelView) nft(f family) (present bool, nat, excl []string, rule string) {
	c := k.nftConn()
	t := nftTable(f)
	tables, err := c.ListTablesOfFamily(t.Family)
	if err != nil {
		k.t.Fatal(err)
	}
	if !slices.ContainsFunc(tables, func(x *nftables.Table) bool { return x.Name == TableName }) {
		return false, nil, nil, ""
	}
	for _, name := range []string{nftSetNAT, nftSetExclude} {
		s, err := c.GetSetByName(t, name)
		if err != nil {
			return true, nil, nil, "set " + name + ": " + err.Error()
		}
		es, err := c.GetSetElements(s)
		if err != nil {
			k.t.Fatal(err)
		}
		got := fromSetElements(es)
		sortElements(got)
		if name == nftSetNAT {
			nat = elemStrings(got)
		} else {
			excl = elemStrings(got)
		}
	}
	rules, err := c.GetRules(t, &nftables.Chain{Name: nftChain, Table: t})
	if err != nil {
		return true, nat, excl, "rules: " + err.Error()
	}
	var sigs []string
	for _, r := range rules {
		sigs = append(sigs, exprSignature(r.Exprs))
		if !slices.ContainsFunc(r.Exprs, func(e expr.Any) bool { _, ok := e.(*expr.Masq); return ok }) {
			k.t.Errorf("rule without masquerade: %s", exprSignature(r.Exprs))
		}
	}
	return true, nat, excl, strings.Join(sigs, " | ")
}

func (k kernelView) ipt(f family) *iptables.IPTables {
	p, err := legacyProgram(f)
	if err != nil {
		k.t.Fatal(err)
	}
	proto := iptables.ProtocolIPv4
	if f == v6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(p))
	if err != nil {
		k.t.Fatal(err)
	}
	return ipt
}

// legacy returns the chain listing (nil when absent) and the POSTROUTING
// rules. It runs on the test's locked thread, inside the test namespace.
func (k kernelView) legacy(f family) (chain, postrouting []string) {
	ipt := k.ipt(f)
	ok, err := ipt.ChainExists("nat", ChainName)
	if err != nil {
		k.t.Fatal(err)
	}
	if ok {
		if chain, err = ipt.List("nat", ChainName); err != nil {
			k.t.Fatal(err)
		}
	}
	if postrouting, err = ipt.List("nat", "POSTROUTING"); err != nil {
		k.t.Fatal(err)
	}
	return chain, postrouting
}

var (
	rules1 = Rules{
		NATOutgoing: pfx("10.16.0.0/16", "fd00:10:16::/64"),
		Exclude:     pfx("10.16.0.0/16", "100.64.0.0/16", "10.96.0.0/12", "fd00:10:16::/64", "fd00:100:64::/64"),
	}
	rules2 = Rules{ // a subnet added, one exclusion gone, IPv6 dropped
		NATOutgoing: pfx("10.16.0.0/16", "10.17.0.0/16"),
		Exclude:     pfx("10.16.0.0/16", "10.17.0.0/16", "10.96.0.0/12", "192.168.1.10/32"),
	}
)

func TestBackendsInNetNS(t *testing.T) {
	for _, backend := range []string{BackendNFT, BackendLegacy} {
		t.Run(backend, func(t *testing.T) {
			requireBackend(t, backend)
			inFreshNetNS(t, func(ns netns.NsHandle) { testBackend(t, ns, backend) })
		})
	}
}

func testBackend(t *testing.T, ns netns.NsHandle, backend string) {
	k := kernelView{t: t, ns: ns}
	m, err := New(backend, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// check compares the kernel with r; "" when equal.
	check := func(r Rules) string {
		n, err := normalize(r)
		if err != nil {
			t.Fatal(err)
		}
		var diffs []string
		for _, f := range families {
			switch backend {
			case BackendNFT:
				present, nat, excl, rule := k.nft(f)
				if present != n[f].needed() {
					diffs = append(diffs, fmt.Sprintf("%s table present=%v", f, present))
					continue
				}
				if !present {
					continue
				}
				if w := elemStrings(setElements(n[f].natOutgoing)); !slices.Equal(nat, w) {
					diffs = append(diffs, fmt.Sprintf("%s natoutgoing %v, want %v", f, nat, w))
				}
				if w := elemStrings(setElements(n[f].exclude)); !slices.Equal(excl, w) {
					diffs = append(diffs, fmt.Sprintf("%s exclude %v, want %v", f, excl, w))
				}
				s, e := nftSet(nftTable(f), f, nftSetNAT), nftSet(nftTable(f), f, nftSetExclude)
				if w := exprSignature(nftRuleExprs(f, s, e)); rule != w {
					diffs = append(diffs, fmt.Sprintf("%s rule %q, want %q", f, rule, w))
				}
			case BackendLegacy:
				chain, post := k.legacy(f)
				want := []string(nil)
				if n[f].needed() {
					want = legacyListing(n[f])
				}
				if !slices.Equal(chain, want) {
					diffs = append(diffs, fmt.Sprintf("%s chain %q, want %q", f, chain, want))
				}
				jumps := 0
				for _, r := range post {
					if strings.Contains(r, "-j "+ChainName) {
						jumps++
					}
				}
				if wj := map[bool]int{true: 1, false: 0}[n[f].needed()]; jumps != wj {
					diffs = append(diffs, fmt.Sprintf("%s %d jumps in POSTROUTING %q, want %d", f, jumps, post, wj))
				}
			}
		}
		return strings.Join(diffs, "; ")
	}

	if err := m.Apply(ctx, rules1); err != nil {
		t.Fatal(err)
	}
	if d := check(rules1); d != "" {
		t.Fatalf("after Apply(rules1): %s", d)
	}
	if err := m.Apply(ctx, rules1); err != nil { // idempotent
		t.Fatal(err)
	}
	if d := check(rules1); d != "" {
		t.Fatalf("after a second Apply(rules1): %s", d)
	}
	if err := m.Apply(ctx, rules2); err != nil {
		t.Fatal(err)
	}
	if d := check(rules2); d != "" {
		t.Fatalf("after Apply(rules2): %s", d)
	}

	runDone := make(chan error, 1)
	go func() { runDone <- m.Run(ctx) }()

	// Someone else flushes our rules; Run restores them within 1 s.
	flush := map[string][]func(){
		BackendNFT: {
			func() { // delete the table
				c := k.nftConn()
				c.DelTable(nftTable(v4))
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
			},
			func() { // flush the whole ruleset (nft flush ruleset)
				c := k.nftConn()
				c.FlushRuleset()
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
			},
			func() { // empty a set
				c := k.nftConn()
				c.FlushSet(nftSet(nftTable(v4), v4, nftSetExclude))
				if err := c.Flush(); err != nil {
					t.Fatal(err)
				}
			},
		},
		BackendLegacy: {
			func() { // iptables-legacy -t nat -F OVNHOST-POSTROUTING
				if err := k.ipt(v4).ClearChain("nat", ChainName); err != nil {
					t.Fatal(err)
				}
			},
			func() { // the jump removed (a firewall reload rebuilding POSTROUTING)
				if err := k.ipt(v4).ClearChain("nat", "POSTROUTING"); err != nil {
					t.Fatal(err)
				}
			},
			func() { // everything gone (iptables -t nat -F; -X)
				ipt := k.ipt(v4)
				if err := ipt.ClearChain("nat", "POSTROUTING"); err != nil {
					t.Fatal(err)
				}
				if err := ipt.ClearAndDeleteChain("nat", ChainName); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for i, f := range flush[backend] {
		start := time.Now()
		f() // (the nft monitor may have restored everything before check runs)
		waitFor(t, fmt.Sprintf("flush %d reverted by Run", i), time.Second, func() (bool, string) {
			d := check(rules2)
			return d == "", d
		})
		t.Logf("flush %d reverted after %v", i, time.Since(start).Round(time.Millisecond))
	}

	// Apply while Run runs: back to both families.
	if err := m.Apply(ctx, rules1); err != nil {
		t.Fatal(err)
	}
	if d := check(rules1); d != "" {
		t.Fatalf("after Apply(rules1) under Run: %s", d)
	}

	if err := m.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if d := check(Rules{}); d != "" {
		t.Fatalf("after Remove: %s", d)
	}
	cancel()
	if err := <-runDone; err != nil {
		t.Fatal(err)
	}
	// Remove left nothing, and Run did not put anything back.
	if d := check(Rules{}); d != "" {
		t.Fatalf("after Run ended: %s", d)
	}
}

func TestCleanupRemovesBothBackends(t *testing.T) {
	requireBackend(t, BackendLegacy)
	inFreshNetNS(t, func(ns netns.NsHandle) {
		k := kernelView{t: t, ns: ns}
		ctx := context.Background()
		for _, b := range []string{BackendNFT, BackendLegacy} {
			m, err := New(b, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			if err := m.Apply(ctx, rules1); err != nil {
				t.Fatal(err)
			}
			m.Close()
		}
		// an inet table of our name, as another layout would leave
		c := k.nftConn()
		c.AddTable(&nftables.Table{Name: TableName, Family: nftables.TableFamilyINet})
		if err := c.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := Cleanup(testLogger(t)); err != nil {
			t.Fatal(err)
		}
		tables, err := k.nftConn().ListTables()
		if err != nil {
			t.Fatal(err)
		}
		for _, tb := range tables {
			if tb.Name == TableName {
				t.Errorf("table %s %s left", familyName(tb.Family), tb.Name)
			}
		}
		for _, f := range families {
			chain, post := k.legacy(f)
			if chain != nil || slices.ContainsFunc(post, func(r string) bool { return strings.Contains(r, ChainName) }) {
				t.Errorf("%s: legacy leftovers: %q %q", f, chain, post)
			}
		}
	})
}

func TestDetectInNetNS(t *testing.T) {
	inFreshNetNS(t, func(netns.NsHandle) {
		d, err := Detect()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("detected %s: %s", d.Backend, d.Reason)
		if d.Backend != BackendNFT && d.Backend != BackendLegacy {
			t.Fatalf("backend %q", d.Backend)
		}
		// With legacy rules and no nft table, a host whose iptables is
		// not the nft variant is legacy.
		if p, err := findProgram("iptables"); err == nil {
			if v, _ := programVersion(p); !strings.Contains(v, "nf_tables") {
				ipt := kernelView{t: t}.ipt(v4)
				if err := ipt.Append("filter", "INPUT", "-s", "192.0.2.1/32", "-j", "ACCEPT"); err != nil {
					t.Fatal(err)
				}
				if d, err := Detect(); err != nil || d.Backend != BackendLegacy {
					t.Errorf("with legacy rules: %+v, %v", d, err)
				}
			}
		}
		_ = netip.Addr{}
	})
}

package hostnat

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coreos/go-iptables/iptables"
)

// legacyBackend keeps the chain OVNHOST-POSTROUTING in the nat table of
// iptables-legacy (and ip6tables-legacy), jumped to from the top of
// POSTROUTING. Without ipset there is one rule per prefix: RETURN for each
// excluded destination, then MASQUERADE for each NATOutgoing source. A
// chain that differs is flushed and refilled (the window without rules is
// the few milliseconds of the iptables calls).
type legacyBackend struct {
	ns  *nsHandle
	log *slog.Logger
	ipt [2]*iptables.IPTables // nil when that family's program is missing
	// missing says why a family has no program.
	missing [2]error
}

// binDirs are searched after PATH: daemons often run with a PATH that lacks
// the sbin directories.
var binDirs = []string{"/usr/sbin", "/sbin", "/usr/local/sbin", "/usr/bin", "/bin"}

// findProgram returns the path of name on PATH or in binDirs, without
// resolving symlinks (the xtables multi-call binaries dispatch on argv[0]).
func findProgram(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range binDirs {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH or in %s", name, strings.Join(binDirs, ":"))
}

// programVersion runs `<path> -V`.
func programVersion(path string) (string, error) {
	out, err := exec.Command(path, "-V").CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// legacyProgram finds the legacy iptables program of a family:
// iptables-legacy (Debian, newer Fedora/RHEL) or, when it is not the nft
// variant, plain iptables (CentOS 7: iptables 1.4.21, legacy only).
func legacyProgram(f family) (string, error) {
	base := "iptables"
	if f == v6 {
		base = "ip6tables"
	}
	if p, err := findProgram(base + "-legacy"); err == nil {
		return p, nil
	}
	p, err := findProgram(base)
	if err != nil {
		return "", fmt.Errorf("neither %s-legacy nor %s found: install iptables (legacy) or set the host NAT backend to nft", base, base)
	}
	v, err := programVersion(p)
	if err != nil {
		return "", fmt.Errorf("%s -V: %v: %s", p, err, v)
	}
	if strings.Contains(v, "nf_tables") {
		return "", fmt.Errorf("%s is the nf_tables variant (%s) and no %s-legacy exists: set the host NAT backend to nft, or install the legacy programs", p, v, base)
	}
	return p, nil
}

func newLegacy(ns *nsHandle, log *slog.Logger) (*legacyBackend, error) {
	b := &legacyBackend{ns: ns, log: log}
	for _, f := range families {
		p, err := legacyProgram(f)
		if err != nil {
			b.missing[f] = err
			continue
		}
		proto := iptables.ProtocolIPv4
		if f == v6 {
			proto = iptables.ProtocolIPv6
		}
		ipt, err := iptables.New(iptables.IPFamily(proto), iptables.Path(p), iptables.Timeout(5))
		if err != nil {
			b.missing[f] = fmt.Errorf("%s: %w", p, err)
			continue
		}
		b.ipt[f] = ipt
	}
	if b.ipt[v4] == nil && b.ipt[v6] == nil {
		return nil, fmt.Errorf("hostnat iptables-legacy: %w", b.missing[v4])
	}
	return b, nil
}

func (b *legacyBackend) name() string            { return BackendLegacy }
func (b *legacyBackend) interval() time.Duration { return LegacyCheckInterval }

func (b *legacyBackend) changes(context.Context) (<-chan struct{}, func()) { return nil, func() {} }

// chainState reads the chain listing and whether the jump exists.
func (b *legacyBackend) chainState(f family) (listing []string, exists, jump bool, err error) {
	ipt := b.ipt[f]
	err = b.ns.do(func() error {
		var err error
		exists, err = ipt.ChainExists("nat", ChainName)
		if err != nil || !exists {
			return err
		}
		if listing, err = ipt.List("nat", ChainName); err != nil {
			return err
		}
		jump, err = ipt.Exists("nat", "POSTROUTING", jumpSpec()...)
		return err
	})
	if err != nil {
		return nil, false, false, legacyErr(f, "read nat chain "+ChainName, err)
	}
	return listing, exists, jump, nil
}

func (b *legacyBackend) sync(n normalized) (bool, string, error) {
	for _, f := range families {
		fr := n[f]
		if b.ipt[f] == nil {
			if fr.needed() {
				return false, "", fmt.Errorf("hostnat iptables-legacy: %s NATOutgoing prefixes need %w", f, b.missing[f])
			}
			continue
		}
		listing, exists, jump, err := b.chainState(f)
		if err != nil {
			return false, "", err
		}
		switch {
		case !fr.needed():
			if exists {
				return false, fmt.Sprintf("%s chain present but not needed", f), nil
			}
		case !exists:
			return false, fmt.Sprintf("%s chain %s missing", f, ChainName), nil
		case !jump:
			return false, fmt.Sprintf("%s jump from POSTROUTING missing", f), nil
		case !slices.Equal(listing, legacyListing(fr)):
			return false, fmt.Sprintf("%s chain %s holds %d rule(s), want %d", f, ChainName, len(listing)-1, len(legacyRuleSpecs(fr))), nil
		}
	}
	return true, "", nil
}

func (b *legacyBackend) apply(n normalized) error {
	for _, f := range families {
		fr := n[f]
		ipt := b.ipt[f]
		if ipt == nil {
			if fr.needed() {
				return fmt.Errorf("hostnat iptables-legacy: %s NATOutgoing prefixes need %w", f, b.missing[f])
			}
			continue
		}
		if !fr.needed() {
			if err := b.removeFamily(f); err != nil {
				return err
			}
			continue
		}
		listing, exists, jump, err := b.chainState(f)
		if err != nil {
			return err
		}
		if !exists || !slices.Equal(listing, legacyListing(fr)) {
			err := b.ns.do(func() error {
				if err := ipt.ClearChain("nat", ChainName); err != nil { // creates it when missing
					return err
				}
				for _, spec := range legacyRuleSpecs(fr) {
					if err := ipt.Append("nat", ChainName, spec...); err != nil {
						return fmt.Errorf("append %s: %w", strings.Join(spec, " "), err)
					}
				}
				return nil
			})
			if err != nil {
				return legacyErr(f, "fill nat chain "+ChainName, err)
			}
		}
		if !jump {
			if err := b.ns.do(func() error { return ipt.Insert("nat", "POSTROUTING", 1, jumpSpec()...) }); err != nil {
				return legacyErr(f, "insert the jump to "+ChainName+" into nat POSTROUTING", err)
			}
		}
	}
	return nil
}

func (b *legacyBackend) removeFamily(f family) error {
	ipt := b.ipt[f]
	if ipt == nil {
		return nil
	}
	err := b.ns.do(func() error {
		// Without the chain there is no jump to it (iptables -C would fail
		// on the unknown target).
		if exists, err := ipt.ChainExists("nat", ChainName); err != nil || !exists {
			return err
		}
		// Every copy of the jump (another instance may have added one).
		for {
			ok, err := ipt.Exists("nat", "POSTROUTING", jumpSpec()...)
			if err != nil {
				return err
			}
			if !ok {
				break
			}
			if err := ipt.Delete("nat", "POSTROUTING", jumpSpec()...); err != nil {
				return err
			}
		}
		// A jump without our comment (added by hand) would keep the chain
		// referenced: remove those too.
		rules, err := ipt.List("nat", "POSTROUTING")
		if err != nil {
			return err
		}
		for _, r := range rules {
			if r == "-A POSTROUTING -j "+ChainName {
				if err := ipt.Delete("nat", "POSTROUTING", "-j", ChainName); err != nil {
					return err
				}
			}
		}
		return ipt.ClearAndDeleteChain("nat", ChainName)
	})
	if err != nil {
		return legacyErr(f, "remove nat chain "+ChainName+" and its jump", err)
	}
	return nil
}

func (b *legacyBackend) remove() error {
	var errs []error
	for _, f := range families {
		errs = append(errs, b.removeFamily(f))
	}
	return errors.Join(errs...)
}

// legacyErr names the failed step and the fix for the usual causes.
func legacyErr(f family, what string, err error) error {
	prog := "iptables-legacy"
	if f == v6 {
		prog = "ip6tables-legacy"
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "Permission denied") || strings.Contains(msg, "you must be root") || strings.Contains(msg, "Operation not permitted"):
		return fmt.Errorf("hostnat %s: %s: %w: the node daemon needs CAP_NET_ADMIN (run as root or grant the capability)", prog, what, err)
	case strings.Contains(msg, "can't initialize") || strings.Contains(msg, "Table does not exist"):
		mod := "iptable_nat"
		if f == v6 {
			mod = "ip6table_nat"
		}
		return fmt.Errorf("hostnat %s: %s: %w: the kernel lacks the legacy nat table: load it (modprobe %s), or set the host NAT backend to nft", prog, what, err, mod)
	}
	return fmt.Errorf("hostnat %s: %s: %w", prog, what, err)
}

package hostnat

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// The guard's iptables-legacy chain (guard.go describes it): filter
// OVNHOST-GUARD, jumped to from the top of INPUT and FORWARD, in each
// family whose program exists. A host whose kernel has IPv6 but no
// ip6tables-legacy cannot be guarded: that is an error, not a warning.

// ipv6Enabled reports whether the namespace's kernel routes IPv6 at all.
func (b *legacyBackend) ipv6Enabled() bool {
	on := false
	_ = b.ns.do(func() error {
		v, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
		on = err == nil && strings.TrimSpace(string(v)) == "0"
		return nil
	})
	return on
}

// guardState reads the chain listing and whether each jump exists.
func (b *legacyBackend) guardState(f family) (listing []string, exists bool, jumps map[string]bool, err error) {
	ipt := b.ipt[f]
	jumps = map[string]bool{}
	err = b.ns.do(func() error {
		var err error
		exists, err = ipt.ChainExists("filter", GuardChain)
		if err != nil || !exists {
			return err
		}
		if listing, err = ipt.List("filter", GuardChain); err != nil {
			return err
		}
		for _, h := range guardHooks {
			ok, err := ipt.Exists("filter", h, guardJumpSpec()...)
			if err != nil {
				return err
			}
			jumps[h] = ok
		}
		return nil
	})
	if err != nil {
		return nil, false, nil, legacyErr(f, "read filter chain "+GuardChain, err)
	}
	return listing, exists, jumps, nil
}

// guardFamilies are the families the guard is kept in; an error when a
// family that needs it has no program.
func (b *legacyBackend) guardFamilies() ([]family, error) {
	var fs []family
	for _, f := range families {
		if b.ipt[f] != nil {
			fs = append(fs, f)
			continue
		}
		if f == v4 || b.ipv6Enabled() {
			return nil, fmt.Errorf("hostnat iptables-legacy: the %s guard needs %w (the kernel routes this family, so pods could reach the guarded ports through it)", f, b.missing[f])
		}
	}
	return fs, nil
}

func (b *legacyBackend) guardSync(g *guardRules) (bool, string, error) {
	fs := []family{}
	if g == nil {
		for _, f := range families {
			if b.ipt[f] != nil {
				fs = append(fs, f)
			}
		}
	} else {
		var err error
		if fs, err = b.guardFamilies(); err != nil {
			return false, "", err
		}
	}
	for _, f := range fs {
		listing, exists, jumps, err := b.guardState(f)
		if err != nil {
			return false, "", err
		}
		switch {
		case g == nil:
			if exists {
				return false, fmt.Sprintf("%s chain %s present but not wanted", f, GuardChain), nil
			}
		case !exists:
			return false, fmt.Sprintf("%s chain %s missing", f, GuardChain), nil
		case !slices.Equal(listing, legacyGuardListing(*g)):
			return false, fmt.Sprintf("%s chain %s holds %d rule(s), want %d", f, GuardChain, len(listing)-1, len(legacyGuardSpecs(*g))), nil
		default:
			for _, h := range guardHooks {
				if !jumps[h] {
					return false, fmt.Sprintf("%s jump from %s to %s missing", f, h, GuardChain), nil
				}
			}
		}
	}
	return true, "", nil
}

// guardApply fills the chain before it inserts the jumps, so a jump never
// leads to a half-filled chain on first install; a chain that differs is
// refilled in place (the window is the few milliseconds of the calls).
func (b *legacyBackend) guardApply(g guardRules) error {
	fs, err := b.guardFamilies()
	if err != nil {
		return err
	}
	for _, f := range fs {
		ipt := b.ipt[f]
		listing, exists, jumps, err := b.guardState(f)
		if err != nil {
			return err
		}
		if !exists || !slices.Equal(listing, legacyGuardListing(g)) {
			err := b.ns.do(func() error {
				if err := ipt.ClearChain("filter", GuardChain); err != nil {
					return err
				}
				for _, spec := range legacyGuardSpecs(g) {
					if err := ipt.Append("filter", GuardChain, spec...); err != nil {
						return fmt.Errorf("append %s: %w", strings.Join(spec, " "), err)
					}
				}
				return nil
			})
			if err != nil {
				return legacyErr(f, "fill filter chain "+GuardChain, err)
			}
		}
		for _, h := range guardHooks {
			if jumps[h] {
				continue
			}
			if err := b.ns.do(func() error { return ipt.Insert("filter", h, 1, guardJumpSpec()...) }); err != nil {
				return legacyErr(f, "insert the jump to "+GuardChain+" into filter "+h, err)
			}
		}
	}
	return nil
}

func (b *legacyBackend) guardRemoveFamily(f family) error {
	ipt := b.ipt[f]
	if ipt == nil {
		return nil
	}
	err := b.ns.do(func() error {
		if exists, err := ipt.ChainExists("filter", GuardChain); err != nil || !exists {
			return err
		}
		for _, h := range guardHooks {
			for {
				ok, err := ipt.Exists("filter", h, guardJumpSpec()...)
				if err != nil {
					return err
				}
				if !ok {
					break
				}
				if err := ipt.Delete("filter", h, guardJumpSpec()...); err != nil {
					return err
				}
			}
			rules, err := ipt.List("filter", h)
			if err != nil {
				return err
			}
			for _, r := range rules {
				if r == "-A "+h+" -j "+GuardChain {
					if err := ipt.Delete("filter", h, "-j", GuardChain); err != nil {
						return err
					}
				}
			}
		}
		return ipt.ClearAndDeleteChain("filter", GuardChain)
	})
	if err != nil {
		return legacyErr(f, "remove filter chain "+GuardChain+" and its jumps", err)
	}
	return nil
}

func (b *legacyBackend) guardRemove() error {
	var errs []error
	for _, f := range families {
		errs = append(errs, b.guardRemoveFamily(f))
	}
	return errors.Join(errs...)
}

// guardDrops sums the packet counters of the chain's DROP rules.
func (b *legacyBackend) guardDrops() (uint64, error) {
	var n uint64
	for _, f := range families {
		ipt := b.ipt[f]
		if ipt == nil {
			continue
		}
		var stats [][]string
		err := b.ns.do(func() error {
			var err error
			stats, err = ipt.Stats("filter", GuardChain)
			return err
		})
		if err != nil {
			return 0, legacyErr(f, "read the counters of filter chain "+GuardChain, err)
		}
		for _, s := range stats {
			// pkts bytes target prot opt in out source destination options
			if len(s) > 2 && s[2] == "DROP" {
				p, err := strconv.ParseUint(s[0], 10, 64)
				if err == nil {
					n += p
				}
			}
		}
	}
	return n, nil
}

package hostnat

import (
	"fmt"
	"os"
	"os/exec"
	"strings"

	"github.com/google/nftables"
)

// Detection is the backend the host uses and why.
type Detection struct {
	Backend string // BackendNFT or BackendLegacy
	Reason  string
}

// hostSignals are the facts Detect decides on (see decide).
type hostSignals struct {
	iptablesMode string // "nf_tables", "legacy", "" (no iptables program)
	iptablesV    string // its -V output
	nftUsable    bool   // an nftables netlink dump worked
	nftErr       error
	nftTables    []string // family/name of nft tables other than ours
	legacyRules  int      // "-A" lines in the legacy tables (ours excluded)
	legacyProg   bool     // iptables-legacy (or a legacy iptables) exists
}

// Detect picks the backend the host's other tools use, in the network
// namespace of the calling thread:
//
//  1. `iptables -V` says nf_tables: the host's iptables (firewalld,
//     kube-proxy, the CNI plugins) writes nftables, so nft.
//  2. nftables tables exist (other than ours): nft is in use, so nft.
//  3. the legacy tables hold rules (the count netctl doctor's
//     iptables-backends check makes from iptables-legacy-save, or the
//     legacy iptables-save of CentOS 7's iptables 1.4.21): iptables-legacy.
//  4. nothing loaded anywhere: nft when the kernel answers nftables
//     netlink, else iptables-legacy when its programs exist.
func Detect() (Detection, error) {
	ns, err := currentNS()
	if err != nil {
		return Detection{}, err
	}
	defer ns.close()
	return detectIn(ns)
}

func detectIn(ns *nsHandle) (Detection, error) {
	var s hostSignals
	if p, err := findProgram("iptables"); err == nil {
		v, _ := programVersion(p)
		s.iptablesV = v
		s.iptablesMode = "legacy"
		if strings.Contains(v, "nf_tables") {
			s.iptablesMode = "nf_tables"
		}
	}
	nb := &nftBackend{ns: ns}
	if c, err := nb.conn(); err != nil {
		s.nftErr = err
	} else if tables, err := c.ListTables(); err != nil {
		s.nftErr = err
	} else {
		s.nftUsable = true
		for _, t := range tables {
			if t.Name == TableName || t.Name == GuardTable {
				continue
			}
			s.nftTables = append(s.nftTables, fmt.Sprintf("%s %s", familyName(t.Family), t.Name))
		}
	}
	for _, f := range families {
		p, err := legacyProgram(f)
		if err != nil {
			continue
		}
		s.legacyProg = true
		n, err := legacyRuleCount(ns, f, p)
		if err == nil {
			s.legacyRules += n
		}
	}
	return decide(s)
}

// decide is Detect's pure part.
func decide(s hostSignals) (Detection, error) {
	switch {
	case s.iptablesMode == "nf_tables":
		return Detection{BackendNFT, fmt.Sprintf("iptables -V reports nf_tables (%s)", s.iptablesV)}, nil
	case len(s.nftTables) > 0:
		r := "nftables tables exist: " + strings.Join(s.nftTables, ", ")
		if s.legacyRules > 0 {
			r += fmt.Sprintf(" (iptables-legacy also holds %d rules)", s.legacyRules)
		}
		return Detection{BackendNFT, r}, nil
	case s.legacyRules > 0:
		return Detection{BackendLegacy, fmt.Sprintf("iptables-legacy holds %d rules and no nftables table exists", s.legacyRules)}, nil
	case s.nftUsable:
		return Detection{BackendNFT, "no iptables-legacy rules loaded and the kernel supports nftables"}, nil
	case s.legacyProg:
		return Detection{BackendLegacy, fmt.Sprintf("nftables unusable (%v), iptables-legacy present", s.nftErr)}, nil
	}
	return Detection{}, fmt.Errorf("hostnat: no usable NAT backend: nftables: %v; iptables-legacy: no iptables-legacy or legacy iptables program: load nf_tables (modprobe nf_tables) or install iptables", s.nftErr)
}

func familyName(f nftables.TableFamily) string {
	switch f {
	case nftables.TableFamilyIPv4:
		return "ip"
	case nftables.TableFamilyIPv6:
		return "ip6"
	case nftables.TableFamilyINet:
		return "inet"
	case nftables.TableFamilyARP:
		return "arp"
	case nftables.TableFamilyBridge:
		return "bridge"
	case nftables.TableFamilyNetdev:
		return "netdev"
	}
	return fmt.Sprintf("family%d", f)
}

// legacyRuleCount counts the rules in the legacy tables of a family, ours
// left out. Tables that are not loaded hold nothing: when
// ip{,6}_tables_names is empty no program is run (and iptables-save only
// dumps loaded tables, it never loads one).
func legacyRuleCount(ns *nsHandle, f family, prog string) (int, error) {
	names := "ip_tables_names"
	if f == v6 {
		names = "ip6_tables_names"
	}
	save := strings.Replace(prog, "tables", "tables-save", 1) // iptables -> iptables-save
	if strings.HasSuffix(prog, "-legacy") {
		save = strings.TrimSuffix(prog, "-legacy") + "-legacy-save"
	}
	count := 0
	err := ns.do(func() error {
		b, err := os.ReadFile("/proc/thread-self/net/" + names)
		if err == nil && strings.TrimSpace(string(b)) == "" {
			return nil
		}
		out, err := exec.Command(save).Output()
		if err != nil {
			return err
		}
		count = countRules(string(out))
		return nil
	})
	return count, err
}

// countRules counts the "-A" lines of iptables-save output, leaving out
// ours (the chain and the jump to it).
func countRules(save string) int {
	n := 0
	for _, line := range strings.Split(save, "\n") {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "-A ") && !strings.Contains(line, ChainName) && !strings.Contains(line, GuardChain) {
			n++
		}
	}
	return n
}

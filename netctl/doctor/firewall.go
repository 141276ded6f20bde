package doctor

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ovnhost/ovnhost/supervisor/preflight"
)

// TunnelPort is the UDP port of a tunnel type.
func TunnelPort(tunnelType string) int {
	switch tunnelType {
	case "vxlan":
		return 4789
	case "stt":
		return 7471 // STT is TCP-like over IP proto 6, port 7471
	default:
		return 6081
	}
}

// ruleset is the filter table of one iptables-save output.
type ruleset struct {
	policy map[string]string   // builtin chain -> policy
	rules  map[string][]string // chain -> rule arguments (after "-A CHAIN")
	// incompatible names native nftables tables iptables-nft cannot show.
	incompatible []string
	count        int // rules in every table
}

var incompatibleRe = regexp.MustCompile("^# Table `([^']+)' is incompatible")

// parseSave reads iptables-save output.
func parseSave(text string) *ruleset {
	rs := &ruleset{policy: map[string]string{}, rules: map[string][]string{}}
	table := ""
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if m := incompatibleRe.FindStringSubmatch(line); m != nil {
			rs.incompatible = append(rs.incompatible, m[1])
			continue
		}
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "*"):
			table = line[1:]
		case line == "COMMIT":
			table = ""
		case strings.HasPrefix(line, ":") && table == "filter":
			f := strings.Fields(line[1:])
			if len(f) >= 2 && f[1] != "-" {
				rs.policy[f[0]] = f[1]
			}
		case strings.HasPrefix(line, "-A "):
			rs.count++
			if table != "filter" {
				continue
			}
			rest := strings.TrimPrefix(line, "-A ")
			chain, args, _ := strings.Cut(rest, " ")
			rs.rules[chain] = append(rs.rules[chain], args)
		}
	}
	return rs
}

// tokens splits a rule's arguments, keeping quoted strings together.
func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	inQ := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			inQ = !inQ
		case c == '\\' && inQ && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
		case c == ' ' && !inQ:
			if cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
			}
		default:
			cur.WriteByte(c)
		}
	}
	if cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

type match int

const (
	noMatch match = iota
	maybeMatch
	yesMatch
)

// ruleMatches decides whether a rule matches a new UDP packet to port, and
// returns its jump target.
func ruleMatches(args string, proto string, port int) (match, string) {
	tk := tokens(args)
	m := yesMatch
	target := ""
	neg := false
	for i := 0; i < len(tk); i++ {
		a := tk[i]
		next := func() string {
			if i+1 < len(tk) {
				i++
				return tk[i]
			}
			return ""
		}
		if a == "!" {
			neg = true
			continue
		}
		isNeg := neg
		neg = false
		switch a {
		case "-j", "--jump", "-g", "--goto":
			target = next()
			// Target options follow; stop matching here.
			return m, target
		case "-p", "--protocol":
			p := next()
			ok := p == proto || p == "all" || p == "0"
			if ok == isNeg {
				return noMatch, ""
			}
		case "--dport", "--destination-port":
			if inPorts(next(), port) == isNeg {
				return noMatch, ""
			}
		case "--dports", "--destination-ports":
			if inPorts(next(), port) == isNeg {
				return noMatch, ""
			}
		case "--sport", "--source-port", "--sports", "--source-ports":
			next()
			m = maybeMatch
		case "-m", "--match":
			next() // the module name; its options are handled by name
		case "--comment":
			next()
		case "--ctstate", "--state":
			st := strings.Split(next(), ",")
			has := false
			for _, s := range st {
				if s == "NEW" || s == "UNTRACKED" {
					has = true
				}
			}
			if has == isNeg {
				return noMatch, ""
			}
		case "-i", "--in-interface":
			// Tunnel packets from other nodes never arrive on loopback.
			if v := next(); v == "lo" || v == "lo+" {
				if !isNeg {
					return noMatch, ""
				}
			} else {
				m = maybeMatch
			}
		case "-s", "--source", "-d", "--destination", "--src-type", "--dst-type", "--mark", "--match-set", "--uid-owner":
			next()
			m = maybeMatch
		default:
			if strings.HasPrefix(a, "-") {
				// An option this evaluator does not know: the rule may or may
				// not match, and its value (if any) is skipped by the loop.
				m = maybeMatch
			}
		}
	}
	return m, target
}

func inPorts(spec string, port int) bool {
	for _, part := range strings.Split(spec, ",") {
		lo, hi, isRange := strings.Cut(part, ":")
		a, err := strconv.Atoi(lo)
		if err != nil {
			continue
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				b = 65535
			}
		}
		if port >= a && port <= b {
			return true
		}
	}
	return false
}

// walker evaluates INPUT for one packet.
type walker struct {
	rs          *ruleset
	proto       string
	port        int
	condAccept  string // first conditional ACCEPT seen
	condDrop    string // first conditional DROP/REJECT seen
	unevaluated string
}

// eval returns "ACCEPT", "DROP" or "" (fell off a user chain) and the rule
// that decided.
func (w *walker) eval(chain string, depth int, conditional bool) (string, string) {
	if depth > 32 {
		w.unevaluated = "chains nested too deep at " + chain
		return "", ""
	}
	for _, r := range w.rs.rules[chain] {
		m, target := ruleMatches(r, w.proto, w.port)
		if m == noMatch || target == "" {
			continue
		}
		cond := conditional || m == maybeMatch
		ruleText := "-A " + chain + " " + r
		switch target {
		case "ACCEPT":
			if !cond {
				return "ACCEPT", ruleText
			}
			if w.condAccept == "" {
				w.condAccept = ruleText
			}
		case "DROP", "REJECT":
			if !cond {
				return "DROP", ruleText
			}
			if w.condDrop == "" {
				w.condDrop = ruleText
			}
		case "RETURN":
			if !cond {
				return "", ""
			}
		case "LOG", "NFLOG", "MARK", "CONNMARK", "CT", "TRACE", "AUDIT", "NOTRACK":
		default:
			if _, ok := w.rs.rules[target]; !ok {
				if _, builtin := w.rs.policy[target]; !builtin {
					continue // an extension target we do not model
				}
			}
			v, why := w.eval(target, depth+1, cond)
			if v != "" && !cond {
				return v, why
			}
		}
	}
	if p, ok := w.rs.policy[chain]; ok && !conditional {
		return p, "policy " + p + " of " + chain
	}
	return "", ""
}

// CheckTunnelPort decides whether new tunnel packets to port are accepted
// by the filter INPUT chain of an iptables-save output.
func CheckTunnelPort(name, backend, save string, proto string, port int) preflight.Check {
	rs := parseSave(save)
	what := fmt.Sprintf("%s/%d", proto, port)
	if len(rs.rules["INPUT"]) == 0 && (rs.policy["INPUT"] == "" || rs.policy["INPUT"] == "ACCEPT") {
		c := preflight.Check{Name: name, Status: preflight.Pass, Found: backend + ": INPUT accepts everything"}
		addIncompatible(&c, rs, what)
		return c
	}
	w := &walker{rs: rs, proto: proto, port: port}
	v, why := w.eval("INPUT", 0, false)
	open := fmt.Sprintf("iptables -I INPUT -p %s --dport %d -j ACCEPT (firewalld: firewall-cmd --permanent --add-port=%d/%s && firewall-cmd --reload)", proto, port, port, proto)
	var c preflight.Check
	switch {
	case v == "ACCEPT" && w.condDrop != "":
		c = preflight.Check{Name: name, Status: preflight.Warn, Found: fmt.Sprintf("%s: %s is accepted by `%s` but may be dropped earlier by `%s`", backend, what, why, w.condDrop), Fix: open}
	case v == "ACCEPT":
		c = preflight.Check{Name: name, Status: preflight.Pass, Found: fmt.Sprintf("%s: %s accepted on INPUT (%s)", backend, what, why)}
	case v == "DROP" && w.condAccept != "":
		c = preflight.Check{Name: name, Status: preflight.Warn, Found: fmt.Sprintf("%s: %s is accepted only when `%s` matches, otherwise dropped by `%s`: tunnels from other nodes may be blocked", backend, what, w.condAccept, why), Fix: open}
	case v == "DROP":
		c = preflight.Check{Name: name, Status: preflight.Fail, Found: fmt.Sprintf("%s: %s is dropped on INPUT by `%s`: tunnel traffic from other nodes is lost", backend, what, why), Fix: open}
	default:
		c = preflight.Check{Name: name, Status: preflight.Warn, Found: fmt.Sprintf("%s: could not decide whether %s is accepted on INPUT %s", backend, what, w.unevaluated), Fix: "inspect with iptables-save"}
	}
	addIncompatible(&c, rs, what)
	return c
}

func addIncompatible(c *preflight.Check, rs *ruleset, what string) {
	if len(rs.incompatible) == 0 {
		return
	}
	c.Found += "; native nftables tables not shown by iptables may also filter " + what + ": " + strings.Join(rs.incompatible, ", ")
	if c.Status == preflight.Pass {
		c.Status = preflight.Warn
		c.Fix = "inspect them with nft list table <name> and allow " + what
	}
}

// CheckMixedBackends warns when both iptables backends hold rules: each
// filters packets, but `iptables` shows only one of them.
func CheckMixedBackends(legacy, nft string, legacyErr, nftErr error) preflight.Check {
	const name = "iptables-backends"
	if legacyErr != nil && nftErr != nil {
		return preflight.Check{Name: name, Status: preflight.Warn, Found: fmt.Sprintf("cannot read iptables state: legacy: %v; nft: %v", legacyErr, nftErr), Fix: "install iptables (iptables-legacy-save, iptables-nft-save)"}
	}
	nl, nn := 0, 0
	if legacyErr == nil {
		nl = parseSave(legacy).count
	}
	if nftErr == nil {
		nn = parseSave(nft).count
	}
	switch {
	case nl > 0 && nn > 0:
		return preflight.Check{Name: name, Status: preflight.Warn,
			Found: fmt.Sprintf("rules in both iptables-legacy (%d) and iptables-nft (%d): both filter packets, each tool shows only its own, and kube-proxy or the CNI may write to the other one", nl, nn),
			Fix:   "move every rule to one backend (usually nft) and flush the other (iptables-legacy-save shows what to move); make the host and kube-proxy use the same iptables mode"}
	case nl > 0:
		return preflight.Check{Name: name, Status: preflight.Pass, Found: fmt.Sprintf("only iptables-legacy holds rules (%d)", nl)}
	case nn > 0:
		return preflight.Check{Name: name, Status: preflight.Pass, Found: fmt.Sprintf("only iptables-nft holds rules (%d)", nn)}
	}
	return preflight.Check{Name: name, Status: preflight.Pass, Found: "no iptables rules in either backend"}
}

package cli

import (
	"fmt"
	"io"
	"sort"

	"github.com/ovnhost/ovnhost/netctl/cluster"
)

// PingerView is a node's latest pinger round (the node API's /v1/pinger).
type PingerView struct {
	Node    string        `json:"node"`
	At      string        `json:"at"`
	Targets []PingerProbe `json:"targets"`
}

// PingerProbe is one target of a round.
type PingerProbe struct {
	Class  string  `json:"class"` // pod, node, external, dns
	Target string  `json:"target"`
	Addr   string  `json:"addr"`
	Sent   int     `json:"sent"`
	Lost   int     `json:"lost"`
	RTTms  float64 `json:"rttMs"`
	Error  string  `json:"error,omitempty"`
}

func writePinger(w io.Writer, m map[string]PingerView) {
	if len(m) == 0 {
		return
	}
	fmt.Fprintln(w, "\nPINGER (latest round per node)")
	t := &Table{Columns: []Column{{Name: "FROM"}, {Name: "CLASS"}, {Name: "TARGET"}, {Name: "ADDRESS"}, {Name: "LOSS"}, {Name: "RTT"}, {Name: "ERROR"}}}
	nodes := make([]string, 0, len(m))
	for n := range m {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, p := range m[n].Targets {
			rtt := ""
			if p.Sent > p.Lost {
				rtt = fmt.Sprintf("%.2fms", p.RTTms)
			}
			t.Rows = append(t.Rows, []string{n, p.Class, p.Target, p.Addr, fmt.Sprintf("%d/%d", p.Lost, p.Sent), rtt, p.Error})
		}
	}
	_ = Print(w, OutTable, nil, t)
}

func pingerFindings(m map[string]PingerView) []cluster.Finding {
	var out []cluster.Finding
	for n, v := range m {
		for _, p := range v.Targets {
			if p.Sent == 0 || p.Lost == 0 {
				continue
			}
			sev := cluster.Warn
			if p.Lost == p.Sent {
				sev = cluster.Fail
			}
			out = append(out, cluster.Finding{Severity: sev, Scope: "node/" + n, Check: "pinger-" + p.Class,
				Found: fmt.Sprintf("%d of %d probes to %s (%s) lost", p.Lost, p.Sent, p.Target, p.Addr),
				Fix:   "netctl trace from a pod on " + n + " to " + p.Addr + "; check the tunnel interface and firewall (doctor: tunnel-port, mtu)"})
		}
	}
	return out
}

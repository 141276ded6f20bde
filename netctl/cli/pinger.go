package cli

import (
	"fmt"
	"io"
	"sort"

	"github.com/ovnhost/ovnhost/netctl/cluster"
	"github.com/ovnhost/ovnhost/netctl/pinger"
)

// PingerView is a node's latest pinger round (the node API's /v1/pinger).
type PingerView = pinger.Round

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

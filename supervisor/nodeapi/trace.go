package nodeapi

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/annotations"
	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/unixctl"
)

var (
	traceStage    = regexp.MustCompile(`^\s*(\d+)\. (\w+) \(([^)]*)\): (.*), priority (\d+), uuid ([0-9a-f]+)$`)
	tracePipeline = regexp.MustCompile(`^(ingress|egress)\(dp="([^"]+)", inport="([^"]+)"(?:, outport="([^"]+)")?\)$`)
	traceOutput   = regexp.MustCompile(`/\* output to "([^"]+)", type "([^"]*)" \*/`)
	traceLB       = regexp.MustCompile(`ct_lb(?:_mark)?\(backends=([^;)]*)`)
	datapathActs  = regexp.MustCompile(`(?m)^Datapath actions: (.*)$`)
	providerName  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
)

// ParseOVNTrace reads ovn-trace's detailed output: where the packet was
// output (a port that is not a patch to another datapath), or the stage
// at which the trace ended (an explicit drop, an ACL verdict, no flow);
// the ACL stages with user priorities (northd adds 1000) and the load
// balancers that rewrote the destination.
func ParseOVNTrace(out string) api.TraceVerdict {
	var v api.TraceVerdict
	var dp, stage, flow string
	var lastStage, lastFlow string
	for _, line := range strings.Split(out, "\n") {
		if m := tracePipeline.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
			dp = m[1] + " of " + m[2]
			continue
		}
		if m := traceStage.FindStringSubmatch(line); m != nil {
			stage, flow = m[2], fmt.Sprintf("%s, priority %s (lflow %s)", m[4], m[5], m[6])
			lastStage, lastFlow = stage+" ("+dp+")", flow
			prio, _ := strconv.Atoi(m[5])
			if isACLStage(stage) && prio >= 1000 {
				v.ACLs = append(v.ACLs, fmt.Sprintf("%s: %s, priority %d", stage, m[4], prio-1000))
			}
			continue
		}
		t := strings.TrimSpace(line)
		if m := traceOutput.FindStringSubmatch(t); m != nil {
			if m[2] != "patch" {
				v.Delivered, v.Output = true, m[1]
			}
			continue
		}
		if m := traceLB.FindStringSubmatch(t); m != nil {
			v.LBs = append(v.LBs, fmt.Sprintf("%s: %s -> %s", stage, strings.TrimSuffix(flow, ")"), m[1]))
			continue
		}
		if rest, ok := strings.CutPrefix(t, "LOG: ACL "); ok {
			if i := strings.Index(rest, ", packet="); i > 0 {
				rest = rest[:i]
			}
			v.ACLs = append(v.ACLs, "logged: "+rest)
		}
	}
	if !v.Delivered {
		v.DropStage, v.DropFlow = lastStage, lastFlow
		if v.DropStage == "" {
			v.DropStage = "before the first stage (the inport is unknown to the southbound database)"
		}
	}
	return v
}

func isACLStage(s string) bool {
	return strings.Contains(s, "_acl") && !strings.Contains(s, "acl_hint") && !strings.Contains(s, "pre_acl")
}

// ParseOFProtoTrace returns the last "Datapath actions:" of ofproto/trace
// (after every recirculation): "drop" or the output actions.
func ParseOFProtoTrace(out string) string {
	m := datapathActs.FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		return ""
	}
	return strings.TrimSpace(m[len(m)-1][1])
}

// Trace traces a packet from a pod on this node: the logical path with
// ovn-trace against the SB database, the physical path with ofproto/trace
// on br-int. The pod's MAC, IP and ofport come from its OVS interface.
func (o *Ops) Trace(ctx context.Context, r api.TraceRequest) (*api.TraceResult, error) {
	dst, err := netip.ParseAddr(r.Dst)
	if err != nil || !dst.Is4() {
		return nil, BadRequest{Err: fmt.Errorf("destination %q: want an IPv4 address", r.Dst)}
	}
	proto := strings.ToLower(r.Protocol)
	switch proto {
	case "":
		proto = "icmp"
	case "tcp", "udp", "icmp":
	default:
		return nil, BadRequest{Err: fmt.Errorf("protocol %q: use tcp, udp or icmp", r.Protocol)}
	}
	if (proto == "tcp" || proto == "udp") && (r.Port <= 0 || r.Port > 65535) {
		return nil, BadRequest{Err: fmt.Errorf("%s needs a destination port 1-65535", proto)}
	}
	// The MACs are written into ovn-trace's microflow and ofproto/trace's
	// flow: only MACs, nothing more of either syntax.
	for _, m := range []struct{ name, v string }{{"srcMAC", r.SrcMAC}, {"dstMAC", r.DstMAC}} {
		if m.v == "" {
			continue
		}
		if hw, err := net.ParseMAC(m.v); err != nil || len(hw) != 6 {
			return nil, BadRequest{Err: fmt.Errorf("%s %q: want an Ethernet MAC such as 0a:58:0a:10:00:01", m.name, m.v)}
		}
	}
	lsp := r.Pod + "." + r.Namespace
	if r.Provider != "" {
		// The port's name goes into ovn-trace's microflow: a provider's
		// characters only.
		if !annotations.IsAttachmentProvider(r.Provider) || !providerName.MatchString(r.Provider) {
			return nil, BadRequest{Err: fmt.Errorf("provider %q: want an attachment network's provider <nad>.<namespace>.ovn", r.Provider)}
		}
		lsp += "." + r.Provider
	}
	port, err := o.port(ctx, lsp)
	if err != nil {
		return nil, err
	}
	src, mac := port.ExternalIDs["ip"], port.ExternalIDs["attached-mac"]
	if i := strings.IndexByte(src, '/'); i > 0 {
		src = src[:i]
	}
	if i := strings.IndexByte(src, ','); i > 0 {
		src = src[:i]
	}
	if src == "" || mac == "" {
		return nil, fmt.Errorf("interface %s lacks external_ids ip/attached-mac", port.Interface)
	}
	if r.SrcMAC != "" {
		mac = r.SrcMAC
	}
	dstMAC := r.DstMAC
	if dstMAC == "" {
		if dstMAC, err = o.routerMAC(ctx, lsp); err != nil {
			return nil, err
		}
	}
	micro := fmt.Sprintf(`inport == %q && eth.src == %s && eth.dst == %s && ip4.src == %s && ip4.dst == %s && ip.ttl == 64`, lsp, mac, dstMAC, src, dst)
	of := fmt.Sprintf("in_port=%d,dl_src=%s,dl_dst=%s,nw_src=%s,nw_dst=%s,nw_ttl=64", port.OFPort, mac, dstMAC, src, dst)
	switch proto {
	case "icmp":
		micro += " && icmp4 && icmp4.type == 8 && icmp4.code == 0"
		of = "icmp," + of + ",icmp_type=8,icmp_code=0"
	default:
		micro += fmt.Sprintf(" && %s && %s.src == 40000 && %s.dst == %d", proto, proto, proto, r.Port)
		of = fmt.Sprintf("%s,%s,tp_src=40000,tp_dst=%d", proto, of, r.Port)
	}
	res := &api.TraceResult{Microflow: micro}
	res.Logical, err = o.runOVNTrace(ctx, "--ct=new", micro)
	if err != nil {
		return nil, err
	}
	res.Verdict = ParseOVNTrace(res.Logical)
	phys, err := unixctl.Call(ctx, o.Config.Layout.VSwitchdCtl, "ofproto/trace", "br-int", of, "--ct-next", "trk,new")
	if err != nil {
		res.Physical = "ofproto/trace failed: " + err.Error()
	} else {
		res.Physical = phys
		res.Verdict.Physical = ParseOFProtoTrace(phys)
	}
	return res, nil
}

// routerMAC is the MAC of the router port on the pod's logical switch (the
// pod's next hop for destinations outside its subnet), from SB: the pod's
// datapath, its patch port, the peer's MAC.
func (o *Ops) routerMAC(ctx context.Context, lsp string) (string, error) {
	sb, err := o.dial(ctx, "OVN_Southbound")
	if err != nil {
		return "", err
	}
	defer sb.Close()
	pbs, err := selectRows(ctx, sb.Client, "Port_Binding", []ovsdb.Condition{{Column: "logical_port", Function: ovsdb.ConditionEqual, Value: lsp}})
	if err != nil {
		return "", err
	}
	if len(pbs) == 0 {
		return "", fmt.Errorf("no Port_Binding %s in the southbound database: the controller has not created the pod's logical port", lsp)
	}
	patches, err := selectRows(ctx, sb.Client, "Port_Binding", []ovsdb.Condition{
		{Column: "datapath", Function: ovsdb.ConditionEqual, Value: pbs[0]["datapath"]},
		{Column: "type", Function: ovsdb.ConditionEqual, Value: "patch"}})
	if err != nil {
		return "", err
	}
	for _, p := range patches {
		peer := stringMap(p["options"])["peer"]
		if peer == "" {
			continue
		}
		rows, err := selectRows(ctx, sb.Client, "Port_Binding", []ovsdb.Condition{{Column: "logical_port", Function: ovsdb.ConditionEqual, Value: peer}})
		if err != nil || len(rows) == 0 {
			continue
		}
		if macs, ok := rows[0]["mac"].(ovsdb.OvsSet); ok && len(macs.GoSet) > 0 {
			if f := strings.Fields(fmt.Sprint(macs.GoSet[0])); len(f) > 0 {
				return f[0], nil
			}
		}
		if s, ok := rows[0]["mac"].(string); ok {
			if f := strings.Fields(s); len(f) > 0 {
				return f[0], nil
			}
		}
	}
	return "", fmt.Errorf("the logical switch of %s has no router port: give the next hop's MAC (--dst-mac)", lsp)
}

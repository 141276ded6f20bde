package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// Ops is the node's side of the API. Its zero value is not usable: fill
// Config (and the rest where known).
type Ops struct {
	Config *nodeconfig.NodeConfig
	// ControllerPid returns ovn-controller's pid (its control socket is
	// named after it), 0 when it does not run.
	ControllerPid func() int
	// OVNTrace is the ovn-trace program ("" finds it in PATH).
	OVNTrace string
	// SSL files for ovn-trace against ssl: databases.
	SSLKey, SSLCert, SSLCACert string
	Log                        *slog.Logger
	// QueryCaps bound OVSDB answers (zero: DefaultQueryCaps).
	QueryCaps QueryCaps
}

// readOnlyAppctl are the control-socket commands the API passes through,
// per target: each only reports. Everything else is refused.
var readOnlyAppctl = map[string][]string{
	"ovs-vswitchd": {"ofproto/trace", "ofproto/list", "dpif/show", "dpif/dump-flows", "dpctl/dump-flows", "dpctl/show",
		"dpctl/dump-conntrack", "fdb/show", "mdb/show", "bond/show", "lacp/show", "coverage/show", "memory/show",
		"upcall/show", "ovs/route/show", "tnl/ports/show", "tnl/neigh/show", "tnl/arp/show", "bridge/dump-flows",
		"dpif-netdev/pmd-stats-show", "dpif-netdev/pmd-rxq-show", "vlog/list", "version", "list-commands"},
	"ovn-controller": {"connection-status", "ct-zone-list", "meter-table-list", "group-table-list", "inject-pkt-list",
		"debug/status", "debug/dump-local-bindings", "debug/dump-related-ports", "coverage/show", "memory/show",
		"vlog/list", "version", "list-commands", "sb-cluster-state-reset-list"},
	"ovsdb-server": {"ovsdb-server/list-dbs", "ovsdb-server/list-remotes", "ovsdb-server/sync-status", "cluster/status",
		"coverage/show", "memory/show", "vlog/list", "version", "list-commands"},
}

// CheckOFProtoTraceArgs refuses the ofproto/trace arguments that have side
// effects. ovs-vswitchd(8): "The trace commands only perform side effects
// when a packet is specified": with -generate (a packet made from the
// flow) or a packet in hex as the last argument, the trace executes the
// datapath actions but outputs (ofproto-dpif-trace.c,
// execute_actions_except_outputs): conntrack commits, packet-ins to
// ovn-controller (which may write MAC_Binding rows, answer DHCP, ...),
// sampling, MAC learning and learn() flows. Without a packet the trace
// only translates the flow. Options are taken from what ofproto/trace
// parses (--ct-next, --l7, --l7-len); everything else starting with "-"
// is refused here, as is a third positional argument (always a packet).
func CheckOFProtoTraceArgs(args []string) error {
	const fix = "trace the flow alone (ofproto/trace [BRIDGE] FLOW [--ct-next FLAGS]); the node API runs no trace that acts on the datapath"
	positional := 0
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-generate" || a == "--generate":
			return fmt.Errorf("ofproto/trace argument %q: it makes a packet and executes the flow's actions on the datapath (conntrack, packet-ins to ovn-controller, learning); %s", a, fix)
		case a == "--ct-next" || a == "--l7" || a == "--l7-len":
			if i+1 >= len(args) {
				return fmt.Errorf("ofproto/trace option %s needs a value", a)
			}
			i++
		case strings.HasPrefix(a, "-"):
			return fmt.Errorf("ofproto/trace argument %q: not an option the node API passes (allowed: --ct-next FLAGS, --l7 HEX, --l7-len N); %s", a, fix)
		default:
			positional++
			if positional > 2 || isHexPacket(a) {
				return fmt.Errorf("ofproto/trace argument %q: a packet (hex) makes the trace execute the flow's actions on the datapath (conntrack, packet-ins to ovn-controller, learning); %s", short(a), fix)
			}
		}
	}
	if positional == 0 {
		return fmt.Errorf("ofproto/trace needs a flow: ofproto/trace [BRIDGE] FLOW")
	}
	return nil
}

// isHexPacket is what ovs-vswitchd would take for a packet: hex digits
// (spaces allowed) for at least an Ethernet header (14 bytes).
func isHexPacket(s string) bool {
	n := 0
	for _, c := range s {
		switch {
		case c == ' ' || c == '\t' || c == '\n':
		case c >= '0' && c <= '9', c >= 'a' && c <= 'f', c >= 'A' && c <= 'F':
			n++
		default:
			return false
		}
	}
	return n >= 28
}

func short(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// AppctlTargets names the daemons and their allowed commands (for help).
func AppctlTargets() map[string][]string { return readOnlyAppctl }

// Appctl passes one read-only command to a daemon's control socket.
func (o *Ops) Appctl(ctx context.Context, r api.AppctlRequest) (string, error) {
	allowed, ok := readOnlyAppctl[r.Target]
	if !ok {
		return "", BadRequest{Err: fmt.Errorf("target %q: use ovs-vswitchd, ovn-controller or ovsdb-server", r.Target)}
	}
	if !slices.Contains(allowed, r.Command) {
		return "", BadRequest{Err: fmt.Errorf("%s %q is not a read-only command the node API passes; allowed: %s", r.Target, r.Command, strings.Join(allowed, ", "))}
	}
	if r.Target == "ovs-vswitchd" && r.Command == "ofproto/trace" {
		if err := CheckOFProtoTraceArgs(r.Args); err != nil {
			return "", BadRequest{Err: err}
		}
	}
	sock, err := o.socket(r.Target)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	return unixctl.Call(ctx, sock, r.Command, r.Args...)
}

func (o *Ops) socket(target string) (string, error) {
	l := o.Config.Layout
	switch target {
	case "ovs-vswitchd":
		return l.VSwitchdCtl, nil
	case "ovsdb-server":
		return l.OVSDBCtl, nil
	case "ovn-controller":
		pid := 0
		if o.ControllerPid != nil {
			pid = o.ControllerPid()
		}
		if pid <= 0 {
			return "", errors.New("ovn-controller is not running on this node")
		}
		return l.ControllerCtl(pid), nil
	}
	return "", BadRequest{Err: fmt.Errorf("unknown target %q", target)}
}

// dial opens a short-lived, unmonitored connection to one database of this
// node: its conf.db, or the NB/SB it is configured with.
func (o *Ops) dial(ctx context.Context, db string) (*ovsdbconn.Conn, error) {
	var dbm model.ClientDBModel
	var err error
	var remote nodeconfig.Remote
	switch db {
	case "Open_vSwitch", "":
		dbm, err = vswitch.FullDatabaseModel()
		remote = nodeconfig.Remote{Endpoint: "unix:" + o.Config.Layout.DBSock}
	case "OVN_Northbound":
		dbm, err = nbdb.FullDatabaseModel()
		remote = o.Config.NB
		if remote.Endpoint == "" {
			return nil, BadRequest{Err: errors.New("this node does not know the northbound database (it was given OVN_SB_ADDR only); set OVN_DB_IPS on the node, or ask a node that has it with --node")}
		}
	case "OVN_Southbound":
		dbm, err = sbdb.FullDatabaseModel()
		remote = o.Config.SB
	default:
		return nil, BadRequest{Err: fmt.Errorf("database %q: use Open_vSwitch, OVN_Northbound or OVN_Southbound", db)}
	}
	if err != nil {
		return nil, err
	}
	return ovsdbconn.Dial(ctx, dbm, remote.Endpoint, ovsdbconn.Options{TLS: remote.TLS, Probe: true, Once: true, Timeout: 5 * time.Second, Log: o.Log})
}

// OVSDB answers a ctl-style read query.
func (o *Ops) OVSDB(ctx context.Context, r api.OVSDBRequest) (*api.OVSDBResult, error) {
	c, err := o.dial(ctx, r.DB)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	out, err := QueryRows(ctx, c.Client, r.Args, o.QueryCaps)
	if IsBadArgs(err) {
		return nil, BadRequest{Err: err}
	}
	return out, err
}

// Pod reports the pod's OVS interface (by external_ids:iface-id) and the
// chassis its SB Port_Binding is bound to.
func (o *Ops) Pod(ctx context.Context, namespace, name string) (*api.PodPort, error) {
	return o.port(ctx, name+"."+namespace)
}

// port is what the node holds for the logical port lsp (a pod's default
// port or one of its attachment ports).
func (o *Ops) port(ctx context.Context, lsp string) (*api.PodPort, error) {
	c, err := o.dial(ctx, "Open_vSwitch")
	if err != nil {
		return nil, err
	}
	defer c.Close()
	rows, err := selectRows(ctx, c.Client, "Interface", []ovsdb.Condition{{Column: "external_ids", Function: ovsdb.ConditionIncludes,
		Value: ovsdb.OvsMap{GoMap: map[any]any{"iface-id": lsp}}}})
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, BadRequest{Err: fmt.Errorf("no OVS interface with external_ids:iface-id=%s on this node: the CNI ADD did not run here or failed (see the node daemon's log)", lsp)}
	}
	r := rows[0]
	p := &api.PodPort{Interface: str(r, "name"), ExternalIDs: stringMap(r["external_ids"])}
	p.OFPort = intOf(r["ofport"])
	p.OVNInstalled = p.ExternalIDs["ovn-installed"] == "true"
	p.Ingress, p.IngressBurst = intOf(r["ingress_policing_rate"]), intOf(r["ingress_policing_burst"])
	// The QoS row hangs off the Port.
	if ports, err := selectRows(ctx, c.Client, "Port", []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: p.Interface}}); err == nil && len(ports) > 0 {
		if q := refs(ports[0]["qos"]); len(q) > 0 {
			if qs, err := selectRows(ctx, c.Client, "QoS", []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: q[0]}}}); err == nil && len(qs) > 0 {
				p.QoS = stringMap(qs[0]["other_config"])
				p.QoS["type"] = str(qs[0], "type")
			}
		}
	}
	if sb, err := o.dial(ctx, "OVN_Southbound"); err == nil {
		defer sb.Close()
		if pbs, err := selectRows(ctx, sb.Client, "Port_Binding", []ovsdb.Condition{{Column: "logical_port", Function: ovsdb.ConditionEqual, Value: lsp}}); err == nil && len(pbs) > 0 {
			if ch := refs(pbs[0]["chassis"]); len(ch) > 0 {
				if chs, err := selectRows(ctx, sb.Client, "Chassis", []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: ch[0]}}}); err == nil && len(chs) > 0 {
					p.BoundChassis = str(chs[0], "name")
				}
			}
		}
	}
	return p, nil
}

func stringMap(v any) map[string]string {
	out := map[string]string{}
	if m, ok := v.(ovsdb.OvsMap); ok {
		for k, e := range m.GoMap {
			out[fmt.Sprint(k)] = fmt.Sprint(e)
		}
	}
	return out
}

func intOf(v any) int {
	switch x := v.(type) {
	case float64:
		return int(x)
	case int:
		return x
	case ovsdb.OvsSet:
		if len(x.GoSet) == 1 {
			return intOf(x.GoSet[0])
		}
	}
	return 0
}

// ovnTraceArgs are the database arguments of ovn-trace for this node's SB.
func (o *Ops) ovnTraceArgs() []string {
	args := []string{"--db=" + o.Config.SB.Endpoint}
	if strings.Contains(o.Config.SB.Endpoint, "ssl:") {
		args = append(args, "--private-key="+o.SSLKey, "--certificate="+o.SSLCert, "--ca-cert="+o.SSLCACert)
	}
	return args
}

func (o *Ops) runOVNTrace(ctx context.Context, args ...string) (string, error) {
	bin := o.OVNTrace
	if bin == "" {
		p, err := exec.LookPath("ovn-trace")
		if err != nil {
			return "", errors.New("ovn-trace is not installed on this node (Debian package ovn-common)")
		}
		bin = p
	}
	cmd := exec.CommandContext(ctx, bin, append(o.ovnTraceArgs(), args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ovn-trace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

package nodeapi

import (
	"context"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/unixctl"
)

// Collector exports OVS and OVN internals at scrape time: each daemon's
// memory/show items and coverage/show counters (over its control socket),
// the size of the node's database files, and which centralized-gateway
// subnets this node's chassis is the active gateway of (SB).
type Collector struct {
	Ops *Ops
	// SystemID is this node's chassis name (for the gateway gauge).
	SystemID func() string
}

var (
	memDesc = prometheus.NewDesc("ovnhost_ovs_memory_items", "Items a daemon reports in memory/show (rules, ports, idl-cells, lflow cache entries...).",
		[]string{"daemon", "item"}, nil)
	covDesc = prometheus.NewDesc("ovnhost_ovs_coverage_total", "Coverage counter of a daemon (coverage/show total since it started).",
		[]string{"daemon", "event"}, nil)
	dbDesc = prometheus.NewDesc("ovnhost_ovsdb_file_bytes", "Size of a database file of the node (conf.db; local NB/SB in all-in-one).",
		[]string{"db"}, nil)
	gwDesc = prometheus.NewDesc("ovnhost_gateway_active", "1 for each centralized-gateway subnet whose traffic leaves through this node now.",
		[]string{"subnet"}, nil)
	ctlUpDesc = prometheus.NewDesc("ovnhost_ovs_control_socket_up", "1 when the daemon answered on its control socket at this scrape.",
		[]string{"daemon"}, nil)
)

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{memDesc, covDesc, dbDesc, gwDesc, ctlUpDesc} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, d := range []string{"ovs-vswitchd", "ovn-controller"} {
		sock, err := c.Ops.socket(d)
		up := 0.0
		if err == nil {
			if out, err := unixctl.Call(ctx, sock, "memory/show"); err == nil {
				up = 1
				for item, v := range ParseMemoryShow(out) {
					ch <- prometheus.MustNewConstMetric(memDesc, prometheus.GaugeValue, v, d, item)
				}
			}
			if out, err := unixctl.Call(ctx, sock, "coverage/show"); err == nil {
				for ev, v := range ParseCoverageShow(out) {
					ch <- prometheus.MustNewConstMetric(covDesc, prometheus.CounterValue, v, d, ev)
				}
			}
		}
		ch <- prometheus.MustNewConstMetric(ctlUpDesc, prometheus.GaugeValue, up, d)
	}
	l := c.Ops.Config.Layout
	files := map[string]string{"conf.db": l.ConfDB}
	if c.Ops.Config.AllInOne {
		files["ovnnb_db.db"], files["ovnsb_db.db"] = l.NBDB, l.SBDB
	}
	for name, p := range files {
		if st, err := os.Stat(p); err == nil {
			ch <- prometheus.MustNewConstMetric(dbDesc, prometheus.GaugeValue, float64(st.Size()), name)
		}
	}
	if c.SystemID != nil {
		for subnet, active := range c.gateways(ctx, c.SystemID()) {
			v := 0.0
			if active {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(gwDesc, prometheus.GaugeValue, v, subnet)
		}
	}
}

// gateways reads the chassisredirect ports of the centralized-gateway
// subnets and whether this chassis holds each.
func (c *Collector) gateways(ctx context.Context, systemID string) map[string]bool {
	out := map[string]bool{}
	if systemID == "" {
		return out
	}
	sb, err := c.Ops.dial(ctx, "OVN_Southbound")
	if err != nil {
		return out
	}
	defer sb.Close()
	pbs, err := selectRows(ctx, sb.Client, "Port_Binding", []ovsdb.Condition{{Column: "type", Function: ovsdb.ConditionEqual, Value: "chassisredirect"}})
	if err != nil || len(pbs) == 0 {
		return out
	}
	me, err := selectRows(ctx, sb.Client, "Chassis", []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: systemID}})
	if err != nil {
		return out
	}
	meUUID := ""
	if len(me) > 0 {
		meUUID = formatValue(me[0]["_uuid"])
	}
	for _, p := range pbs {
		subnet, ok := ovnnet.SubnetOfRedirectPort(ovnnet.DefaultRouter, str(p, "logical_port"))
		if !ok {
			continue
		}
		ch := refs(p["chassis"])
		out[subnet] = meUUID != "" && len(ch) > 0 && ch[0] == meUUID
	}
	return out
}

var (
	memItem = regexp.MustCompile(`([^:\s][^:]*?):(\d+)`)
	covLine = regexp.MustCompile(`^(\w+)\s+.*total: (\d+)\s*$`)
)

// ParseMemoryShow reads "handlers:1 ports:2 udpif keys:0" (names may hold
// spaces; they become underscores).
func ParseMemoryShow(out string) map[string]float64 {
	m := map[string]float64{}
	for _, x := range memItem.FindAllStringSubmatch(out, -1) {
		v, err := strconv.ParseFloat(x[2], 64)
		if err != nil {
			continue
		}
		m[strings.ReplaceAll(strings.TrimSpace(x[1]), " ", "_")] = v
	}
	return m
}

// ParseCoverageShow reads the "total: N" of each event line.
func ParseCoverageShow(out string) map[string]float64 {
	m := map[string]float64{}
	for _, l := range strings.Split(out, "\n") {
		if x := covLine.FindStringSubmatch(strings.TrimSpace(l)); x != nil {
			if v, err := strconv.ParseFloat(x[2], 64); err == nil {
				m[x[1]] = v
			}
		}
	}
	return m
}

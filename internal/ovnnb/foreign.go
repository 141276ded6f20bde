package ovnnb

import (
	"sort"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// ForeignRows lists, per table, the names (or UUIDs) of the rows in the
// cache whose external_ids:vendor is vendor (e.g. KubeOVNVendor): what
// another controller made and ovnhost has not adopted. After a migration
// from Kube-OVN they are left in place and reported, never deleted.
func (c *Client) ForeignRows(vendor string) map[string][]string {
	out := map[string][]string{}
	tables := []string{nbdb.LogicalSwitchPortTable, nbdb.LogicalSwitchTable, nbdb.LogicalRouterTable, nbdb.LogicalRouterPortTable,
		nbdb.LogicalRouterPolicyTable, nbdb.LogicalRouterStaticRouteTable, nbdb.AddressSetTable, nbdb.LoadBalancerTable,
		nbdb.LoadBalancerGroupTable, nbdb.PortGroupTable, nbdb.ACLTable}
	for _, table := range tables {
		t := c.cl.Cache().Table(table)
		if t == nil {
			continue // not monitored
		}
		for uuid, m := range t.RowsShallow() {
			name, ids := uuid, map[string]string(nil)
			switch r := m.(type) {
			case *nbdb.LogicalSwitchPort:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LogicalSwitch:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LogicalRouter:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LogicalRouterPort:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LogicalRouterPolicy:
				name, ids = r.Match, r.ExternalIDs
			case *nbdb.LogicalRouterStaticRoute:
				name, ids = r.IPPrefix+" via "+r.Nexthop, r.ExternalIDs
			case *nbdb.AddressSet:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LoadBalancer:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.LoadBalancerGroup:
				name = r.Name
			case *nbdb.PortGroup:
				name, ids = r.Name, r.ExternalIDs
			case *nbdb.ACL:
				name, ids = r.Match, r.ExternalIDs
			}
			if ids[KeyVendor] == vendor {
				out[table] = append(out[table], name)
			}
		}
		sort.Strings(out[table])
	}
	for k, v := range out {
		if len(v) == 0 {
			delete(out, k)
		}
	}
	return out
}

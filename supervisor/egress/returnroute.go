package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// Return path of a centralized gateway. Replies to a pod's egress come back
// to the gateway node on its uplink, are de-masqueraded to the pod's
// address, and must re-enter OVN through br-egw, where they left: sent
// into ovn0 instead (which routes the subnet for the node's own traffic)
// they reach the cluster router by another port and are dropped. So
// forwarded packets to a centralized subnet look up GatewayRouteTable
// (via the transit address on br-egw), while the node's own packets
// (iif lo) keep the main table and ovn0.
const (
	// GatewayRouteTable holds the routes to centralized subnets through br-egw.
	GatewayRouteTable = 30264
	// Rule priorities, ahead of the main table's 32766.
	gatewayRuleLocal   = 30264 // iif lo to <subnet>: main (ovn0)
	gatewayRuleForward = 30265 // to <subnet>: GatewayRouteTable
)

// GatewayReturn is one centralized subnet this node is a gateway for.
type GatewayReturn struct {
	CIDR    netip.Prefix
	Transit netip.Addr // the router's end of the transit link
}

// SetGatewayReturnRoutes converges the policy rules and GatewayRouteTable
// to want on the link named bridge (br-egw): missing ones are added, ours
// that are no longer wanted removed.
func SetGatewayReturnRoutes(bridge string, want []GatewayReturn) error {
	l, err := netlink.LinkByName(bridge)
	if err != nil {
		return fmt.Errorf("centralized gateway return routes: %s: %w", bridge, err)
	}
	var rules []netlink.Rule
	var routes []netlink.Route
	for _, g := range want {
		dst := prefixNet(g.CIDR)
		fam := familyOf(g.CIDR.Addr())
		local := netlink.NewRule()
		local.Priority, local.IifName, local.Dst, local.Table, local.Family = gatewayRuleLocal, "lo", dst, unix.RT_TABLE_MAIN, fam
		fwd := netlink.NewRule()
		fwd.Priority, fwd.Dst, fwd.Table, fwd.Family = gatewayRuleForward, dst, GatewayRouteTable, fam
		rules = append(rules, *local, *fwd)
		routes = append(routes, netlink.Route{LinkIndex: l.Attrs().Index, Dst: dst, Gw: net.IP(g.Transit.AsSlice()), Table: GatewayRouteTable})
	}
	for i := range routes {
		if err := netlink.RouteReplace(&routes[i]); err != nil {
			return fmt.Errorf("centralized gateway: route %s via %s dev %s table %d: %w", routes[i].Dst, routes[i].Gw, bridge, GatewayRouteTable, err)
		}
	}
	have, err := ourGatewayRules()
	if err != nil {
		return err
	}
	for i := range rules {
		if containsRule(have, rules[i]) {
			continue
		}
		if err := netlink.RuleAdd(&rules[i]); err != nil && !errors.Is(err, syscall.EEXIST) {
			return fmt.Errorf("centralized gateway: rule to %s (priority %d): %w", rules[i].Dst, rules[i].Priority, err)
		}
	}
	var errs []error
	for i := range have {
		if !containsRule(rules, have[i]) {
			errs = append(errs, ruleDel(&have[i]))
		}
	}
	stale, err := gatewayTableRoutes()
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range stale {
		if !slicesContainsRoute(routes, stale[i]) {
			errs = append(errs, netlink.RouteDel(&stale[i]))
		}
	}
	return errors.Join(errs...)
}

// RemoveGatewayReturnRoutes deletes ovnhost's return-path rules and the
// routes of GatewayRouteTable; absent is fine.
func RemoveGatewayReturnRoutes() ([]string, error) {
	have, err := ourGatewayRules()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for i := range have {
		if err := ruleDel(&have[i]); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, fmt.Sprintf("rule %d to %s", have[i].Priority, have[i].Dst))
	}
	routes, err := gatewayTableRoutes()
	if err != nil {
		return removed, errors.Join(append(errs, err)...)
	}
	for i := range routes {
		if err := netlink.RouteDel(&routes[i]); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, fmt.Sprintf("route %s table %d", routes[i].Dst, GatewayRouteTable))
	}
	return removed, errors.Join(errs...)
}

// ourGatewayRules lists the return-path rules of both families.
func ourGatewayRules() ([]netlink.Rule, error) {
	var ours []netlink.Rule
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		all, err := nldump.Retry(func() ([]netlink.Rule, error) { return netlink.RuleList(fam) })
		if err != nil {
			if fam == unix.AF_INET6 && ipv6Off() {
				continue
			}
			return nil, fmt.Errorf("listing policy rules: %w", err)
		}
		for _, r := range all {
			if r.Priority == gatewayRuleLocal || r.Priority == gatewayRuleForward {
				r.Family = fam // RuleDel needs it; the dump leaves it unset
				ours = append(ours, r)
			}
		}
	}
	return ours, nil
}

// gatewayTableRoutes lists GatewayRouteTable in both families.
func gatewayTableRoutes() ([]netlink.Route, error) {
	var out []netlink.Route
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs, err := nldump.Retry(func() ([]netlink.Route, error) {
			return netlink.RouteListFiltered(fam, &netlink.Route{Table: GatewayRouteTable}, netlink.RT_FILTER_TABLE)
		})
		if err != nil {
			if fam == unix.AF_INET6 && ipv6Off() {
				continue
			}
			return nil, err
		}
		out = append(out, rs...)
	}
	return out, nil
}

// ipv6Off: the kernel was booted with ipv6.disable=1 (no IPv6 rules or
// routes to list).
func ipv6Off() bool {
	_, err := os.Stat("/proc/sys/net/ipv6")
	return errors.Is(err, os.ErrNotExist)
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

func ruleDel(r *netlink.Rule) error {
	if err := netlink.RuleDel(r); err != nil && !errors.Is(err, syscall.ENOENT) {
		return fmt.Errorf("removing rule %d to %s: %w", r.Priority, r.Dst, err)
	}
	return nil
}

func containsRule(rs []netlink.Rule, r netlink.Rule) bool {
	for _, x := range rs {
		if x.Priority == r.Priority && x.Table == r.Table && x.IifName == r.IifName && x.Dst.String() == r.Dst.String() {
			return true
		}
	}
	return false
}

func slicesContainsRoute(rs []netlink.Route, r netlink.Route) bool {
	for _, x := range rs {
		if x.Dst.String() == r.Dst.String() && x.Gw.Equal(r.Gw) && x.LinkIndex == r.LinkIndex {
			return true
		}
	}
	return false
}

func prefixNet(p netip.Prefix) *net.IPNet {
	p = p.Masked()
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

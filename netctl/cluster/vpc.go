package cluster

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
)

// NB rows of the routers, as the node API's list answers them (column ->
// formatted value), the tables netctl reads for `vpc` and `diagnose pod`.
type NBRows struct {
	Routers     []map[string]string // Logical_Router
	RouterPorts []map[string]string // Logical_Router_Port
	Routes      []map[string]string // Logical_Router_Static_Route
	Policies    []map[string]string // Logical_Router_Policy
	NATs        []map[string]string // NAT
	Switches    []map[string]string // Logical_Switch
	SwitchPorts []map[string]string // Logical_Switch_Port of type router
}

// NBRouter is one logical router as the NB holds it.
type NBRouter struct {
	Name        string            `json:"name"`
	ExternalIDs map[string]string `json:"externalIDs,omitempty"`
	Ports       []NBRouterPort    `json:"ports,omitempty"`
	Routes      []NBRoute         `json:"staticRoutes,omitempty"`
	Policies    []NBPolicy        `json:"policies,omitempty"`
	NATs        []NBNAT           `json:"nat,omitempty"`
}

// NBRouterPort is a router port: its networks, and its OVN peer (a
// peering link) or the switch it attaches (through a router-type switch
// port).
type NBRouterPort struct {
	Name     string   `json:"name"`
	Networks []string `json:"networks"`
	Peer     string   `json:"peer,omitempty"`
	Switch   string   `json:"switch,omitempty"`
}

// NBRoute is a static route.
type NBRoute struct {
	Prefix  string `json:"ipPrefix"`
	Nexthop string `json:"nexthop"`
	Policy  string `json:"policy,omitempty"` // dst-ip (also "") or src-ip
	Owner   string `json:"owner,omitempty"`  // external_ids vpc=, vpc-nat=, or other
}

// NBPolicy is a router policy.
type NBPolicy struct {
	Priority int      `json:"priority"`
	Match    string   `json:"match"`
	Action   string   `json:"action"`
	Nexthops []string `json:"nexthops,omitempty"`
}

// NBNAT is a NAT row.
type NBNAT struct {
	Type       string `json:"type"`
	ExternalIP string `json:"externalIP"`
	LogicalIP  string `json:"logicalIP"`
}

func (r NBRoute) String() string {
	s := r.Prefix + " via " + r.Nexthop
	if r.Policy == "src-ip" {
		s += " (by source)"
	}
	return s
}

func (p NBPolicy) String() string {
	s := fmt.Sprintf("%d %q %s", p.Priority, p.Match, p.Action)
	if len(p.Nexthops) > 0 {
		s += " " + strings.Join(p.Nexthops, ",")
	}
	return s
}

// Topology is the NB's routers by name and, for each switch, the routers
// its router-type ports attach it to.
type Topology struct {
	Routers map[string]*NBRouter `json:"routers"`
	// SwitchRouters: switch name -> names of the routers it is attached to.
	SwitchRouters map[string][]string `json:"switchRouters"`
}

// ParseTopology assembles the rows.
func ParseTopology(rows NBRows) *Topology {
	t := &Topology{Routers: map[string]*NBRouter{}, SwitchRouters: map[string][]string{}}
	byUUID := func(list []map[string]string) map[string]map[string]string {
		m := map[string]map[string]string{}
		for _, r := range list {
			m[r["_uuid"]] = r
		}
		return m
	}
	ports, routes, pols, nats := byUUID(rows.RouterPorts), byUUID(rows.Routes), byUUID(rows.Policies), byUUID(rows.NATs)
	// Switch of each router-type switch port, and the router port it names.
	switchOfLSP := map[string]string{}
	for _, s := range rows.Switches {
		for _, id := range Set(s["ports"]) {
			switchOfLSP[id] = Text(s["name"])
		}
	}
	switchOfLRP := map[string]string{}
	for _, lsp := range rows.SwitchPorts {
		if Text(lsp["type"]) != "router" {
			continue
		}
		if rp := Map(lsp["options"])["router-port"]; rp != "" {
			switchOfLRP[rp] = switchOfLSP[lsp["_uuid"]]
		}
	}
	for _, r := range rows.Routers {
		rt := &NBRouter{Name: Text(r["name"]), ExternalIDs: Map(r["external_ids"])}
		for _, id := range Set(r["ports"]) {
			p, ok := ports[id]
			if !ok {
				continue
			}
			rp := NBRouterPort{Name: Text(p["name"]), Networks: Set(p["networks"]), Peer: Opt(p["peer"])}
			rp.Switch = switchOfLRP[rp.Name]
			if rp.Switch != "" {
				t.SwitchRouters[rp.Switch] = append(t.SwitchRouters[rp.Switch], rt.Name)
			}
			rt.Ports = append(rt.Ports, rp)
		}
		for _, id := range Set(r["static_routes"]) {
			s, ok := routes[id]
			if !ok {
				continue
			}
			ids := Map(s["external_ids"])
			owner := ""
			switch {
			case ids["vpc"] != "":
				owner = "vpc=" + ids["vpc"]
			case ids["vpc-nat"] != "":
				owner = "vpc-nat=" + ids["vpc-nat"]
			}
			rt.Routes = append(rt.Routes, NBRoute{Prefix: Text(s["ip_prefix"]), Nexthop: Text(s["nexthop"]), Policy: Opt(s["policy"]), Owner: owner})
		}
		for _, id := range Set(r["policies"]) {
			p, ok := pols[id]
			if !ok {
				continue
			}
			prio, _ := strconv.Atoi(Text(p["priority"]))
			np := NBPolicy{Priority: prio, Match: Text(p["match"]), Action: Text(p["action"]), Nexthops: Set(p["nexthops"])}
			if nh := Opt(p["nexthop"]); nh != "" && len(np.Nexthops) == 0 {
				np.Nexthops = []string{nh}
			}
			sort.Strings(np.Nexthops)
			rt.Policies = append(rt.Policies, np)
		}
		for _, id := range Set(r["nat"]) {
			if n, ok := nats[id]; ok {
				rt.NATs = append(rt.NATs, NBNAT{Type: Text(n["type"]), ExternalIP: Text(n["external_ip"]), LogicalIP: Text(n["logical_ip"])})
			}
		}
		sort.Slice(rt.Ports, func(i, j int) bool { return rt.Ports[i].Name < rt.Ports[j].Name })
		sort.Slice(rt.Routes, func(i, j int) bool { return rt.Routes[i].String() < rt.Routes[j].String() })
		sort.Slice(rt.Policies, func(i, j int) bool { return rt.Policies[i].Priority > rt.Policies[j].Priority })
		t.Routers[rt.Name] = rt
	}
	for s := range t.SwitchRouters {
		sort.Strings(t.SwitchRouters[s])
	}
	return t
}

// VpcInfo is one Vpc as netctl shows it: the spec and status beside the
// NB's router.
type VpcInfo struct {
	Name           string                   `json:"name"`
	Router         string                   `json:"router"` // the router the VPC is: its name (ovn-cluster for the default)
	Namespaces     []string                 `json:"namespaces,omitempty"`
	DefaultSubnet  string                   `json:"defaultSubnet,omitempty"`
	Subnets        []string                 `json:"subnets"` // Subnets whose spec.vpc names it
	StaticRoutes   []*kubeovnv1.StaticRoute `json:"staticRoutes,omitempty"`
	PolicyRoutes   []*kubeovnv1.PolicyRoute `json:"policyRoutes,omitempty"`
	Peerings       []*kubeovnv1.VpcPeering  `json:"vpcPeerings,omitempty"`
	EnableExternal bool                     `json:"enableExternal,omitempty"`
	Standby        bool                     `json:"standby"`
	Ready          string                   `json:"ready"`
	Conditions     []kubeovnv1.Condition    `json:"conditions,omitempty"`
	StatusSubnets  []string                 `json:"statusSubnets,omitempty"`
	NB             *NBRouter                `json:"nb,omitempty"`
	Findings       []Finding                `json:"findings,omitempty"`
	spec           *kubeovnv1.Vpc           // for the checks
	subnetObjs     map[string]*kubeovnv1.Subnet
}

// SubnetVpc is the VPC a Subnet is in (ovn-cluster when spec.vpc is empty).
func SubnetVpc(s *kubeovnv1.Subnet) string {
	if kubeovnv1.IsCustomVpc(s.Spec.Vpc) {
		return s.Spec.Vpc
	}
	return kubeovnv1.DefaultVpc
}

// RoutedSubnet: the Subnet's switch is meant to be on its VPC's router.
// An underlay Subnet whose gateway is the physical one (no logicalGateway,
// no u2oInterconnection) has no router port.
func RoutedSubnet(s *kubeovnv1.Subnet) bool {
	return s.Spec.Vlan == "" || s.Spec.LogicalGateway || s.Spec.U2OInterconnection
}

// Vpcs reads the Vpc and Subnet objects (unconvertible ones are skipped
// and named in the returned problems) into VpcInfos sorted by name, with
// the NB's routers when topo is not nil, and checks each (VpcChecks).
func Vpcs(vpcs, subnets []unstructured.Unstructured, topo *Topology) ([]*VpcInfo, []string) {
	var problems []string
	subs := map[string]*kubeovnv1.Subnet{}
	for i := range subnets {
		s, err := kubeovnv1.FromUnstructured(&subnets[i])
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		subs[s.Name] = s
	}
	var out []*VpcInfo
	for i := range vpcs {
		v, err := kubeovnv1.VpcFromUnstructured(&vpcs[i])
		if err != nil {
			problems = append(problems, err.Error())
			continue
		}
		info := &VpcInfo{Name: v.Name, Router: v.Name, Namespaces: v.Spec.Namespaces, DefaultSubnet: v.Spec.DefaultSubnet,
			StaticRoutes: v.Spec.StaticRoutes, PolicyRoutes: v.Spec.PolicyRoutes, Peerings: v.Spec.VpcPeerings,
			EnableExternal: v.Spec.EnableExternal, Standby: v.Status.Standby, Ready: "Unknown", Conditions: v.Status.Conditions,
			StatusSubnets: v.Status.Subnets, Subnets: []string{}, spec: v, subnetObjs: map[string]*kubeovnv1.Subnet{}}
		for _, c := range v.Status.Conditions {
			if c.Type == kubeovnv1.Ready {
				info.Ready = c.Status
			}
		}
		for name, s := range subs {
			if SubnetVpc(s) == v.Name {
				info.Subnets = append(info.Subnets, name)
				info.subnetObjs[name] = s
			}
		}
		sort.Strings(info.Subnets)
		if topo != nil {
			info.NB = topo.Routers[info.Router]
		}
		info.Findings = VpcChecks(info, topo)
		out = append(out, info)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Name < out[b].Name })
	return out, problems
}

// VpcChecks compares a Vpc with the NB (topo nil: the NB was not read, so
// only the object's own conditions are judged): the router exists, each
// Subnet's switch is attached to it, and on a custom VPC each static
// route, policy route and peering of the spec is on the router and the
// router has no route or policy of the VPC that the spec lacks.
func VpcChecks(v *VpcInfo, topo *Topology) []Finding {
	scope := "vpc/" + v.Name
	var out []Finding
	for _, c := range v.Conditions {
		if (c.Type == kubeovnv1.Validated || c.Type == kubeovnv1.Ready) && c.Status == "False" {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-conditions", Found: fmt.Sprintf("%s=False %s: %s", c.Type, c.Reason, c.Message),
				Fix: "fix what the message names in the Vpc (kubectl edit vpc " + v.Name + ")"})
		}
	}
	if topo == nil {
		return out
	}
	r := v.NB
	if r == nil {
		return append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-router", Found: "no logical router " + v.Router + " in the northbound database",
			Fix: "the controller has not programmed the Vpc: check its conditions (netctl vpc show " + v.Name + ") and the controller's log"})
	}
	out = append(out, Finding{Severity: Pass, Scope: scope, Check: "vpc-router", Found: fmt.Sprintf("router %s in NB (%d ports, %d static routes, %d policies, %d NAT rows)",
		r.Name, len(r.Ports), len(r.Routes), len(r.Policies), len(r.NATs))})
	for _, name := range v.Subnets {
		if s := v.subnetObjs[name]; s == nil || RoutedSubnet(s) {
			out = append(out, SwitchAttachment(name, v.Name, topo))
		}
	}
	if !kubeovnv1.IsCustomVpc(v.Name) {
		return out // the cluster router's routes are the controller's own (egress, nodes)
	}
	// Static routes of the spec on the router, and the VPC's own routes
	// the spec lacks.
	want := map[string]bool{}
	for i, sr := range v.StaticRoutes {
		if kubeovnv1.StaticRouteProblem(sr) != "" {
			continue // the Vpc's Validated condition names it
		}
		pfx, _ := kubeovnv1.ParseRouteCIDR(sr.CIDR)
		nr := NBRoute{Prefix: routeText(pfx), Nexthop: strings.TrimSpace(sr.NextHopIP), Policy: "dst-ip"}
		if sr.Policy == kubeovnv1.PolicySrc {
			nr.Policy = "src-ip"
		}
		want[routeKey(nr)] = true
		if !hasRoute(r, nr) {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-static-route", Found: fmt.Sprintf("spec.staticRoutes[%d] %s is not on router %s", i, nr, r.Name),
				Fix: "the Vpc's Validated condition says why an entry is left out (netctl vpc show " + v.Name + "); otherwise the controller has not synced it: its log"})
		} else {
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: "vpc-static-route", Found: fmt.Sprintf("spec.staticRoutes[%d] %s on router %s", i, nr, r.Name)})
		}
	}
	for _, nr := range r.Routes {
		if nr.Owner == "vpc="+v.Name && !want[routeKey(nr)] {
			out = append(out, Finding{Severity: Warn, Scope: scope, Check: "vpc-static-route", Found: fmt.Sprintf("router %s has static route %s that the Vpc's spec does not list", r.Name, nr),
				Fix: "the controller removes it at its next sync of the Vpc; if it stays, check the controller's log"})
		}
	}
	for i, pr := range v.PolicyRoutes {
		if kubeovnv1.PolicyRouteProblem(pr) != "" {
			continue
		}
		np := NBPolicy{Priority: pr.Priority, Match: strings.TrimSpace(pr.Match), Action: pr.Action}
		if pr.Action == kubeovnv1.PolicyActionReroute {
			for _, nh := range strings.Split(pr.NextHopIP, ",") {
				np.Nexthops = append(np.Nexthops, strings.TrimSpace(nh))
			}
			sort.Strings(np.Nexthops)
		}
		if !hasPolicy(r, np) {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-policy-route", Found: fmt.Sprintf("spec.policyRoutes[%d] %s is not on router %s", i, np, r.Name),
				Fix: "the Vpc's Validated condition says why an entry is left out (netctl vpc show " + v.Name + "); otherwise the controller's log"})
		} else {
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: "vpc-policy-route", Found: fmt.Sprintf("spec.policyRoutes[%d] %s on router %s", i, np, r.Name)})
		}
	}
	for i, pe := range v.Peerings {
		if kubeovnv1.PeeringProblem(v.Name, pe) != "" {
			continue
		}
		name, peer := v.Name+"-"+pe.RemoteVpc, pe.RemoteVpc+"-"+v.Name
		var port *NBRouterPort
		for j := range r.Ports {
			if r.Ports[j].Name == name {
				port = &r.Ports[j]
			}
		}
		link := strings.TrimSpace(pe.LocalConnectIP)
		switch {
		case port == nil:
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-peering", Found: fmt.Sprintf("spec.vpcPeerings[%d] to %s: router %s has no port %s", i, pe.RemoteVpc, r.Name, name),
				Fix: "the remote Vpc must exist (the Vpc's Validated condition names a missing one); netctl vpc show " + v.Name})
		case port.Peer != peer || !contains(port.Networks, link):
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-peering", Found: fmt.Sprintf("spec.vpcPeerings[%d]: port %s has networks %v and peer %q, want %s and peer %s", i, name, port.Networks, port.Peer, link, peer),
				Fix: "the controller corrects it at its next sync; check its log"})
		default:
			f := Finding{Severity: Pass, Scope: scope, Check: "vpc-peering", Found: fmt.Sprintf("port %s %s peers with %s", name, link, peer)}
			if rr := topo.Routers[pe.RemoteVpc]; rr == nil || !hasPort(rr, peer) {
				f.Severity, f.Found = Warn, fmt.Sprintf("port %s %s names peer %s, which router %s lacks: nothing crosses the link", name, link, peer, pe.RemoteVpc)
				f.Fix = "the peering must be listed on both Vpcs: add {remoteVpc: " + v.Name + "} with the other address of the link to Vpc " + pe.RemoteVpc
			}
			out = append(out, f)
		}
	}
	if v.EnableExternal {
		gw := v.Name + "-ovn-external"
		if hasPort(r, gw) {
			out = append(out, Finding{Severity: Pass, Scope: scope, Check: "vpc-external", Found: fmt.Sprintf("gateway port %s, %d NAT rows", gw, len(r.NATs))})
		} else {
			out = append(out, Finding{Severity: Fail, Scope: scope, Check: "vpc-external", Found: "enableExternal but router " + r.Name + " has no gateway port " + gw,
				Fix: "the external gateway (ConfigMap ovn-external-gw-config) must be enabled with a ready gateway node; the Vpc's events (VpcExternalNotProgrammed) say why"})
		}
	}
	return out
}

// SwitchAttachment checks that the switch of Subnet sub is attached to the
// router of VPC vpc, and to no other router.
func SwitchAttachment(sub, vpc string, topo *Topology) Finding {
	f := Finding{Scope: "subnet/" + sub, Check: "vpc-attachment"}
	rs := topo.SwitchRouters[sub]
	switch {
	case len(rs) == 1 && rs[0] == vpc:
		f.Severity, f.Found = Pass, "switch "+sub+" is attached to router "+vpc+" (VPC "+vpc+")"
	case len(rs) == 0:
		f.Severity, f.Found = Fail, "switch "+sub+" is attached to no router, so its pods reach nothing outside it; its VPC is "+vpc
		f.Fix = "the controller attaches it once the Subnet is programmed: netctl subnet show " + sub + " (conditions), the controller's log"
	default:
		f.Severity, f.Found = Fail, fmt.Sprintf("switch %s is attached to router(s) %s, but Subnet %s is in VPC %s", sub, strings.Join(rs, ", "), sub, vpc)
		f.Fix = "the controller moves it at its next sync of the Subnet; a router port left by another tool must be removed"
	}
	return f
}

func routeText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.Masked().String()
}

// routeKey normalises a route: the prefix as the controller writes it
// (a host route without /32), the policy dst-ip when empty.
func routeKey(r NBRoute) string {
	pfx := r.Prefix
	if p, err := kubeovnv1.ParseRouteCIDR(pfx); err == nil {
		pfx = routeText(p)
	}
	pol := r.Policy
	if pol == "" {
		pol = "dst-ip"
	}
	return pfx + "|" + r.Nexthop + "|" + pol
}

func hasRoute(r *NBRouter, want NBRoute) bool {
	for _, x := range r.Routes {
		if routeKey(x) == routeKey(want) {
			return true
		}
	}
	return false
}

func hasPolicy(r *NBRouter, want NBPolicy) bool {
	for _, x := range r.Policies {
		if x.String() == want.String() {
			return true
		}
	}
	return false
}

func hasPort(r *NBRouter, name string) bool {
	for _, p := range r.Ports {
		if p.Name == name {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

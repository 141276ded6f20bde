package vpcnat

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// External is the external network as the default VPC's gateway
// (ovn-external-gw-config) programs it: the VPCs' gateway ports join its
// switch ovn-external and use its gateway nodes.
type External struct {
	Ready     bool   // the ConfigMap's gateway is programmed
	Why       string // why not, with the fix
	Prefix    netip.Prefix
	RouterIP  netip.Addr // nic-ip: ovn-cluster's own address there
	GatewayIP netip.Addr // external-gw-addr: the next hop outside
	Policy    ovnnet.ExternalAddressPolicy
	// PodHolder is the default-VPC pod holding a as its EIP or SNAT
	// address ("" for none).
	PodHolder func(a netip.Addr) string
}

// SubnetInfo is a programmed Subnet as NAT rules see it.
type SubnetInfo struct {
	Vpc   string
	CIDRs []netip.Prefix
}

// IPInfo is an IP object (ips.kubeovn.io) as NAT rules see it.
type IPInfo struct {
	Subnet string
	V4     netip.Addr
}

// Input is everything the NAT of the custom VPCs depends on.
type Input struct {
	Ext     External
	Vpcs    map[string]*kubeovnv1.Vpc // custom VPCs whose router is programmed
	Subnets map[string]SubnetInfo
	IPs     map[string]IPInfo
	Eips    []*kubeovnv1.OvnEip
	Fips    []*kubeovnv1.OvnFip
	Snats   []*kubeovnv1.OvnSnatRule
	Dnats   []*kubeovnv1.OvnDnatRule
}

// Result is what one object's status says.
type Result struct {
	Ready   bool
	Problem string // the condition's message when not ready: what is wrong and the fix
	Vpc     string
	V4Eip   string // FIP/SNAT/DNAT: the EIP's address; OvnEip: its own
	V4Ip    string // FIP/DNAT: the internal address; SNAT: the CIDR
	Nat     string // OvnEip: what uses it (fip, snat, dnat, lrp)
	// DNAT: the protocol and ports as programmed.
	Protocol     string
	ExternalPort string
	InternalPort string
}

// Gateway is a VPC's port on the external network.
type Gateway struct {
	Address netip.Prefix // its address with the external prefix length
	Eip     string       // the lrp OvnEip giving it
}

// Plan is what the NB and the statuses get.
type Plan struct {
	Gateways map[string]Gateway              // vpc -> its gateway port (absent: none)
	NATs     map[string][]ovnnb.NAT          // vpc -> its NAT rows (every VPC with enableExternal has an entry)
	Forwards map[string][]ovnnet.PortForward // vpc -> its OvnDnatRules' port forwards
	// CreateLRPEips are the lrp OvnEips to create (name -> address) for
	// VPCs with enableExternal that have none (Kube-OVN creates them too).
	CreateLRPEips map[string]netip.Addr
	Eips          map[string]Result
	Fips          map[string]Result
	Snats         map[string]Result
	Dnats         map[string]Result
	VpcProblems   map[string]string // vpc -> why its external gateway is not programmed
}

// LRPEipName is the OvnEip of a VPC's gateway port (Kube-OVN's name:
// <vpc>-<external subnet>).
func LRPEipName(vpc string) string { return vpc + "-" + ovnnet.ExternalSwitch }

// Key of the NAT rows of a VPC (external IDs) and of each object.
const (
	KeyVPCNAT = "vpc-nat"
	KeyObject = "vpc-nat-object"
)

// Translate computes the gateway ports, NAT rows and statuses. It is
// pure: the reconciler reads the objects and applies the plan.
func Translate(in Input) Plan {
	p := Plan{Gateways: map[string]Gateway{}, NATs: map[string][]ovnnb.NAT{}, Forwards: map[string][]ovnnet.PortForward{}, CreateLRPEips: map[string]netip.Addr{},
		Eips: map[string]Result{}, Fips: map[string]Result{}, Snats: map[string]Result{}, Dnats: map[string]Result{}, VpcProblems: map[string]string{}}
	eips := map[string]*kubeovnv1.OvnEip{}
	taken := map[netip.Addr]string{} // address -> the OvnEip holding it
	eipNames := make([]*kubeovnv1.OvnEip, 0, len(in.Eips))
	eipNames = append(eipNames, in.Eips...)
	sort.Slice(eipNames, func(i, j int) bool { return eipNames[i].Name < eipNames[j].Name })
	eipAddr := map[string]netip.Addr{}
	for _, e := range eipNames {
		eips[e.Name] = e
		a, problem := checkEip(in.Ext, e)
		if problem == "" {
			if other, ok := taken[a]; ok {
				problem = fmt.Sprintf("spec.v4Ip %s is OvnEip %q's already; give each OvnEip its own address", a, other)
			}
		}
		r := Result{V4Eip: e.Spec.V4Ip}
		if problem != "" {
			r.Problem = problem
			p.Eips[e.Name] = r
			continue
		}
		taken[a] = e.Name
		eipAddr[e.Name] = a
		p.Eips[e.Name] = Result{V4Eip: a.String()} // ready once something uses it, below
	}
	vpcNames := make([]string, 0, len(in.Vpcs))
	for n := range in.Vpcs {
		vpcNames = append(vpcNames, n)
	}
	sort.Strings(vpcNames)
	for _, v := range vpcNames {
		if !in.Vpcs[v].Spec.EnableExternal {
			continue
		}
		p.NATs[v] = nil
		if !in.Ext.Ready {
			p.VpcProblems[v] = "enableExternal: the external network is not programmed: " + in.Ext.Why
			continue
		}
		name := LRPEipName(v)
		a, ok := eipAddr[name]
		switch {
		case eips[name] == nil:
			free, found := freeAddress(in.Ext, taken)
			if !found {
				p.VpcProblems[v] = fmt.Sprintf("enableExternal: no free address on the external network %s for the VPC's gateway port (outside every namespace's and the reserved ranges); create OvnEip %q (type lrp) with spec.v4Ip", in.Ext.Prefix, name)
				continue
			}
			taken[free] = name
			p.CreateLRPEips[name] = free
			p.VpcProblems[v] = fmt.Sprintf("enableExternal: waiting for OvnEip %q (type lrp, %s) to be created", name, free)
			continue
		case !ok:
			p.VpcProblems[v] = fmt.Sprintf("enableExternal: OvnEip %q, the VPC's gateway address, is not usable: %s", name, p.Eips[name].Problem)
			continue
		case eips[name].Spec.Type != kubeovnv1.OvnEipTypeLRP:
			p.VpcProblems[v] = fmt.Sprintf("enableExternal: OvnEip %q is the VPC's gateway address but has spec.type %q; set it to lrp", name, eips[name].Spec.Type)
			continue
		}
		p.Gateways[v] = Gateway{Address: netip.PrefixFrom(a, in.Ext.Prefix.Bits()), Eip: name}
		p.Eips[name] = Result{Ready: true, V4Eip: a.String(), Vpc: v, Nat: "lrp"}
	}
	// usable resolves the OvnEip a rule names: its address, else why not.
	used := map[string]string{} // OvnEip -> "fip <name>" of a FIP (one FIP per EIP)
	usable := func(eip, vpc string) (netip.Addr, string) {
		e := eips[eip]
		switch {
		case eip == "":
			return netip.Addr{}, "spec.ovnEip is empty; name the OvnEip whose address to use"
		case e == nil:
			return netip.Addr{}, fmt.Sprintf("spec.ovnEip %q: no such OvnEip; create it (kind OvnEip, spec.externalSubnet %s, spec.v4Ip an address of %s) or name an existing one", eip, ovnnet.ExternalSwitch, in.Ext.Prefix)
		case p.Eips[eip].Problem != "":
			return netip.Addr{}, fmt.Sprintf("spec.ovnEip %q is not usable: %s", eip, p.Eips[eip].Problem)
		case e.Spec.Type == kubeovnv1.OvnEipTypeLRP || e.Spec.Type == kubeovnv1.OvnEipTypeLSP:
			return netip.Addr{}, fmt.Sprintf("spec.ovnEip %q has type %s (a port's address); use an OvnEip of type nat", eip, e.Spec.Type)
		}
		if _, ok := p.Gateways[vpc]; !ok {
			why := p.VpcProblems[vpc]
			if in.Vpcs[vpc] == nil {
				why = "no such custom Vpc (or its router is not programmed yet)"
			} else if !in.Vpcs[vpc].Spec.EnableExternal {
				why = "the Vpc has no external gateway; set spec.enableExternal: true on Vpc " + vpc
			}
			return netip.Addr{}, fmt.Sprintf("Vpc %q: %s", vpc, why)
		}
		return eipAddr[eip], ""
	}
	// internal resolves a rule's address in its VPC: the IP object's, or
	// v4 in vpc (which must hold it in one of its Subnets).
	internal := func(ipName, v4, vpc string) (netip.Addr, string, string) {
		if ipName != "" {
			ip, ok := in.IPs[ipName]
			if !ok || !ip.V4.IsValid() {
				return netip.Addr{}, "", fmt.Sprintf("spec.ipName %q: no such IP object with an IPv4 address (IP objects are named <pod>.<namespace>); name a pod's IP object or give spec.vpc and spec.v4Ip", ipName)
			}
			sub := in.Subnets[ip.Subnet]
			if !kubeovnv1.IsCustomVpc(sub.Vpc) {
				return netip.Addr{}, "", fmt.Sprintf("spec.ipName %q: its Subnet %q is not in a custom VPC; the default VPC's pods use the ovn.kubernetes.io/eip and snat annotations", ipName, ip.Subnet)
			}
			if vpc != "" && vpc != sub.Vpc {
				return netip.Addr{}, "", fmt.Sprintf("spec.vpc %q, but IP %q is in Vpc %q; leave spec.vpc empty or name %q", vpc, ipName, sub.Vpc, sub.Vpc)
			}
			return ip.V4, sub.Vpc, ""
		}
		a, err := netip.ParseAddr(strings.TrimSpace(v4))
		if err != nil || !a.Is4() {
			return netip.Addr{}, "", fmt.Sprintf("spec.v4Ip %q is not an IPv4 address; give spec.ipName (an IP object) or spec.vpc with spec.v4Ip", v4)
		}
		if vpc == "" {
			return netip.Addr{}, "", fmt.Sprintf("spec.v4Ip %s without spec.vpc; name the Vpc the address is in", a)
		}
		if !vpcHolds(in, vpc, a) {
			return netip.Addr{}, "", fmt.Sprintf("spec.v4Ip %s is in no Subnet of Vpc %q; give an address of one of its Subnets", a, vpc)
		}
		return a, vpc, ""
	}
	fips := slices.Clone(in.Fips)
	sort.Slice(fips, func(i, j int) bool { return fips[i].Name < fips[j].Name })
	fipOf := map[netip.Addr]string{} // internal address -> FIP (one FIP per address and VPC)
	for _, f := range fips {
		if f.Spec.IPType == "vip" {
			p.Fips[f.Name] = Result{Problem: "spec.ipType vip is not supported (ovnhost has no Vip objects); use ipType ip with an IP object or spec.v4Ip"}
			continue
		}
		ip, vpc, problem := internal(f.Spec.IPName, f.Spec.V4Ip, f.Spec.Vpc)
		if problem != "" {
			p.Fips[f.Name] = Result{Problem: problem, Vpc: f.Spec.Vpc}
			continue
		}
		eip, problem := usable(f.Spec.OvnEip, vpc)
		if problem == "" {
			if u, ok := used[f.Spec.OvnEip]; ok {
				problem = fmt.Sprintf("spec.ovnEip %q is used by %s already; an EIP serves one OvnFip (give this one its own OvnEip)", f.Spec.OvnEip, u)
			} else if other, ok := fipOf[ip]; ok && in.Vpcs[vpc] != nil {
				problem = fmt.Sprintf("the address %s of Vpc %q has OvnFip %q already; remove one of them", ip, vpc, other)
			}
		}
		if problem != "" {
			p.Fips[f.Name] = Result{Problem: problem, Vpc: vpc, V4Ip: ip.String()}
			continue
		}
		used[f.Spec.OvnEip] = "OvnFip " + f.Name
		fipOf[ip] = f.Name
		p.NATs[vpc] = append(p.NATs[vpc], ovnnb.NAT{Type: nbdb.NATTypeDNATAndSNAT, ExternalIP: eip.String(), LogicalIP: ip.String(),
			GatewayPort: ovnnet.ExternalRouterPort(vpc), ExternalIDs: map[string]string{KeyVPCNAT: vpc, KeyObject: "fip/" + f.Name}})
		p.Fips[f.Name] = Result{Ready: true, Vpc: vpc, V4Eip: eip.String(), V4Ip: ip.String()}
		p.Eips[f.Spec.OvnEip] = Result{Ready: true, V4Eip: eip.String(), Vpc: vpc, Nat: "fip"}
	}
	snats := slices.Clone(in.Snats)
	sort.Slice(snats, func(i, j int) bool { return snats[i].Name < snats[j].Name })
	for _, s := range snats {
		var cidr netip.Prefix
		var vpc, problem string
		switch {
		case s.Spec.VpcSubnet != "":
			sub, ok := in.Subnets[s.Spec.VpcSubnet]
			switch {
			case !ok || len(sub.CIDRs) == 0:
				problem = fmt.Sprintf("spec.vpcSubnet %q: no such programmed Subnet; name a Subnet of the VPC", s.Spec.VpcSubnet)
			case !kubeovnv1.IsCustomVpc(sub.Vpc):
				problem = fmt.Sprintf("spec.vpcSubnet %q is in the default VPC; its pods leave through natOutgoing or the ovn.kubernetes.io/snat annotation", s.Spec.VpcSubnet)
			case s.Spec.Vpc != "" && s.Spec.Vpc != sub.Vpc:
				problem = fmt.Sprintf("spec.vpc %q, but Subnet %q is in Vpc %q; leave spec.vpc empty or name %q", s.Spec.Vpc, s.Spec.VpcSubnet, sub.Vpc, sub.Vpc)
			default:
				vpc = sub.Vpc
				for _, c := range sub.CIDRs {
					if c.Addr().Is4() {
						cidr = c.Masked()
					}
				}
				if !cidr.IsValid() {
					problem = fmt.Sprintf("spec.vpcSubnet %q has no IPv4 CIDR (OVN-native SNAT here is IPv4)", s.Spec.VpcSubnet)
				}
			}
		case s.Spec.IPName != "":
			var a netip.Addr
			a, vpc, problem = internal(s.Spec.IPName, "", s.Spec.Vpc)
			if problem == "" {
				cidr = netip.PrefixFrom(a, 32)
			}
		default:
			c, err := kubeovnv1.ParseRouteCIDR(s.Spec.V4IpCidr)
			vpc = s.Spec.Vpc
			switch {
			case s.Spec.V4IpCidr == "":
				problem = "none of spec.vpcSubnet, spec.ipName and spec.v4IpCidr is set; name what leaves through the EIP"
			case err != nil || !c.Addr().Is4():
				problem = fmt.Sprintf("spec.v4IpCidr %q is not an IPv4 address or CIDR", s.Spec.V4IpCidr)
			case vpc == "":
				problem = fmt.Sprintf("spec.v4IpCidr %s without spec.vpc; name the Vpc it is in", c)
			case !vpcHolds(in, vpc, c.Masked().Addr()):
				problem = fmt.Sprintf("spec.v4IpCidr %s is in no Subnet of Vpc %q; give a CIDR inside one of its Subnets", c, vpc)
			default:
				cidr = c.Masked()
			}
		}
		var eip netip.Addr
		if problem == "" {
			eip, problem = usable(s.Spec.OvnEip, vpc)
		}
		if problem == "" {
			if u, ok := used[s.Spec.OvnEip]; ok && strings.HasPrefix(u, "OvnFip") {
				problem = fmt.Sprintf("spec.ovnEip %q is used by %s; an OvnFip's EIP is its own (give the SNAT rule another OvnEip)", s.Spec.OvnEip, u)
			} else if ok && !strings.HasSuffix(u, "vpc "+vpc) {
				problem = fmt.Sprintf("spec.ovnEip %q is used by another VPC (%s); an EIP leaves from one VPC only", s.Spec.OvnEip, u)
			}
		}
		if problem != "" {
			p.Snats[s.Name] = Result{Problem: problem, Vpc: vpc}
			continue
		}
		used[s.Spec.OvnEip] = "OvnSnatRule " + s.Name + " of vpc " + vpc
		p.NATs[vpc] = append(p.NATs[vpc], ovnnb.NAT{Type: nbdb.NATTypeSNAT, ExternalIP: eip.String(), LogicalIP: routeText(cidr),
			GatewayPort: ovnnet.ExternalRouterPort(vpc), ExternalIDs: map[string]string{KeyVPCNAT: vpc, KeyObject: "snat/" + s.Name}})
		p.Snats[s.Name] = Result{Ready: true, Vpc: vpc, V4Eip: eip.String(), V4Ip: routeText(cidr)}
		if !p.Eips[s.Spec.OvnEip].Ready {
			p.Eips[s.Spec.OvnEip] = Result{Ready: true, V4Eip: eip.String(), Vpc: vpc, Nat: "snat"}
		}
	}
	dnats := slices.Clone(in.Dnats)
	sort.Slice(dnats, func(i, j int) bool { return dnats[i].Name < dnats[j].Name })
	forwarded := map[string]string{} // "eip proto port" -> the OvnDnatRule forwarding it
	for _, d := range dnats {
		r := Result{Vpc: d.Spec.Vpc, Protocol: d.Spec.Protocol, ExternalPort: d.Spec.ExternalPort, InternalPort: d.Spec.InternalPort}
		proto, ext, intl, problem := checkForward(d)
		var ip, eip netip.Addr
		vpc := d.Spec.Vpc
		if problem == "" {
			ip, vpc, problem = internal(d.Spec.IPName, d.Spec.V4Ip, d.Spec.Vpc)
		}
		if problem == "" {
			eip, problem = usable(d.Spec.OvnEip, vpc)
		}
		key := fmt.Sprintf("%s %s %d", d.Spec.OvnEip, proto, ext)
		if problem == "" {
			u, ok := used[d.Spec.OvnEip]
			switch {
			case ok && strings.HasPrefix(u, "OvnFip"):
				problem = fmt.Sprintf("spec.ovnEip %q is used by %s, which takes every port of it; give the OvnDnatRule another OvnEip", d.Spec.OvnEip, u)
			case ok && !strings.HasSuffix(u, "vpc "+vpc):
				problem = fmt.Sprintf("spec.ovnEip %q is used by another VPC (%s); an EIP serves one VPC", d.Spec.OvnEip, u)
			case forwarded[key] != "":
				problem = fmt.Sprintf("%s port %d of OvnEip %q is forwarded by OvnDnatRule %q already; give this rule another externalPort", proto, ext, d.Spec.OvnEip, forwarded[key])
			}
		}
		if problem != "" {
			r.Problem, r.Vpc = problem, vpc
			if ip.IsValid() {
				r.V4Ip = ip.String()
			}
			p.Dnats[d.Name] = r
			continue
		}
		forwarded[key] = d.Name
		if _, ok := used[d.Spec.OvnEip]; !ok {
			used[d.Spec.OvnEip] = "OvnDnatRule " + d.Name + " of vpc " + vpc
		}
		p.Forwards[vpc] = append(p.Forwards[vpc], ovnnet.PortForward{Protocol: proto, ExternalIP: eip, ExternalPort: ext, InternalIP: ip, InternalPort: intl})
		p.Dnats[d.Name] = Result{Ready: true, Vpc: vpc, V4Eip: eip.String(), V4Ip: ip.String(), Protocol: proto,
			ExternalPort: strconv.Itoa(int(ext)), InternalPort: strconv.Itoa(int(intl))}
		if !p.Eips[d.Spec.OvnEip].Ready {
			p.Eips[d.Spec.OvnEip] = Result{Ready: true, V4Eip: eip.String(), Vpc: vpc, Nat: "dnat"}
		}
	}
	// An OvnEip nothing uses: ready (the address is held), nat "".
	for name, r := range p.Eips {
		if r.Problem == "" && !r.Ready {
			r.Ready = true
			p.Eips[name] = r
		}
	}
	return p
}

// checkForward validates an OvnDnatRule's own fields: protocol (tcp when
// empty, as Kube-OVN), ports, and what ovnhost does not do.
func checkForward(d *kubeovnv1.OvnDnatRule) (string, uint16, uint16, string) {
	proto := strings.ToLower(strings.TrimSpace(d.Spec.Protocol))
	if proto == "" {
		proto = "tcp"
	}
	switch {
	case proto != "tcp" && proto != "udp" && proto != "sctp":
		return "", 0, 0, fmt.Sprintf("spec.protocol %q is not tcp, udp or sctp", d.Spec.Protocol)
	case d.Spec.IPType == "vip":
		return "", 0, 0, "spec.ipType vip is not supported (ovnhost has no Vip objects); use ipType ip with an IP object or spec.vpc and spec.v4Ip"
	case d.Spec.V6Ip != "":
		return "", 0, 0, "spec.v6Ip is not supported (OVN-native NAT of custom VPCs is IPv4 here); remove it"
	case d.Spec.ServiceName != "" || d.Spec.ServiceNamespace != "":
		return "", 0, 0, "spec.serviceName/serviceNamespace are not supported; forward to a pod's address (spec.ipName or spec.v4Ip)"
	}
	ext, err := parsePort(d.Spec.ExternalPort)
	if err != nil {
		return "", 0, 0, "spec.externalPort " + err.Error()
	}
	intl, err := parsePort(d.Spec.InternalPort)
	if err != nil {
		return "", 0, 0, "spec.internalPort " + err.Error()
	}
	return proto, ext, intl, ""
}

// parsePort reads one port number (Kube-OVN's ports are strings).
func parsePort(s string) (uint16, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("%q is not a port number; give one from 1 to 65535", s)
	}
	return uint16(n), nil
}

// checkEip validates an OvnEip against the external network.
func checkEip(ext External, e *kubeovnv1.OvnEip) (netip.Addr, string) {
	if e.Spec.ExternalSubnet != "" && e.Spec.ExternalSubnet != ovnnet.ExternalSwitch {
		return netip.Addr{}, fmt.Sprintf("spec.externalSubnet %q: ovnhost's external network is %q (ovn-external-gw-config); set spec.externalSubnet to %s or leave it empty", e.Spec.ExternalSubnet, ovnnet.ExternalSwitch, ovnnet.ExternalSwitch)
	}
	switch e.Spec.Type {
	case "", kubeovnv1.OvnEipTypeNAT, kubeovnv1.OvnEipTypeLRP:
	default:
		return netip.Addr{}, fmt.Sprintf("spec.type %q is not supported; use nat (for OvnFip/OvnSnatRule) or lrp (a Vpc's gateway address)", e.Spec.Type)
	}
	if e.Spec.V6Ip != "" {
		return netip.Addr{}, "spec.v6Ip is not supported (the external network is IPv4); remove it"
	}
	if !ext.Ready {
		return netip.Addr{}, "the external network is not programmed: " + ext.Why
	}
	a, err := netip.ParseAddr(strings.TrimSpace(e.Spec.V4Ip))
	switch {
	case e.Spec.V4Ip == "":
		return netip.Addr{}, fmt.Sprintf("spec.v4Ip is empty; give an address of the external network %s (ovnhost does not allocate OvnEip addresses)", ext.Prefix)
	case err != nil || !a.Is4():
		return netip.Addr{}, fmt.Sprintf("spec.v4Ip %q is not an IPv4 address; give an address of the external network %s", e.Spec.V4Ip, ext.Prefix)
	case !ext.Prefix.Contains(a) || a == ext.Prefix.Masked().Addr() || a == lastAddr(ext.Prefix):
		return netip.Addr{}, fmt.Sprintf("spec.v4Ip %s is outside the external Subnet %s (%s of ovn-external-gw-config); give an address inside it", a, ext.Prefix, ovnnet.KeyNICIP)
	case a == ext.RouterIP || a == ext.GatewayIP:
		return netip.Addr{}, fmt.Sprintf("spec.v4Ip %s is the default VPC router's (nic-ip) or the external gateway's (external-gw-addr) address; give another", a)
	}
	if r, ok := ext.Policy.Reserved.Find(a); ok {
		return netip.Addr{}, fmt.Sprintf("spec.v4Ip %s is reserved (%s in reserved-external-addresses of ovn-external-gw-config); give another address", a, r.Text)
	}
	if ext.PodHolder != nil {
		if pod := ext.PodHolder(a); pod != "" {
			return netip.Addr{}, fmt.Sprintf("spec.v4Ip %s is pod %s's EIP or SNAT address (ovn.kubernetes.io/eip or snat); give another address", a, pod)
		}
	}
	return a, ""
}

// freeAddress is the lowest address of the external network that no
// namespace may take (namespace-external-addresses), that is not
// reserved, not a router's or the gateway's, and no OvnEip holds.
func freeAddress(ext External, taken map[netip.Addr]string) (netip.Addr, bool) {
	last := lastAddr(ext.Prefix)
	for a := ext.Prefix.Masked().Addr().Next(); a.IsValid() && a.Less(last); a = a.Next() {
		if a == ext.RouterIP || a == ext.GatewayIP || taken[a] != "" {
			continue
		}
		if _, ok := ext.Policy.Reserved.Find(a); ok {
			continue
		}
		pooled := false
		for _, rs := range ext.Policy.Allowed {
			if _, ok := rs.Find(a); ok {
				pooled = true
				break
			}
		}
		if pooled || (ext.PodHolder != nil && ext.PodHolder(a) != "") {
			continue
		}
		return a, true
	}
	return netip.Addr{}, false
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().As4()
	host := uint32(1)<<(32-p.Bits()) - 1
	v := (uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// vpcHolds: a is in one of vpc's Subnets.
func vpcHolds(in Input, vpc string, a netip.Addr) bool {
	for _, s := range in.Subnets {
		if s.Vpc == vpc && slices.ContainsFunc(s.CIDRs, func(c netip.Prefix) bool { return c.Contains(a) }) {
			return true
		}
	}
	return false
}

// routeText is a CIDR as OVN's logical_ip wants it (a host without /32).
func routeText(p netip.Prefix) string {
	if p.IsSingleIP() {
		return p.Addr().String()
	}
	return p.Masked().String()
}

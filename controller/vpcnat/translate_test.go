package vpcnat

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	kubeovnv1 "github.com/ovnhost/ovnhost/controller/apis/kubeovn/v1"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
)

func meta(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }

func baseInput() Input {
	pol := ovnnet.ExternalAddressPolicy{Allowed: map[string]ovnnet.AddrRanges{"*": {{From: netip.MustParseAddr("172.56.0.2"), To: netip.MustParseAddr("172.56.0.250")}}},
		Reserved: ovnnet.AddrRanges{{From: netip.MustParseAddr("172.56.0.251"), To: netip.MustParseAddr("172.56.0.251"), Text: "172.56.0.251"}}}
	return Input{
		Ext: External{Ready: true, Prefix: netip.MustParsePrefix("172.56.0.0/16"), RouterIP: netip.MustParseAddr("172.56.0.254"),
			GatewayIP: netip.MustParseAddr("172.56.0.1"), Policy: pol,
			PodHolder: func(a netip.Addr) string {
				if a == netip.MustParseAddr("172.56.0.30") {
					return "team/web"
				}
				return ""
			}},
		Vpcs: map[string]*kubeovnv1.Vpc{
			"vpc-x": {ObjectMeta: meta("vpc-x"), Spec: kubeovnv1.VpcSpec{EnableExternal: true}},
			"vpc-y": {ObjectMeta: meta("vpc-y")},
		},
		Subnets: map[string]SubnetInfo{
			"sx":          {Vpc: "vpc-x", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.50.0.0/24")}},
			"sy":          {Vpc: "vpc-y", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.50.0.0/24")}},
			"ovn-default": {Vpc: "ovn-cluster", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")}},
		},
		IPs: map[string]IPInfo{
			"web.team":   {Subnet: "sx", V4: netip.MustParseAddr("10.50.0.5")},
			"other.team": {Subnet: "ovn-default", V4: netip.MustParseAddr("10.16.0.9")},
		},
	}
}

func eip(name, v4, typ string) *kubeovnv1.OvnEip {
	return &kubeovnv1.OvnEip{ObjectMeta: meta(name), Spec: kubeovnv1.OvnEipSpec{ExternalSubnet: "ovn-external", V4Ip: v4, Type: typ}}
}

// A Vpc with enableExternal and no lrp OvnEip: one is asked for, with the
// lowest address outside every namespace's pool and the reserved ranges.
func TestTranslateCreatesTheGatewayAddress(t *testing.T) {
	p := Translate(baseInput())
	if got := p.CreateLRPEips["vpc-x-ovn-external"]; got != netip.MustParseAddr("172.56.0.252") {
		t.Fatalf("CreateLRPEips %v, want vpc-x-ovn-external 172.56.0.252 (.251 reserved, .2-.250 a namespace pool)", p.CreateLRPEips)
	}
	if _, ok := p.Gateways["vpc-x"]; ok || !strings.Contains(p.VpcProblems["vpc-x"], "waiting for OvnEip") {
		t.Fatalf("gateway %v problem %q", p.Gateways, p.VpcProblems["vpc-x"])
	}
	if _, ok := p.NATs["vpc-y"]; ok {
		t.Errorf("vpc-y without enableExternal has NAT rows planned")
	}
}

// FIP by IP object, SNAT by Subnet: NAT rows on vpc-x's router through
// its gateway port; statuses ready with the addresses.
func TestTranslateFipAndSnat(t *testing.T) {
	in := baseInput()
	in.Eips = []*kubeovnv1.OvnEip{eip("vpc-x-ovn-external", "172.56.0.252", "lrp"), eip("fip-a", "172.56.0.10", "nat"), eip("snat-a", "172.56.0.20", "nat")}
	in.Fips = []*kubeovnv1.OvnFip{{ObjectMeta: meta("f1"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "fip-a", IPType: "ip", IPName: "web.team"}}}
	in.Snats = []*kubeovnv1.OvnSnatRule{{ObjectMeta: meta("s1"), Spec: kubeovnv1.OvnSnatRuleSpec{OvnEip: "snat-a", VpcSubnet: "sx"}}}
	p := Translate(in)
	g, ok := p.Gateways["vpc-x"]
	if !ok || g.Address != netip.MustParsePrefix("172.56.0.252/16") {
		t.Fatalf("gateway %v (%q)", p.Gateways, p.VpcProblems["vpc-x"])
	}
	var rows []string
	for _, n := range p.NATs["vpc-x"] {
		rows = append(rows, n.Type+" "+n.ExternalIP+" "+n.LogicalIP+" "+n.GatewayPort)
	}
	want := "dnat_and_snat 172.56.0.10 10.50.0.5 vpc-x-ovn-external,snat 172.56.0.20 10.50.0.0/24 vpc-x-ovn-external"
	if strings.Join(rows, ",") != want {
		t.Fatalf("NAT rows %q, want %q", rows, want)
	}
	if r := p.Fips["f1"]; !r.Ready || r.V4Eip != "172.56.0.10" || r.V4Ip != "10.50.0.5" || r.Vpc != "vpc-x" {
		t.Errorf("f1 %+v", r)
	}
	if r := p.Snats["s1"]; !r.Ready || r.V4Ip != "10.50.0.0/24" {
		t.Errorf("s1 %+v", r)
	}
	if r := p.Eips["fip-a"]; !r.Ready || r.Nat != "fip" {
		t.Errorf("fip-a %+v", r)
	}
	if r := p.Eips["vpc-x-ovn-external"]; !r.Ready || r.Nat != "lrp" {
		t.Errorf("lrp eip %+v", r)
	}
}

// Bad objects fail alone, each naming the fix.
func TestTranslateBadObjects(t *testing.T) {
	in := baseInput()
	in.Eips = []*kubeovnv1.OvnEip{
		eip("vpc-x-ovn-external", "172.56.0.252", "lrp"),
		eip("outside", "10.9.9.9", "nat"),
		eip("podheld", "172.56.0.30", "nat"),
		eip("reserved", "172.56.0.251", "nat"),
		eip("good", "172.56.0.11", "nat"),
		eip("y-eip", "172.56.0.12", "nat"),
	}
	in.Fips = []*kubeovnv1.OvnFip{
		{ObjectMeta: meta("missing-eip"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "nope", IPName: "web.team"}},
		{ObjectMeta: meta("missing-ip"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "good", IPName: "ghost.team"}},
		{ObjectMeta: meta("default-vpc"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "good", IPName: "other.team"}},
		{ObjectMeta: meta("no-external"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "y-eip", Vpc: "vpc-y", V4Ip: "10.50.0.7"}},
		{ObjectMeta: meta("ok"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "good", IPName: "web.team"}},
	}
	p := Translate(in)
	for name, want := range map[string]string{
		"outside":  "outside the external Subnet 172.56.0.0/16",
		"podheld":  "pod team/web's EIP or SNAT address",
		"reserved": "reserved (172.56.0.251 in reserved-external-addresses",
	} {
		if r := p.Eips[name]; r.Ready || !strings.Contains(r.Problem, want) {
			t.Errorf("OvnEip %s: %+v, want a problem containing %q", name, r, want)
		}
	}
	for name, want := range map[string]string{
		"missing-eip": `spec.ovnEip "nope": no such OvnEip; create it`,
		"missing-ip":  `spec.ipName "ghost.team": no such IP object`,
		"default-vpc": "is not in a custom VPC",
		"no-external": "set spec.enableExternal: true on Vpc vpc-y",
	} {
		if r := p.Fips[name]; r.Ready || !strings.Contains(r.Problem, want) {
			t.Errorf("OvnFip %s: %+v, want a problem containing %q", name, r, want)
		}
	}
	if r := p.Fips["ok"]; !r.Ready {
		t.Errorf("the good OvnFip beside the bad ones: %+v", r)
	}
	if len(p.NATs["vpc-x"]) != 1 || len(p.NATs["vpc-y"]) != 0 {
		t.Errorf("NAT rows %v, want only ok's on vpc-x", p.NATs)
	}
	// Without the external network nothing is programmed and the Vpc says why.
	in.Ext = External{Why: "ConfigMap absent"}
	p = Translate(in)
	if len(p.Gateways) != 0 || !strings.Contains(p.VpcProblems["vpc-x"], "ConfigMap absent") || p.Fips["ok"].Ready {
		t.Errorf("without the external network: gateways %v problems %v ok %+v", p.Gateways, p.VpcProblems, p.Fips["ok"])
	}
}

// Port forwards: by IP object and by spec.vpc + v4Ip, on a SNAT's EIP and
// on one of their own; tcp when the protocol is empty; each bad one
// refused alone, naming the fix.
func TestTranslateDnat(t *testing.T) {
	in := baseInput()
	in.Eips = []*kubeovnv1.OvnEip{eip("vpc-x-ovn-external", "172.56.0.252", "lrp"), eip("fip-a", "172.56.0.10", "nat"),
		eip("snat-a", "172.56.0.20", "nat"), eip("dnat-a", "172.56.0.21", "nat")}
	in.Fips = []*kubeovnv1.OvnFip{{ObjectMeta: meta("f1"), Spec: kubeovnv1.OvnFipSpec{OvnEip: "fip-a", IPName: "web.team"}}}
	in.Snats = []*kubeovnv1.OvnSnatRule{{ObjectMeta: meta("s1"), Spec: kubeovnv1.OvnSnatRuleSpec{OvnEip: "snat-a", VpcSubnet: "sx"}}}
	dnat := func(name, eip, ipName, vpc, v4, proto, ext, intl string) *kubeovnv1.OvnDnatRule {
		return &kubeovnv1.OvnDnatRule{ObjectMeta: meta(name), Spec: kubeovnv1.OvnDnatRuleSpec{OvnEip: eip, IPName: ipName, Vpc: vpc, V4Ip: v4,
			Protocol: proto, ExternalPort: ext, InternalPort: intl}}
	}
	in.Dnats = []*kubeovnv1.OvnDnatRule{
		dnat("ssh", "snat-a", "web.team", "", "", "", "2222", "22"),
		dnat("dns", "dnat-a", "", "vpc-x", "10.50.0.7", "UDP", "53", "5353"),
		dnat("zz-dup", "snat-a", "", "vpc-x", "10.50.0.8", "tcp", "2222", "22"),
		dnat("on-fip", "fip-a", "web.team", "", "", "tcp", "80", "80"),
		dnat("bad-port", "dnat-a", "web.team", "", "", "tcp", "http", "80"),
		dnat("bad-proto", "dnat-a", "web.team", "", "", "icmp", "1", "1"),
		dnat("other-vpc", "dnat-a", "", "vpc-y", "10.50.0.9", "tcp", "81", "80"),
		dnat("outside", "dnat-a", "", "vpc-x", "10.99.0.1", "tcp", "82", "80"),
	}
	p := Translate(in)
	if got := fmt.Sprint(p.Forwards["vpc-x"]); got != "[{udp 172.56.0.21 53 10.50.0.7 5353} {tcp 172.56.0.20 2222 10.50.0.5 22}]" {
		t.Fatalf("vpc-x's forwards %s", got)
	}
	if r := p.Dnats["ssh"]; !r.Ready || r.Protocol != "tcp" || r.V4Eip != "172.56.0.20" || r.V4Ip != "10.50.0.5" || r.ExternalPort != "2222" || r.InternalPort != "22" {
		t.Errorf("ssh %+v", r)
	}
	if r := p.Eips["dnat-a"]; !r.Ready || r.Nat != "dnat" || r.Vpc != "vpc-x" {
		t.Errorf("OvnEip dnat-a %+v", r)
	}
	if r := p.Eips["snat-a"]; r.Nat != "snat" {
		t.Errorf("OvnEip snat-a (SNAT and a forward) %+v, want nat snat", r)
	}
	for name, want := range map[string]string{
		"zz-dup":    `tcp port 2222 of OvnEip "snat-a" is forwarded by OvnDnatRule "ssh" already`,
		"on-fip":    `is used by OvnFip f1, which takes every port of it`,
		"bad-port":  `spec.externalPort "http" is not a port number`,
		"bad-proto": `spec.protocol "icmp" is not tcp, udp or sctp`,
		"other-vpc": `Vpc "vpc-y": the Vpc has no external gateway`,
		"outside":   `spec.v4Ip 10.99.0.1 is in no Subnet of Vpc "vpc-x"`,
	} {
		if r := p.Dnats[name]; r.Ready || !strings.Contains(r.Problem, want) {
			t.Errorf("OvnDnatRule %s: %+v, want a problem containing %q", name, r, want)
		}
	}
}

package hostcheck

import (
	"io/fs"
	"net/netip"
	"strings"
	"testing"
)

// sysctlTree is /proc/sys/net/ipv6/conf as a map: "all/forwarding" -> "1".
type sysctlTree map[string]string

func (t sysctlTree) read(p string) ([]byte, error) {
	v, ok := t[strings.TrimPrefix(p, "/proc/sys/net/ipv6/conf/")]
	if !ok {
		return nil, fs.ErrNotExist
	}
	return []byte(v + "\n"), nil
}

func ipv6Host(over map[string]string) sysctlTree {
	t := sysctlTree{"all/disable_ipv6": "0", "default/disable_ipv6": "0", "all/forwarding": "1",
		"eth0/disable_ipv6": "0", "eth0/forwarding": "1", "eth0/accept_ra": "0",
		"ovn0/disable_ipv6": "0", "ovn0/forwarding": "1", "ovn0/accept_ra": "0"}
	for k, v := range over {
		if v == "" {
			delete(t, k)
		} else {
			t[k] = v
		}
	}
	return t
}

func TestCheckIPv6(t *testing.T) {
	p := netip.MustParsePrefix
	dual := []Link{{Name: "eth0", Addrs: []netip.Prefix{p("192.168.1.5/24"), p("2001:db8::5/64"), p("fe80::1/64")}}, {Name: "ovn0"}}
	v4only := []Link{{Name: "eth0", Addrs: []netip.Prefix{p("192.168.1.5/24"), p("fe80::1/64")}}, {Name: "ovn0"}}
	v4 := IPv6Need{Services4: true, KernelTunnel: true}
	ds := IPv6Need{Services4: true, Services6: true, KernelTunnel: true}
	v6 := IPv6Need{Services6: true, Encap6: true, KernelTunnel: true}
	for _, c := range []struct {
		name  string
		host  sysctlTree
		links []Link
		need  IPv6Need
		want  string // "check=status ..." in order
		piece string // in the first check that does not pass
	}{
		{"IPv4 cluster, IPv6 on", ipv6Host(nil), dual, v4, "ipv6=pass", ""},
		{"IPv4 cluster, sysctl off: nothing needs it", ipv6Host(map[string]string{"all/disable_ipv6": "1"}), dual, v4, "ipv6=pass", ""},
		{"ipv6.disable=1, kernel tunnels", sysctlTree{}, dual, v4, "ipv6=warn", "opens an IPv6 socket too"},
		{"ipv6.disable=1, userspace datapath", sysctlTree{}, dual, IPv6Need{Services4: true}, "ipv6=pass", ""},
		{"ipv6.disable=1, dual-stack", sysctlTree{}, dual, ds, "ipv6=fail", "booted with ipv6.disable=1 (no /proc/sys/net/ipv6) and the cluster is dual-stack"},
		{"dual-stack, all right", ipv6Host(nil), dual, ds, "ipv6=pass ipv6-forwarding=pass ipv6-ra=pass", ""},
		{"dual-stack, sysctl off", ipv6Host(map[string]string{"all/disable_ipv6": "1"}), dual, ds, "ipv6=fail ipv6-forwarding=pass ipv6-ra=pass", "net.ipv6.conf.all.disable_ipv6=1"},
		{"dual-stack, new interfaces off", ipv6Host(map[string]string{"default/disable_ipv6": "1"}), dual, ds, "ipv6=fail ipv6-forwarding=pass ipv6-ra=pass", "net.ipv6.conf.default.disable_ipv6=1"},
		{"dual-stack, no IPv6 on the node: IPv4 tunnel carries it", ipv6Host(nil), v4only, ds, "ipv6=pass ipv6-forwarding=pass ipv6-ra=pass", ""},
		{"IPv6-only, no IPv6 on the node", ipv6Host(nil), v4only, IPv6Need{Services6: true, KernelTunnel: true}, "ipv6=fail ipv6-forwarding=pass ipv6-ra=pass", "the tunnel interface eth0 has no global IPv6 address"},
		{"IPv6 encap, tunnel interface off", ipv6Host(map[string]string{"eth0/disable_ipv6": "1"}), dual, v6, "ipv6=fail ipv6-forwarding=pass ipv6-ra=pass", "IPv6 is disabled on the tunnel interface eth0"},
		{"forwarding off", ipv6Host(map[string]string{"all/forwarding": "0", "eth0/forwarding": "0", "ovn0/forwarding": "0"}), dual, ds, "ipv6=pass ipv6-forwarding=fail ipv6-ra=pass", ""},
		{"RAs ignored on the uplink", ipv6Host(map[string]string{"eth0/accept_ra": "1"}), dual, ds, "ipv6=pass ipv6-forwarding=pass ipv6-ra=warn", "eth0 has accept_ra=1 with forwarding on"},
		{"RAs accepted on the uplink with 2", ipv6Host(map[string]string{"eth0/accept_ra": "2"}), dual, ds, "ipv6=pass ipv6-forwarding=pass ipv6-ra=pass", ""},
		{"RAs accepted on ovn0", ipv6Host(map[string]string{"ovn0/accept_ra": "2"}), dual, ds, "ipv6=pass ipv6-forwarding=pass ipv6-ra=warn", "ovn0 accepts router advertisements"},
	} {
		t.Run(c.name, func(t *testing.T) {
			checks := CheckIPv6(ReadIPv6State(c.host.read, c.links, "eth0", "ovn0"), c.need)
			var got []string
			var found string
			for _, ch := range checks {
				got = append(got, ch.Name+"="+string(ch.Status))
				if ch.Status != Pass && found == "" {
					found = ch.Found
					if ch.Fix == "" {
						t.Errorf("%s is %s without a fix", ch.Name, ch.Status)
					}
				}
			}
			if summary := strings.Join(got, " "); summary != c.want {
				t.Fatalf("checks %s, want %s\n%+v", summary, c.want, checks)
			}
			if !strings.Contains(found, c.piece) {
				t.Fatalf("found %q lacks %q", found, c.piece)
			}
		})
	}
}

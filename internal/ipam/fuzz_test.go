package ipam

import (
	"fmt"
	"net/netip"
	"testing"
)

// FuzzAllocateRelease drives one small dual-stack subnet (and a second
// IPv4 one) through random sequences of allocations (dynamic, static,
// with a MAC), releases, moves between subnets and subnet edits, and
// checks after every step what must always hold: no address or MAC is held
// by two owners; every held address lies in its subnet, is not the
// gateway, the network or broadcast address or an excluded one (unless it
// was held before that exclusion); Lookup, Holder and Usage agree with one
// another; a dynamic allocation takes the lowest free address.
//
// Each input byte pair is one operation: op = b[0] % 6, arg = b[1].
func FuzzAllocateRelease(f *testing.F) {
	f.Add([]byte{0, 1, 0, 2, 1, 1, 0, 3})
	f.Add([]byte{2, 7, 2, 7, 0, 9, 3, 9, 4, 1, 0, 1, 5, 2})
	f.Add([]byte{0, 0, 0, 1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 1, 3, 0, 9})
	f.Fuzz(func(t *testing.T, prog []byte) {
		m := New()
		a, err := ParseSubnet("a", "10.1.0.0/28,fd00::/124", "", []string{"10.1.0.5", "fd00::3..fd00::4"})
		if err != nil {
			t.Fatal(err)
		}
		b, err := ParseSubnet("b", "10.2.0.0/29", "10.2.0.6", nil)
		if err != nil {
			t.Fatal(err)
		}
		if m.AddSubnet(a) != nil || m.AddSubnet(b) != nil {
			t.Fatal("AddSubnet")
		}
		// What each owner held before an edit may outlive its exclusion.
		grandfathered := map[netip.Addr]bool{}
		for i := 0; i+1 < len(prog); i += 2 {
			op, arg := prog[i]%6, prog[i+1]
			owner := fmt.Sprintf("ns/p%d", arg%12)
			subnet := []string{"a", "b"}[arg>>7]
			switch op {
			case 0: // dynamic
				before := lowestFree(m, subnet)
				prev, had := m.Lookup(owner)
				got, err := m.Allocate(subnet, owner, Request{})
				checkErr(t, err)
				switch {
				case err != nil:
					if KindOf(err) == KindExhausted && before.IsValid() {
						t.Fatalf("subnet %s exhausted although %s is free", subnet, before)
					}
				case had && prev.Subnet == subnet:
					// Keeps what it holds (unless an edit excluded it since).
					if !contains(got.IPs, prev.IPs[0]) && !reserved(subnetCfg(m, subnet), prev.IPs[0]) {
						t.Fatalf("owner %s moved from %v to %v on a repeated request", owner, prev.IPs, got.IPs)
					}
				case before.IsValid() && !contains(got.IPs, before):
					t.Fatalf("dynamic allocation %v skipped the lowest free %s", got.IPs, before)
				}
			case 1:
				m.Release(owner)
			case 2: // static IPv4 in a
				ip := netip.AddrFrom4([4]byte{10, 1, 0, arg % 16})
				_, err := m.Allocate("a", owner, Request{IPs: []netip.Addr{ip}})
				checkErr(t, err)
			case 3: // static MAC
				mac := fmt.Sprintf("0a:00:00:00:00:%02x", arg%8)
				_, err := m.Allocate(subnet, owner, Request{MAC: mac})
				checkErr(t, err)
			case 4: // static IPv6 in a
				ip := netip.MustParseAddr(fmt.Sprintf("fd00::%x", arg%16))
				_, err := m.Allocate("a", owner, Request{IPs: []netip.Addr{ip}})
				checkErr(t, err)
			case 5: // edit a: exclude one more address
				for _, o := range m.OwnersIn("a") {
					h, _ := m.Lookup(o)
					for _, ip := range h.IPs {
						grandfathered[ip] = true
					}
				}
				ex := []string{"10.1.0.5", "fd00::3..fd00::4", fmt.Sprintf("10.1.0.%d", 1+arg%14)}
				c, err := ParseSubnet("a", "10.1.0.0/28,fd00::/124", "", ex)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.AddSubnet(c); err != nil {
					t.Fatal(err)
				}
			}
			invariants(t, m, grandfathered)
		}
	})
}

func subnetCfg(m *IPAM, name string) SubnetConfig {
	c, _ := m.Subnet(name)
	return c
}

func contains(ips []netip.Addr, ip netip.Addr) bool {
	for _, x := range ips {
		if x == ip {
			return true
		}
	}
	return false
}

func checkErr(t *testing.T, err error) {
	t.Helper()
	if err != nil && KindOf(err) == "" {
		t.Fatalf("untyped error: %v", err)
	}
}

// lowestFree is the lowest IPv4 address of subnet nobody holds and
// allocation may hand out.
func lowestFree(m *IPAM, subnet string) netip.Addr {
	cfg, _ := m.Subnet(subnet)
	for _, p := range cfg.CIDRs {
		if !p.Addr().Is4() {
			continue
		}
		for ip := p.Addr().Next(); p.Contains(ip) && ip != lastAddr(p); ip = ip.Next() {
			if reserved(cfg, ip) {
				continue
			}
			if _, held := m.Holder(ip); !held {
				return ip
			}
		}
	}
	return netip.Addr{}
}

func reserved(cfg SubnetConfig, ip netip.Addr) bool {
	for i, p := range cfg.CIDRs {
		if p.Contains(ip) && (ip == cfg.Gateways[i] || ip == p.Addr() || (ip.Is4() && ip == lastAddr(p))) {
			return true
		}
	}
	for _, r := range cfg.Exclude {
		if !ip.Less(r.Start) && !r.End.Less(ip) {
			return true
		}
	}
	return false
}

func invariants(t *testing.T, m *IPAM, grandfathered map[netip.Addr]bool) {
	t.Helper()
	ipOwner := map[netip.Addr]string{}
	macOwner := map[string]string{}
	count := map[string][2]float64{}
	for _, o := range m.Owners() {
		a, ok := m.Lookup(o)
		if !ok {
			t.Fatalf("owner %s listed but Lookup fails", o)
		}
		cfg, ok := m.Subnet(a.Subnet)
		if !ok {
			t.Fatalf("owner %s in unknown subnet %s", o, a.Subnet)
		}
		if len(a.IPs) != len(cfg.CIDRs) {
			t.Fatalf("owner %s holds %v in %s (%d CIDRs)", o, a.IPs, a.Subnet, len(cfg.CIDRs))
		}
		if prev, dup := macOwner[a.MAC]; dup {
			t.Fatalf("MAC %s held by %s and %s", a.MAC, prev, o)
		}
		macOwner[a.MAC] = o
		c := count[a.Subnet]
		for _, ip := range a.IPs {
			if prev, dup := ipOwner[ip]; dup {
				t.Fatalf("address %s held by %s and %s", ip, prev, o)
			}
			ipOwner[ip] = o
			in := false
			for _, p := range cfg.CIDRs {
				in = in || p.Contains(ip)
			}
			if !in {
				t.Fatalf("owner %s holds %s outside %s", o, ip, cfg.CIDRString())
			}
			if reserved(cfg, ip) && !grandfathered[ip] {
				t.Fatalf("owner %s holds reserved address %s of %s", o, ip, a.Subnet)
			}
			if h, ok := m.Holder(ip); !ok || h != o {
				t.Fatalf("Holder(%s) = %q, want %s", ip, h, o)
			}
			if ip.Is4() {
				c[0]++
			} else {
				c[1]++
			}
		}
		count[a.Subnet] = c
	}
	for _, s := range m.SubnetNames() {
		u, _ := m.Usage(s)
		if u.V4Using != count[s][0] || u.V6Using != count[s][1] {
			t.Fatalf("Usage(%s) using %v/%v, owners hold %v", s, u.V4Using, u.V6Using, count[s])
		}
	}
}

// FuzzParse: the parsers of what users write (cidrBlock, gateway,
// excludeIps, ip_address, ip_pool) never panic, and refuse with an
// InvalidInput error naming the problem; what they accept is usable.
func FuzzParse(f *testing.F) {
	f.Add("10.16.0.0/16", "10.16.0.1", "10.16.0.2..10.16.0.9", "10.16.0.5,fd00::5")
	f.Add("10.16.0.0/16,fd00::/64", "", "fd00::1", "10.16.0.10,fd00::a;10.16.0.11,fd00::b")
	f.Add("::/0", "::1", "..", ";;,")
	f.Fuzz(func(t *testing.T, cidr, gw, excl, ips string) {
		cfg, err := ParseSubnet("s", cidr, gw, []string{excl})
		if err != nil {
			if KindOf(err) != KindInvalid {
				t.Fatalf("ParseSubnet: untyped error %v", err)
			}
		} else {
			m := New()
			if err := m.AddSubnet(cfg); err != nil {
				t.Fatalf("AddSubnet of a parsed subnet: %v", err)
			}
			if a, err := m.Allocate("s", "o", Request{}); err == nil {
				if h, _ := m.Holder(a.IPs[0]); h != "o" {
					t.Fatalf("allocated %v not held", a.IPs)
				}
			}
		}
		if _, err := ParseIPs(ips); err != nil && KindOf(err) != KindInvalid {
			t.Fatalf("ParseIPs: untyped error %v", err)
		}
		if p, err := ParsePool(ips); err != nil {
			if KindOf(err) != KindInvalid {
				t.Fatalf("ParsePool: untyped error %v", err)
			}
		} else if len(p) == 0 {
			t.Fatal("ParsePool accepted an empty pool")
		}
	})
}

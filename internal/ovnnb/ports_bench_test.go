package ovnnb_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
)

// BenchmarkPortsOfOnePod: the lookup every pod sync makes (a pod's
// attachment ports) among n ports: through the client index it does not
// grow with n.
//
//	go test -run '^$' -bench PortsOfOnePod ./internal/ovnnb
func BenchmarkPortsOfOnePod(b *testing.B) {
	for _, n := range []int{500, 2000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, nb := nbtest.Client(b)
			ctx := context.Background()
			if err := nb.EnsureSwitch(ctx, ovnnb.Switch{Name: "ovn-default", CIDRs: []netip.Prefix{netip.MustParsePrefix("10.16.0.0/16")}, Gateways: []netip.Addr{netip.MustParseAddr("10.16.0.1")}}); err != nil {
				b.Fatal(err)
			}
			for i := 0; i < n; i++ {
				ip := netip.AddrFrom4([4]byte{10, 16, byte((i + 2) >> 8), byte(i + 2)})
				p := ovnnb.Port{Name: fmt.Sprintf("p%d.default", i), Switch: "ovn-default", MAC: fmt.Sprintf("0a:00:00:00:%02x:%02x", i>>8, i&0xff),
					IPs: []netip.Addr{ip}, ExternalIDs: map[string]string{ovnnb.KeyPod: fmt.Sprintf("default/p%d", i)}}
				if err := nb.EnsurePort(ctx, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ps, err := nb.Ports(ctx, map[string]string{ovnnb.KeyPod: fmt.Sprintf("default/p%d", i%n)})
				if err != nil || len(ps) != 1 {
					b.Fatalf("%v %v", ps, err)
				}
			}
		})
	}
}

// BenchmarkAddressSetUnchanged: EnsureAddressSet of a set as it is, among
// n sets (a NetworkPolicy sync re-ensures each of its peers' sets): the
// lookup by name should not grow with n.
//
//	go test -run '^$' -bench AddressSetUnchanged ./internal/ovnnb
func BenchmarkAddressSetUnchanged(b *testing.B) {
	for _, n := range []int{500, 4000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, nb := nbtest.Client(b)
			ctx := context.Background()
			sets := make([]ovnnb.AddressSet, n)
			for i := range sets {
				sets[i] = ovnnb.AddressSet{Name: fmt.Sprintf("as_np_%d", i), Addresses: []string{fmt.Sprintf("10.16.%d.%d", i>>8, i&0xff)},
					ExternalIDs: map[string]string{"np": fmt.Sprint(i)}}
				if err := nb.EnsureAddressSet(ctx, sets[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := nb.EnsureAddressSet(ctx, sets[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkPortGroupUnchanged: EnsurePortGroup of a NetworkPolicy's group
// as it is (two address sets, one ACL) among n policies' groups: what
// every policy sync pays. Finding the group and the policy's own sets must
// not visit every policy's.
//
//	go test -run '^$' -bench PortGroupUnchanged ./internal/ovnnb
func BenchmarkPortGroupUnchanged(b *testing.B) {
	for _, n := range []int{500, 2000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, nb := nbtest.Client(b)
			ctx := context.Background()
			pgs := make([]ovnnb.PortGroup, n)
			for i := range pgs {
				key := fmt.Sprintf("ns%d/p", i)
				as := fmt.Sprintf("np_%d_ingress_allow", i)
				pgs[i] = ovnnb.PortGroup{Name: fmt.Sprintf("np_%d", i), ExternalIDs: map[string]string{ovnnb.KeyPolicy: key},
					AddressSets: []ovnnb.AddressSet{
						{Name: as + "_v4", Addresses: []string{fmt.Sprintf("10.16.%d.%d", i>>8, i&0xff)}},
						{Name: as + "_v6", Addresses: nil}},
					ACLs: []ovnnb.ACL{{Direction: "to-lport", Priority: 2001, Match: fmt.Sprintf("outport == @np_%d && ip4.src == $%s_v4", i, as), Action: "allow-related"}}}
				if _, err := nb.EnsurePortGroup(ctx, pgs[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := nb.EnsurePortGroup(ctx, pgs[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSwitchUnchanged: EnsureSwitch of a switch as it is among n
// switches (each Subnet sync): the lookup by name should not grow with n.
//
//	go test -run '^$' -bench SwitchUnchanged ./internal/ovnnb
func BenchmarkSwitchUnchanged(b *testing.B) {
	for _, n := range []int{200, 1000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			_, nb := nbtest.Client(b)
			ctx := context.Background()
			if err := nb.EnsureRouter(ctx, "ovn-cluster"); err != nil {
				b.Fatal(err)
			}
			sws := make([]ovnnb.Switch, n)
			for i := range sws {
				sws[i] = ovnnb.Switch{Name: fmt.Sprintf("s%d", i), Router: "ovn-cluster",
					CIDRs:    []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i>>8), byte(i), 0}), 24)},
					Gateways: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(100 + i>>8), byte(i), 1})}}
				if err := nb.EnsureSwitch(ctx, sws[i]); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := nb.EnsureSwitch(ctx, sws[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

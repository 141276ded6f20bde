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

package hostlink

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
)

// Share, then Move (as an underlay bridge takes a NIC): the target answers
// for every address before anything leaves the source, and the move ends
// where a plain one does; the move back the same way gives the host back
// as it was.
func TestShareThenMoveAndBack(t *testing.T) {
	var plain string
	inFreshNetNS(t, func() {
		setupHost(t)
		run(t, "ip link set "+port+" up")
		settle(t, port)
		if _, err := Move(nic, port, moveOpts); err != nil {
			t.Fatal(err)
		}
		plain = withoutSide(t, snapshot(t))
	})
	inFreshNetNS(t, func() {
		setupHost(t)
		run(t, "ip link set "+port+" up")
		settle(t, port)
		before := snapshot(t)

		added, err := Share(nic, port, moveOpts)
		if err != nil {
			t.Fatalf("Share(%s, %s): %v", nic, port, err)
		}
		if added != 8 {
			t.Errorf("Share added %d addresses, want 8", added)
		}
		shared := snapshot(t)
		for _, want := range []string{
			"inet 10.99.0.2/24 brd 10.99.0.255 scope global " + nic + "\n",
			"inet 10.99.0.2/24 brd 10.99.0.255 scope global " + port + "\n",
			"inet 192.0.2.10/32 scope global dynamic " + port + ":dhcp\n",
			"inet6 2001:db8:99::3/64 scope global nodad \n",
			"default via 10.99.0.1 dev " + nic + " proto static \n",
		} {
			if !strings.Contains(shared, want) {
				t.Errorf("after Share, %q is missing", want)
			}
		}
		if again, err := Share(nic, port, moveOpts); err != nil || again != 0 {
			t.Errorf("second Share = %d, %v; want nothing added", again, err)
		}

		res, err := Move(nic, port, moveOpts)
		if err != nil {
			t.Fatalf("Move after Share: %v", err)
		}
		if want := (Result{Addrs: 8, Routes: 12, Rules: 4, Neighs: 2}); res != want {
			t.Errorf("Move after Share = %+v, want %+v", res, want)
		}
		if moved := withoutSide(t, snapshot(t)); moved != plain {
			t.Errorf("Share+Move does not end where a plain Move does:\n%s", diff(plain, moved))
		}

		if _, err := Share(port, nic, Options{}); err != nil {
			t.Fatalf("Share back: %v", err)
		}
		if _, err := Move(port, nic, Options{}); err != nil {
			t.Fatalf("Move back: %v", err)
		}
		if after := snapshot(t); withoutLinkHeader(after, port) != withoutLinkHeader(before, port) {
			t.Errorf("the host after Share+Move there and back is not as before:\n%s", diff(withoutLinkHeader(before, port), withoutLinkHeader(after, port)))
		}
	})
}

// A fault at each step of Share, and of the Move that follows it: the host
// is as it was before that call.
func TestShareAndSharedMoveRollBackAtEveryStep(t *testing.T) {
	for _, call := range []string{"Share", "Move"} {
		var steps []string
		inFreshNetNS(t, func() {
			setupHost(t)
			if call == "Move" {
				if _, err := Share(nic, port, moveOpts); err != nil {
					t.Fatal(err)
				}
			}
			fault = func(step string) error { steps = append(steps, step); return nil }
			defer func() { fault = nil }()
			var err error
			if call == "Share" {
				_, err = Share(nic, port, moveOpts)
			} else {
				_, err = Move(nic, port, Options{CopyMAC: true, JournalDir: t.TempDir()})
			}
			if err != nil {
				t.Fatal(err)
			}
		})
		t.Logf("%s: %d steps: %v", call, len(steps), steps)
		nth := map[string]int{}
		for _, kind := range steps {
			nth[kind]++
			n := nth[kind]
			t.Run(fmt.Sprintf("%s/%s#%d", call, kind, n), func(t *testing.T) {
				inFreshNetNS(t, func() {
					setupHost(t)
					if call == "Move" {
						if _, err := Share(nic, port, moveOpts); err != nil {
							t.Fatal(err)
						}
						settle(t, port)
					}
					before := snapshot(t)
					failAt(t, kind, n)
					var err error
					if call == "Share" {
						_, err = Share(nic, port, moveOpts)
					} else {
						_, err = Move(nic, port, Options{CopyMAC: true, JournalDir: t.TempDir()})
					}
					if !errors.Is(err, errInjected) {
						t.Fatalf("%s with a fault: %v", call, err)
					}
					if !strings.Contains(err.Error(), "; rolled back: ") && !strings.HasSuffix(err.Error(), "; nothing was changed") {
						t.Errorf("error does not say the host was restored: %v", err)
					}
					if got := snapshot(t); got != before {
						t.Errorf("the host after the rollback is not as before:\n%s", diff(before, got))
					}
				})
			})
		}
	}
}

// withoutSide replaces side0's random MAC and the link-local address made
// from it, which differ from one namespace to the next.
func withoutSide(t *testing.T, s string) string {
	t.Helper()
	l, err := netlink.LinkByName(side)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.IsLinkLocalUnicast() {
			s = strings.ReplaceAll(s, a.IP.String(), "SIDE-LL")
		}
	}
	return strings.ReplaceAll(s, l.Attrs().HardwareAddr.String(), "SIDE-MAC")
}

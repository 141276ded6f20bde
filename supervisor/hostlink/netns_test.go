package hostlink

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"

	harnessnetns "github.com/ovnhost/ovnhost/tests/harness/netns"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

// Root tests run on a real kernel, each in a throwaway network namespace:
// under0 stands for the NIC (or the tunnel interface), br-phy for the OVS
// internal port, each one end of a veth pair (this kernel may lack the
// dummy driver); Move only touches the netlink side of a link, never OVS.
// The host's state is what ip(8) shows, compared as text.

const (
	nic  = "under0"
	port = "br-phy"
	side = "side0" // a third link: the other nexthop of a multipath route
)

// inFreshNetNS runs fn in a new, unnamed network namespace
// (tests/harness/netns.InFresh); programs started from fn (ip) run in it.
func inFreshNetNS(t *testing.T, fn func()) {
	t.Helper()
	testenv.RequireCommands(t, "ip")
	harnessnetns.InFresh(t, func(vns.NsHandle) { fn() })
}

// ip runs ip(8) (or rm, for a journal) with the words of cmd.
func run(t *testing.T, cmd string) {
	t.Helper()
	if out, err := runCmd(cmd); err != nil {
		t.Fatalf("%s: %v\n%s", cmd, err, out)
	}
}

func runCmd(cmd string) (string, error) {
	f := strings.Fields(cmd)
	path, err := testenv.LookPath(f[0])
	if err != nil {
		return "", err
	}
	out, err := exec.Command(path, f[1:]...).CombinedOutput()
	return string(out), err
}

// sysctl writes a /proc/sys/net value of the current thread's namespace.
func sysctl(t *testing.T, key, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/net/"+key, []byte(value), 0o644); err != nil {
		t.Fatalf("sysctl %s: %v", key, err)
	}
}

// addVeth adds name with a peer that is up and has no IPv6 (so that the
// peer's own link-local address and routes do not come and go with the
// carrier the tests give it); name's duplicate address detection takes
// 10ms rather than up to 2s.
func addVeth(t *testing.T, name string) {
	t.Helper()
	peer := name + "-peer"
	run(t, "ip link add "+name+" type veth peer name "+peer)
	sysctl(t, "ipv6/conf/"+peer+"/disable_ipv6", "1")
	sysctl(t, "ipv6/neigh/"+name+"/retrans_time_ms", "10")
	run(t, "ip link set "+peer+" up")
}

// setupHost builds the host of the tests: under0 with everything Move
// moves (and things it leaves), br-phy down and empty, side0 for the other
// nexthop of a multipath route.
func setupHost(t *testing.T) {
	t.Helper()
	sysctl(t, "ipv6/conf/default/router_solicitation_delay", "0")
	run(t, "ip link set lo up")
	for _, l := range []string{nic, port, side} {
		addVeth(t, l)
	}
	for _, c := range []string{
		"ip link set " + nic + " mtu 9000 address 02:00:00:00:00:01 up",
		"ip link set " + port + " address 02:00:00:00:00:02",
		"ip link set " + side + " up",
		"ip address add 10.98.0.2/24 dev " + side,

		// Addresses: primary and secondary, one without a broadcast, a
		// DHCP lease with its label, a network manager's noprefixroute
		// one with its own prefix route; IPv6 with and without DAD, and
		// with a lifetime.
		"ip address add 10.99.0.2/24 broadcast 10.99.0.255 dev " + nic,
		"ip address add 10.99.0.3/24 broadcast 10.99.0.255 dev " + nic,
		"ip address add 10.99.1.2/24 dev " + nic + " noprefixroute",
		"ip address add 10.99.2.2/24 dev " + nic,
		"ip address add 192.0.2.10/32 dev " + nic + " valid_lft 3600 preferred_lft 1800 label " + nic + ":dhcp",
		"ip address add 2001:db8:99::2/64 dev " + nic,
		"ip address add 2001:db8:99::3/64 dev " + nic + " nodad",
		"ip address add 2001:db8:98::5/64 dev " + nic + " valid_lft 3600 preferred_lft 1800",
	} {
		run(t, c)
	}
	settle(t, nic)
	settle(t, side)
	for _, c := range []string{
		"ip route add 10.99.1.0/24 dev " + nic + " proto kernel scope link src 10.99.1.2 metric 100",
		"ip route add default via 10.99.0.1 dev " + nic + " proto static",
		"ip route add 198.51.100.0/24 via 10.99.0.254 dev " + nic + " proto static metric 20 mtu 1400",
		"ip route add 203.0.113.0/24 dev " + nic + " proto static scope link",
		"ip route add 192.0.2.128/25 proto static nexthop via 10.99.0.1 dev " + nic + " weight 2 nexthop via 10.98.0.1 dev " + side,
		"ip route add default via 10.99.0.1 dev " + nic + " table 100",
		"ip route add 10.99.5.0/24 via 10.99.0.254 dev " + nic + " table 100 metric 50 src 10.99.0.2",
		"ip route add blackhole 10.99.6.0/24 table 100",
		"ip route add 10.99.7.0/24 via inet6 fe80::1 dev " + nic + " proto static",
		"ip -6 route add 2001:db8:1::/64 via 2001:db8:99::1 dev " + nic + " proto static",
		"ip -6 route add default via fe80::1 dev " + nic + " proto static metric 1024",
		"ip -6 route add 2001:db8:2::/64 dev " + nic + " src 2001:db8:99::2",
		"ip -6 route add 2001:db8:3::/64 via 2001:db8:99::1 dev " + nic + " table 100",

		"ip rule add iif " + nic + " lookup 100 priority 100",
		"ip rule add oif " + nic + " lookup 100 priority 101",
		"ip rule add iif " + nic + " blackhole priority 102",
		"ip rule add from 10.0.0.0/8 lookup 200 priority 200",
		"ip -6 rule add iif " + nic + " lookup 100 priority 100",

		"ip neigh add 10.99.0.77 lladdr 02:00:00:00:00:77 dev " + nic + " nud permanent",
		"ip neigh add 2001:db8:99::77 lladdr 02:00:00:00:00:78 dev " + nic + " nud permanent router",
	} {
		run(t, c)
	}
}

// settle waits until no IPv6 address of link is tentative.
func settle(t *testing.T, name string) {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	if err := waitDAD(l, name, addrs, 10*time.Second); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

var (
	countdown = regexp.MustCompile(`\b(valid_lft|preferred_lft|expires) \d+sec\b`)
	noQdisc   = regexp.MustCompile(`qdisc (noop|noqueue) state DOWN`)
)

// snapshot is the host as ip(8) shows it: addresses with details, routes
// of all tables, rules, permanent neighbours. Left out: the lifetimes
// counting down (a finite one stays "Nsec", not "forever"), and the qdisc
// of a link that is down (noop until the link was first up, noqueue after:
// neither queues anything), and the veth peers (withoutPeers).
func snapshot(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range []string{
		"ip -d address show",
		"ip -4 route show table all",
		"ip -6 route show table all",
		"ip -4 rule show",
		"ip -6 rule show",
		"ip neigh show nud permanent",
	} {
		out, err := runCmd(c)
		if err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
		out = withoutPeers(out)
		out = countdown.ReplaceAllString(out, "$1 Nsec")
		out = noQdisc.ReplaceAllString(out, "qdisc none state DOWN")
		b.WriteString("$ " + c + "\n" + out + "\n")
	}
	return b.String()
}

// withoutPeers drops the veth peers from ip address show: they stand for
// the wire, have no addresses, and their carrier follows br-phy's admin
// state through the kernel's linkwatch, which runs up to a second later.
func withoutPeers(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	skip := false
	for _, l := range lines {
		if linkLine.MatchString(l) {
			skip = strings.Contains(l, "-peer@")
		}
		if !skip {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

var linkLine = regexp.MustCompile(`^\d+: `)

// withoutLinkHeader drops the lines of name's header in ip -d address
// show (flags, MTU, state, MAC): what a move gives the target and a move
// back leaves it.
func withoutLinkHeader(s, name string) string {
	lines := strings.Split(s, "\n")
	var out []string
	for i := 0; i < len(lines); i++ {
		if strings.Contains(lines[i], ": "+name+"@") {
			i++ // and link/ether
			continue
		}
		out = append(out, lines[i])
	}
	return strings.Join(out, "\n")
}

// diff shows the lines that differ, for a failure message.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	seen := map[string]int{}
	for _, l := range g {
		seen[l]++
	}
	var b strings.Builder
	for _, l := range w {
		if seen[l] > 0 {
			seen[l]--
			continue
		}
		b.WriteString("- " + l + "\n")
	}
	inWant := map[string]int{}
	for _, l := range w {
		inWant[l]++
	}
	for _, l := range g {
		if inWant[l] > 0 {
			inWant[l]--
			continue
		}
		b.WriteString("+ " + l + "\n")
	}
	if b.Len() == 0 {
		return "(same lines, another order)\n--- want\n" + want + "\n--- got\n" + got
	}
	return b.String()
}

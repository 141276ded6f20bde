package hostcheck

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"strconv"
	"strings"
)

// The host's IPv6 against what the cluster needs of it (issue 25): the
// failures Kube-OVN users report are a kernel booted with ipv6.disable=1
// (Geneve ports of the kernel datapath cannot be made), IPv6 switched off
// by sysctl (ovn0 gets no IPv6 address, pods cannot reach the node),
// nodes of an IPv6 cluster without an IPv6 address, forwarding off, and
// router advertisements: ignored on an interface once forwarding is on
// (accept_ra=1), so an address and default route learned from them
// expire; accepted on ovn0, they would give the host a default route into
// the cluster (Kube-OVN issue 1379).

// IPv6Need is what the cluster asks of the node's IPv6.
type IPv6Need struct {
	// Encap6: the encap IP is an IPv6 address.
	Encap6 bool
	// Services4, Services6: the Service CIDRs have a range of that
	// family (both: dual-stack; only 6: an IPv6-only cluster).
	Services4, Services6 bool
	// KernelTunnel: the kernel datapath makes the tunnel ports
	// (Geneve, VXLAN), which need the kernel's IPv6 sockets.
	KernelTunnel bool
}

// Any reports whether the node needs IPv6 at all.
func (n IPv6Need) Any() bool { return n.Encap6 || n.Services6 }

// IfaceIPv6 is one interface's IPv6 switches.
type IfaceIPv6 struct {
	Name       string
	Disabled   bool
	Forwarding bool
	AcceptRA   int
	// Global are its addresses of global scope.
	Global []netip.Addr
}

// IPv6State is the host's IPv6 as /proc/sys/net/ipv6 and the links show it.
type IPv6State struct {
	// Off: /proc/sys/net/ipv6 does not exist (ipv6.disable=1 at boot).
	Off                          bool
	AllDisabled, DefaultDisabled bool
	AllForwarding                bool
	Tunnel                       *IfaceIPv6 // nil: no tunnel interface
	NodePort                     *IfaceIPv6 // ovn0; nil when absent
	ReadErr                      error      // a switch could not be read
}

// ReadIPv6State reads the switches of the host and of interfaces tunnel
// and nodePort (ovn0) through read (a file reader), their addresses from
// links.
func ReadIPv6State(read func(string) ([]byte, error), links []Link, tunnel, nodePort string) IPv6State {
	var st IPv6State
	get := func(iface, key string) (int, bool) {
		b, err := read("/proc/sys/net/ipv6/conf/" + iface + "/" + key)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) && st.ReadErr == nil {
				st.ReadErr = err
			}
			return 0, false
		}
		v, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			if st.ReadErr == nil {
				st.ReadErr = fmt.Errorf("/proc/sys/net/ipv6/conf/%s/%s: %q is not a number", iface, key, strings.TrimSpace(string(b)))
			}
			return 0, false
		}
		return v, true
	}
	v, ok := get("all", "disable_ipv6")
	if !ok && st.ReadErr == nil {
		st.Off = true
		return st
	}
	st.AllDisabled = v == 1
	v, _ = get("default", "disable_ipv6")
	st.DefaultDisabled = v == 1
	v, _ = get("all", "forwarding")
	st.AllForwarding = v == 1
	iface := func(name string) *IfaceIPv6 {
		if name == "" {
			return nil
		}
		var found *Link
		for i := range links {
			if links[i].Name == name {
				found = &links[i]
			}
		}
		if found == nil {
			return nil
		}
		i := &IfaceIPv6{Name: name}
		v, _ := get(name, "disable_ipv6")
		i.Disabled = v == 1
		v, _ = get(name, "forwarding")
		i.Forwarding = v == 1
		i.AcceptRA, _ = get(name, "accept_ra")
		for _, a := range found.Addrs {
			if ip := a.Addr(); ip.Is6() && !ip.Is4In6() && ip.IsGlobalUnicast() {
				i.Global = append(i.Global, ip)
			}
		}
		return i
	}
	st.Tunnel, st.NodePort = iface(tunnel), iface(nodePort)
	return st
}

// CheckIPv6 judges st against need: "ipv6" (CheckIPv6Node), then, when
// the cluster has IPv6, "ipv6-forwarding" and "ipv6-ra" (CheckIPv6Routing).
func CheckIPv6(st IPv6State, need IPv6Need) []Check {
	return append([]Check{CheckIPv6Node(st, need)}, CheckIPv6Routing(st, need)...)
}

// CheckIPv6Node is "ipv6": the kernel's IPv6 and its switches, the node's
// IPv6 address, against what the cluster needs (part of preflight: a node
// that cannot carry the cluster's IPv6 does not start).
func CheckIPv6Node(st IPv6State, need IPv6Need) Check {
	const name = "ipv6"
	sysctlFix := "sysctl -w net.ipv6.conf.all.disable_ipv6=0 net.ipv6.conf.default.disable_ipv6=0, and the same in /etc/sysctl.d so that it survives a reboot"
	if st.ReadErr != nil {
		return Check{Name: name, Status: Warn, Found: "cannot read the IPv6 switches: " + st.ReadErr.Error(), Fix: "run netctl doctor as root in the host network namespace"}
	}
	what := "the cluster has no IPv6 (IPv4 Service CIDRs and encap IP)"
	switch {
	case need.Services6 && !need.Services4:
		what = "the cluster is IPv6-only (its Service CIDRs)"
	case need.Services6:
		what = "the cluster is dual-stack (its Service CIDRs)"
	case need.Encap6:
		what = "the encap IP is IPv6"
	}
	if st.Off {
		switch {
		case need.Any():
			return Check{Name: name, Status: Fail, Found: "the kernel was booted with ipv6.disable=1 (no /proc/sys/net/ipv6) and " + what,
				Fix: "remove ipv6.disable=1 from the kernel command line and reboot"}
		case need.KernelTunnel:
			return Check{Name: name, Status: Warn, Found: "the kernel was booted with ipv6.disable=1 (no /proc/sys/net/ipv6): a flow-based Geneve or VXLAN port of the kernel datapath opens an IPv6 socket too, and on kernels that do not skip it when IPv6 is off the port cannot come up, so no tunnel reaches other nodes (Kube-OVN lists this among its prerequisites)",
				Fix: "if tunnels to other nodes fail, remove ipv6.disable=1 from the kernel command line and reboot; to keep IPv6 off, use sysctl net.ipv6.conf.all.disable_ipv6=1 instead, which leaves the tunnels working"}
		}
		return Check{Name: name, Status: Pass, Found: "the kernel's IPv6 is off (ipv6.disable=1); " + what + " and the userspace datapath makes its own tunnels"}
	}
	switch {
	case !need.Any():
		return Check{Name: name, Status: Pass, Found: what}
	case st.AllDisabled || st.DefaultDisabled:
		which := "all"
		if !st.AllDisabled {
			which = "default"
		}
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("net.ipv6.conf.%s.disable_ipv6=1 and %s: ovn0 gets no IPv6 address, so the node cannot reach its pods' IPv6 addresses nor they the node", which, what), Fix: sysctlFix}
	case st.Tunnel != nil && st.Tunnel.Disabled && need.Encap6:
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("IPv6 is disabled on the tunnel interface %s (net.ipv6.conf.%s.disable_ipv6=1) and the encap IP is IPv6", st.Tunnel.Name, st.Tunnel.Name),
			Fix: fmt.Sprintf("sysctl -w net.ipv6.conf.%s.disable_ipv6=0 (and in /etc/sysctl.d)", st.Tunnel.Name)}
	case st.Tunnel != nil && len(st.Tunnel.Global) == 0 && (need.Encap6 || !need.Services4):
		return Check{Name: name, Status: Fail, Found: fmt.Sprintf("%s, but the tunnel interface %s has no global IPv6 address", what, st.Tunnel.Name),
			Fix: fmt.Sprintf("give %s an IPv6 address (the node's InternalIP in that family), or set ENCAP_IP/IFACE to an interface that has one", st.Tunnel.Name)}
	default:
		found := what + "; IPv6 is on"
		if st.Tunnel != nil && len(st.Tunnel.Global) > 0 {
			found += fmt.Sprintf(", %s has %s", st.Tunnel.Name, st.Tunnel.Global[0])
		}
		return Check{Name: name, Status: Pass, Found: found}
	}
}

// CheckIPv6Routing is "ipv6-forwarding" and "ipv6-ra" when the cluster
// has IPv6 (none otherwise; doctor only: ovnhost runs without them, but
// its pods' IPv6 does not cross the node).
func CheckIPv6Routing(st IPv6State, need IPv6Need) []Check {
	if !need.Any() || st.Off || st.ReadErr != nil {
		return nil
	}
	var out []Check
	if st.AllForwarding {
		out = append(out, Check{Name: "ipv6-forwarding", Status: Pass, Found: "net.ipv6.conf.all.forwarding=1"})
	} else {
		out = append(out, Check{Name: "ipv6-forwarding", Status: Fail, Found: "net.ipv6.conf.all.forwarding=0: the node does not forward its pods' IPv6 traffic (NodePorts to pods, egress through the node)",
			Fix: "sysctl -w net.ipv6.conf.all.forwarding=1, and the same in /etc/sysctl.d; then check the uplink's accept_ra (ipv6-ra)"})
	}
	out = append(out, checkIPv6RA(st))
	return out
}

// checkIPv6RA: with forwarding on, an interface accepts router
// advertisements only with accept_ra=2; ovn0 should accept none.
func checkIPv6RA(st IPv6State) Check {
	const name = "ipv6-ra"
	var problems, fixes []string
	if t := st.Tunnel; t != nil && (st.AllForwarding || t.Forwarding) && t.AcceptRA == 1 {
		problems = append(problems, fmt.Sprintf("%s has accept_ra=1 with forwarding on, so the kernel ignores router advertisements there: an address or default route learned from them expires", t.Name))
		fixes = append(fixes, fmt.Sprintf("sysctl -w net.ipv6.conf.%s.accept_ra=2 if %s's IPv6 comes from router advertisements (0 if it is static)", t.Name, t.Name))
	}
	if p := st.NodePort; p != nil && p.AcceptRA != 0 && !(p.AcceptRA == 1 && (st.AllForwarding || p.Forwarding)) {
		problems = append(problems, fmt.Sprintf("%s accepts router advertisements (accept_ra=%d): one from the cluster router would give the host a default route into the cluster", p.Name, p.AcceptRA))
		fixes = append(fixes, fmt.Sprintf("sysctl -w net.ipv6.conf.%s.accept_ra=0 (ovnhost sets it when it makes %s; something changed it since)", p.Name, p.Name))
	}
	if len(problems) > 0 {
		return Check{Name: name, Status: Warn, Found: strings.Join(problems, "; "), Fix: strings.Join(fixes, "; ")}
	}
	return Check{Name: name, Status: Pass, Found: "no interface of the node's accepts router advertisements that would fight its routes"}
}

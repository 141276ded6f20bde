package hostcheck

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
)

// SelectIface picks the tunnel interface: the first IFACE entry that
// matches an interface, as an exact name or else as a regular expression
// anchored at both ends (among several matches, the lowest index wins);
// with no IFACE, the first default-route interface.
func SelectIface(patterns []string, links []Link, defaults []string) (name, how string, err error) {
	sorted := append([]Link(nil), links...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	if len(patterns) > 0 {
		for _, p := range patterns {
			for _, l := range sorted {
				if l.Name == p {
					return l.Name, fmt.Sprintf("IFACE entry %q", p), nil
				}
			}
			re, rerr := regexp.Compile("^(?:" + p + ")$")
			if rerr != nil {
				continue
			}
			for _, l := range sorted {
				if !l.Loopback && re.MatchString(l.Name) {
					return l.Name, fmt.Sprintf("IFACE pattern %q", p), nil
				}
			}
		}
		return "", "", fmt.Errorf("IFACE=%s matches no interface", strings.Join(patterns, ","))
	}
	for _, d := range defaults {
		for _, l := range sorted {
			if l.Name == d {
				return d, "the default route", nil
			}
		}
	}
	return "", "", fmt.Errorf("IFACE is not set and there is no default route")
}

// describeLinks lists interfaces and their addresses for an error message.
func describeLinks(links []Link) string {
	var parts []string
	sorted := append([]Link(nil), links...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Index < sorted[j].Index })
	for _, l := range sorted {
		if l.Loopback {
			continue
		}
		s := l.Name
		var as []string
		for _, a := range l.Addrs {
			as = append(as, a.String())
		}
		if len(as) > 0 {
			s += " (" + strings.Join(as, ", ") + ")"
		}
		if !l.Up {
			s += " [down]"
		}
		parts = append(parts, s)
	}
	if len(parts) == 0 {
		return "none besides loopback"
	}
	return strings.Join(parts, "; ")
}

// firstAddr is the first IPv4 address of a link, else its first global IPv6.
func firstAddr(l Link) (netip.Addr, bool) {
	for _, a := range l.Addrs {
		if a.Addr().Is4() {
			return a.Addr(), true
		}
	}
	for _, a := range l.Addrs {
		if ad := a.Addr(); ad.Is6() && ad.IsGlobalUnicast() {
			return ad, true
		}
	}
	return netip.Addr{}, false
}

// CheckInterfaces finds the tunnel interface and the encap IP, and checks
// the MTU headroom for the tunnel type.
func CheckInterfaces(s nodeconfig.HostSettings, f LinkFacts) (iface, encapIP string, checks []Check) {
	t, checks := checkInterfaces(s, f)
	return t.iface, t.encapIP, checks
}

// tunnelFound is what the interface checks found.
type tunnelFound struct {
	iface, encapIP string
	mtu            int
}

func checkInterfaces(s nodeconfig.HostSettings, f LinkFacts) (found tunnelFound, checks []Check) {
	var iface, encapIP string
	defer func() { found.iface, found.encapIP = iface, encapIP }()
	links, err := f.Links()
	if err != nil {
		encapIP = fallbackEncap(s)
		return found, []Check{{Name: "tunnel-interface", Status: Fail, Found: "cannot list interfaces: " + err.Error(), Fix: "run ovnhost with CAP_NET_ADMIN in the host network namespace"}}
	}
	var defaults []string
	if len(s.Iface) == 0 {
		defaults, err = f.DefaultRouteIfaces()
		if err != nil {
			checks = append(checks, Check{Name: "default-route", Status: Warn, Found: "cannot read routes: " + err.Error(), Fix: "set IFACE to the tunnel interface"})
		}
	}
	name, how, serr := SelectIface(s.Iface, links, defaults)
	var link Link
	if serr != nil {
		c := Check{Name: "tunnel-interface", Found: serr.Error() + "; interfaces here: " + describeLinks(links)}
		if len(s.Iface) > 0 {
			c.Status = Fail
			c.Fix = "set IFACE to one of the interfaces listed (names or regular expressions, comma separated)"
		} else {
			c.Status = Warn
			c.Fix = "set IFACE to the underlay interface, or add a default route"
		}
		checks = append(checks, c)
	} else {
		for _, l := range links {
			if l.Name == name {
				link = l
			}
		}
		c := Check{Name: "tunnel-interface", Status: Pass, Found: fmt.Sprintf("%s, chosen by %s", name, how)}
		if !link.Up {
			c.Status, c.Found, c.Fix = Warn, c.Found+"; the interface is down", "bring it up: ip link set "+name+" up"
		}
		checks = append(checks, c)
		iface = name
	}

	// Encap IP.
	switch {
	case s.EncapIP != "":
		encapIP = s.EncapIP
		want, _ := netip.ParseAddr(s.EncapIP)
		owner := ""
		for _, l := range links {
			for _, a := range l.Addrs {
				if a.Addr() == want {
					owner = l.Name
				}
			}
		}
		if owner == "" {
			checks = append(checks, Check{Name: "encap-ip", Status: Warn, Found: "ENCAP_IP=" + encapIP + " is not assigned to any interface here; interfaces: " + describeLinks(links),
				Fix: "set ENCAP_IP to an address of this node, or unset it to use the tunnel interface's"})
		} else {
			checks = append(checks, Check{Name: "encap-ip", Status: Pass, Found: encapIP + " (ENCAP_IP, on " + owner + ")"})
		}
	case iface != "":
		if a, ok := firstAddr(link); ok {
			encapIP = a.String()
			checks = append(checks, Check{Name: "encap-ip", Status: Pass, Found: encapIP + " (first address of " + iface + ")"})
		} else if br, a, ok := movedAddr(s, iface, links); ok {
			encapIP = a.String()
			checks = append(checks, Check{Name: "encap-ip", Status: Pass, Found: encapIP + " (on " + br + ", where the underlay address moves when " + iface + " is attached to OVS)"})
		} else {
			encapIP = "127.0.0.1"
			checks = append(checks, Check{Name: "encap-ip", Status: Fail, Found: iface + " has no IPv4 or global IPv6 address",
				Fix: "assign an address to " + iface + ", set IFACE to an interface that has one, or set ENCAP_IP"})
		}
	default:
		encapIP = "127.0.0.1"
		checks = append(checks, Check{Name: "encap-ip", Status: Warn, Found: "no tunnel interface: using 127.0.0.1, this node cannot reach others through tunnels",
			Fix: "set IFACE or ENCAP_IP for a multi-node cluster"})
	}

	// MTU headroom.
	if iface != "" {
		found.mtu = link.MTU
		over := nodeconfig.TunnelOverhead(s.TunnelType, nodeconfig.IsIPv6(encapIP))
		tt := s.TunnelType
		if tt == "" {
			tt = "geneve"
		}
		pod := link.MTU - over
		if nodeconfig.IsIPv6(encapIP) {
			tt += " over IPv6"
		}
		c := Check{Name: "mtu", Status: Pass, Found: fmt.Sprintf("%s MTU %d leaves %d for pods after %d bytes of %s", iface, link.MTU, pod, over, tt)}
		switch {
		case pod < 576:
			c.Status, c.Fix = Fail, fmt.Sprintf("raise the MTU of %s to at least %d", iface, 1280+over)
		case pod < 1280:
			c.Status, c.Fix = Warn, fmt.Sprintf("IPv6 needs a pod MTU of 1280: raise the MTU of %s to at least %d", iface, 1280+over)
		}
		checks = append(checks, c)
	}
	checks = append(checks, checkProviderNetworks(s, links, iface)...)
	return found, checks
}

func fallbackEncap(s nodeconfig.HostSettings) string {
	if s.EncapIP != "" {
		return s.EncapIP
	}
	return "127.0.0.1"
}

// movedAddr finds the address of iface where a running (or crashed) node
// moved it: br-phy for the tunnel interface, br-<name> for a provider
// network's NIC.
func movedAddr(s nodeconfig.HostSettings, iface string, links []Link) (string, netip.Addr, bool) {
	for _, br := range []string{nodeconfig.PhysBridge, providerBridgeOf(s, iface)} {
		for _, l := range links {
			if br != "" && l.Name == br {
				if a, ok := firstAddr(l); ok {
					return br, a, true
				}
			}
		}
	}
	return "", netip.Addr{}, false
}

package hostnetmgr

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"sigs.k8s.io/yaml"

	"github.com/ovnhost/ovnhost/internal/nldump"
)

// Finding is something on the host that will take a bridged NIC back, or
// stop working, now that the NIC's configuration lives on its bridge.
type Finding struct {
	// Manager is who: "systemd-networkd", "netplan", "keepalived", "DHCP".
	Manager string
	Problem string
	Fix     string
}

func (f Finding) String() string { return f.Manager + ": " + f.Problem + "; fix: " + f.Fix }

// Lease is an address with a finite lifetime (a DHCP or SLAAC lease).
type Lease struct {
	Addr     string // CIDR
	ValidFor time.Duration
}

// LeasesOf is link's addresses with a finite lifetime: what a DHCP or
// SLAAC client renews (the kernel's 0xffffffff is forever).
func LeasesOf(link netlink.Link) []Lease {
	addrs, _ := nldump.Retry(func() ([]netlink.Addr, error) { return netlink.AddrList(link, netlink.FAMILY_ALL) })
	var out []Lease
	for _, a := range addrs {
		if a.ValidLft > 0 && a.ValidLft != 0xffffffff && a.Scope == int(netlink.SCOPE_UNIVERSE) {
			out = append(out, Lease{Addr: a.IPNet.String(), ValidFor: time.Duration(a.ValidLft) * time.Second})
		}
	}
	return out
}

// Host is where Inspect reads: Root prefixes every path ("/" on a node; a
// directory of files in tests).
type Host struct{ Root string }

func (h Host) path(p string) string { return filepath.Join(h.Root, p) }

// Inspect finds what would take nic (ifindex on the host) back from
// bridge or break once its configuration lives there: systemd-networkd
// managing it, a netplan file configuring it, keepalived running VRRP on
// it, and leases (on nic before the move, on bridge after it) that no one
// renews where they now are. Files that cannot be read count as absent.
func (h Host) Inspect(nic string, ifindex int, bridge string, leases []Lease) []Finding {
	var out []Finding
	if f, ok := h.networkd(nic, ifindex, bridge); ok {
		out = append(out, f)
	}
	out = append(out, h.netplan(nic, bridge)...)
	out = append(out, h.keepalived(nic, bridge)...)
	for _, l := range leases {
		out = append(out, Finding{Manager: "DHCP",
			Problem: fmt.Sprintf("%s is a lease (valid %s more) that was renewed on %s; on %s nothing renews it unless its DHCP client runs there, and the host loses it when it expires", l.Addr, l.ValidFor.Round(time.Second), nic, bridge),
			Fix:     fmt.Sprintf("give the host a static address on this network, or run its DHCP client on %s (the network manager's profile for %s)", bridge, bridge)})
	}
	return out
}

// networkd reads systemd-networkd's state of the link
// (/run/systemd/netif/links/<ifindex>): a .network file it applies to nic
// is applied again on `networkctl reload`/`reconfigure` or a restart of
// systemd-networkd, putting the addresses back on the NIC.
func (h Host) networkd(nic string, ifindex int, bridge string) (Finding, bool) {
	if ifindex <= 0 {
		return Finding{}, false
	}
	raw, err := os.ReadFile(h.path("/run/systemd/netif/links/" + strconv.Itoa(ifindex)))
	if err != nil {
		return Finding{}, false
	}
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			kv[k] = v
		}
	}
	file := kv["NETWORK_FILE"]
	if file == "" || kv["ADMIN_STATE"] == "unmanaged" || kv["ADMIN_STATE"] == "linger" {
		return Finding{}, false
	}
	return Finding{Manager: "systemd-networkd",
		Problem: fmt.Sprintf("systemd-networkd configures %s from %s (state %s); `networkctl reload`, `networkctl reconfigure` or a restart of systemd-networkd puts its addresses back on %s, now a port of %s", nic, file, dash(kv["ADMIN_STATE"]), nic, bridge),
		Fix:     fmt.Sprintf("move the addresses, routes and DHCP settings of %s to a .network file matching Name=%s, leave %s with none (or [Link] Unmanaged=yes), then networkctl reload", file, bridge, nic)}, true
}

// netplanDirs are netplan's configuration directories; a file name in a
// later one hides the same name in an earlier one (netplan(5)).
var netplanDirs = []string{"/lib/netplan", "/etc/netplan", "/run/netplan"}

// netplanDevice is the part of a netplan device definition that says
// whether it configures addresses.
type netplanDevice struct {
	Match struct {
		Name string `json:"name"`
	} `json:"match"`
	SetName   string `json:"set-name"`
	Addresses []any  `json:"addresses"`
	DHCP4     any    `json:"dhcp4"`
	DHCP6     any    `json:"dhcp6"`
	Gateway4  string `json:"gateway4"`
	Gateway6  string `json:"gateway6"`
	Routes    []any  `json:"routes"`
}

type netplanFile struct {
	Network map[string]any `json:"network"`
}

// netplan finds netplan definitions that configure nic: `netplan apply`
// (or a reboot before ovnhost starts) puts the configuration back on the
// NIC (Kube-OVN issue 2962).
func (h Host) netplan(nic, bridge string) []Finding {
	files := map[string]string{} // name -> path (later dirs win)
	for _, d := range netplanDirs {
		entries, _ := os.ReadDir(h.path(d))
		for _, e := range entries {
			if !e.IsDir() && strings.HasSuffix(e.Name(), ".yaml") {
				files[e.Name()] = path.Join(d, e.Name())
			}
		}
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []Finding
	for _, n := range names {
		p := files[n]
		raw, err := os.ReadFile(h.path(p))
		if err != nil {
			continue
		}
		var f netplanFile
		if yaml.Unmarshal(raw, &f) != nil {
			continue
		}
		for _, kind := range []string{"ethernets", "bonds", "vlans"} {
			devs, err := reparse[map[string]netplanDevice](f.Network[kind])
			if err != nil {
				continue
			}
			ids := make([]string, 0, len(devs))
			for id := range devs {
				ids = append(ids, id)
			}
			sort.Strings(ids)
			for _, id := range ids {
				d := devs[id]
				if !d.names(id, nic) || !d.configures() {
					continue
				}
				out = append(out, Finding{Manager: "netplan",
					Problem: fmt.Sprintf("%s configures %s (network.%s.%s: %s); `netplan apply` puts that back on %s, now a port of %s (Kube-OVN issue 2962)", p, nic, kind, id, strings.Join(d.what(), ", "), nic, bridge),
					Fix:     fmt.Sprintf("in %s leave %s without addresses (dhcp4: false, dhcp6: false, no addresses/routes) and configure %s instead, or do not run netplan apply while ovnhost bridges %s", p, id, bridge, nic)})
			}
		}
	}
	return out
}

func (d netplanDevice) names(id, nic string) bool {
	switch {
	case d.SetName != "":
		return d.SetName == nic
	case d.Match.Name != "":
		ok, _ := path.Match(d.Match.Name, nic)
		return ok
	}
	return id == nic
}

func (d netplanDevice) configures() bool { return len(d.what()) > 0 }

func (d netplanDevice) what() []string {
	var w []string
	if len(d.Addresses) > 0 {
		w = append(w, "addresses")
	}
	if truthy(d.DHCP4) {
		w = append(w, "dhcp4")
	}
	if truthy(d.DHCP6) {
		w = append(w, "dhcp6")
	}
	if d.Gateway4 != "" || d.Gateway6 != "" {
		w = append(w, "gateway")
	}
	if len(d.Routes) > 0 {
		w = append(w, "routes")
	}
	return w
}

// truthy reads netplan's booleans (true/yes/on, as YAML 1.1 allows).
func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		return slices.Contains([]string{"true", "yes", "on", "y"}, strings.ToLower(b))
	}
	return false
}

// reparse turns a generically decoded value into T.
func reparse[T any](v any) (T, error) {
	var t T
	if v == nil {
		return t, nil
	}
	raw, err := yaml.Marshal(v)
	if err != nil {
		return t, err
	}
	err = yaml.Unmarshal(raw, &t)
	return t, err
}

// keepalivedConf is keepalived's default configuration file.
const keepalivedConf = "/etc/keepalived/keepalived.conf"

// keepalived finds VRRP instances and addresses that name nic: VRRP
// adverts arriving on a NIC that is an OVS port go to the bridge, not to
// keepalived's socket on the NIC, so every node becomes master (Kube-OVN
// issue 4914). The addresses themselves moved to the bridge with the rest.
func (h Host) keepalived(nic, bridge string) []Finding {
	raw, err := os.ReadFile(h.path(keepalivedConf))
	if err != nil {
		return nil
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for n := 1; sc.Scan(); n++ {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line, _, _ = strings.Cut(line, "!")
		f := strings.Fields(line)
		for i, w := range f {
			named := w == nic && i > 0 && (f[i-1] == "interface" || f[i-1] == "dev")
			tracked := w == nic && len(f) == 1 // an entry of a track_interface block
			if named || tracked {
				lines = append(lines, strconv.Itoa(n))
				break
			}
		}
	}
	if len(lines) == 0 {
		return nil
	}
	return []Finding{{Manager: "keepalived",
		Problem: fmt.Sprintf("%s names %s (line %s): VRRP adverts now arrive through %s and never reach keepalived on %s, so every node turns master (Kube-OVN issue 4914)", keepalivedConf, nic, strings.Join(lines, ", "), bridge, nic),
		Fix:     fmt.Sprintf("replace %s with %s in %s (interface, dev and track_interface) and reload keepalived; the addresses it holds moved to %s already", nic, bridge, keepalivedConf, bridge)}}
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

package hostnetmgr

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeFiles(t *testing.T, files map[string]string) Host {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Host{Root: root}
}

func managers(fs []Finding) []string {
	var m []string
	for _, f := range fs {
		m = append(m, f.Manager)
	}
	return m
}

func TestNothingManagesTheNIC(t *testing.T) {
	h := writeFiles(t, map[string]string{
		"/run/systemd/netif/links/3":        "ADMIN_STATE=unmanaged\nOPER_STATE=carrier\n",
		"/run/systemd/netif/links/4":        "ADMIN_STATE=configured\nNETWORK_FILE=/etc/systemd/network/eth2.network\n",
		"/etc/netplan/01.yaml":              "network:\n  ethernets:\n    eth1: {}\n    eth2:\n      dhcp4: true\n",
		"/etc/keepalived/keepalived.conf":   "vrrp_instance V {\n  interface eth2\n}\n",
		"/etc/netplan/broken.yaml":          "network: [",
		"/etc/netplan/not-yaml-suffix.conf": "network:\n  ethernets:\n    eth1:\n      dhcp4: true\n",
	})
	if got := h.Inspect("eth1", 3, "br-pn", nil); len(got) != 0 {
		t.Fatalf("findings for a NIC nothing manages: %v", got)
	}
	// The same files do speak of eth2.
	if got := managers(h.Inspect("eth2", 4, "br-pn", nil)); strings.Join(got, ",") != "systemd-networkd,netplan,keepalived" {
		t.Fatalf("findings for eth2: %v", got)
	}
	if got := (Host{Root: t.TempDir()}).Inspect("eth1", 3, "br-pn", nil); len(got) != 0 {
		t.Fatalf("findings on an empty host: %v", got)
	}
}

func TestNetworkdManagingTheNIC(t *testing.T) {
	h := writeFiles(t, map[string]string{
		"/run/systemd/netif/links/3": "# This is private data.\nADMIN_STATE=configured\nOPER_STATE=routable\nNETWORK_FILE=/etc/systemd/network/10-eth1.network\n",
	})
	got := h.Inspect("eth1", 3, "br-pn", nil)
	if len(got) != 1 || got[0].Manager != "systemd-networkd" {
		t.Fatalf("findings: %v", got)
	}
	for _, want := range []string{"/etc/systemd/network/10-eth1.network", "networkctl reload", "br-pn"} {
		if !strings.Contains(got[0].String(), want) {
			t.Errorf("%q lacks %q", got[0], want)
		}
	}
}

func TestNetplanConfiguringTheNIC(t *testing.T) {
	h := writeFiles(t, map[string]string{
		"/lib/netplan/50.yaml": "network:\n  ethernets:\n    eth1:\n      dhcp4: yes\n",
		// /etc hides /lib's file of the same name: this one does not configure eth1.
		"/etc/netplan/50.yaml": "network:\n  ethernets:\n    eth1:\n      dhcp4: false\n",
		"/etc/netplan/60.yaml": "network:\n  version: 2\n  ethernets:\n    uplink:\n      match:\n        name: eth*\n      set-name: \"\"\n      addresses: [10.0.0.5/24]\n      routes:\n        - to: default\n          via: 10.0.0.1\n",
		"/run/netplan/70.yaml": "network:\n  vlans:\n    vlan10:\n      id: 10\n      link: eth0\n      dhcp4: true\n",
	})
	got := h.Inspect("eth1", 0, "br-pn", nil)
	if len(got) != 1 || got[0].Manager != "netplan" {
		t.Fatalf("findings: %v", got)
	}
	for _, want := range []string{"/etc/netplan/60.yaml", "network.ethernets.uplink", "addresses, routes", "netplan apply", "br-pn"} {
		if !strings.Contains(got[0].String(), want) {
			t.Errorf("%q lacks %q", got[0], want)
		}
	}
	// A VLAN interface as the NIC is found under vlans.
	if got := h.Inspect("vlan10", 0, "br-v", nil); len(got) != 1 || !strings.Contains(got[0].Problem, "network.vlans.vlan10: dhcp4") {
		t.Fatalf("vlan10: %v", got)
	}
}

func TestKeepalivedOnTheNIC(t *testing.T) {
	h := writeFiles(t, map[string]string{
		"/etc/keepalived/keepalived.conf": `! Configuration File for keepalived
vrrp_instance VI_1 {
    state MASTER
    interface eth1   # the uplink
    virtual_router_id 51
    track_interface {
        eth1
    }
    virtual_ipaddress {
        10.0.0.100/24 dev eth1
    }
}
# interface eth1 in a comment is not a use
`,
	})
	got := h.Inspect("eth1", 0, "br-pn", nil)
	if len(got) != 1 || got[0].Manager != "keepalived" {
		t.Fatalf("findings: %v", got)
	}
	if !strings.Contains(got[0].Problem, "line 4, 7, 10") || !strings.Contains(got[0].Fix, "replace eth1 with br-pn") {
		t.Fatalf("finding: %v", got[0])
	}
	if got := h.Inspect("eth10", 0, "br-x", nil); len(got) != 0 {
		t.Fatalf("eth10 is not eth1: %v", got)
	}
}

func TestLeasesAreReported(t *testing.T) {
	got := (Host{Root: t.TempDir()}).Inspect("eth1", 0, "br-pn", []Lease{{Addr: "10.0.0.5/24", ValidFor: 3599*time.Second + 400*time.Millisecond}})
	if len(got) != 1 || got[0].Manager != "DHCP" || !strings.Contains(got[0].Problem, "10.0.0.5/24 is a lease (valid 59m59s more)") || !strings.Contains(got[0].Fix, "br-pn") {
		t.Fatalf("findings: %v", managers(got))
	}
}

func TestBridgedNICsReadsTheJournals(t *testing.T) {
	h := writeFiles(t, map[string]string{
		"/j/eth1.json":           `{"From":"eth1","To":"br-pn","Phase":"moved"}`,
		"/j/eth1.networkmanager": "NetworkManager managed eth1\n",
		"/j/bond0.json":          `{"From":"bond0","To":"br-b","Phase":"moving"}`,
		"/j/.tmp.json":           `{"From":".tmp","To":"x"}`,
		"/j/odd.json":            `{"From":"eth9","To":"br-x"}`,
	})
	got, err := BridgedNICs(filepath.Join(h.Root, "j"))
	if err != nil || len(got) != 2 || got[0] != (Bridged{NIC: "bond0", Bridge: "br-b"}) || got[1] != (Bridged{NIC: "eth1", Bridge: "br-pn", NetworkManager: true}) {
		t.Fatalf("BridgedNICs: %+v %v", got, err)
	}
	if got, err := BridgedNICs(filepath.Join(h.Root, "none")); err != nil || got != nil {
		t.Fatalf("no directory: %+v %v", got, err)
	}
}

package hostcheck_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/hostnetmgr"
)

func TestUnderlayHostCheck(t *testing.T) {
	eth1 := hostnetmgr.Bridged{NIC: "eth1", Bridge: "br-pn"}
	cases := []struct {
		name   string
		nics   []hostcheck.UnderlayNIC
		status []hostcheck.Status
		found  []string
		fix    []string
	}{
		{name: "no NIC bridged: no check"},
		{name: "left alone", nics: []hostcheck.UnderlayNIC{{Bridged: eth1}},
			status: []hostcheck.Status{hostcheck.Pass}, found: []string{"eth1 is bridged into br-pn"}},
		{name: "NetworkManager took it back", nics: []hostcheck.UnderlayNIC{{Bridged: eth1, NMManaged: true}},
			status: []hostcheck.Status{hostcheck.Fail}, found: []string{"NetworkManager manages eth1 again"}, fix: []string{"nmcli device set eth1 managed no"}},
		{name: "netplan and a lease", nics: []hostcheck.UnderlayNIC{{Bridged: eth1, Findings: []hostnetmgr.Finding{
			{Manager: "netplan", Problem: "/etc/netplan/50.yaml configures eth1", Fix: "edit 50.yaml"},
			{Manager: "DHCP", Problem: "10.0.0.5/24 is a lease", Fix: "static"}}}},
			status: []hostcheck.Status{hostcheck.Warn}, found: []string{"netplan: /etc/netplan/50.yaml configures eth1; DHCP: 10.0.0.5/24 is a lease"}, fix: []string{"edit 50.yaml; static"}},
		{name: "NetworkManager unreachable", nics: []hostcheck.UnderlayNIC{{Bridged: eth1, NMErr: errors.New("timeout")}},
			status: []hostcheck.Status{hostcheck.Warn}, found: []string{"cannot ask NetworkManager about eth1: timeout"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := hostcheck.CheckUnderlayHost(c.nics, nil)
			if len(got) != len(c.status) {
				t.Fatalf("checks: %+v", got)
			}
			for i, ch := range got {
				if ch.Name != "underlay-host:eth1" || ch.Status != c.status[i] || !strings.Contains(ch.Found, c.found[i]) || (c.fix != nil && !strings.Contains(ch.Fix, c.fix[i])) {
					t.Errorf("check %d: %+v", i, ch)
				}
			}
		})
	}
	if got := hostcheck.CheckUnderlayHost(nil, errors.New("permission denied")); len(got) != 1 || got[0].Status != hostcheck.Warn {
		t.Errorf("unreadable journals: %+v", got)
	}
}

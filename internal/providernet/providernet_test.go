package providernet

import (
	"strings"
	"testing"
)

func TestNameProblem(t *testing.T) {
	for _, ok := range []string{"physnet1", "a", "net-0", "abcdefghijkl"} {
		if p := NameProblem(ok); p != "" {
			t.Errorf("%q refused: %s", ok, p)
		}
	}
	for name, want := range map[string]string{"": "empty", "abcdefghijklm": "at most 12", "Net": "lower-case", "a_b": "lower-case",
		"a-": "ending", "phy": "reserved", "ovnhost-egw": "reserved"} {
		if p := NameProblem(name); !strings.Contains(p, want) {
			t.Errorf("%q: %q, want %q", name, p, want)
		}
	}
	if BridgeName("abcdefghijkl") != "br-abcdefghijkl" || len(BridgeName("abcdefghijkl")) != 15 {
		t.Fatal("the longest name's bridge does not fit 15 bytes")
	}
}

func TestMissingNIC(t *testing.T) {
	if got := MissingNIC("eth1", []string{"eth0", "Eth1"}); got != "eth1 not found; Eth1 exists (interface names are case-sensitive)" {
		t.Fatal(got)
	}
	if got := MissingNIC("eth1", []string{"eth0", "ens3"}); got != "eth1 not found; this host has eth0, ens3" {
		t.Fatal(got)
	}
	if got := MissingNIC("eth1", nil); !strings.Contains(got, "no interface besides the loopback") {
		t.Fatal(got)
	}
}

func TestNotApplied(t *testing.T) {
	if got := (Spec{DefaultInterface: "eth1", PreserveVlanInterfaces: true, VlanInterfaces: []string{"eth1.10"}}).NotApplied(); got != "" {
		t.Fatalf("applied fields reported: %q", got)
	}
	got := (Spec{DefaultInterface: "eth1.10", ExchangeLinkName: true, AutoCreateVlanSubinterfaces: true}).NotApplied()
	if !strings.HasPrefix(got, "spec.exchangeLinkName: ") || !strings.Contains(got, "; spec.autoCreateVlanSubinterfaces: ") {
		t.Fatalf("NotApplied: %q", got)
	}
}

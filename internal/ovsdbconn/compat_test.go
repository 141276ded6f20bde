package ovsdbconn

import (
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

func TestReleaseOf(t *testing.T) {
	for v, want := range map[string]string{
		"8.2.0": "OVS 2.15", "8.3.1": "OVS 3.1", "8.8.0": "OVS 3.5",
		"8.3.0": "between OVS 2.15 and OVS 3.1", "8.1.0": "older than OVS 2.15", "8.9.0": "newer than OVS 3.5",
	} {
		if got := ReleaseOf("Open_vSwitch", v); got != want {
			t.Errorf("ReleaseOf(%s) = %q, want %q", v, got, want)
		}
	}
	if CompareVersions("20.27.0", "20.4.0") <= 0 || CompareVersions("7.0.0", "7.0") != 0 {
		t.Fatal("CompareVersions compares text")
	}
}

// Compare finds what libovsdb would refuse: a missing table, a missing
// column, a column of another type. The fixture is the model's own schema
// with those changes made.
func TestCompare(t *testing.T) {
	full, _ := vswitch.FullDatabaseModel()
	if gaps := Compare(full, vswitch.Schema()); len(gaps) != 0 {
		t.Fatalf("the model does not fit its own schema: %v", gaps)
	}
	s := vswitch.Schema()
	delete(s.Tables, "AutoAttach")
	iface := s.Tables["Interface"]
	delete(iface.Columns, "mtu_request")
	s.Tables["Interface"] = iface
	br := s.Tables["Bridge"]
	col := *br.Columns["name"]
	col.Type = "integer"
	br.Columns["name"] = &col
	s.Tables["Bridge"] = br
	got := []string{}
	for _, g := range Compare(full, s) {
		got = append(got, g.String())
	}
	j := strings.Join(got, "; ")
	for _, want := range []string{"table AutoAttach", "column Interface.mtu_request", "column Bridge.name (server type int"} {
		if !strings.Contains(j, want) {
			t.Errorf("Compare = %s; missing %q", j, want)
		}
	}
	sub, err := Subset(full, &vswitch.Bridge{}, &vswitch.Port{})
	if err != nil || len(sub.Types()) != 2 {
		t.Fatalf("Subset: %v %v", sub.Types(), err)
	}
	if gaps := Compare(sub, s); len(gaps) != 1 || gaps[0].Table != "Bridge" {
		t.Fatalf("a subset is checked only on its tables: %v", gaps)
	}
	if _, err := Subset(full, &nbdb.ACL{}); err == nil {
		t.Fatal("Subset accepted a table of another database")
	}
	if n := len(Columns(&vswitch.Bridge{})); n != len(s.Tables["Bridge"].Columns) {
		t.Fatalf("Columns(Bridge) = %d pointers, schema has %d columns", n, len(s.Tables["Bridge"].Columns))
	}
}

func TestCompareVersionsTable(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{{"8.3.0", "8.3.0", 0}, {"8.2.0", "8.3.0", -1}, {"8.10.0", "8.9.1", 1}, {"7", "7.0.0", 0}} {
		if got := CompareVersions(c.a, c.b); got != c.want {
			t.Errorf("CompareVersions(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

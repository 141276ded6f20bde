package ovsconf

import (
	"slices"
	"testing"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

func TestSplitMappings(t *testing.T) {
	got := SplitMappings(" ext:br-external, ,egw:br-egw,")
	if want := []string{"ext:br-external", "egw:br-egw"}; !slices.Equal(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
	if got := SplitMappings(""); len(got) != 0 {
		t.Fatalf("empty value: %q", got)
	}
}

func TestSetExternalIDDeletesThenInserts(t *testing.T) {
	root := &vswitch.OpenvSwitch{UUID: "u"}
	ops := SetExternalID(root, BridgeMappings, "a:b")
	if len(ops) != 2 || ops[0].Mutations[0].Mutator != ovsdb.MutateOperationDelete || ops[1].Mutations[0].Mutator != ovsdb.MutateOperationInsert {
		t.Fatalf("set: %+v", ops)
	}
	if ops := SetExternalID(root, BridgeMappings, ""); len(ops) != 1 {
		t.Fatalf("remove: %+v", ops)
	}
}

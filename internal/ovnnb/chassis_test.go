package ovnnb_test

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// A VM's port: owned by the VM (not by a pod of its name); its migration
// options are set and cleared by its owner only, other options kept.
func TestVMPortOptionsFollowTheirOwner(t *testing.T) {
	s, nb := nbtest.Client(t)
	ctx := context.Background()
	topology(t, nb)
	vm := ovnnb.Port{Name: "vm1.default", Switch: "ovn-default", MAC: "0a:58:0a:10:00:05", IPs: []netip.Addr{mustAddr("10.16.0.5")},
		ExternalIDs: map[string]string{ovnnb.KeyPod: "default/vm1", ovnnb.KeyVM: "vm1"}}
	if err := nb.EnsurePort(ctx, vm); err != nil {
		t.Fatal(err)
	}
	owner := ovnnb.VMPortOwner("default", "vm1")
	// A pod named vm1 cannot take or delete it.
	pod := vm
	pod.ExternalIDs = map[string]string{ovnnb.KeyPod: "default/vm1"}
	if err := nb.EnsurePort(ctx, pod); !errors.Is(err, ovnnb.ErrNotOwner) {
		t.Fatalf("a pod of the VM's name took its port: %v", err)
	}
	if err := nb.DeletePort(ctx, "vm1.default", ovnnb.PodPortOwner("default", "vm1")); !errors.Is(err, ovnnb.ErrNotOwner) {
		t.Fatalf("a pod of the VM's name deleted its port: %v", err)
	}
	if err := nb.SetPortOptions(ctx, "vm1.default", ovnnb.PodPortOwner("default", "vm1"), map[string]string{ovnnb.OptRequestedChassis: "x"}, nil); !errors.Is(err, ovnnb.ErrNotOwner) {
		t.Fatalf("a pod of the VM's name set its options: %v", err)
	}
	row := func() *nbdb.LogicalSwitchPort {
		for _, p := range nbtest.Rows[*nbdb.LogicalSwitchPort](t, s, nb, nbdb.LogicalSwitchPortTable) {
			if p.Name == "vm1.default" {
				return p
			}
		}
		t.Fatal("vm1.default is gone")
		return nil
	}
	if err := nb.SetPortOptions(ctx, "vm1.default", owner, map[string]string{ovnnb.OptRequestedChassis: "a,b", ovnnb.OptActivationStrategy: "rarp", "other": "kept"}, nil); err != nil {
		t.Fatal(err)
	}
	if o := row().Options; o[ovnnb.OptRequestedChassis] != "a,b" || o[ovnnb.OptActivationStrategy] != "rarp" {
		t.Fatalf("options %v", o)
	}
	if err := nb.SetPortOptions(ctx, "vm1.default", owner, map[string]string{ovnnb.OptRequestedChassis: "b"}, []string{ovnnb.OptActivationStrategy}); err != nil {
		t.Fatal(err)
	}
	if o := row().Options; o[ovnnb.OptRequestedChassis] != "b" || o[ovnnb.OptActivationStrategy] != "" || o["other"] != "kept" {
		t.Fatalf("options after the migration %v", o)
	}
	// EnsurePort leaves the options alone.
	if err := nb.EnsurePort(ctx, vm); err != nil {
		t.Fatal(err)
	}
	if o := row().Options; o[ovnnb.OptRequestedChassis] != "b" {
		t.Fatalf("EnsurePort changed the options: %v", o)
	}
	if err := nb.DeletePort(ctx, "vm1.default", owner); err != nil {
		t.Fatal(err)
	}
}

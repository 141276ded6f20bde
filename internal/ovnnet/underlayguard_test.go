package ovnnet

import "testing"

func TestUnderlayGuardACLs(t *testing.T) {
	acls := UnderlayGuardACLs("sub100")
	if len(acls) != 1 {
		t.Fatalf("%d ACLs", len(acls))
	}
	want := `outport == "localnet.sub100" && ((tcp && tcp.dst == {6641, 6642, 6643, 6644, 10666, 7471} && tcp.flags == 0x2/0x12) || (udp && udp.dst == {6081, 4789, 7471}))`
	if a := acls[0]; a.Direction != "to-lport" || a.Action != "drop" || a.Priority != underlayGuardPriority || a.Match != want {
		t.Errorf("%+v\nwant match %s", a, want)
	}
	// Above every NetworkPolicy and isolation ACL (Kube-OVN's go up to 3000).
	if underlayGuardPriority <= privateNodePriority {
		t.Errorf("guard priority %d is not above the isolation ACLs'", underlayGuardPriority)
	}
}

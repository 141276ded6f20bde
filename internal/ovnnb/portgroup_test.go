package ovnnb_test

import (
	"context"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnb/nbtest"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

func addPorts(t *testing.T, nb *ovnnb.Client, names ...string) {
	t.Helper()
	for i, n := range names {
		ip := netip.AddrFrom4([4]byte{10, 16, 1, byte(i + 2)})
		if err := nb.EnsurePort(context.Background(), ovnnb.Port{Name: n, Switch: "ovn-default", MAC: "0a:00:00:00:01:0" + string(rune('0'+i)),
			IPs: []netip.Addr{ip}, ExternalIDs: map[string]string{ovnnb.KeyPod: "default/" + n}}); err != nil {
			t.Fatal(err)
		}
	}
}

var policyIDs = map[string]string{"np": "default/web"}

func webPolicy(ports []string, acls []ovnnb.ACL, sets ...ovnnb.AddressSet) ovnnb.PortGroup {
	return ovnnb.PortGroup{Name: "np_web", ExternalIDs: policyIDs, Ports: ports, ACLs: acls, AddressSets: sets}
}

var (
	allowFromSet = ovnnb.ACL{Direction: "to-lport", Priority: 2001, Match: "outport == @np_web && ip4.src == $np_web_in", Action: "allow-related"}
	dropRest     = ovnnb.ACL{Direction: "to-lport", Priority: 2000, Match: "outport == @np_web && ip", Action: "drop", Log: true, Name: "np_web", Severity: "warning"}
	allowDNS     = ovnnb.ACL{Direction: "from-lport", Priority: 2001, Match: "inport == @np_web && udp.dst == 53", Action: "allow-related",
		Options: map[string]string{"apply-after-lb": "true"}}
)

type pgState struct {
	pg   *nbdb.PortGroup
	acls map[string]*nbdb.ACL // uuid -> row, of the port group
	sets map[string][]string  // address set -> addresses
}

func readPortGroup(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, name string) pgState {
	t.Helper()
	st := pgState{acls: map[string]*nbdb.ACL{}, sets: map[string][]string{}}
	for _, pg := range nbtest.Rows[*nbdb.PortGroup](t, s, nb, nbdb.PortGroupTable) {
		if pg.Name == name {
			st.pg = pg
		}
	}
	for _, a := range nbtest.Rows[*nbdb.ACL](t, s, nb, nbdb.ACLTable) {
		if st.pg != nil && slices.Contains(st.pg.ACLs, a.UUID) {
			st.acls[a.UUID] = a
		}
	}
	for _, as := range nbtest.Rows[*nbdb.AddressSet](t, s, nb, nbdb.AddressSetTable) {
		a := slices.Clone(as.Addresses)
		sort.Strings(a)
		st.sets[as.Name] = a
	}
	return st
}

func (st pgState) uuidOf(match string) string {
	for u, a := range st.acls {
		if a.Match == match {
			return u
		}
	}
	return ""
}

func portUUIDs(t *testing.T, s *nbtest.Server, nb *ovnnb.Client, names ...string) []string {
	var out []string
	for _, n := range names {
		out = append(out, portNamed(t, s, nb, n).UUID)
	}
	sort.Strings(out)
	return out
}

func TestPortGroupIsCreatedWithItsACLsAndAddressSets(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	addPorts(t, nb, "web-0", "web-1")
	missing, err := nb.EnsurePortGroup(context.Background(), webPolicy([]string{"web-0", "web-1", "web-2"}, []ovnnb.ACL{allowFromSet, dropRest},
		ovnnb.AddressSet{Name: "np_web_in", Addresses: []string{"10.16.1.9", "10.16.1.8", "10.16.1.9"}}))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(missing, []string{"web-2"}) {
		t.Fatalf("missing ports %v, want [web-2] (not in the NB)", missing)
	}
	st := readPortGroup(t, s, nb, "np_web")
	if st.pg == nil || st.pg.ExternalIDs["np"] != "default/web" || st.pg.ExternalIDs[ovnnb.KeyVendor] != ovnnb.Vendor {
		t.Fatalf("port group: %+v", st.pg)
	}
	ports := slices.Clone(st.pg.Ports)
	sort.Strings(ports)
	if want := portUUIDs(t, s, nb, "web-0", "web-1"); !slices.Equal(ports, want) {
		t.Fatalf("port group ports %v, want %v", ports, want)
	}
	if len(st.acls) != 2 {
		t.Fatalf("ACLs %d, want 2", len(st.acls))
	}
	d := st.acls[st.uuidOf(dropRest.Match)]
	if d == nil || d.Action != "drop" || !d.Log || d.Name == nil || *d.Name != "np_web" || d.Severity == nil || *d.Severity != "warning" || d.ExternalIDs["np"] != "default/web" {
		t.Fatalf("drop ACL: %+v", d)
	}
	if got := st.sets["np_web_in"]; !slices.Equal(got, []string{"10.16.1.8", "10.16.1.9"}) {
		t.Fatalf("address set np_web_in %v", got)
	}
}

func TestPortGroupUpdateWritesOnlyTheDifferences(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		topology(t, nb)
		addPorts(t, nb, "web-0", "web-1")
		ctx := context.Background()
		if _, err := nb.EnsurePortGroup(ctx, webPolicy([]string{"web-0", "web-1"}, []ovnnb.ACL{allowFromSet, dropRest},
			ovnnb.AddressSet{Name: "np_web_in", Addresses: []string{"10.16.1.8"}}, ovnnb.AddressSet{Name: "np_web_old", Addresses: []string{"10.16.1.7"}})); err != nil {
			t.Fatal(err)
		}
		before := readPortGroup(t, s, nb, "np_web")

		// web-1 leaves, the set changes, allowFromSet stays, dropRest is
		// replaced by allowDNS, np_web_old is no longer used.
		if _, err := nb.EnsurePortGroup(ctx, webPolicy([]string{"web-0"}, []ovnnb.ACL{allowDNS, allowFromSet},
			ovnnb.AddressSet{Name: "np_web_in", Addresses: []string{"10.16.1.9"}})); err != nil {
			t.Fatal(err)
		}
		after := readPortGroup(t, s, nb, "np_web")
		if after.pg.UUID != before.pg.UUID {
			t.Fatal("port group recreated")
		}
		if u := before.uuidOf(allowFromSet.Match); u == "" || after.uuidOf(allowFromSet.Match) != u {
			t.Fatalf("unchanged ACL rewritten: before %s after %s", u, after.uuidOf(allowFromSet.Match))
		}
		if after.uuidOf(dropRest.Match) != "" || after.uuidOf(allowDNS.Match) == "" || len(after.acls) != 2 {
			t.Fatalf("ACLs after update: %v", after.acls)
		}
		if dns := after.acls[after.uuidOf(allowDNS.Match)]; dns.Options["apply-after-lb"] != "true" {
			t.Fatalf("allowDNS options %v", dns.Options)
		}
		// The replaced ACL row is gone from the database, not only from the group.
		for _, a := range nbtest.Rows[*nbdb.ACL](t, s, nb, nbdb.ACLTable) {
			if a.Match == dropRest.Match {
				t.Fatalf("removed ACL row left behind: %+v", a)
			}
		}
		if want := portUUIDs(t, s, nb, "web-0"); !slices.Equal(after.pg.Ports, want) {
			t.Fatalf("ports %v, want %v", after.pg.Ports, want)
		}
		if got := after.sets["np_web_in"]; !slices.Equal(got, []string{"10.16.1.9"}) {
			t.Fatalf("np_web_in %v", got)
		}
		if _, ok := after.sets["np_web_old"]; ok {
			t.Fatal("address set no longer listed was not deleted")
		}

		// Same again: nothing to write.
		if _, err := nb.EnsurePortGroup(ctx, webPolicy([]string{"web-0"}, []ovnnb.ACL{allowFromSet, allowDNS},
			ovnnb.AddressSet{Name: "np_web_in", Addresses: []string{"10.16.1.9"}})); err != nil {
			t.Fatal(err)
		}
		again := readPortGroup(t, s, nb, "np_web")
		for u := range after.acls {
			if again.acls[u] == nil {
				t.Fatalf("ACL %s replaced by an identical sync", u)
			}
		}
	})
}

func TestPortGroupDuplicateACLRowsAreReducedToTheWantedOnes(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		topology(t, nb)
		ctx := context.Background()
		if _, err := nb.EnsurePortGroup(ctx, webPolicy(nil, []ovnnb.ACL{dropRest, dropRest, allowFromSet})); err != nil {
			t.Fatal(err)
		}
		if st := readPortGroup(t, s, nb, "np_web"); len(st.acls) != 3 {
			t.Fatalf("ACLs %d, want 3 (the duplicate asked for twice)", len(st.acls))
		}
		if _, err := nb.EnsurePortGroup(ctx, webPolicy(nil, []ovnnb.ACL{dropRest, allowFromSet})); err != nil {
			t.Fatal(err)
		}
		if st := readPortGroup(t, s, nb, "np_web"); len(st.acls) != 2 {
			t.Fatalf("ACLs %d, want 2", len(st.acls))
		}
	})
}

func TestDeletePortGroupsKeepsWhatKeepSays(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	ctx := context.Background()
	for _, name := range []string{"a", "b"} {
		if _, err := nb.EnsurePortGroup(ctx, ovnnb.PortGroup{Name: "np_" + name, ExternalIDs: map[string]string{"np": "default/" + name},
			ACLs: []ovnnb.ACL{dropRest}, AddressSets: []ovnnb.AddressSet{{Name: "np_" + name + "_in", Addresses: []string{"10.0.0.1"}}}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := nb.DeletePortGroups(ctx, map[string]string{}, func(ids map[string]string) bool { return ids["np"] == "default/a" }); err != nil {
		t.Fatal(err)
	}
	if readPortGroup(t, s, nb, "np_a").pg == nil {
		t.Fatal("kept port group deleted")
	}
	st := readPortGroup(t, s, nb, "np_b")
	if st.pg != nil {
		t.Fatal("port group np_b not deleted")
	}
	if _, ok := st.sets["np_b_in"]; ok {
		t.Fatal("address set np_b_in not deleted")
	}
	if n := len(nbtest.Rows[*nbdb.ACL](t, s, nb, nbdb.ACLTable)); n != 1 {
		t.Fatalf("%d ACL rows, want np_a's one", n)
	}
	// By owner (the client index on external_ids:np): np_a, its set and
	// its ACL go.
	if sets, err := nb.AddressSets(ctx, map[string]string{ovnnb.KeyPolicy: "default/a"}); err != nil || len(sets) != 1 || sets[0].Name != "np_a_in" {
		t.Fatalf("np_a's address sets by owner: %v %v", sets, err)
	}
	if err := nb.DeletePortGroups(ctx, map[string]string{ovnnb.KeyPolicy: "default/a"}, nil); err != nil {
		t.Fatal(err)
	}
	if st := readPortGroup(t, s, nb, "np_a"); st.pg != nil || len(st.sets) != 0 {
		t.Fatalf("np_a after its deletion by owner: %+v", st)
	}
	if n := len(nbtest.Rows[*nbdb.ACL](t, s, nb, nbdb.ACLTable)); n != 0 {
		t.Fatalf("%d ACL rows left", n)
	}
}

func TestSwitchACLsLeaveOtherOwnersAlone(t *testing.T) {
	bothServers(t, func(t *testing.T, s *nbtest.Server, nb *ovnnb.Client) {
		topology(t, nb)
		ctx := context.Background()
		mine := map[string]string{"subnet": "ovn-default"}
		theirs := map[string]string{"subnet": "someone-else"}
		other := ovnnb.ACL{Direction: "to-lport", Priority: 3000, Match: "ip4.src == 1.2.3.4", Action: "drop"}
		if err := nb.EnsureSwitchACLs(ctx, "ovn-default", theirs, []ovnnb.ACL{other}); err != nil {
			t.Fatal(err)
		}
		if err := nb.EnsureSwitchACLs(ctx, "ovn-default", mine, []ovnnb.ACL{dropRest, allowFromSet}); err != nil {
			t.Fatal(err)
		}
		if err := nb.EnsureSwitchACLs(ctx, "ovn-default", mine, []ovnnb.ACL{allowFromSet}); err != nil {
			t.Fatal(err)
		}
		got, err := nb.SwitchACLs(ctx, "ovn-default", mine)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].Match != allowFromSet.Match {
			t.Fatalf("my ACLs %+v, want allowFromSet only", got)
		}
		ls := switchNamed(t, s, nb, "ovn-default")
		if len(ls.ACLs) != 2 {
			t.Fatalf("switch has %d ACLs, want mine and the other owner's", len(ls.ACLs))
		}
		theirsNow, _ := nb.SwitchACLs(ctx, "ovn-default", theirs)
		if len(theirsNow) != 1 || theirsNow[0].Match != other.Match {
			t.Fatalf("other owner's ACLs %+v", theirsNow)
		}
	})
}

// Two tenants' policies whose names map to one port group name: the second
// is refused, naming the owner, and the first keeps its ports and ACLs.
// (PolicyPortGroup's 128-bit hash makes such names unfindable; this is
// the guard behind it.)
func TestPortGroupOfAnotherOwnerIsNotTakenOver(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	addPorts(t, nb, "web-0", "spy-0")
	ctx := context.Background()
	if _, err := nb.EnsurePortGroup(ctx, webPolicy([]string{"web-0"}, []ovnnb.ACL{dropRest})); err != nil {
		t.Fatal(err)
	}
	spy := ovnnb.PortGroup{Name: "np_web", ExternalIDs: map[string]string{"np": "tenant/b-web"}, Ports: []string{"spy-0"},
		ACLs: []ovnnb.ACL{{Direction: "to-lport", Priority: 2001, Match: "outport == @np_web && ip", Action: "allow-related"}}}
	_, err := nb.EnsurePortGroup(ctx, spy)
	if err == nil || !strings.Contains(err.Error(), "np=default/web") || !strings.Contains(err.Error(), "collision") {
		t.Fatalf("EnsurePortGroup of another owner's name: %v; want a collision error naming np=default/web", err)
	}
	st := readPortGroup(t, s, nb, "np_web")
	if st.pg == nil || st.pg.ExternalIDs["np"] != "default/web" || !slices.Equal(st.pg.Ports, portUUIDs(t, s, nb, "web-0")) {
		t.Fatalf("the owner's port group changed: %+v", st.pg)
	}
	if len(st.acls) != 1 || st.uuidOf(dropRest.Match) == "" {
		t.Fatalf("the owner's ACLs changed: %+v", st.acls)
	}
}

// A policy's port group under an older name (the naming changed across an
// upgrade) goes when the policy is ensured under its new name: its ACLs
// would otherwise still apply.
func TestPortGroupUnderAnOldNameIsReplaced(t *testing.T) {
	s, nb := nbtest.Client(t)
	topology(t, nb)
	addPorts(t, nb, "web-0")
	ctx := context.Background()
	old := webPolicy([]string{"web-0"}, []ovnnb.ACL{dropRest})
	old.Name = "np_web_old"
	if _, err := nb.EnsurePortGroup(ctx, old); err != nil {
		t.Fatal(err)
	}
	if _, err := nb.EnsurePortGroup(ctx, webPolicy([]string{"web-0"}, []ovnnb.ACL{dropRest})); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, pg := range nbtest.Rows[*nbdb.PortGroup](t, s, nb, nbdb.PortGroupTable) {
		names = append(names, pg.Name)
	}
	if !slices.Equal(names, []string{"np_web"}) {
		t.Fatalf("port groups %v, want only np_web", names)
	}
	if n := len(nbtest.Rows[*nbdb.ACL](t, s, nb, nbdb.ACLTable)); n != 1 {
		t.Fatalf("%d ACLs, want the new port group's 1", n)
	}
}

// Names tenants choose alike ("a-b"/"c" and "a"/"b-c") stay apart, by a
// hash no one can search: 128 bits.
func TestPolicyPortGroupNamesOfLookalikePoliciesDiffer(t *testing.T) {
	a, b := ovnnb.PolicyPortGroup("tenant-b", "allow-web"), ovnnb.PolicyPortGroup("tenant", "b-allow-web")
	if a == b {
		t.Fatalf("both policies are port group %s", a)
	}
	if h := a[strings.LastIndexByte(a, '_')+1:]; len(h) != 2*ovnnb.PolicyHashBytes || ovnnb.PolicyHashBytes < 16 {
		t.Fatalf("port group %s carries a %d-character hash; want %d hex characters of at least 128 bits", a, len(h), 2*ovnnb.PolicyHashBytes)
	}
}

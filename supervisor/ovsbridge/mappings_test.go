package ovsbridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovsconf"
	"github.com/ovnhost/ovnhost/internal/ovsconf/ovsconftest"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

func TestWithMapping(t *testing.T) {
	for _, c := range []struct {
		in              []string
		network, bridge string
		want            string
	}{
		{nil, "p1", "br-p1", "p1:br-p1"},
		{[]string{"physnet0:br-eth0"}, "p1", "br-p1", "physnet0:br-eth0,p1:br-p1"},
		{[]string{"p1:br-old", "physnet0:br-eth0"}, "p1", "br-p1", "p1:br-p1,physnet0:br-eth0"}, // in its place
		{[]string{"a:br-a", "p1:br-p1", "b:br-b"}, "p1", "", "a:br-a,b:br-b"},
		{[]string{"p1:x", "a:br-a", "p1:y"}, "p1", "br-p1", "p1:br-p1,a:br-a"}, // duplicates go
		{[]string{"junk", "p10:br-p10"}, "p1", "", "junk,p10:br-p10"},          // a prefix is not the network
	} {
		if got := strings.Join(withMapping(c.in, c.network, c.bridge), ","); got != c.want {
			t.Errorf("%q with %s:%s = %q, want %q", c.in, c.network, c.bridge, got, c.want)
		}
	}
}

// Four features ensuring their bridge and mapping at once, from one
// connection and so from one cache that lags the server (br-egw,
// br-external and two underlay providers), beside a mapping written
// outside ovnhost: all five end present. Each round starts from a fresh
// conf.db, all writers released together. (With the guard taken out of
// setEntryFrom, as egress's earlier write had none, round 0 already
// loses mappings.)
func TestConcurrentMappingsAllKept(t *testing.T) {
	ctx := context.Background()
	bridges := map[string]Spec{
		"egw":      {Name: "br-egw", HWAddr: "0a:00:00:00:00:01"},
		"external": {Name: "br-external", Uplink: "eth1", UplinkMark: "ovnhost-external-nic"},
		"p1":       {Name: "br-p1", Uplink: "eth2", UplinkMark: "ovnhost-provider-nic"},
		"p2":       {Name: "br-p2", Uplink: "eth3", UplinkMark: "ovnhost-provider-nic"},
	}
	for round := range 20 {
		ovs := ovsconftest.ConfDB(t, map[string]string{ovsconf.BridgeMappings: "physnet0:br-eth0", "system-id": "n1"})
		start := make(chan struct{})
		errs := make(chan error, len(bridges))
		var wg sync.WaitGroup
		for network, s := range bridges {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				s.Datapath = nodeconfig.Kernel
				if err := Ensure(ctx, ovs, s); err != nil {
					errs <- err
					return
				}
				errs <- SetMapping(ctx, ovs, network, s.Name)
			}()
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		got := mappingsOf(t, ovs) // SetMapping returned once the cache had its write
		if len(got) != 5 || got[0] != "physnet0:br-eth0" {
			t.Fatalf("round %d: mappings %q, want physnet0:br-eth0 first and the four networks", round, got)
		}
		for network, s := range bridges {
			if !slices.Contains(got, network+":"+s.Name) {
				t.Fatalf("round %d: %s:%s lost: %q", round, network, s.Name, got)
			}
			if !Exists(ctx, ovs, s.Name) {
				t.Fatalf("round %d: %s missing", round, s.Name)
			}
		}
		if round == 0 {
			// One mapping dropped: the others, and their order, stay.
			if err := SetMapping(ctx, ovs, "p1", ""); err != nil {
				t.Fatal(err)
			}
			want := slices.DeleteFunc(slices.Clone(got), func(m string) bool { return m == "p1:br-p1" })
			if got := mappingsOf(t, ovs); !slices.Equal(got, want) {
				t.Fatalf("after dropping p1: %q, want %q", got, want)
			}
			m, err := Mappings(ctx, ovs)
			if err != nil || len(m) != 4 || m["physnet0"] != "br-eth0" || m["p2"] != "br-p2" || m["p1"] != "" {
				t.Fatalf("Mappings: %v %v", m, err)
			}
		}
	}
}

// The guard: a write computed from external_ids that changed since is
// refused by the server (the in-memory one honours OVSDB's wait too), and
// leaves the other writer's value; SetMapping then starts over from it.
// libovsdb's in-memory server skips a wait's comparison when the expected
// value is the column's default, so a guard computed from empty
// external_ids passes there (ovsdb-server compares): these tests start
// from non-empty ones, as a node's always are (system-id, ovn-remote).
func TestMappingWriteGuarded(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, map[string]string{ovsconf.BridgeMappings: "physnet0:br-eth0"})
	stale := root(t, ovs)
	if err := SetMapping(ctx, ovs, "egw", "br-egw"); err != nil {
		t.Fatal(err)
	}
	wrote, err := setEntryFrom(ctx, ovs, stale, ovsconf.BridgeMappings, "p1", "br-p1")
	var tx *ovsdbconn.TxError
	if wrote || !errors.As(err, &tx) || !tx.TimedOut() {
		t.Fatalf("a write from a stale external_ids: %v, want the guard's wait to time out", err)
	}
	if got := strings.Join(mappingsOf(t, ovs), ","); got != "physnet0:br-eth0,egw:br-egw" {
		t.Fatalf("after the refused write: %q", got)
	}
	if err := SetMapping(ctx, ovs, "p1", "br-p1"); err != nil {
		t.Fatal(err)
	}
	// Read without waiting: SetMapping returns once the cache has its write.
	if got := strings.Join(mappingsOf(t, ovs), ","); got != "physnet0:br-eth0,egw:br-egw,p1:br-p1" {
		t.Fatalf("after SetMapping: %q", got)
	}
}

// Names that would corrupt the shared key are refused, naming them.
func TestMappingNamesChecked(t *testing.T) {
	ctx := context.Background()
	ovs := ovsconftest.ConfDB(t, nil)
	for _, c := range [][2]string{{"", "br-x"}, {"a:b", "br-x"}, {"a,b", "br-x"}, {"a", "br:x"}, {"a", "br x"}} {
		err := SetMapping(ctx, ovs, c[0], c[1])
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("%q", c[0])) && !strings.Contains(err.Error(), fmt.Sprintf("%q", c[1])) {
			t.Errorf("%q:%q: %v", c[0], c[1], err)
		}
	}
	if err := SetMapping(ctx, nil, "a", "br-a"); err == nil {
		t.Error("SetMapping without conf.db succeeded")
	}
}

func mappingsOf(t *testing.T, ovs *ovsdbconn.Conn) []string {
	t.Helper()
	return ovsconf.SplitMappings(root(t, ovs).ExternalIDs[ovsconf.BridgeMappings])
}

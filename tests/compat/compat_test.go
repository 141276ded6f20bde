// Package compat runs ovnhost's real OVSDB clients against the schemas of
// every supported OVS/OVN release: each database is created with
// `ovsdb-tool create` from that release's schema file (Debian bullseye,
// bookworm, trixie: tests/harness/debschema) and served by the installed
// (bookworm) ovsdb-server. The controller's NB writes, the node's conf.db
// and SB use, and doctor's reads must work on each.
package compat_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/hostcheck"
	"github.com/ovnhost/ovnhost/internal/nodeconfig"
	"github.com/ovnhost/ovnhost/internal/ovnnb"
	"github.com/ovnhost/ovnhost/internal/ovnnet"
	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
	"github.com/ovnhost/ovnhost/tests/harness/debschema"
	"github.com/ovnhost/ovnhost/tests/harness/ovncentral"
	"github.com/ovnhost/ovnhost/tests/testenv"
)

func requireDaemons(t *testing.T) {
	t.Helper()
	if testing.Short() && !testenv.Strict() { // make test-unit only; make test never passes -short
		t.Skip("real daemons are not started under -short")
	}
	testenv.RequireCommands(t, "ovsdb-server", "ovsdb-tool")
}

// schemaVersions are the versions each release's files must carry: a
// Debian update that changes one changes the supported-range table in the
// README and ovsdbconn's release names too.
var schemaVersions = map[string][3]string{ // vswitch, NB, SB
	"bullseye": {"8.2.0", "", ""},
	"bookworm": {"8.3.1", "7.0.0", "20.27.0"},
	"trixie":   {"8.8.0", "7.11.0", "20.41.0"},
}

func TestSchemaFilesAndModels(t *testing.T) {
	requireDaemons(t)
	models := map[string]func() (model.ClientDBModel, error){
		"Open_vSwitch": vswitch.FullDatabaseModel, "OVN_Northbound": nbdb.FullDatabaseModel, "OVN_Southbound": sbdb.FullDatabaseModel,
	}
	for _, r := range debschema.All(t) {
		want := schemaVersions[r.Suite]
		for i, path := range []string{r.VSwitch, r.NB, r.SB} {
			if path == "" {
				continue
			}
			s := readSchema(t, path)
			if s.Version != want[i] {
				t.Errorf("%s: %s has schema version %s, want %s", r.Name(), path, s.Version, want[i])
			}
			// The generated models are the floor of the supported range:
			// every release's schema has every table and column of them.
			m, err := models[s.Name]()
			if err != nil {
				t.Fatal(err)
			}
			if gaps := ovsdbconn.Compare(m, s); len(gaps) > 0 {
				t.Errorf("%s: the %s model does not fit schema %s: %v", r.Name(), s.Name, s.Version, gaps)
			}
			if rel := ovsdbconn.ReleaseOf(s.Name, s.Version); !strings.Contains(rel, r.OVS) && !strings.Contains(rel, r.OVN) {
				t.Errorf("%s: ReleaseOf(%s, %s) = %q", r.Name(), s.Name, s.Version, rel)
			}
		}
	}
}

func readSchema(t *testing.T, path string) ovsdb.DatabaseSchema {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var s ovsdb.DatabaseSchema
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return s
}

// ovnReleases are the releases that carry OVN.
func ovnReleases(t *testing.T) []debschema.Release {
	var out []debschema.Release
	for _, r := range debschema.All(t) {
		if r.NB != "" {
			out = append(out, r)
		}
	}
	return out
}

// TestControllerNB: the controller's NB writes on each OVN release's NB:
// default topology, a node, a pod, a Service load balancer, a NetworkPolicy
// port group with its ACLs. Each result is read back by a client of its
// own, then a column of the newer schema is written by "another client"
// (as Kube-OVN's controller writes ACL.tier on 25.03) together with one the
// model knows: the controller's cache must still follow the known one.
func TestControllerNB(t *testing.T) {
	requireDaemons(t)
	testenv.RequireCommands(t, "ovn-northd")
	for _, r := range ovnReleases(t) {
		t.Run(r.Suite, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			c := ovncentral.StartSchemas(t, r.NB, r.SB)
			nb, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: c.NB(), PortGroups: true})
			if err != nil {
				t.Fatalf("%s: controller cannot connect: %v", r.Name(), err)
			}
			defer nb.Close()
			n := ovnnet.New(nb, ovnnet.Config{})
			if err := n.EnsureDefaultTopology(ctx, "", ""); err != nil {
				t.Fatalf("EnsureDefaultTopology: %v", err)
			}
			if _, err := n.AddNode(ctx, ovnnet.NodeRequest{Name: "n1", InternalIPs: []netip.Addr{netip.MustParseAddr("192.168.0.10")}}); err != nil {
				t.Fatalf("AddNode: %v", err)
			}
			alloc, err := n.AddPod(ctx, ovnnet.PodRequest{Namespace: "default", Name: "p1", Node: "n1"})
			if err != nil {
				t.Fatalf("AddPod: %v", err)
			}
			group, err := nb.EnsureLBGroup(ctx, "cluster-lbs")
			if err != nil {
				t.Fatalf("EnsureLBGroup: %v", err)
			}
			if err := nb.AttachLBGroup(ctx, "cluster-lbs", group, ovnnet.DefaultRouter); err != nil {
				t.Fatalf("AttachLBGroup: %v", err)
			}
			lb := ovnnb.LoadBalancer{Name: "svc.default.tcp", Protocol: "tcp", VIPs: map[string]string{"10.96.0.10:80": alloc.IPs[0].String() + ":8080"}}
			if err := nb.SetLoadBalancers(ctx, "cluster-lbs", []string{lb.Name}, []ovnnb.LoadBalancer{lb}); err != nil {
				t.Fatalf("SetLoadBalancers: %v", err)
			}
			pg := ovnnb.PortGroup{Name: "np.default.deny", Ports: []string{ovnnet.PortName("default", "p1")},
				ACLs: []ovnnb.ACL{{Direction: "to-lport", Priority: 2000, Match: "outport == @np.default.deny && ip", Action: "drop"}}}
			if missing, err := nb.EnsurePortGroup(ctx, pg); err != nil || len(missing) > 0 {
				t.Fatalf("EnsurePortGroup: missing %v, err %v", missing, err)
			}
			if err := c.WaitNorthd(ctx); err != nil {
				t.Fatalf("northd did not process the NB: %v", err)
			}

			// Read back with a client of its own (raw selects).
			raw := probe(t, ctx, "OVN_Northbound", c.NB())
			expectRow(t, ctx, raw, "Logical_Router", "name", ovnnet.DefaultRouter)
			expectRow(t, ctx, raw, "Logical_Switch", "name", ovnnet.DefaultSubnet)
			expectRow(t, ctx, raw, "Logical_Switch", "name", ovnnet.JoinSubnet)
			expectRow(t, ctx, raw, "Logical_Switch_Port", "name", "p1.default")
			expectRow(t, ctx, raw, "Logical_Switch_Port", "name", "node-n1")
			expectRow(t, ctx, raw, "Load_Balancer", "name", lb.Name)
			expectRow(t, ctx, raw, "Port_Group", "name", "np.default.deny")
			acls := selectRows(t, ctx, raw, "ACL", ovsdb.NewCondition("priority", ovsdb.ConditionEqual, 2000))
			if len(acls) != 1 || acls[0]["action"] != "drop" {
				t.Fatalf("ACL rows %v, want one drop at 2000", acls)
			}

			// Another writer sets a column this schema has and the model
			// may not (25.03: ACL.tier) with one the model knows.
			newer := newerACLColumns(readSchema(t, r.NB))
			row := ovsdb.Row{"external_ids": mapOf(t, map[string]string{"written-by": "other"})}
			for _, col := range newer {
				if col == "tier" {
					row["tier"] = 1
				}
			}
			ops := []ovsdb.Operation{{Op: ovsdb.OperationUpdate, Table: "ACL", Where: []ovsdb.Condition{ovsdb.NewCondition("priority", ovsdb.ConditionEqual, 2000)}, Row: row}}
			if _, err := ovsdbconn.Transact(ctx, raw, "other writer updates the ACL", ops...); err != nil {
				t.Fatal(err)
			}
			waitCache(t, ctx, nb.Raw(), "the controller's cache shows external_ids:written-by on the ACL", func() bool {
				var got []nbdb.ACL
				_ = nb.Raw().List(ctx, &got)
				return len(got) == 1 && got[0].ExternalIDs["written-by"] == "other"
			})
			t.Logf("%s: NB schema %s; extra ACL columns beyond the model written: %v", r.Name(), readSchema(t, r.NB).Version, newer)
		})
	}
}

// newerACLColumns are ACL columns of schema s that the model lacks.
func newerACLColumns(s ovsdb.DatabaseSchema) []string {
	known := map[string]bool{}
	info := s.Table("ACL")
	m, _ := nbdb.FullDatabaseModel()
	typ := m.Types()["ACL"].Elem()
	for i := 0; i < typ.NumField(); i++ {
		known[typ.Field(i).Tag.Get("ovsdb")] = true
	}
	var out []string
	for c := range info.Columns {
		if !known[c] {
			out = append(out, c)
		}
	}
	return out
}

// TestOlderNBRefusedByName: an NB older than the model's floor is refused
// at once, naming what it lacks and the release needed. No Debian suite
// carries an OVN older than 23.03, so the older schema is derived from
// bookworm's by removing what OVN 21.09 added (Load_Balancer_Group and the
// load_balancer_group columns): the shape of an OVN 21.06 NB.
func TestOlderNBRefusedByName(t *testing.T) {
	requireDaemons(t)
	r := debschema.Bookworm(t)
	s := readSchemaMap(t, r.NB)
	tables := s["tables"].(map[string]any)
	delete(tables, "Load_Balancer_Group")
	for _, tn := range []string{"Logical_Switch", "Logical_Router"} {
		delete(tables[tn].(map[string]any)["columns"].(map[string]any), "load_balancer_group")
	}
	s["version"] = "5.32.1"
	delete(s, "cksum")
	ep := serve(t, "nb-old", writeSchema(t, s))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := ovnnb.Connect(ctx, ovnnb.Options{Endpoints: ep})
	var se *ovsdbconn.SchemaError
	if !errors.As(err, &se) {
		t.Fatalf("connect to an older NB: got %v, want a SchemaError", err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the refusal took %v: a schema that does not fit is not worth retrying", took)
	}
	for _, want := range []string{"column Logical_Switch.load_balancer_group", "table Load_Balancer_Group", "5.32.1", "older than OVN 23.03", "OVN 23.03 (schema 7.0.0) or newer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}

	// A client for which that table is optional still connects; the
	// feature says it is off and what it needs.
	full, _ := nbdb.FullDatabaseModel()
	sub, err := ovsdbconn.Subset(full, &nbdb.NBGlobal{}, &nbdb.LoadBalancer{}, &nbdb.LoadBalancerGroup{})
	if err != nil {
		t.Fatal(err)
	}
	feat := ovsdbconn.Feature{Table: &nbdb.LoadBalancerGroup{}, Name: "Services in one load balancer group", Since: "OVN 21.09"}
	conn, err := ovsdbconn.Dial(ctx, sub, ep, ovsdbconn.Options{Optional: []ovsdbconn.Feature{feat}})
	if err != nil {
		t.Fatalf("dial with Load_Balancer_Group optional: %v", err)
	}
	defer conn.Close()
	uerr := conn.Unavailable(&nbdb.LoadBalancerGroup{})
	if uerr == nil || !strings.Contains(uerr.Error(), "needs OVN 21.09 or newer") || !strings.Contains(uerr.Error(), "5.32.1") {
		t.Fatalf("Unavailable = %v, want the feature named with OVN 21.09 and the server's schema", uerr)
	}
	if conn.Unavailable(&nbdb.LoadBalancer{}) != nil {
		t.Fatal("Load_Balancer reported unavailable")
	}
	var lbs []nbdb.LoadBalancer
	if err := conn.List(ctx, &lbs); err != nil {
		t.Fatalf("the rest of the model works: %v", err)
	}
}

// TestSBChassis: the node's and doctor's SB reads (SB_Global, Chassis,
// Encap) on each OVN release's SB, with a chassis written the way
// ovn-controller writes it.
func TestSBChassis(t *testing.T) {
	requireDaemons(t)
	for _, r := range ovnReleases(t) {
		t.Run(r.Suite, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ep := serve(t, "sb", r.SB)
			raw := probe(t, ctx, "OVN_Southbound", ep)
			ops := []ovsdb.Operation{
				{Op: ovsdb.OperationInsert, Table: "Encap", UUIDName: "e", Row: ovsdb.Row{"type": "geneve", "ip": "192.168.0.10", "chassis_name": "chassis-1"}},
				{Op: ovsdb.OperationInsert, Table: "Chassis", Row: ovsdb.Row{"name": "chassis-1", "hostname": "n1",
					"encaps": ovsdb.OvsSet{GoSet: []any{ovsdb.UUID{GoUUID: "e"}}}}},
				{Op: ovsdb.OperationInsert, Table: "SB_Global", Row: ovsdb.Row{"options": mapOf(t, map[string]string{"northd_internal_version": "25.03.0-20.41.0-78.0"})}},
			}
			if _, err := ovsdbconn.Transact(ctx, raw, "ovn-controller registers its chassis", ops...); err != nil {
				t.Fatal(err)
			}
			full, _ := sbdb.FullDatabaseModel()
			m, err := ovsdbconn.Subset(full, &sbdb.SBGlobal{}, &sbdb.Chassis{}, &sbdb.ChassisPrivate{}, &sbdb.Encap{})
			if err != nil {
				t.Fatal(err)
			}
			conn, err := ovsdbconn.Dial(ctx, m, ep, ovsdbconn.Options{Tables: []model.Model{&sbdb.SBGlobal{}, &sbdb.Chassis{}, &sbdb.ChassisPrivate{}, &sbdb.Encap{}}})
			if err != nil {
				t.Fatalf("%s: node SB client: %v", r.Name(), err)
			}
			defer conn.Close()
			var ch []sbdb.Chassis
			var enc []sbdb.Encap
			var g []sbdb.SBGlobal
			if err := conn.List(ctx, &ch); err != nil || len(ch) != 1 || ch[0].Name != "chassis-1" || len(ch[0].Encaps) != 1 {
				t.Fatalf("Chassis rows %+v (%v)", ch, err)
			}
			if err := conn.List(ctx, &enc); err != nil || len(enc) != 1 || enc[0].IP != "192.168.0.10" {
				t.Fatalf("Encap rows %+v (%v)", enc, err)
			}
			if err := conn.List(ctx, &g); err != nil || len(g) != 1 || g[0].Options["northd_internal_version"] == "" {
				t.Fatalf("SB_Global rows %+v (%v)", g, err)
			}
			if v, rel := conn.ServerSchema(); v != schemaVersions[r.Suite][2] || !strings.Contains(rel, r.OVN) {
				t.Errorf("ServerSchema = %s %s", v, rel)
			}
			// doctor's skew check reads the same row: a 25.03 central
			// (Kube-OVN 1.15) against the bundle's 23.03 ovn-controller.
			northd, err := hostcheck.NewDoctorHost(nodeconfig.HostSettings{}).NorthdVersion(ctx, ep)
			if err != nil || northd != "25.03.0-20.41.0-78.0" {
				t.Fatalf("doctor NorthdVersion = %q, %v", northd, err)
			}
			if c := hostcheck.CheckVersionSkew(northd, "23.03.1", false); c.Status != "fail" || !strings.Contains(c.Fix, "25.03") {
				t.Errorf("skew check: %+v", c)
			}
		})
	}
}

// serve creates a database from schema and serves it on a unix socket
// with the installed ovsdb-server; t.Cleanup stops it.
func serve(t *testing.T, name, schema string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovnc-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db, sock := filepath.Join(dir, name+".db"), filepath.Join(dir, "db.sock")
	tool, _ := testenv.LookPath("ovsdb-tool")
	server, _ := testenv.LookPath("ovsdb-server")
	if out, err := exec.Command(tool, "create", db, schema).CombinedOutput(); err != nil {
		t.Fatalf("ovsdb-tool create %s %s: %v: %s", db, schema, err, out)
	}
	cmd := exec.Command(server, db, "--remote=punix:"+sock, "--unixctl="+filepath.Join(dir, "ctl"), "--no-chdir",
		"--log-file="+filepath.Join(dir, "log"), "-vconsole:off", "-vfile:info")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	ep := "unix:" + sock
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	empty, _ := model.NewClientDBModel(readSchema(t, schema).Name, map[string]model.Model{})
	c, err := ovsdbconn.Dial(ctx, empty, ep, ovsdbconn.Options{Probe: true, Exited: done, Name: "ovsdb-server " + name})
	if err != nil {
		b, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("%v\n%s", err, b)
	}
	c.Close()
	return ep
}

// probe is a client with no tables: raw transactions only.
func probe(t *testing.T, ctx context.Context, db, ep string) client.Client {
	t.Helper()
	empty, _ := model.NewClientDBModel(db, map[string]model.Model{})
	c, err := ovsdbconn.Dial(ctx, empty, ep, ovsdbconn.Options{Probe: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Client
}

func selectRows(t *testing.T, ctx context.Context, c client.Client, table string, where ...ovsdb.Condition) []ovsdb.Row {
	t.Helper()
	if where == nil {
		where = []ovsdb.Condition{}
	}
	res, err := ovsdbconn.Transact(ctx, c, "select from "+table, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: where})
	if err != nil {
		t.Fatal(err)
	}
	return res[0].Rows
}

func expectRow(t *testing.T, ctx context.Context, c client.Client, table, col string, val any) {
	t.Helper()
	if rows := selectRows(t, ctx, c, table, ovsdb.NewCondition(col, ovsdb.ConditionEqual, val)); len(rows) != 1 {
		t.Errorf("%s with %s=%v: %d rows, want 1", table, col, val, len(rows))
	}
}

func mapOf(t *testing.T, m map[string]string) ovsdb.OvsMap {
	t.Helper()
	om, err := ovsdb.NewOvsMap(m)
	if err != nil {
		t.Fatal(err)
	}
	return om
}

// waitCache re-checks cond on every change of c's cache until ctx ends.
func waitCache(t *testing.T, ctx context.Context, c client.Client, what string, cond func() bool) {
	t.Helper()
	ch := make(chan struct{}, 1)
	poke := func() {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	c.Cache().AddEventHandler(&cacheEvents{poke: poke})
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

type cacheEvents struct{ poke func() }

func (e *cacheEvents) OnAdd(string, model.Model)                 { e.poke() }
func (e *cacheEvents) OnUpdate(string, model.Model, model.Model) { e.poke() }
func (e *cacheEvents) OnDelete(string, model.Model)              { e.poke() }

func readSchemaMap(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeSchema(t *testing.T, m map[string]any) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), fmt.Sprintf("derived-%s.ovsschema", m["version"]))
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

package ovsdbconn

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/model"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/sbdb"
	"github.com/ovnhost/ovnhost/internal/ovsdb/vswitch"
)

// Schema compatibility. libovsdb refuses, at Connect, a server whose schema
// lacks a table of the client model or a column of one of its structs, or
// whose column has another Go type (model.ClientDBModel.validate, through
// mapper.NewInfo). A server with more tables and columns is accepted, but a
// monitor without a column list asks for every column the server has, and
// an update that changes a column the struct lacks fails in the cache
// ("column ... not found"), leaving that row stale. So:
//
//   - monitors name the model's columns (Dial does it for every table), so a
//     newer server's extra columns never reach the cache;
//   - a model should hold only the tables a client uses (Subset): libovsdb
//     checks every table of the model, monitored or not;
//   - a table a feature needs but an older server may lack is Optional: Dial
//     drops it from the model and the feature reports itself unavailable,
//     naming the first release that has it;
//   - anything else a server lacks is a *SchemaError that names the missing
//     tables and columns, the server's release and the one ovnhost needs.

// Feature is an optional table: what uses it and the first release whose
// schema has it.
type Feature struct {
	Table model.Model
	Name  string // "Services as one load balancer group"
	Since string // "OVN 21.09"
}

// SchemaError is a server schema that lacks what ovnhost's model needs.
type SchemaError struct {
	DB        string   // "Open_vSwitch"
	Server    string   // the server's schema version
	Model     string   // the schema version the model was generated from ("" if unknown)
	Missing   []string // "table Foo", "column Bar.baz", "column Bar.qux has type ... on the server"
	Remote    string
	missingTs []string
}

func (e *SchemaError) Error() string {
	need := "a newer release"
	if e.Model != "" {
		need = ReleaseOf(e.DB, e.Model) + " (schema " + e.Model + ") or newer"
	}
	return fmt.Sprintf("%s at %s has schema %s (%s), which lacks what ovnhost uses: %s; ovnhost needs %s: upgrade the server's OVS/OVN (or run an ovnhost built with models from the older schema)",
		e.DB, e.Remote, e.Server, ReleaseOf(e.DB, e.Server), strings.Join(e.Missing, ", "), need)
}

// Unavailable is the error of a feature whose table the server lacks.
type Unavailable struct {
	Feature Feature
	Table   string
	DB      string
	Server  string
}

func (e *Unavailable) Error() string {
	return fmt.Sprintf("%s is not available: it needs %s or newer (table %s); this %s server has schema %s (%s)",
		e.Feature.Name, e.Feature.Since, e.Table, e.DB, e.Server, ReleaseOf(e.DB, e.Server))
}

// release is a schema version and the release that ships it.
type release struct{ schema, name string }

// releases are the schemas ovnhost is tested against (tests/compat): the
// schema files of Debian bullseye, bookworm and trixie.
var releases = map[string][]release{
	"Open_vSwitch":      {{"8.2.0", "OVS 2.15"}, {"8.3.1", "OVS 3.1"}, {"8.8.0", "OVS 3.5"}},
	"OVN_Northbound":    {{"7.0.0", "OVN 23.03"}, {"7.11.0", "OVN 25.03"}},
	"OVN_Southbound":    {{"20.27.0", "OVN 23.03"}, {"20.41.0", "OVN 25.03"}},
	"_Server":           {},
	"OVN_IC_Southbound": {},
}

// ReleaseOf names the release of a schema version: "OVS 2.15" for a known
// one, else where it falls among the known ones ("between OVS 2.15 and OVS
// 3.1", "newer than OVS 3.5", "older than OVN 23.03").
func ReleaseOf(db, version string) string {
	rs := releases[db]
	if len(rs) == 0 {
		return db + " " + version
	}
	for _, r := range rs {
		if CompareVersions(r.schema, version) == 0 {
			return r.name
		}
	}
	if CompareVersions(version, rs[0].schema) < 0 {
		return "older than " + rs[0].name
	}
	for i := 1; i < len(rs); i++ {
		if CompareVersions(version, rs[i].schema) < 0 {
			return "between " + rs[i-1].name + " and " + rs[i].name
		}
	}
	return "newer than " + rs[len(rs)-1].name
}

// CompareVersions compares dotted schema versions numerically.
func CompareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Subset is the client model with only the given tables (and their client
// indexes): libovsdb validates every table of a model against the server,
// so a client that reads three tables should not need the other forty.
func Subset(full model.ClientDBModel, tables ...model.Model) (model.ClientDBModel, error) {
	keep := map[string]model.Model{}
	for _, m := range tables {
		name := tableOf(full, m)
		if name == "" {
			return model.ClientDBModel{}, fmt.Errorf("%T is not a table of the %s model", m, full.Name())
		}
		keep[name] = m
	}
	return rebuild(full, keep)
}

// without is the model less the named tables.
func without(full model.ClientDBModel, drop map[string]bool) (model.ClientDBModel, error) {
	keep := map[string]model.Model{}
	for t, typ := range full.Types() {
		if !drop[t] {
			keep[t] = reflect.New(typ.Elem()).Interface().(model.Model)
		}
	}
	return rebuild(full, keep)
}

func rebuild(full model.ClientDBModel, keep map[string]model.Model) (model.ClientDBModel, error) {
	m, err := model.NewClientDBModel(full.Name(), keep)
	if err != nil {
		return m, err
	}
	idx := map[string][]model.ClientIndex{}
	for t := range keep {
		if ci := full.Indexes(t); len(ci) > 0 {
			idx[t] = ci
		}
	}
	if len(idx) > 0 {
		m.SetIndexes(idx)
	}
	return m, nil
}

// Gap is what a server schema lacks of one model table.
type Gap struct {
	Table   string
	Columns []string // missing columns, or columns of another type ("x (server: integer)"); empty with NoTable
	NoTable bool
}

func (g Gap) String() string {
	if g.NoTable {
		return "table " + g.Table
	}
	var s []string
	for _, c := range g.Columns {
		s = append(s, "column "+g.Table+"."+c)
	}
	return strings.Join(s, ", ")
}

// Compare lists what schema lacks of the model: tables, columns, and
// columns whose Go type differs (what libovsdb's validation refuses).
// Pure: unit-tested against the schemas of several releases.
func Compare(m model.ClientDBModel, schema ovsdb.DatabaseSchema) []Gap {
	var gaps []Gap
	names := make([]string, 0, len(m.Types()))
	for t := range m.Types() {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		ts := schema.Table(t)
		if ts == nil {
			gaps = append(gaps, Gap{Table: t, NoTable: true})
			continue
		}
		typ := m.Types()[t].Elem()
		var cols []string
		for i := 0; i < typ.NumField(); i++ {
			f := typ.Field(i)
			col := f.Tag.Get("ovsdb")
			if col == "" || col == "_uuid" {
				continue
			}
			cs := ts.Column(col)
			if cs == nil {
				cols = append(cols, col)
				continue
			}
			if nt := ovsdb.NativeType(cs); nt != f.Type {
				cols = append(cols, fmt.Sprintf("%s (server type %s, model %s)", col, nt, f.Type))
			}
		}
		if len(cols) > 0 {
			gaps = append(gaps, Gap{Table: t, Columns: cols})
		}
	}
	return gaps
}

// Columns are pointers to the OVSDB columns of m's struct (not _uuid), to
// name every column of the model in a monitor request:
// client.WithTable(m, ovsdbconn.Columns(m)...). Dial does it for its own
// monitors; a caller adding a monitor later uses this.
func Columns(m model.Model) []any {
	v := reflect.ValueOf(m).Elem()
	var ptrs []any
	for i := 0; i < v.NumField(); i++ {
		col := v.Type().Field(i).Tag.Get("ovsdb")
		if col == "" || col == "_uuid" {
			continue
		}
		ptrs = append(ptrs, v.Field(i).Addr().Interface())
	}
	return ptrs
}

// tableOf is the table of m's type in the client model ("" if none).
func tableOf(cm model.ClientDBModel, m model.Model) string {
	for t, typ := range cm.Types() {
		if typ == reflect.TypeOf(m) {
			return t
		}
	}
	return ""
}

// isValidation reports libovsdb's refusal of a server schema at Connect
// ("database X validation error (N): ..."): permanent, not worth a retry.
func isValidation(err error) bool {
	return err != nil && strings.Contains(err.Error(), "validation error")
}

var errValidation = errors.New("schema validation")

// serverSchema asks the server for its schema through a libovsdb client
// whose model has no tables (which every schema validates).
func serverSchema(ctx context.Context, db, endpoint string, opts []client.Option) (ovsdb.DatabaseSchema, error) {
	empty, err := model.NewClientDBModel(db, map[string]model.Model{})
	if err != nil {
		return ovsdb.DatabaseSchema{}, err
	}
	cl, err := client.NewOVSDBClient(empty, opts...)
	if err != nil {
		return ovsdb.DatabaseSchema{}, err
	}
	if err := cl.Connect(ctx); err != nil {
		return ovsdb.DatabaseSchema{}, err
	}
	defer cl.Close()
	return cl.Schema(), nil
}

// modelVersion is the schema version ovnhost's generated model of db
// comes from (the floor of the supported range).
func modelVersion(db string) string {
	switch db {
	case "Open_vSwitch":
		return vswitch.Schema().Version
	case "OVN_Northbound":
		return nbdb.Schema().Version
	case "OVN_Southbound":
		return sbdb.Schema().Version
	}
	return ""
}

package nodeapi

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	api "github.com/ovnhost/ovnhost/internal/nodeapi"
	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// badArgs is an error in the query the caller wrote.
type badArgs struct{ msg string }

func (b badArgs) Error() string { return b.msg }

// IsBadArgs tells a caller's mistake from a database failure.
func IsBadArgs(err error) bool { _, ok := err.(badArgs); return ok }

func badf(format string, a ...any) error { return badArgs{fmt.Sprintf(format, a...)} }

// QueryUsage lists the read operations Query understands.
const QueryUsage = "show | list TABLE [RECORD] | get TABLE RECORD COLUMN[:KEY] | find TABLE COLUMN[:KEY]=VALUE..."

// QueryCaps bound what one query answers: rows of list and find, and bytes
// of the text (and of the rows beside it). Past them the answer is cut and
// says so in Truncated and in its text's last line.
type QueryCaps struct {
	MaxRows  int
	MaxBytes int
}

// DefaultQueryCaps: a list of a big table (Logical_Flow, Port_Binding of
// a large cluster) is cut at 2000 rows or 4 MiB of text.
var DefaultQueryCaps = QueryCaps{MaxRows: 2000, MaxBytes: 4 << 20}

func (c QueryCaps) orDefault() QueryCaps {
	if c.MaxRows <= 0 {
		c.MaxRows = DefaultQueryCaps.MaxRows
	}
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultQueryCaps.MaxBytes
	}
	return c
}

const narrow = "narrow the query: list TABLE RECORD, find TABLE COLUMN=VALUE, or get TABLE RECORD COLUMN"

// QueryRows is Query with the rows too: the text the ctl programs would
// print, and for list and find the rows with every value formatted as in
// the text; both within caps (zero fields: DefaultQueryCaps).
func QueryRows(ctx context.Context, cl client.Client, args []string, caps QueryCaps) (*api.OVSDBResult, error) {
	caps = caps.orDefault()
	if len(args) > 0 && (args[0] == "list" || args[0] == "find") {
		rows, err := queryRows(ctx, cl, args)
		if err != nil {
			return nil, err
		}
		return capRows(rows, caps), nil
	}
	text, err := Query(ctx, cl, args)
	if err != nil {
		return nil, err
	}
	res := &api.OVSDBResult{Text: text}
	capText(res, caps.MaxBytes)
	return res, nil
}

// capRows formats rows as list does, within caps.
func capRows(rows []row, caps QueryCaps) *api.OVSDBResult {
	caps = caps.orDefault()
	total := len(rows)
	res := &api.OVSDBResult{}
	if total > caps.MaxRows {
		rows = rows[:caps.MaxRows]
		res.Truncated = fmt.Sprintf("%d of %d rows shown (the node API answers at most %d); %s", caps.MaxRows, total, caps.MaxRows, narrow)
	}
	var text strings.Builder
	size := 0
	for i, r := range rows {
		one := formatRows([]row{r})
		if i > 0 {
			one = "\n" + one
		}
		// The row travels twice: in the text and in Rows.
		if size+2*len(one) > caps.MaxBytes {
			res.Truncated = fmt.Sprintf("%d of %d rows shown (the node API answers at most %d bytes); %s", i, total, caps.MaxBytes, narrow)
			break
		}
		size += 2 * len(one)
		m := make(map[string]string, len(r))
		for k, v := range r {
			if k != "_version" {
				m[k] = formatValue(v)
			}
		}
		text.WriteString(one)
		res.Rows = append(res.Rows, m)
	}
	res.Text = text.String()
	if res.Truncated != "" {
		res.Text += "\n# truncated: " + res.Truncated + "\n"
	}
	return res
}

// capText cuts res.Text at the last whole line within max bytes.
func capText(res *api.OVSDBResult, max int) {
	if len(res.Text) <= max {
		return
	}
	total := len(res.Text)
	cut := res.Text[:max]
	if i := strings.LastIndexByte(cut, '\n'); i >= 0 {
		cut = cut[:i+1]
	}
	res.Truncated = fmt.Sprintf("%d of %d bytes shown (the node API answers at most %d bytes); %s", len(cut), total, max, narrow)
	res.Text = cut + "# truncated: " + res.Truncated + "\n"
}

// queryRows runs list or find.
func queryRows(ctx context.Context, cl client.Client, args []string) ([]row, error) {
	schema := cl.Schema()
	if len(args) < 2 {
		return nil, badf("%s: table name missing", args[0])
	}
	name := resolveTable(schema, args[1])
	ts, ok := schema.Tables[name]
	if !ok {
		return nil, badf("no table %q in %s; tables: %s", args[1], schema.Name, strings.Join(tableNames(schema), ", "))
	}
	var conds []ovsdb.Condition
	if args[0] == "list" && len(args) > 2 {
		c, err := recordCondition(&ts, name, args[2])
		if err != nil {
			return nil, err
		}
		conds = c
	}
	if args[0] == "find" {
		for _, a := range args[2:] {
			c, err := findCondition(&ts, name, a)
			if err != nil {
				return nil, err
			}
			conds = append(conds, c)
		}
	}
	rows, err := selectRows(ctx, cl, name, conds)
	if err == nil && args[0] == "list" && len(args) > 2 && len(rows) == 0 {
		return nil, badf("no row %q in table %s", args[2], name)
	}
	return rows, err
}

// Query runs one read-only ctl-style command against a connected client
// and returns its text. RECORD is a UUID, or the row's name column.
func Query(ctx context.Context, cl client.Client, args []string) (string, error) {
	if len(args) == 0 {
		return "", badf("no operation: use %s", QueryUsage)
	}
	schema := cl.Schema()
	table := func(i int) (*ovsdb.TableSchema, string, error) {
		if len(args) <= i {
			return nil, "", badf("%s: table name missing", args[0])
		}
		name := resolveTable(schema, args[i])
		ts, ok := schema.Tables[name]
		if !ok {
			return nil, "", badf("no table %q in %s; tables: %s", args[i], schema.Name, strings.Join(tableNames(schema), ", "))
		}
		return &ts, name, nil
	}
	switch args[0] {
	case "show":
		return show(ctx, cl)
	case "list", "find":
		rows, err := queryRows(ctx, cl, args)
		if err != nil {
			return "", err
		}
		return formatRows(rows), nil
	case "get":
		ts, name, err := table(1)
		if err != nil {
			return "", err
		}
		if len(args) != 4 {
			return "", badf("get TABLE RECORD COLUMN[:KEY]")
		}
		conds, err := recordCondition(ts, name, args[2])
		if err != nil {
			return "", err
		}
		col, key, _ := strings.Cut(args[3], ":")
		if _, ok := ts.Columns[col]; !ok && col != "_uuid" {
			return "", badf("no column %q in table %s; columns: %s", col, name, strings.Join(columnNames(ts), ", "))
		}
		rows, err := selectRows(ctx, cl, name, conds)
		if err != nil {
			return "", err
		}
		if len(rows) == 0 {
			return "", badf("no row %q in table %s", args[2], name)
		}
		v := rows[0][col]
		if key != "" {
			m, ok := v.(ovsdb.OvsMap)
			if !ok {
				return "", badf("column %s is not a map; drop :%s", col, key)
			}
			got, ok := m.GoMap[key]
			if !ok {
				return "", badf("no key %q in %s:%s", key, name, col)
			}
			v = got
		}
		return formatValue(v) + "\n", nil
	}
	return "", badf("%q is not a read operation: use %s", args[0], QueryUsage)
}

func tableNames(s ovsdb.DatabaseSchema) []string {
	var out []string
	for n := range s.Tables {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func columnNames(ts *ovsdb.TableSchema) []string {
	var out []string
	for n := range ts.Columns {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// resolveTable accepts table names case-insensitively, with - for _.
func resolveTable(s ovsdb.DatabaseSchema, name string) string {
	want := strings.ToLower(strings.ReplaceAll(name, "-", "_"))
	for n := range s.Tables {
		if strings.ToLower(n) == want {
			return n
		}
	}
	return name
}

func recordCondition(ts *ovsdb.TableSchema, table, rec string) ([]ovsdb.Condition, error) {
	if _, err := uuid.Parse(rec); err == nil {
		return []ovsdb.Condition{{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: rec}}}, nil
	}
	if rec == "." {
		return nil, nil // the table's only row (Open_vSwitch, NB_Global, SB_Global)
	}
	if c, ok := ts.Columns["name"]; ok && c.Type == ovsdb.TypeString {
		return []ovsdb.Condition{{Column: "name", Function: ovsdb.ConditionEqual, Value: rec}}, nil
	}
	if c, ok := ts.Columns["logical_port"]; ok && c.Type == ovsdb.TypeString {
		return []ovsdb.Condition{{Column: "logical_port", Function: ovsdb.ConditionEqual, Value: rec}}, nil
	}
	return nil, badf("record %q: table %s has no name column; give a UUID", rec, table)
}

// findCondition parses COLUMN=VALUE or COLUMN:KEY=VALUE.
func findCondition(ts *ovsdb.TableSchema, table, expr string) (ovsdb.Condition, error) {
	lhs, val, ok := strings.Cut(expr, "=")
	if !ok {
		return ovsdb.Condition{}, badf("find condition %q: write COLUMN=VALUE or COLUMN:KEY=VALUE", expr)
	}
	col, key, hasKey := strings.Cut(lhs, ":")
	if col == "_uuid" {
		return ovsdb.Condition{Column: "_uuid", Function: ovsdb.ConditionEqual, Value: ovsdb.UUID{GoUUID: val}}, nil
	}
	cs, ok := ts.Columns[col]
	if !ok {
		return ovsdb.Condition{}, badf("no column %q in table %s; columns: %s", col, table, strings.Join(columnNames(ts), ", "))
	}
	switch cs.Type {
	case ovsdb.TypeMap:
		if !hasKey {
			return ovsdb.Condition{}, badf("column %s is a map: write %s:KEY=VALUE", col, col)
		}
		k, err := atom(cs.TypeObj.Key.Type, key)
		if err != nil {
			return ovsdb.Condition{}, err
		}
		v, err := atom(cs.TypeObj.Value.Type, val)
		if err != nil {
			return ovsdb.Condition{}, err
		}
		return ovsdb.Condition{Column: col, Function: ovsdb.ConditionIncludes, Value: ovsdb.OvsMap{GoMap: map[any]any{k: v}}}, nil
	case ovsdb.TypeSet:
		v, err := atom(cs.TypeObj.Key.Type, val)
		if err != nil {
			return ovsdb.Condition{}, err
		}
		return ovsdb.Condition{Column: col, Function: ovsdb.ConditionIncludes, Value: ovsdb.OvsSet{GoSet: []any{v}}}, nil
	}
	typ := string(cs.Type)
	if cs.Type == ovsdb.TypeEnum {
		typ = cs.TypeObj.Key.Type
	}
	v, err := atom(typ, val)
	if err != nil {
		return ovsdb.Condition{}, err
	}
	return ovsdb.Condition{Column: col, Function: ovsdb.ConditionEqual, Value: v}, nil
}

func atom(typ, s string) (any, error) {
	switch typ {
	case ovsdb.TypeInteger:
		n, err := strconv.Atoi(s)
		if err != nil {
			return nil, badf("%q is not an integer", s)
		}
		return n, nil
	case ovsdb.TypeReal:
		f, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return nil, badf("%q is not a number", s)
		}
		return f, nil
	case ovsdb.TypeBoolean:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return nil, badf("%q is not true or false", s)
		}
		return b, nil
	case ovsdb.TypeUUID:
		return ovsdb.UUID{GoUUID: s}, nil
	}
	return strings.Trim(s, `"`), nil
}

type row = ovsdb.Row

func selectRows(ctx context.Context, cl client.Client, table string, conds []ovsdb.Condition) ([]row, error) {
	if conds == nil {
		conds = []ovsdb.Condition{}
	}
	res, err := ovsdbconn.Transact(ctx, cl, "select "+table, ovsdb.Operation{Op: ovsdb.OperationSelect, Table: table, Where: conds})
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	rows := res[0].Rows
	sort.Slice(rows, func(i, j int) bool { return sortKey(rows[i]) < sortKey(rows[j]) })
	return rows, nil
}

func sortKey(r row) string {
	for _, c := range []string{"name", "logical_port"} {
		if s, ok := r[c].(string); ok {
			return s
		}
	}
	if u, ok := r["_uuid"].(ovsdb.UUID); ok {
		return u.GoUUID
	}
	return ""
}

// formatRows prints rows as ovs-vsctl list does: "column : value", _uuid
// first, a blank line between records.
func formatRows(rows []row) string {
	var b strings.Builder
	for i, r := range rows {
		if i > 0 {
			b.WriteString("\n")
		}
		cols := make([]string, 0, len(r))
		width := 0
		for c := range r {
			if c == "_version" {
				continue
			}
			cols = append(cols, c)
			width = max(width, len(c))
		}
		sort.Slice(cols, func(i, j int) bool {
			if cols[i] == "_uuid" || cols[j] == "_uuid" {
				return cols[i] == "_uuid"
			}
			return cols[i] < cols[j]
		})
		for _, c := range cols {
			fmt.Fprintf(&b, "%-*s : %s\n", width, c, formatValue(r[c]))
		}
	}
	return b.String()
}

func formatValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "[]"
	case ovsdb.UUID:
		return x.GoUUID
	case ovsdb.OvsSet:
		parts := make([]string, 0, len(x.GoSet))
		for _, e := range x.GoSet {
			parts = append(parts, formatValue(e))
		}
		sort.Strings(parts)
		return "[" + strings.Join(parts, ", ") + "]"
	case ovsdb.OvsMap:
		parts := make([]string, 0, len(x.GoMap))
		for k, e := range x.GoMap {
			parts = append(parts, formatValue(k)+"="+formatValue(e))
		}
		sort.Strings(parts)
		return "{" + strings.Join(parts, ", ") + "}"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e15 {
			return strconv.FormatInt(int64(x), 10)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	case bool:
		return strconv.FormatBool(x)
	case string:
		if x == "" || strings.ContainsAny(x, " ,={}[]\":\t\n") {
			return strconv.Quote(x)
		}
		return x
	}
	return fmt.Sprint(v)
}

// show prints the database's topology as the ctl programs' show does.
func show(ctx context.Context, cl client.Client) (string, error) {
	switch cl.Schema().Name {
	case "Open_vSwitch":
		return showVSwitch(ctx, cl)
	case "OVN_Northbound":
		return showNB(ctx, cl)
	case "OVN_Southbound":
		return showSB(ctx, cl)
	}
	return "", badf("show is not supported for %s", cl.Schema().Name)
}

func byUUID(rows []row) map[string]row {
	m := make(map[string]row, len(rows))
	for _, r := range rows {
		if u, ok := r["_uuid"].(ovsdb.UUID); ok {
			m[u.GoUUID] = r
		}
	}
	return m
}

// refs returns the UUIDs in a set (or single uuid) column.
func refs(v any) []string {
	var out []string
	switch x := v.(type) {
	case ovsdb.UUID:
		out = append(out, x.GoUUID)
	case ovsdb.OvsSet:
		for _, e := range x.GoSet {
			if u, ok := e.(ovsdb.UUID); ok {
				out = append(out, u.GoUUID)
			}
		}
	}
	return out
}

func str(r row, c string) string {
	switch x := r[c].(type) {
	case string:
		return x
	case ovsdb.OvsSet:
		if len(x.GoSet) == 1 {
			return formatValue(x.GoSet[0])
		}
		if len(x.GoSet) == 0 {
			return ""
		}
	}
	if r[c] == nil {
		return ""
	}
	return formatValue(r[c])
}

func isEmpty(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case ovsdb.OvsSet:
		return len(x.GoSet) == 0
	case ovsdb.OvsMap:
		return len(x.GoMap) == 0
	case string:
		return x == ""
	}
	return false
}

func sortedRefs(ids []string, rows map[string]row) []row {
	var out []row
	for _, id := range ids {
		if r, ok := rows[id]; ok {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return sortKey(out[i]) < sortKey(out[j]) })
	return out
}

func showVSwitch(ctx context.Context, cl client.Client) (string, error) {
	ovs, err := selectRows(ctx, cl, "Open_vSwitch", nil)
	if err != nil {
		return "", err
	}
	br, err1 := selectRows(ctx, cl, "Bridge", nil)
	ports, err2 := selectRows(ctx, cl, "Port", nil)
	ifs, err3 := selectRows(ctx, cl, "Interface", nil)
	for _, e := range []error{err1, err2, err3} {
		if e != nil {
			return "", e
		}
	}
	portBy, ifBy := byUUID(ports), byUUID(ifs)
	var b strings.Builder
	for _, o := range ovs {
		fmt.Fprintf(&b, "%s\n", formatValue(o["_uuid"]))
	}
	for _, r := range br {
		fmt.Fprintf(&b, "    Bridge %s\n", formatValue(r["name"]))
		if dp := str(r, "datapath_type"); dp != "" {
			fmt.Fprintf(&b, "        datapath_type: %s\n", dp)
		}
		for _, p := range sortedRefs(refs(r["ports"]), portBy) {
			fmt.Fprintf(&b, "        Port %s\n", formatValue(p["name"]))
			if t := str(p, "tag"); t != "" {
				fmt.Fprintf(&b, "            tag: %s\n", t)
			}
			for _, i := range sortedRefs(refs(p["interfaces"]), ifBy) {
				fmt.Fprintf(&b, "            Interface %s\n", formatValue(i["name"]))
				if t := str(i, "type"); t != "" {
					fmt.Fprintf(&b, "                type: %s\n", t)
				}
				if !isEmpty(i["options"]) {
					fmt.Fprintf(&b, "                options: %s\n", formatValue(i["options"]))
				}
				if e := str(i, "error"); e != "" {
					fmt.Fprintf(&b, "                error: %s\n", strconv.Quote(e))
				}
			}
		}
	}
	for _, o := range ovs {
		if v := str(o, "ovs_version"); v != "" {
			fmt.Fprintf(&b, "    ovs_version: %s\n", strconv.Quote(v))
		}
	}
	return b.String(), nil
}

func showNB(ctx context.Context, cl client.Client) (string, error) {
	ls, err := selectRows(ctx, cl, "Logical_Switch", nil)
	if err != nil {
		return "", err
	}
	lsp, err1 := selectRows(ctx, cl, "Logical_Switch_Port", nil)
	lr, err2 := selectRows(ctx, cl, "Logical_Router", nil)
	lrp, err3 := selectRows(ctx, cl, "Logical_Router_Port", nil)
	for _, e := range []error{err1, err2, err3} {
		if e != nil {
			return "", e
		}
	}
	lspBy, lrpBy := byUUID(lsp), byUUID(lrp)
	var b strings.Builder
	for _, s := range ls {
		fmt.Fprintf(&b, "switch %s (%s)\n", formatValue(s["_uuid"]), str(s, "name"))
		for _, p := range sortedRefs(refs(s["ports"]), lspBy) {
			fmt.Fprintf(&b, "    port %s\n", str(p, "name"))
			if t := str(p, "type"); t != "" {
				fmt.Fprintf(&b, "        type: %s\n", t)
			}
			if !isEmpty(p["addresses"]) {
				fmt.Fprintf(&b, "        addresses: %s\n", formatValue(p["addresses"]))
			}
		}
	}
	for _, r := range lr {
		fmt.Fprintf(&b, "router %s (%s)\n", formatValue(r["_uuid"]), str(r, "name"))
		for _, p := range sortedRefs(refs(r["ports"]), lrpBy) {
			fmt.Fprintf(&b, "    port %s\n        mac: %s\n        networks: %s\n", str(p, "name"), strconv.Quote(str(p, "mac")), formatValue(p["networks"]))
		}
	}
	return b.String(), nil
}

func showSB(ctx context.Context, cl client.Client) (string, error) {
	ch, err := selectRows(ctx, cl, "Chassis", nil)
	if err != nil {
		return "", err
	}
	encaps, err1 := selectRows(ctx, cl, "Encap", nil)
	pbs, err2 := selectRows(ctx, cl, "Port_Binding", nil)
	for _, e := range []error{err1, err2} {
		if e != nil {
			return "", e
		}
	}
	encBy := byUUID(encaps)
	var b strings.Builder
	for _, c := range ch {
		id := formatValue(c["_uuid"])
		fmt.Fprintf(&b, "Chassis %s\n    hostname: %s\n", strconv.Quote(str(c, "name")), str(c, "hostname"))
		for _, e := range sortedRefs(refs(c["encaps"]), encBy) {
			fmt.Fprintf(&b, "    Encap %s\n        ip: %s\n        options: %s\n", str(e, "type"), strconv.Quote(str(e, "ip")), formatValue(e["options"]))
		}
		var bound []string
		for _, p := range pbs {
			for _, r := range refs(p["chassis"]) {
				if r == id {
					bound = append(bound, str(p, "logical_port"))
				}
			}
		}
		sort.Strings(bound)
		for _, lp := range bound {
			fmt.Fprintf(&b, "    Port_Binding %s\n", strconv.Quote(lp))
		}
	}
	return b.String(), nil
}

package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Output formats every listing command accepts (-o).
const (
	OutTable = "table"
	OutWide  = "wide"
	OutJSON  = "json"
	OutYAML  = "yaml"
)

// checkOutput names the bad -o value and the accepted ones.
func checkOutput(o string) error {
	switch o {
	case OutTable, OutWide, OutJSON, OutYAML:
		return nil
	}
	return usageErrorf("-o/--output %q: use table, wide, json or yaml", o)
}

// Column is one table column; Wide columns appear only with -o wide.
type Column struct {
	Name string
	Wide bool
}

// Table is what a listing prints for people; Object is what it prints for
// machines (json, yaml).
type Table struct {
	Columns []Column
	Rows    [][]string
}

// Print writes obj as JSON or YAML, or t as a table (wide adds the Wide
// columns).
func Print(w io.Writer, format string, obj any, t *Table) error {
	switch format {
	case OutJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(obj)
	case OutYAML:
		raw, err := json.Marshal(obj)
		if err != nil {
			return err
		}
		y, err := yaml.JSONToYAML(raw)
		if err != nil {
			return err
		}
		_, err = w.Write(y)
		return err
	}
	wide := format == OutWide
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	var head []string
	for _, c := range t.Columns {
		if !c.Wide || wide {
			head = append(head, c.Name)
		}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range t.Rows {
		var cells []string
		for i, c := range t.Columns {
			if c.Wide && !wide {
				continue
			}
			v := ""
			if i < len(r) {
				v = r[i]
			}
			if v == "" {
				v = "-"
			}
			cells = append(cells, v)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

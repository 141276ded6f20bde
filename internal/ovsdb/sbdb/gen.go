// Package sbdb holds the libovsdb models of ovn-sb.ovsschema from OVN 23.03
// (Debian bookworm, schema 20.27.0), the oldest OVN of the supported range:
// libovsdb refuses a server that lacks a column of the model, and newer
// SB schemas (25.03 in tests/compat) keep every column of it. Regenerate
// with "go generate" only when the floor of the range moves; never from a
// newer schema, or older servers are refused.
// -extended adds DeepCopy and Equals: libovsdb copies rows with them instead
// of a JSON round trip (the controller at 10k ports needs it).
package sbdb

//go:generate go tool modelgen -extended -p sbdb -o . ovn-sb.ovsschema
//go:generate sh -c "sed -i '1{N;s|\\n// DO NOT EDIT\\.|; DO NOT EDIT.|}' *.go"

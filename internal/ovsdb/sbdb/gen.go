// Package sbdb holds the libovsdb models of the ovn-sb.ovsschema schema that Debian's
// packages ship; regenerate with "go generate" after copying a newer schema here.
package sbdb

//go:generate go tool modelgen -p sbdb -o . ovn-sb.ovsschema

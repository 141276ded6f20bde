// Package nbdb holds the libovsdb models of the ovn-nb.ovsschema schema that Debian's
// packages ship; regenerate with "go generate" after copying a newer schema here.
package nbdb

//go:generate go tool modelgen -p nbdb -o . ovn-nb.ovsschema

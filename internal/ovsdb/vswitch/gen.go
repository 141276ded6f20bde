// Package vswitch holds the libovsdb models of the vswitch.ovsschema schema that Debian's
// packages ship; regenerate with "go generate" after copying a newer schema here.
package vswitch

//go:generate go tool modelgen -p vswitch -o . vswitch.ovsschema

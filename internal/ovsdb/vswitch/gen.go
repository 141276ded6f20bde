// Package vswitch holds the libovsdb models of the vswitch.ovsschema schema that Debian's
// packages ship; regenerate with "go generate" after copying a newer schema here.
// -extended adds DeepCopy and Equals: libovsdb copies rows with them instead
// of a JSON round trip (the controller at 10k ports needs it).
package vswitch

//go:generate go tool modelgen -extended -p vswitch -o . vswitch.ovsschema
//go:generate sh -c "sed -i '1{N;s|\\n// DO NOT EDIT\\.|; DO NOT EDIT.|}' *.go"

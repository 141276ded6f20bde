// Package vswitch holds the libovsdb models of vswitch.ovsschema. The schema
// here is the oldest of the supported range, OVS 2.15 (Debian bullseye's
// openvswitch-switch, schema 8.2.0), not the installed one: libovsdb refuses
// a server that lacks a column of the model, and every newer conf.db has
// all of 2.15's columns (tests/compat checks 2.15, 3.1 and 3.5). Newer
// columns (3.1's Interface.ingress_policing_kpkts_*) are not modelled.
// Regenerate with "go generate" only when the floor of the range moves.
// -extended adds DeepCopy and Equals: libovsdb copies rows with them instead
// of a JSON round trip (the controller at 10k ports needs it).
package vswitch

//go:generate go tool modelgen -extended -p vswitch -o . vswitch.ovsschema
//go:generate sh -c "sed -i '1{N;s|\\n// DO NOT EDIT\\.|; DO NOT EDIT.|}' *.go"

// Package providernet names what an underlay provider network (Kube-OVN's
// ProviderNetwork) becomes on a node: the OVS bridge br-<name> that takes
// the network's NIC, and the checks on the names before anything is
// created; and the ProviderNetwork object's spec, its validation and which
// NIC a node bridges (object.go). The controller's CRD validation, the
// node's settings and the node's reading of the objects share it, so what
// one accepts the other can build.
package providernet

import (
	"fmt"
	"regexp"
	"strings"
)

// BridgePrefix starts the name of every provider network's bridge.
const BridgePrefix = "br-"

// MaxName: the node bridge is br-<name>, and a Linux interface name has
// at most 15 bytes.
const MaxName = 15 - len(BridgePrefix)

// BridgeName is the OVS bridge a provider network gets on its nodes
// (Kube-OVN's name, so its nodes' state is recognised).
func BridgeName(network string) string { return BridgePrefix + network }

// Reserved are the bridges and networks the node's other features own:
// a provider network named after one would take over their bridge or
// mapping.
var Reserved = map[string]string{
	"int":         "br-int is OVN's integration bridge",
	"phy":         "br-phy is the userspace tunnel's bridge (--userspace-tunnel)",
	"external":    "br-external and the network external are EIP/SNAT's (ovn-external-gw-config)",
	"egw":         "br-egw is the centralized gateway's bridge",
	"ovnhost-egw": "ovnhost-egw is the centralized gateway's network",
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NameProblem says why name cannot be a provider network's on a node, or "".
func NameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > MaxName:
		return fmt.Sprintf("is %d characters long; a provider network's name has at most %d, because its bridge %s must fit Linux's 15-byte interface names", len(name), MaxName, BridgeName(name))
	case !namePattern.MatchString(name):
		return "is not lower-case letters, digits and '-' (starting and ending with a letter or digit)"
	}
	if why, ok := Reserved[name]; ok {
		return "is reserved: " + why
	}
	return ""
}

// IfnameProblem says why name cannot be a Linux interface name, or "".
func IfnameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > 15:
		return fmt.Sprintf("is %d bytes long; Linux interface names have at most 15", len(name))
	case name == "." || name == "..":
		return "is not an interface name"
	case strings.ContainsAny(name, "/: \t\n"):
		return "contains '/', ':' or white space, which no Linux interface name has"
	}
	return ""
}

// MissingNIC says that nic is not among the host's interfaces (existing,
// the names `ip link` shows), naming an interface whose name differs only
// in case ("eth1 not found; Eth1 exists"), else listing those there are:
// interface names are matched exactly, and a near miss is the likely typo.
func MissingNIC(nic string, existing []string) string {
	var near []string
	for _, e := range existing {
		if e != nic && strings.EqualFold(e, nic) {
			near = append(near, e)
		}
	}
	if len(near) > 0 {
		return fmt.Sprintf("%s not found; %s exists (interface names are case-sensitive)", nic, strings.Join(near, ", "))
	}
	if len(existing) == 0 {
		return nic + " not found; this host has no interface besides the loopback"
	}
	return fmt.Sprintf("%s not found; this host has %s", nic, strings.Join(existing, ", "))
}

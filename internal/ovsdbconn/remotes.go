package ovsdbconn

import (
	"net"
	"strconv"
	"strings"
)

// The OVN central database ports (Kube-OVN's ovn-central, ovn-ctl defaults).
const (
	NBPort = 6641
	SBPort = 6642
)

// ClusterRemotes derives the NB and SB remotes of an OVN central cluster
// from its addresses (OVN_DB_IPS): "tcp:IP:6641,tcp:IP2:6641" and the same
// on 6642, ssl: instead of tcp: with ENABLE_SSL. IPv6 addresses are
// bracketed; blank entries are skipped. No addresses: "", "". The node
// daemon's configuration, the controller and netctl doctor all use it.
func ClusterRemotes(ips []string, ssl bool) (nb, sb string) {
	scheme := "tcp:"
	if ssl {
		scheme = "ssl:"
	}
	var nbs, sbs []string
	for _, ip := range ips {
		ip = strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(ip), "["), "]")
		if ip == "" {
			continue
		}
		nbs = append(nbs, scheme+net.JoinHostPort(ip, strconv.Itoa(NBPort)))
		sbs = append(sbs, scheme+net.JoinHostPort(ip, strconv.Itoa(SBPort)))
	}
	return strings.Join(nbs, ","), strings.Join(sbs, ",")
}

package config

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// Role is what `ovnhost run` supervises.
type Role string

const (
	// RoleNode is the node agent (ovsdb-server, ovs-vswitchd, ovn-controller).
	RoleNode Role = "node"
	// RoleCentral is one member of the clustered OVN central: the Raft NB
	// and SB ovsdb-servers and ovn-northd.
	RoleCentral Role = "central"
)

// Central is the configuration of the central role (unused by the node).
type Central struct {
	// IP is this member's address, one of OVN_DB_IPS (POD_IP in
	// Kube-OVN's ovn-central); empty: found on the host, or read from an
	// existing database.
	IP string
	// ElectionTimer is the Raft election timer a new cluster is created with.
	ElectionTimer time.Duration
	// CompactSize compacts a database whose file grows past it (0: never
	// by size); CompactInterval compacts one that has had new log entries
	// for that long (0: never by time).
	CompactSize     int64
	CompactInterval time.Duration
	// StatusInterval is how often cluster/status is read for health.
	StatusInterval time.Duration
}

// IsCentral reports whether this process runs the central role.
func (c *Config) IsCentral() bool { return c.Role == RoleCentral }

func centralSettings() []setting {
	return []setting{
		{Name: "role", Default: string(RoleNode), Help: "node (the node agent) or central (a member of the clustered OVN NB/SB databases and ovn-northd; needs OVN_DB_IPS)",
			Set: func(c *Config, v string) error {
				var r string
				if err := oneOf(&r, string(RoleNode), string(RoleCentral))(c, v); err != nil {
					return err
				}
				c.Role = Role(r)
				return nil
			}},
		{Name: "central-ip", Env: []string{"DB_CLUSTER_ADDR", "POD_IP"}, Help: "role=central: this member's address, one of OVN_DB_IPS (default: the host's address listed there, else the address its database was created with)",
			Set: func(c *Config, v string) error {
				v = strings.TrimSpace(v)
				if v != "" {
					if _, err := netip.ParseAddr(v); err != nil {
						return bad("not an IP address", "give this member's address as listed in OVN_DB_IPS, e.g. 10.0.0.2")
					}
				}
				c.Central.IP = v
				return nil
			}},
		{Name: "election-timer", Default: "1000", Help: "role=central: Raft election timer in milliseconds of a cluster this member creates (OVN's default 1000)",
			Set: func(c *Config, v string) error {
				n, err := strconv.Atoi(strings.TrimSpace(v))
				if err != nil || n < 100 || n > 600000 {
					return bad("not a number of milliseconds from 100 to 600000", "give e.g. 1000 (OVN's default) or 5000 for a loaded cluster")
				}
				c.Central.ElectionTimer = time.Duration(n) * time.Millisecond
				return nil
			}},
		{Name: "db-compact-size", Default: "64Mi", Help: "role=central: compact (snapshot) a database whose file grows past this size: bytes, or with Ki/Mi/Gi; 0 never by size",
			Set: func(c *Config, v string) error {
				n, err := parseSize(v)
				if err != nil {
					return err
				}
				c.Central.CompactSize = n
				return nil
			}},
		{Name: "db-compact-interval", Default: "1h", Help: "role=central: compact a database that has new log entries since this long ago; 0 never by time",
			Set: func(c *Config, v string) error {
				if strings.TrimSpace(v) == "0" {
					c.Central.CompactInterval = 0
					return nil
				}
				return positiveDuration(&c.Central.CompactInterval, time.Second, "seconds")(c, v)
			}},
		{Name: "cluster-status-interval", Default: "1s", Help: "role=central: how often the members' Raft state is read for /readyz, /metrics and netctl status",
			Set: func(c *Config, v string) error {
				return positiveDuration(&c.Central.StatusInterval, time.Second, "seconds")(c, v)
			}},
	}
}

// finishCentral cross-checks the central role's settings.
func (c *Config) finishCentral() Errors {
	if !c.IsCentral() {
		return nil
	}
	var errs Errors
	if len(c.OVNDBIPs) == 0 {
		errs = append(errs, &Error{Key: "ovn-db-ips", Reason: "role=central needs the cluster's member addresses",
			Fix: "set OVN_DB_IPS to every central member's address, e.g. 10.0.0.1,10.0.0.2,10.0.0.3 (one address for a single-member cluster)"})
	}
	seen := map[string]bool{}
	for _, ip := range c.OVNDBIPs {
		a, _ := netip.ParseAddr(ip)
		if seen[a.String()] {
			errs = append(errs, &Error{Key: "ovn-db-ips", Value: strings.Join(c.OVNDBIPs, ","), Reason: fmt.Sprintf("%s is listed twice", ip), Fix: "list each member once"})
		}
		seen[a.String()] = true
	}
	return errs
}

package agent

import (
	"errors"

	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/supervisor/central"
)

// ErrLeft is what the central's Start returns when this member has left
// the cluster (--leave): nothing is left to run.
var ErrLeft = central.ErrLeft

// NewCentral assembles `ovnhost run --role=central`: one member of the
// clustered OVN central from the settings (the node's host checks do not
// apply), its Raft state in the metrics. A membership the settings got
// wrong is a *config.Error.
func NewCentral(cfg *config.Config, o Options) (*central.Central, error) {
	c, err := central.New(CentralConfig(cfg), central.Options{Log: o.Log, Health: o.Health, TLS: o.TLS, ExplainExec: o.ExplainExec})
	var se *central.SettingError
	if errors.As(err, &se) {
		return nil, &config.Error{Key: se.Key, Value: se.Value, Reason: se.Reason, Fix: se.Fix}
	}
	if err != nil {
		return nil, err
	}
	o.Health.Registry().MustRegister(c.Collector())
	return c, nil
}

// CentralConfig is the member's configuration from the settings.
func CentralConfig(cfg *config.Config) central.Config {
	return central.Config{
		Members: cfg.OVNDBIPs, IP: cfg.Central.IP, ElectionTimer: cfg.Central.ElectionTimer,
		CompactSize: cfg.Central.CompactSize, CompactInterval: cfg.Central.CompactInterval, StatusInterval: cfg.Central.StatusInterval,
		Paths: cfg.Paths, Daemons: cfg.DaemonSettings(),
	}
}

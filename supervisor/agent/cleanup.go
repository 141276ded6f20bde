package agent

import (
	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/supervisor/egress"
	"github.com/ovnhost/ovnhost/supervisor/extgw"
	"github.com/ovnhost/ovnhost/supervisor/node"
)

// Cleanup is `ovnhost cleanup [--purge]`: what the node and its features
// put on this host (node.Cleanup), then the egress masquerade rules and
// the host firewall guard of either backend. It returns what it removed.
func Cleanup(cfg *config.Config, purge bool) ([]string, error) {
	removed, err := node.Cleanup(node.CleanupOptions{
		Layout: layout.New(cfg.Paths), CNI: cfg.CNISettings(),
		Links:      []string{egress.GatewayBridge, extgw.ExternalBridge},
		AfterLinks: egress.RemoveGatewayReturnRoutes,
		Purge:      purge,
	})
	if err == nil {
		err = egress.CleanupNAT()
	}
	return removed, err
}

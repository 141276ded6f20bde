package agent

import (
	"github.com/ovnhost/ovnhost/internal/config"
	"github.com/ovnhost/ovnhost/internal/layout"
	"github.com/ovnhost/ovnhost/internal/providernet"
	"github.com/ovnhost/ovnhost/supervisor/egress"
	"github.com/ovnhost/ovnhost/supervisor/extgw"
	"github.com/ovnhost/ovnhost/supervisor/node"
	"github.com/ovnhost/ovnhost/supervisor/underlay"
)

// Cleanup is `ovnhost cleanup [--purge]`: what the node and its features
// put on this host (node.Cleanup; an underlay NIC's configuration given
// back from its journal first), then the egress masquerade rules and
// the host firewall guard of either backend. It returns what it removed.
func Cleanup(cfg *config.Config, purge bool) ([]string, error) {
	l := layout.New(cfg.Paths)
	links := []string{egress.GatewayBridge, extgw.ExternalBridge}
	for _, pn := range cfg.ProviderNetworks {
		links = append(links, providernet.BridgeName(pn.Name))
	}
	removed, err := node.Cleanup(node.CleanupOptions{
		Layout: l, CNI: cfg.CNISettings(),
		Links:       links,
		BeforeLinks: func() ([]string, error) { return underlay.Cleanup(l.UnderlayJournals) },
		AfterLinks:  egress.RemoveGatewayReturnRoutes,
		Purge:       purge,
	})
	if err == nil {
		err = egress.CleanupNAT()
	}
	return removed, err
}

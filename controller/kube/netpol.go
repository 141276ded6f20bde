package kube

import (
	"context"
	"sync"
)

// policyController enforces NetworkPolicy with OVN port groups, address sets
// and ACLs. Placeholder until issue 11 lands.
type policyController struct{ c *Controller }

func newPolicyController(c *Controller) (addon, error) { return &policyController{c: c}, nil }

func (p *policyController) start(ctx context.Context, wg *sync.WaitGroup) error { return nil }

package kube

import (
	"context"
	"sync"
)

// serviceController programs Services (from EndpointSlices) as OVN load
// balancers. Placeholder until issue 11 lands.
type serviceController struct{ c *Controller }

func newServiceController(c *Controller) (addon, error) { return &serviceController{c: c}, nil }

func (s *serviceController) start(ctx context.Context, wg *sync.WaitGroup) error { return nil }

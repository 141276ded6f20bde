package ovnnb

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"github.com/ovn-kubernetes/libovsdb/client"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdb/nbdb"
)

// Logical_Switch_Port options of a port that moves between chassis (a
// virtual machine's live migration): OVN binds it on every chassis that
// requested-chassis names ("src,dst": the first is the main chassis, the
// others additional ones), and with activation-strategy=rarp keeps an
// additional chassis' traffic blocked until the workload sends a RARP (or
// GARP) from there.
const (
	OptRequestedChassis   = "requested-chassis"
	OptActivationStrategy = "activation-strategy"
)

// PortOptions reads a port's options from the cache (nil when it has none
// or does not exist).
func (c *Client) PortOptions(ctx context.Context, name string) (map[string]string, error) {
	cur := &nbdb.LogicalSwitchPort{Name: name}
	if err := c.cl.Get(ctx, cur); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return nil, nil
		}
		return nil, err
	}
	return maps.Clone(cur.Options), nil
}

// SetPortOptions sets the options in set and removes those in del on the
// port name, if it belongs to owner (an OwnerOf value; else an
// *OwnerError). Other options are kept; nothing is written when nothing
// changes. A missing port is an error naming it.
func (c *Client) SetPortOptions(ctx context.Context, name, owner string, set map[string]string, del []string) error {
	cur := &nbdb.LogicalSwitchPort{Name: name}
	if err := c.cl.Get(ctx, cur); err != nil {
		if errors.Is(err, client.ErrNotFound) {
			return fmt.Errorf("ovnnb: port %q does not exist; its options cannot be set", name)
		}
		return err
	}
	if got := OwnerOf(cur.ExternalIDs); got != owner || owner == "" {
		return &OwnerError{Port: name, Holder: got, Want: owner}
	}
	opts := maps.Clone(cur.Options)
	if opts == nil {
		opts = map[string]string{}
	}
	for _, k := range del {
		delete(opts, k)
	}
	maps.Copy(opts, set)
	if maps.Equal(opts, cur.Options) || (len(opts) == 0 && len(cur.Options) == 0) {
		return nil
	}
	upd := &nbdb.LogicalSwitchPort{UUID: cur.UUID, Options: opts}
	o, err := c.cl.Where(upd).Update(upd, &upd.Options)
	if err != nil {
		return err
	}
	// The row must still be the owner's when the server applies this.
	ops := append([]ovsdb.Operation{ownerWait(cur.UUID, ownerKV(cur.ExternalIDs))}, o...)
	_, err = c.transact(ctx, "set options of port "+name, ops)
	return err
}

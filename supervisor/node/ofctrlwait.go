package node

import (
	"context"
	"strconv"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// ofctrlWaitBeforeClear is the Open_vSwitch external_ids key that makes a
// starting ovn-controller leave br-int's flows in place for that many
// milliseconds before it deletes them and installs its own. OVN 23.03
// waits on every OpenFlow (re)connection and installs nothing meanwhile,
// not even new pods' flows (the wait happens once per process only from
// 23.06.4/24.03.2 on). So the wait is written before each start of
// ovn-controller, and only where there are flows to keep: 0 when
// ovs-vswitchd was started afresh (its tables are empty; on a kept kernel
// datapath flow-restore-wait keeps the datapath's flows instead), the
// setting when ovs-vswitchd kept running (an ovn-controller crash or kill,
// or one left behind by a crashed ovnhost).
const ofctrlWaitBeforeClear = "ovn-ofctrl-wait-before-clear"

// OfctrlWaitBeforeClear is the wait the next ovn-controller start gets, in
// milliseconds.
func (n *Node) OfctrlWaitBeforeClear() int64 {
	n.mu.Lock()
	empty := n.vswitchdEmpty
	n.mu.Unlock()
	if empty {
		return 0
	}
	return n.nc.Daemons.OfctrlWaitBeforeClear.Milliseconds()
}

// setOfctrlWaitBeforeClear writes the wait for the ovn-controller about to
// start.
func (n *Node) setOfctrlWaitBeforeClear(ctx context.Context) error {
	ms := n.OfctrlWaitBeforeClear()
	if err := setExternalID(ctx, n.OVS(), ofctrlWaitBeforeClear, strconv.FormatInt(ms, 10)); err != nil {
		return err
	}
	if ms > 0 {
		n.log.Info("ovn-controller keeps br-int's flows while it computes new ones", "ovn_ofctrl_wait_before_clear_ms", ms)
	}
	return nil
}

// setExternalID sets one key of Open_vSwitch external_ids, leaving the
// others (other writers' keys) alone: a delete and an insert in one
// mutation, since an insert does not replace an existing key.
func setExternalID(ctx context.Context, c *ovsdbconn.Conn, key, value string) error {
	op := ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: everyRow, Mutations: []ovsdb.Mutation{
		{Column: "external_ids", Mutator: ovsdb.MutateOperationDelete, Value: ovsdb.OvsSet{GoSet: []any{key}}},
		{Column: "external_ids", Mutator: ovsdb.MutateOperationInsert, Value: ovsdb.OvsMap{GoMap: map[any]any{key: value}}},
	}}
	_, err := ovsdbconn.Transact(ctx, c, "set Open_vSwitch external_ids:"+key+"="+value, op)
	return err
}

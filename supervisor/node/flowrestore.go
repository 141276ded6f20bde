package node

import (
	"context"

	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/internal/ovsdbconn"
)

// A kernel datapath outlives ovs-vswitchd (a crash, or a stop with
// --keep-datapath) and keeps forwarding established flows. A new
// ovs-vswitchd would flush those flows at start and drop their packets
// until ovn-controller has installed its OpenFlow tables again (seconds on
// a busy node). With other_config:flow-restore-wait=true it leaves the
// datapath's flows alone; once ovn-controller's flows are on br-int the key
// is removed and ovs-vswitchd revalidates the kept flows against them.
// (Kube-OVN's ovs-ctl restart does the same with flow-restore-wait.)
const flowRestoreWait = "flow-restore-wait"

// keptKernelDatapath reports whether the kernel's ovs-system datapath
// already exists, so a starting ovs-vswitchd would find flows in it.
func (n *Node) keptKernelDatapath() bool {
	if n.nc.Datapath.IsUserspace() {
		return false
	}
	_, err := netlink.LinkByName("ovs-system")
	return err == nil
}

// setFlowRestoreWait sets or removes Open_vSwitch other_config:flow-restore-wait.
func setFlowRestoreWait(ctx context.Context, c *ovsdbconn.Conn, on bool) error {
	m := ovsdb.Mutation{Column: "other_config", Mutator: ovsdb.MutateOperationInsert,
		Value: ovsdb.OvsMap{GoMap: map[any]any{flowRestoreWait: "true"}}}
	if !on {
		m.Mutator = ovsdb.MutateOperationDelete
		m.Value = ovsdb.OvsSet{GoSet: []any{flowRestoreWait}}
	}
	op := ovsdb.Operation{Op: ovsdb.OperationMutate, Table: "Open_vSwitch", Where: everyRow, Mutations: []ovsdb.Mutation{m}}
	what := "set Open_vSwitch other_config:" + flowRestoreWait
	if !on {
		what = "remove Open_vSwitch other_config:" + flowRestoreWait
	}
	_, err := ovsdbconn.Transact(ctx, c, what, op)
	return err
}

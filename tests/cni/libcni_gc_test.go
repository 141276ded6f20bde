package cni_test

import (
	"context"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/ovn-kubernetes/libovsdb/ovsdb"
	"github.com/vishvananda/netlink"

	"github.com/ovnhost/ovnhost/cni/podnet"
	"github.com/ovnhost/ovnhost/cni/podnet/podnettest"
)

// TestLibcniGC: GC the way a CNI 1.1 runtime sends it (containerd 2, CRI-O
// 1.30+; containerd 1.6 here never does), through libcni's GCNetworkList at
// cniVersion 1.1.0. Three pods are attached; the runtime then knows only
// two of them: the third was attached through another libcni cache (a
// runtime that lost its state), so libcni has no DEL to replay and only the
// plugin's GC, told the valid attachments, can remove it. Afterwards the
// third's OVS interface and veth are gone, the two valid ones still pass
// CHECK and reach each other, and DEL removes them.
func TestLibcniGC(t *testing.T) {
	n := startNode(t, nodeOpts{})
	withHostEth0(t)
	list, err := libcni.ConfListFromBytes(n.conflistAt(t, "1.1.0"))
	if err != nil {
		t.Fatal(err)
	}
	runtimeCNI := libcni.NewCNIConfigWithCacheDir([]string{n.cfg.BinDir}, t.TempDir(), nil)
	lostCNI := libcni.NewCNIConfigWithCacheDir([]string{n.cfg.BinDir}, t.TempDir(), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var pods []*libcniPod
	for i, name := range []string{"gc-keep-a", "gc-keep-b", "gc-stale"} {
		p := &libcniPod{list: list, rt: &libcni.RuntimeConf{ContainerID: "cid-" + name, NetNS: podnettest.NewNetNS(t, "ovht-"+name), IfName: "eth0", Args: k8sArgs(name)}}
		c := runtimeCNI
		if i == 2 {
			c = lostCNI
		}
		res, err := c.AddNetworkList(ctx, list, p.rt)
		if err != nil {
			t.Fatalf("%s: ADD: %v", name, err)
		}
		r, err := types100.NewResultFromResult(res)
		if err != nil || len(r.IPs) == 0 {
			t.Fatalf("%s: ADD result %+v: %v", name, res, err)
		}
		p.ip = r.IPs[0].Address.IP.String()
		pods = append(pods, p)
	}
	ifaceRows := func(p *libcniPod) int {
		return len(n.selectRows(t, "Interface", ovsdb.NewCondition("name", ovsdb.ConditionEqual, podnet.HostIfName(p.rt.ContainerID, "eth0"))))
	}
	for _, p := range pods {
		if ifaceRows(p) != 1 {
			t.Fatalf("%s: no OVS interface after ADD", p.rt.ContainerID)
		}
	}
	valid := []types.GCAttachment{{ContainerID: pods[0].rt.ContainerID, IfName: "eth0"}, {ContainerID: pods[1].rt.ContainerID, IfName: "eth0"}}
	if err := runtimeCNI.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid}); err != nil {
		t.Fatalf("GC through libcni: %v", err)
	}
	stale := pods[2]
	if ifaceRows(stale) != 0 {
		t.Fatalf("GC kept the OVS interface of %s, which the runtime no longer has", stale.rt.ContainerID)
	}
	if _, err := netlink.LinkByName(podnet.HostIfName(stale.rt.ContainerID, "eth0")); err == nil {
		t.Fatalf("GC kept the veth of %s", stale.rt.ContainerID)
	}
	for _, p := range pods[:2] {
		if ifaceRows(p) != 1 {
			t.Fatalf("GC removed the valid attachment %s", p.rt.ContainerID)
		}
		if err := runtimeCNI.CheckNetworkList(ctx, list, p.rt); err != nil {
			t.Fatalf("CHECK of %s after GC: %v", p.rt.ContainerID, err)
		}
	}
	if err := ping(t, pods[0].rt.NetNS, pods[1].ip); err != nil {
		t.Fatalf("valid pods after GC: %v", err)
	}
	for _, p := range pods[:2] {
		if err := runtimeCNI.DelNetworkList(ctx, list, p.rt); err != nil {
			t.Fatalf("DEL %s: %v", p.rt.ContainerID, err)
		}
	}
	// The stale pod's namespace still holds its eth0 (GC removes the host
	// side; the runtime deletes the namespace): DEL through the lost cache
	// is idempotent.
	if err := lostCNI.DelNetworkList(ctx, list, stale.rt); err != nil {
		t.Fatalf("DEL of the collected %s: %v", stale.rt.ContainerID, err)
	}
	n.assertClean(t)
}

package kernel

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestTwoNodesKernelGeneve: two VMs joined by a qemu socket network (one
// Ethernet segment, 192.168.100.0/24). node-a runs all-in-one and also
// serves its NB/SB on TCP (added to its ovsdb-servers at run time, as the
// product has no setting for it); node-b joins it with OVN_DB_IPS, both
// standalone (no Kubernetes). Pods on
// each node ping and carry TCP across a Geneve tunnel of the kernel
// datapath (genev_sys_6081, a flow-based kernel device).
func TestTwoNodesKernelGeneve(t *testing.T) {
	b := programs(t)
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, NICs: []qemuvm.NIC{link.End(0, "192.168.100.1/24")}},
		qemuvm.Config{Name: "node-b", Memory: 1024, NICs: []qemuvm.NIC{link.End(1, "192.168.100.2/24")}})
	a, bnode := vms[0], vms[1]
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-W", "10", "192.168.100.2"}, Timeout: time.Minute})

	startNode(t, a, b, []string{"IFACE=eth0"})
	for _, db := range []struct{ ctl, remote string }{
		{"/run/ovn/ovnnb_db.ctl", "ptcp:6641:192.168.100.1"},
		{"/run/ovn/ovnsb_db.ctl", "ptcp:6642:192.168.100.1"},
	} {
		a.Run(t, "ovs-appctl", "-t", db.ctl, "ovsdb-server/add-remote", db.remote)
	}
	// Without Kubernetes each node allocates from its own IPAM, rebuilt
	// from the NB when it starts: pod-a exists before node-b starts, so
	// node-b does not hand out its address again.
	confA := cniConf(t, a)
	pa := addPod(t, a, confA, "pod-a")
	startNode(t, bnode, b, []string{"IFACE=eth0", "OVN_DB_IPS=192.168.100.1"})

	// Both chassis in SB, each with its geneve encap on the underlay.
	sysB := strings.TrimSpace(bnode.Run(t, "cat", "/var/lib/openvswitch/system-id.conf"))
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ovn-sbctl", "--db=unix:/run/ovn/ovnsb_db.sock", "--timeout=120",
		"wait-until", "chassis", sysB}, Timeout: 3 * time.Minute})
	encaps := a.Run(t, "ovn-sbctl", "--db=unix:/run/ovn/ovnsb_db.sock", "--bare", "--columns=type,ip", "list", "encap")
	for _, ip := range []string{"192.168.100.1", "192.168.100.2"} {
		if !strings.Contains(encaps, ip) || !strings.Contains(encaps, "geneve") {
			t.Fatalf("SB encaps lack geneve on %s:\n%s", ip, encaps)
		}
	}

	pb := addPod(t, bnode, cniConf(t, bnode), "pod-b")
	t.Logf("pod-a %s on node-a, pod-b %s on node-b", pa.ip, pb.ip)
	if pa.ip == pb.ip {
		t.Fatalf("both pods got %s", pa.ip)
	}
	// Each node's OVS has a geneve port to the other, in the kernel.
	for _, vm := range []*qemuvm.VM{a, bnode} {
		if out := vm.Run(t, "ip", "-d", "link", "show", "genev_sys_6081"); !strings.Contains(out, "geneve external") {
			t.Errorf("%s: no flow-based kernel geneve device:\n%s", vm.Name, out)
		}
	}
	// The first encapsulated packets may go while the tunnel's ARP
	// resolves: a warm-up, then a clean run.
	_, _ = a.Exec(qemuvm.Cmd{Argv: inPod(pa, "ping", "-c", "5", "-i", "0.5", "-W", "5", pb.ip.String()), Timeout: time.Minute})
	out := a.MustExec(t, qemuvm.Cmd{Argv: inPod(pa, "ping", "-c", "5", "-i", "0.3", "-W", "5", pb.ip.String()), Timeout: time.Minute})
	if !strings.Contains(out, " 0% packet loss") {
		t.Errorf("steady cross-node ping lost packets:\n%s", out)
	}
	probeServer(t, bnode, b, pb, 5201)
	var r tcpResult
	probeJSON(t, a, b, pa, 2*time.Minute, &r, "tcp", "-to", fmt.Sprintf("%s:5201", pb.ip), "-n", "64", "-size", "8192")
	if r.Rounds != 64 {
		t.Errorf("TCP across the tunnel: %d round trips, want 64", r.Rounds)
	}
	// The traffic crossed the underlay encapsulated: node-b's kernel
	// datapath has a flow matching on the tunnel.
	if flows := bnode.Run(t, "ovs-dpctl", "dump-flows"); !strings.Contains(flows, "tunnel(") {
		t.Errorf("node-b's kernel datapath has no tunnel flow:\n%s", flows)
	}
}

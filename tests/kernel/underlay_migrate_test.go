package kernel

import (
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelUnderlayFromAnotherOpenvSwitch: a node whose NIC another Open
// vSwitch bridged, as Kube-OVN leaves one (its own conf.db, here in
// /tmp/kovn, br-physnet1 holding eth0's address, its daemons stopped
// without cleanup: the kernel datapath keeps the ports). ovnhost on its
// own conf.db refuses to start ovs-vswitchd, which would delete
// br-physnet1 and the host's address with it, and says so; on that
// Open vSwitch's conf.db (OPENVSWITCH_DIR) it keeps the bridge, adopts it
// without moving anything, and at its stop gives eth0 its address back.
func TestKernelUnderlayFromAnotherOpenvSwitch(t *testing.T) {
	b := programs(t)
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, NICs: []qemuvm.NIC{link.End(0, "192.168.103.1/24")}},
		qemuvm.Config{Name: "peer", Memory: 512, Modules: []string{}, NICs: []qemuvm.NIC{link.End(1, "192.168.103.2/24")}})
	a := vms[0]
	// The other Open vSwitch: Debian's 3.1.0 sets up no upcall handler on
	// the kernel datapath when started in the first 10 s after boot (see
	// docs/kernel-datapath-tests.md), so it waits for the uptime.
	a.Sh(t, `mkdir -p /tmp/kovn && ovsdb-tool create /tmp/kovn/conf.db /usr/share/openvswitch/vswitch.ovsschema
deadline=$(( $(cut -d. -f1 /proc/uptime) + 60 ))
while [ "$(cut -d. -f1 /proc/uptime)" -lt 11 ] && [ "$(cut -d. -f1 /proc/uptime)" -lt $deadline ]; do sleep 0.2; done`)
	db := a.Spawn(t, "/tmp/kovn/ovsdb.log", nil, "ovsdb-server", "/tmp/kovn/conf.db", "--remote=punix:/tmp/kovn/db.sock", "--unixctl=/tmp/kovn/db.ctl")
	vsctl := []string{"ovs-vsctl", "--retry", "--timeout=60", "--db=unix:/tmp/kovn/db.sock"}
	if r, err := a.Exec(qemuvm.Cmd{Argv: append(vsctl, "--no-wait", "init"), Timeout: 2 * time.Minute}); err != nil || r.Exit != 0 {
		t.Fatalf("the other ovsdb-server: %v %+v\n%s", err, r, a.Run(t, "cat", db.Log))
	}
	vs := a.Spawn(t, "/tmp/kovn/vswitchd.log", nil, "ovs-vswitchd", "unix:/tmp/kovn/db.sock", "--unixctl=/tmp/kovn/vs.ctl")
	mac := strings.TrimSpace(a.Run(t, "cat", "/sys/class/net/eth0/address"))
	a.MustExec(t, qemuvm.Cmd{Argv: append(vsctl, "add-br", "br-physnet1", "--", "set", "bridge", "br-physnet1", "other_config:hwaddr="+mac,
		"--", "add-port", "br-physnet1", "eth0", "--", "set", "open_vswitch", ".", "external_ids:ovn-bridge-mappings=physnet1:br-physnet1"), Timeout: 2 * time.Minute})
	a.Sh(t, "ip link set br-physnet1 up && ip addr add 192.168.103.1/24 dev br-physnet1 && ip addr del 192.168.103.1/24 dev eth0")
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.103.2"}, Timeout: time.Minute})
	// Stopped as a DaemonSet's pod goes: no cleanup, the datapath stays.
	a.Run(t, "ovs-appctl", "-t", "/tmp/kovn/vs.ctl", "exit")
	if _, err := vs.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}
	a.Run(t, "ovs-appctl", "-t", "/tmp/kovn/db.ctl", "exit")
	if _, err := db.Wait(time.Minute); err != nil {
		t.Fatal(err)
	}

	// ovnhost on its own (new) conf.db: refused before ovs-vswitchd starts.
	p := a.Spawn(t, "/var/log/ovnhost/refused.log", []string{"NODE_NAME=node-a", "IFACE=br-physnet1"}, b.ovnhost, "run", startTimeout, "--provider-networks=physnet1:eth0")
	r, err := p.Wait(3 * time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	out := a.Run(t, "cat", p.Log)
	if r.Exit == 0 || !strings.Contains(out, "br-physnet1 (192.168.103.1/24)") || !strings.Contains(out, "OPENVSWITCH_DIR") {
		t.Fatalf("ovnhost on its own conf.db: exit %d, want a refusal naming br-physnet1 and the fix:\n%s", r.Exit, tailLines(out, 30))
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "br-physnet1"); !strings.Contains(addrs, "192.168.103.1/24") {
		t.Fatalf("the refused start took br-physnet1's address:\n%s", addrs)
	}

	// On the other Open vSwitch's conf.db: the bridge is kept and adopted.
	n := startNode(t, a, b, []string{"IFACE=br-physnet1", "OPENVSWITCH_DIR=/tmp/kovn"}, "--provider-networks=physnet1:eth0")
	if err := n.proc.WaitLog("underlay: NIC already bridged, nothing to move", time.Minute); err != nil {
		t.Fatalf("%v\n%s", err, tailLines(n.log(t), 30))
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.103.2"}, Timeout: time.Minute})
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "eth0"); !strings.Contains(addrs, "192.168.103.1/24") {
		t.Fatalf("eth0 lacks its address after the give-back:\n%s", addrs)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.103.2"}, Timeout: time.Minute})
}

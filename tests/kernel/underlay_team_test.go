package kernel

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ovnhost/ovnhost/tests/harness/debtool"
	"github.com/ovnhost/ovnhost/tests/harness/qemuvm"
)

// TestKernelUnderlayTeamNIC: the provider NIC is a team device (team0,
// active-backup over eth0, run by Debian's teamd) on the kernel datapath.
// Kube-OVN users saw a team NIC go down when its node agent restarted
// (kube-ovn issue 4622). Here team0 goes into br-physnet1, stays there
// across a --keep-datapath restart, and comes back at the stop, up, with
// eth0 still its port and teamd still running it, while the node pings
// its neighbour every 10 ms (the same limits as the plain NIC's test).
func TestKernelUnderlayTeamNIC(t *testing.T) {
	b := programs(t)
	root := debtool.Tree(t, "teamd-2", "libteam-utils", "libteam5", "libteamdctl0", "libdaemon0", "libjansson4", "libnl-cli-3-200", "libnl-genl-3-200", "libnl-nf-3-200")
	link := qemuvm.NewLink(t)
	vms := qemuvm.BootAll(t,
		qemuvm.Config{Name: "node-a", Memory: 1536, Modules: append(slices.Clone(qemuvm.DatapathModules), "team", "team_mode_activebackup"), NICs: []qemuvm.NIC{link.End(0, "")}},
		qemuvm.Config{Name: "peer", Memory: 512, Modules: []string{}, NICs: []qemuvm.NIC{link.End(1, "192.168.104.2/24")}})
	a := vms[0]
	env := []string{"LD_LIBRARY_PATH=" + filepath.Join(root, "usr/lib/x86_64-linux-gnu") + ":" + filepath.Join(root, "lib/x86_64-linux-gnu")}
	a.Run(t, "mkdir", "-p", "/run/teamd")
	a.Run(t, "ip", "link", "set", "eth0", "down")
	// -d returns once teamd has made team0 and added its ports.
	a.MustExec(t, qemuvm.Cmd{Argv: []string{filepath.Join(root, "usr/bin/teamd"), "-d", "-t", "team0",
		"-c", `{"runner":{"name":"activebackup"},"link_watch":{"name":"ethtool"},"ports":{"eth0":{}}}`}, Env: env, Timeout: time.Minute})
	teamState := func() string {
		t.Helper()
		return a.MustExec(t, qemuvm.Cmd{Argv: []string{filepath.Join(root, "usr/bin/teamdctl"), "team0", "state"}, Env: env, Timeout: time.Minute})
	}
	a.Sh(t, "ip addr add 192.168.104.1/24 dev team0 && ip link set team0 up")
	// Until one answer, 30 s at most: the runner picks eth0 once its link is up.
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "1", "-w", "30", "192.168.104.2"}, Timeout: time.Minute})
	if s := teamState(); !strings.Contains(s, "active port: eth0") {
		t.Fatalf("teamd's state before the move:\n%s", s)
	}

	pinger := startPinger(t, a, "/tmp/ping.log", "192.168.104.2")
	// The first run keeps the datapath at its stop (--keep-datapath), as
	// for a node restart; the second gives everything back.
	n := startNode(t, a, b, []string{"IFACE=team0"}, "--provider-networks=physnet1:team0", "--keep-datapath")
	if err := n.proc.WaitLog("underlay: NIC bridged, its configuration moved to the bridge", time.Minute); err != nil {
		t.Fatal(err)
	}
	if dp := a.Run(t, "ovs-dpctl", "show"); !strings.Contains(dp, ": team0") {
		t.Fatalf("team0 is not a port of the kernel datapath:\n%s", dp)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.104.2"}, Timeout: time.Minute})
	phases := []phaseLoss{{"the move", pinger}}

	pinger = startPinger(t, a, "/tmp/ping-restart.log", "192.168.104.2")
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost --keep-datapath exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	if l := a.Run(t, "ip", "-o", "link", "show", "team0"); !strings.Contains(l, ",UP") || !strings.Contains(l, "master ovs-system") {
		t.Fatalf("team0 after a --keep-datapath stop: %s\n%s", l, a.Run(t, "ovs-dpctl", "show"))
	}
	n.args = slices.DeleteFunc(n.args, func(a string) bool { return a == "--keep-datapath" })
	n.start(t)
	if err := n.proc.WaitLog("underlay: NIC already bridged, nothing to move", time.Minute); err != nil {
		t.Fatalf("the start after --keep-datapath: %v", err)
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.104.2"}, Timeout: time.Minute})
	phases = append(phases, phaseLoss{"a --keep-datapath restart", pinger})

	pinger = startPinger(t, a, "/tmp/ping-back.log", "192.168.104.2")
	if code := n.stop(t); code != 0 {
		t.Fatalf("ovnhost exited %d\n%s", code, tailLines(n.log(t), 40))
	}
	a.MustExec(t, qemuvm.Cmd{Argv: []string{"ping", "-c", "3", "-i", "0.2", "-W", "5", "192.168.104.2"}, Timeout: time.Minute})
	phases = append(phases, phaseLoss{"the give-back", pinger})
	checkPhases(t, a, "team0", phases)
	// team0 is back as it was: up, its address, eth0 its active port,
	// teamd still running it.
	if l := a.Run(t, "ip", "-o", "link", "show", "team0"); !strings.Contains(l, ",UP") || strings.Contains(l, "master ") {
		t.Errorf("team0 after the give-back: %s", l)
	}
	if addrs := a.Run(t, "ip", "-4", "addr", "show", "dev", "team0"); !strings.Contains(addrs, "192.168.104.1/24") {
		t.Errorf("team0 lacks its address after the give-back:\n%s", addrs)
	}
	if l := a.Run(t, "ip", "-o", "link", "show", "eth0"); !strings.Contains(l, "master team0") {
		t.Errorf("eth0 is no longer team0's port: %s", l)
	}
	if s := teamState(); !strings.Contains(s, "active port: eth0") {
		t.Errorf("teamd's state after the give-back:\n%s", s)
	}
}
